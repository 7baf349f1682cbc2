"""Declared facets in the catalog, written once for both engines (``ks facets add``).

Two tables in the store's own schema: ``facets`` (the declarations: name, kind, when)
and ``facet_values`` (one row per entity and value: the value as text — a date in the
stored form — and, for a number facet, as a number), keyed ``(facet, value, entity)``
and deleted with their entity (``ON DELETE CASCADE``). Filters read them through an
``id IN (SELECT entity …)`` with the facet's name bound (``sql/filters.py``); aggregates
join them.

* **Declaring** a facet (:meth:`FacetAdministration.add`) writes its row and backfills
  the values of every entity from its ``attributes``, in one write transaction under
  the store's write lock: a reader sees the facet with every value, or not at all; a
  publish waits for it, and one after it writes the new facet's values too. No entity
  changes (its values come from attributes its content hash covers): the content root
  stays as it was.
* **Every publish** (:func:`write_values`, in the publish's own transaction) writes the
  declared facets' values of the entities it upserts; a deleted entity's go with it.
* **Removing** one deletes its row and its values.

Only the dialect's fixed statements are spelled here: facet names and values are always
bound parameters.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from knowledge_store.engines.sql.dialect import SqlDialect
from knowledge_store.errors import NotFound
from knowledge_store.model import Entity
from knowledge_store.model.declared import DeclaredFacet, check_declaration, facet_values

if TYPE_CHECKING:
    from knowledge_store.engines.base import Writer
    from knowledge_store.engines.sql.publish import PublishPlan

__all__ = ["FacetAdministration", "declared_ddl", "read_declared", "write_values"]

#: Entities read at a time when a facet is backfilled.
_BACKFILL_BATCH = 2000


class Writes(Protocol):
    """A connection (sqlite3 or psycopg) in the caller's transaction."""

    def execute(self, sql: str, params: Any = ..., /) -> Any: ...


def _many(conn: Any, sql: str, rows: Iterable[Any]) -> None:
    """``executemany`` on a connection (sqlite3) or on a cursor of it (psycopg)."""
    target = conn if hasattr(conn, "executemany") else conn.cursor()
    target.executemany(sql, rows)


def declared_ddl(d: SqlDialect) -> list[str]:
    """The two tables and their indexes (``CREATE … IF NOT EXISTS``: run on every open)."""
    text = "TEXT" if d.name == "sqlite" else 'text COLLATE "C"'
    key = "INTEGER" if d.name == "sqlite" else "bigint"
    number = "REAL" if d.name == "sqlite" else "double precision"
    rowid = " WITHOUT ROWID" if d.name == "sqlite" else ""
    return [
        f"CREATE TABLE IF NOT EXISTS facets (name {text} PRIMARY KEY, kind {text} NOT NULL,"
        f" attribute {text}, declared_at {text} NOT NULL){rowid}",
        "CREATE TABLE IF NOT EXISTS facet_values ("
        f"entity {key} NOT NULL REFERENCES entities(id) ON DELETE CASCADE,"
        f" facet {text} NOT NULL, value {text} NOT NULL, number {number},"
        f" PRIMARY KEY (facet, value, entity)){rowid}",
        "CREATE INDEX IF NOT EXISTS facet_values_by_entity ON facet_values (entity)",
        "CREATE INDEX IF NOT EXISTS facet_values_by_number ON facet_values (facet, number)"
        " WHERE number IS NOT NULL",
    ]


def read_declared(conn: Any, d: SqlDialect) -> list[DeclaredFacet]:
    """The store's declared facets, by name (on ``conn``'s snapshot)."""
    rows = conn.execute("SELECT name, kind, attribute FROM facets ORDER BY name").fetchall()
    return [
        DeclaredFacet(str(name), str(kind), None if key is None else str(key))  # type: ignore[arg-type]
        for name, kind, key in rows
    ]


def _rows(
    d: SqlDialect, entity: int, attributes: Any, facets: Sequence[DeclaredFacet]
) -> Iterator[dict[str, Any]]:
    if not isinstance(attributes, dict):
        return
    for facet in facets:
        for text, number in facet_values(attributes, facet):
            yield {"entity": entity, "facet": facet.name, "value": text, "number": number}


def _insert(d: SqlDialect) -> str:
    p = d.param
    return (
        "INSERT INTO facet_values (entity, facet, value, number) VALUES"
        f" ({p('entity')}, {p('facet')}, {p('value')}, {p('number')})"
    )


def write_values(conn: Writes, d: SqlDialect, plan: PublishPlan) -> None:
    """In a publish's transaction: the declared facets' values of the entities it upserts
    (replacing theirs); a deleted entity's went with its row."""
    if not plan.upserts:
        return
    facets = read_declared(conn, d)
    if not facets:
        return
    entities: dict[str, Entity] = {p.entity.uid: p.entity for p in plan.upserts}
    rows = conn.execute(
        f"SELECT uid, id FROM entities WHERE {d.in_array('uid', 'uids')}",
        {"uids": d.bind_array(list(entities))},
    ).fetchall()
    ids = {str(uid): int(i) for uid, i in rows}
    conn.execute(
        f"DELETE FROM facet_values WHERE {d.in_array('entity', 'ids', 'bigint')}",
        {"ids": d.bind_array(list(ids.values()))},
    )
    values = [
        row
        for uid, entity in entities.items()
        if uid in ids
        for row in _rows(d, ids[uid], dict(entity.attributes), facets)
    ]
    if values:
        _many(conn, _insert(d), values)


class FacetAdministration:
    """Declaring, listing and removing facets, over an engine's catalog (its ``Writer``:
    its write transaction holds the store's write lock)."""

    def __init__(self, catalog: Writer) -> None:
        self._catalog = catalog
        self._d = catalog.dialect

    def declared(self) -> list[DeclaredFacet]:
        """The declared facets, by name (one small statement)."""
        with self._catalog.reading() as conn:
            return read_declared(conn, self._d)

    def list(self) -> list[tuple[DeclaredFacet, int, int]]:
        """Each declared facet with how many entities have a value, and how many values."""
        with self._catalog.reading() as conn:
            facets = read_declared(conn, self._d)
            counts = {
                str(name): (int(entities), int(values))
                for name, entities, values in conn.execute(
                    "SELECT facet, count(DISTINCT entity), count(*) FROM facet_values"
                    " GROUP BY facet"
                ).fetchall()
            }
        return [(f, *counts.get(f.name, (0, 0))) for f in facets]

    def add(
        self, name: str, kind: str, attribute: str | None = None
    ) -> tuple[DeclaredFacet, int, int]:
        """Declare facet ``name`` of ``kind`` (read from ``attributes[attribute or name]``)
        and backfill it, in one write transaction; the facet with the entities and values
        it found."""
        d = self._d
        with self._catalog.writing() as conn:
            facet = check_declaration(name, kind, read_declared(conn, d), attribute)
            p = d.param
            conn.execute(
                "INSERT INTO facets (name, kind, attribute, declared_at) VALUES"
                f" ({p('name')}, {p('kind')}, {p('attribute')}, {p('at')})",
                {
                    "name": facet.name,
                    "kind": facet.kind,
                    "attribute": facet.attribute,
                    "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                },
            )
            entities, values = self._backfill(conn, facet)
        return facet, entities, values

    def _backfill(self, conn: Writes, facet: DeclaredFacet) -> tuple[int, int]:
        d = self._d
        join, _, attributes = d.body("e")
        after, entities, values = 0, 0, 0
        while True:
            rows = conn.execute(
                f"SELECT e.id, {attributes} FROM entities AS e{join}"
                f" WHERE e.id > {d.param('after')} ORDER BY e.id LIMIT {_BACKFILL_BATCH}",
                {"after": after},
            ).fetchall()
            if not rows:
                return entities, values
            after = int(rows[-1][0])
            batch = []
            for entity, raw in rows:
                found = list(_rows(d, int(entity), _decoded(raw), [facet]))
                entities += bool(found)
                batch.extend(found)
            values += len(batch)
            if batch:
                _many(conn, _insert(d), batch)

    def remove(self, name: str) -> DeclaredFacet:
        """Forget facet ``name`` and its values (NotFound when it is not declared)."""
        d = self._d
        with self._catalog.writing() as conn:
            facet = next((f for f in read_declared(conn, d) if f.name == name), None)
            if facet is None:
                raise NotFound(f"no facet {name!r} is declared", facet=name)
            conn.execute(
                f"DELETE FROM facet_values WHERE facet = {d.param('name')}", {"name": name}
            )
            conn.execute(f"DELETE FROM facets WHERE name = {d.param('name')}", {"name": name})
        return facet


def _decoded(raw: Any) -> Any:
    import json

    return json.loads(raw) if isinstance(raw, str | bytes) else raw
