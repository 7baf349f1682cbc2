"""``ks check``: what both engines verify in their catalog, through the dialect.

The catalog is the source of truth, and nothing above it can tell when its payload
changed under it: a flipped byte in a body, a row updated behind the store's back.
SQLite's ``integrity_check`` says ``ok`` when a byte of a text changed (its pages and
b-trees are fine). So the check reads every entity as stored — fields, edges, ACL —
and recomputes the content hash its publish recorded, with the very function the
publish used (:attr:`Entity.content_hash`); checks that every chunk is the slice of
its entity's body it says it is, and that no chunk or edge hangs off an entity that
is gone. Each engine adds its own checks (the database's own, the derived indexes
against the catalog: ``engines/embedded/check.py``, ``engines/postgres/check.py``).

Everything runs on one snapshot (``run``, a statement runner on one read transaction),
a batch of :data:`BATCH` entities at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from knowledge_store.engines.shared import stored_entity
from knowledge_store.engines.sql.dialect import SqlDialect
from knowledge_store.engines.sql.facets import entity_columns
from knowledge_store.model import (
    CHECK_UIDS_SHOWN,
    DAMAGE_KINDS,
    ENTITY_FIELDS,
    CheckFinding,
    CheckReport,
    DamageKind,
    Edge,
)

__all__ = ["BATCH", "Findings", "Run", "check_catalog"]

#: Runs one statement on the check's snapshot and returns its rows.
Run = Callable[[str, Mapping[str, Any]], Sequence[Sequence[Any]]]

#: Entities read at a time (with their edges, ACLs and chunks).
BATCH = 500


@dataclass
class _Found:
    count: int = 0
    uids: set[str] = field(default_factory=set)
    details: list[str] = field(default_factory=list)
    repaired: bool = False


class Findings:
    """The damage found so far, per kind, and what was checked."""

    def __init__(self) -> None:
        self._found: dict[DamageKind, _Found] = {}
        self.checked: dict[str, int] = {}
        self.notes: list[str] = []

    def add(
        self,
        kind: DamageKind,
        uids: Iterable[str] = (),
        *,
        count: int | None = None,
        details: Iterable[str] = (),
        repaired: bool = False,
    ) -> None:
        """Record damage of ``kind``: the entities concerned, how many things are damaged
        (default: how many uids), what was seen."""
        found = self._found.setdefault(kind, _Found(repaired=repaired))
        named = set(uids)
        found.uids |= named
        found.count += len(named) if count is None else count
        found.details.extend(details)
        found.repaired = found.repaired and repaired

    def __bool__(self) -> bool:
        return bool(self._found)

    def report(self, content_root: str, engine: str) -> CheckReport:
        damage = [
            CheckFinding(
                kind=kind,
                count=found.count,
                uids=sorted(found.uids)[:CHECK_UIDS_SHOWN],
                details=found.details[:CHECK_UIDS_SHOWN],
                message=DAMAGE_KINDS[kind].meaning,
                repair=DAMAGE_KINDS[kind].repair,
                repaired=found.repaired,
            )
            for kind, found in sorted(self._found.items())
        ]
        return CheckReport(
            content_root=content_root,
            engine=engine,
            ok=not damage,
            checked=dict(self.checked),
            damage=damage,
            notes=list(self.notes),
        )


def check_catalog(run: Run, d: SqlDialect, findings: Findings) -> None:
    """Every entity's content hash recomputed, every chunk against its entity's body, chunks
    and edges of no entity; adds ``entities``, ``chunks`` and ``edges`` to ``checked``."""
    after, entities, chunks = 0, 0, 0
    while True:
        rows = run(*_entities(d, after))
        if not rows:
            break
        after = int(rows[-1][0])
        entities += len(rows)
        chunks += _check_batch(run, d, rows, findings)
    findings.checked["entities"] = entities
    findings.checked["chunks"] = chunks
    (edges,) = run("SELECT count(*) FROM edges", {})[0]
    findings.checked["edges"] = int(edges)
    orphans = run(
        "SELECT count(*) FROM chunks AS c"
        " WHERE NOT EXISTS (SELECT 1 FROM entities AS e WHERE e.id = c.entity)",
        {},
    )
    if int(orphans[0][0]):
        findings.add("orphan_chunks", count=int(orphans[0][0]))
    dangling = run(
        "SELECT DISTINCT src FROM edges AS g"
        " WHERE NOT EXISTS (SELECT 1 FROM entities AS e WHERE e.uid = g.src)",
        {},
    )
    if dangling:
        findings.add("orphan_edges", (str(src) for (src,) in dangling))


_FIELDS = len(ENTITY_FIELDS)


def _entities(d: SqlDialect, after: int) -> tuple[str, dict[str, Any]]:
    """A batch of entities by row id: the id, ``ENTITY_FIELDS``, the stored hash, the ACL set,
    and whether its body row exists (a left join: a missing one is damage, not a skip)."""
    columns = entity_columns("e", "b.body", "b.attributes")
    return (
        f"SELECT e.id, {columns}, e.content_hash, e.acl_set, b.entity IS NOT NULL"
        " FROM entities AS e LEFT JOIN entity_bodies AS b ON b.entity = e.id"
        f" WHERE e.id > {d.param('after')} ORDER BY e.id LIMIT {BATCH}",
        {"after": after},
    )


def _check_batch(run: Run, d: SqlDialect, rows: Sequence[Sequence[Any]], found: Findings) -> int:
    """The hashes and chunks of one batch of entities; how many chunks it has."""
    uids = [str(r[1]) for r in rows]
    edges: dict[str, list[Edge]] = {}
    for src, label, dst, position in run(
        "SELECT src, label, dst, position FROM edges"
        f" WHERE {d.in_array('src', 'uids')} ORDER BY src, label, dst",
        {"uids": d.bind_array(uids)},
    ):
        edges.setdefault(str(src), []).append(Edge(str(src), str(label), str(dst), position))
    sets = sorted({int(r[_FIELDS + 2]) for r in rows})
    bound = {"sets": d.bind_array(sets)}
    known = run(f"SELECT id FROM acl_sets WHERE {d.in_array('id', 'sets', 'bigint')}", bound)
    acls: dict[int, list[str]] = {int(s): [] for (s,) in known}
    for acl_set, principal in run(
        "SELECT acl_set, principal FROM acl_set_principals"
        f" WHERE {d.in_array('acl_set', 'sets', 'bigint')} ORDER BY acl_set, principal",
        bound,
    ):
        acls.setdefault(int(acl_set), []).append(str(principal))
    bodies: dict[int, tuple[str, object]] = {}
    for row in rows:
        uid, fields = str(row[1]), row[1 : 1 + _FIELDS]
        stored_hash, acl_set, has_body = row[_FIELDS + 1], int(row[_FIELDS + 2]), row[_FIELDS + 3]
        problem = None if has_body else "no body row"
        if problem is None and acl_set not in acls:
            problem = f"its ACL set {acl_set} is missing"
        if problem is None:
            try:
                entity = stored_entity(
                    fields, tuple(edges.get(uid, ())), tuple(sorted(acls[acl_set]))
                )
                hashed = entity.content_hash
            except (ValueError, TypeError, KeyError, UnicodeError) as exc:
                problem = f"{type(exc).__name__}: {exc}"[:200]
            else:
                if hashed != stored_hash:
                    found.add("content_hash", [uid])
                bodies[int(row[0])] = (uid, entity.body)
        if problem is not None:
            found.add("unreadable", [uid], details=[f"{uid}: {problem}"])
    return _check_chunks(run, d, bodies, found)


def _check_chunks(
    run: Run, d: SqlDialect, bodies: Mapping[int, tuple[str, object]], found: Findings
) -> int:
    """Each chunk of these entities is ``body[start:end]`` of its entity; how many there are."""
    if not bodies:
        return 0
    rows = run(
        'SELECT entity, text, start, "end" FROM chunks'
        f" WHERE {d.in_array('entity', 'ids', 'bigint')}",
        {"ids": d.bind_array(sorted(bodies))},
    )
    bad: set[str] = set()
    count = 0
    for entity, text, start, end in rows:
        uid, body = bodies[int(entity)]
        if not isinstance(body, str) or body[int(start) : int(end)] != text:
            bad.add(uid)
            count += 1
    if bad:
        found.add("chunk_text", bad, count=count)
    return len(rows)
