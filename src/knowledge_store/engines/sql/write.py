"""A publish's catalog writes, written once for both engines over the dialect.

In the publish's own write transaction (the store's write lock held), :func:`publish_batch`
settles the batch (:mod:`.batch`), reads what the store holds of it, plans it (the pure
planner, :mod:`.publish`) and writes the plan: entities and their bodies, ACL sets, edges,
the ``publishes`` row and the source's row (:mod:`.sources`). Every write is set-based —
one statement per table and kind of change, whatever the size of the batch (the rows
bound as one value: :meth:`~.dialect.SqlDialect.rows_from`) — and keyed by the entity's
uid where the table has it (a plain ``INSERT … ON CONFLICT (uid)``, an ``UPDATE … WHERE
uid``: what a database distributed by uid routes to one shard).

**One place per row change.** Each table's rows are inserted, replaced or deleted by
exactly one function below (``_delete_*``, ``_upsert_*``, ``_insert_*``, ``_repoint_acls``,
``_record``), called in one order: what goes (chunks, then edges, then entities), then
what comes (entities, bodies, chunks, edges, the declared facets' values:
:func:`.declared.write_values`), then ACL-only changes and the publish's row. Before any
of it, the history keeps what the publish ends (:func:`.history.retire`: the versions it
replaces, deletes or re-points, the chunks it removes with their vectors).

**What an engine keeps of chunks is its own** (:class:`ChunkStore`): the rows of
``chunks`` with what it derives from them in the same transaction — PostgreSQL its
tsvector, field lengths, vector column and BM25 postings and statistics; the embedded
engine its ``chunk_vectors`` and the ``publish_ops`` log its derived indexes follow.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from knowledge_store.engines.base import PreparedEntity, Published
from knowledge_store.engines.shared import check_prepared
from knowledge_store.engines.sql.batch import BatchScope, settle_batch
from knowledge_store.engines.sql.declared import write_values
from knowledge_store.engines.sql.dialect import Column, SqlDialect
from knowledge_store.engines.sql.history import retire
from knowledge_store.engines.sql.publish import (
    EMPTY_ROOT,
    PublishPlan,
    content_root_of,
    plan_publish,
    plan_row,
    publish_row,
)
from knowledge_store.engines.sql.sources import Executes, SourceSync, record_source
from knowledge_store.errors import ModelMismatch, StoreError
from knowledge_store.model import ENTITY_FIELDS, Entity

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "Batch",
    "ChunkStore",
    "Placed",
    "Reembedding",
    "acl_set_id",
    "latest_publish",
    "publish_batch",
    "reembed",
    "stored_hashes",
    "write_meta",
]

#: An upserted entity with the row id the catalog gave it.
Placed = tuple[int, PreparedEntity]


@dataclass(frozen=True)
class Batch:
    """What one publish is asked to do.

    ``model``: the vectors' model — refused (ModelMismatch) unless the store records that
    model (or none yet): it may have been re-embedded since they were made. ``source``: the
    source's row is written (even when nothing changed), and a sync deletes the source's
    entities the batch does not hold. ``scope``: what the batch holds beyond its upserts,
    and whether it may move entities from another source (``.batch``). ``acl_change``:
    decides, on the publish's connection, the entities whose ACL changes and nothing
    else (a grant, a revoke).
    """

    upserts: Sequence[PreparedEntity] = ()
    deletes: Sequence[str] = ()
    kind: str = "ingest"
    model: str | None = None
    source: SourceSync | None = None
    scope: BatchScope | None = None
    acl_change: Callable[[Any], Sequence[Entity]] | None = None


class ChunkStore(Protocol):
    """What an engine writes of chunks, inside the publish's transaction ``conn``."""

    #: Columns of ``entities`` the engine keeps beyond the shared ones, each with its value
    #: for an upserted entity (PostgreSQL: its chunk count).
    entity_columns: Mapping[str, tuple[Column, Callable[[PreparedEntity], Any]]]

    def add(self, conn: Any, publish: int, placed: Sequence[Placed]) -> None:
        """Insert the chunks (and vectors) of these entities, new rows with new ids."""
        ...

    def drop(self, conn: Any, publish: int, chunk_ids: Sequence[int]) -> None:
        """These chunks' rows are about to be deleted (the shared statement deletes them)."""
        ...

    def repoint(self, conn: Any, publish: int, uids: Sequence[str]) -> None:
        """These entities' ACL set changed and nothing else: their chunks stay."""
        ...

    def replace_vectors(
        self, conn: Any, publish: int, ids: Sequence[int], vectors: npt.NDArray[np.float32]
    ) -> None:
        """Every chunk's vector, replaced (a re-embedding: ``ids`` are all the chunks)."""
        ...

    def set_dimension(self, conn: Any, dimension: int) -> None:
        """The store's first model is recorded: its vectors have ``dimension`` floats."""
        ...

    def vector_bytes(self, conn: Any, ids: Sequence[int]) -> dict[int, bytes]:
        """The stored vectors of chunk rows ``ids`` (float32 bytes), for the history."""
        ...


# -- reads, on the publish's connection ------------------------------------------------------------
def latest_publish(conn: Executes) -> tuple[int, str]:
    """``(id, root)`` of the latest publish (``(0, EMPTY_ROOT)``: none yet)."""
    row = conn.execute("SELECT id, root FROM publishes ORDER BY id DESC LIMIT 1").fetchone()
    return (0, EMPTY_ROOT) if row is None else (int(row[0]), str(row[1]))


def stored_hashes(conn: Executes, d: SqlDialect, uids: Sequence[str]) -> dict[str, str]:
    """uid → stored content hash, of the stored ones of ``uids``."""
    sql = f"SELECT uid, content_hash FROM entities WHERE {d.in_array('uid', 'uids')}"
    rows = conn.execute(sql, {"uids": d.bind_array(list(uids))}).fetchall()
    return {str(uid): str(h) for uid, h in rows}


# -- the publish ------------------------------------------------------------------------------------
def publish_batch(conn: Executes, d: SqlDialect, chunks: ChunkStore, batch: Batch) -> PublishPlan:
    """Settle, plan and write ``batch`` inside the caller's write transaction ``conn``
    (the store's write lock held). A plan that changes nothing writes nothing but the
    source's row."""
    _check_batch(conn, d, batch)
    latest = latest_publish(conn)
    acl_only = () if batch.acl_change is None else batch.acl_change(conn)
    settled = settle_batch(
        conn,
        d,
        batch.upserts,
        batch.deletes,
        source=batch.source,
        scope=batch.scope,
        acl_only=acl_only,
    )
    uids = [p.entity.uid for p in settled.upserts] + list(settled.deletes)
    uids += [e.uid for e in settled.acl_only]
    stored = stored_hashes(conn, d, uids)
    plan = plan_publish(latest, stored, settled.upserts, settled.deletes, settled.acl_only)
    if not plan.empty:
        write_plan(conn, d, chunks, plan, batch.kind)
    record_source(conn, d, batch.source, Published.of(plan))
    return plan


def _check_batch(conn: Executes, d: SqlDialect, batch: Batch) -> None:
    """Refuse, before anything is written, vectors of another model than the store's and
    chunks or vectors no engine could take (``shared.check_prepared``)."""
    sql = f"SELECT key, value FROM meta WHERE {d.in_array('key', 'keys')}"
    meta = dict(conn.execute(sql, {"keys": d.bind_array(["model", "dimension"])}).fetchall())
    recorded = meta.get("model")
    if batch.model is not None and recorded is not None and recorded != batch.model:
        raise ModelMismatch(
            f"this store's vectors are now {recorded}, not {batch.model} (it was re-embedded"
            " meanwhile); nothing was published — ingest again",
            store_model=str(recorded),
            model=batch.model,
        )
    dimension = meta.get("dimension")
    check_prepared(batch.upserts, None if dimension is None else int(dimension))


def write_plan(
    conn: Executes, d: SqlDialect, chunks: ChunkStore, plan: PublishPlan, kind: str
) -> None:
    """Write ``plan`` (not empty) and its ``publishes`` row (see the module docstring)."""
    publish = plan.publish
    retire(
        conn,
        d,
        publish,
        replaced=plan.replaced,
        deleted=plan.deletes,
        acl_only=[e.uid for e in plan.acl_only],
        vectors=chunks.vector_bytes,
    )
    gone = [*plan.replaced, *plan.deletes]
    if gone:
        _delete_chunks(conn, d, chunks, publish, gone)
        _delete_edges(conn, d, gone)
    if plan.deletes:
        _delete_entities(conn, d, plan.deletes)
    if plan.upserts:
        acl_sets = _acl_sets(conn, d, (p.entity.acl for p in plan.upserts))
        ids = _upsert_entities(conn, d, chunks, publish, plan.upserts, acl_sets)
        placed = [(ids[p.entity.uid], p) for p in plan.upserts]
        _upsert_bodies(conn, d, placed)
        chunks.add(conn, publish, placed)
        _insert_edges(conn, d, plan.upserts)
        write_values(conn, d, plan)  # the declared facets' values (ks facets add)
    if plan.acl_only:
        acl_sets = _acl_sets(conn, d, (e.acl for e in plan.acl_only))
        _repoint_acls(conn, d, publish, plan.acl_only, acl_sets)
        chunks.repoint(conn, publish, [e.uid for e in plan.acl_only])
    _record(conn, *plan_row(d, plan, kind))


# -- what goes -------------------------------------------------------------------------------------
def _delete_chunks(
    conn: Executes, d: SqlDialect, chunks: ChunkStore, publish: int, uids: Sequence[str]
) -> None:
    """The chunks of entities ``uids`` (their vectors with them: a foreign key's cascade)."""
    owned = f"entity IN (SELECT id FROM entities WHERE {d.in_array('uid', 'uids')})"
    params = {"uids": d.bind_array(list(uids))}
    ids = [int(c) for (c,) in conn.execute(f"SELECT id FROM chunks WHERE {owned}", params)]
    if ids:
        chunks.drop(conn, publish, ids)
        conn.execute(f"DELETE FROM chunks WHERE {owned}", params)


def _delete_edges(conn: Executes, d: SqlDialect, srcs: Sequence[str]) -> None:
    """The outgoing edges of ``srcs``."""
    sql = f"DELETE FROM edges WHERE {d.in_array('src', 'srcs')}"
    conn.execute(sql, {"srcs": d.bind_array(list(srcs))})


def _delete_entities(conn: Executes, d: SqlDialect, uids: Sequence[str]) -> None:
    """The rows (and bodies) of entities ``uids``, whose chunks and edges went first."""
    params = {"uids": d.bind_array(list(uids))}
    conn.execute(
        "DELETE FROM entity_bodies WHERE entity IN"
        f" (SELECT id FROM entities WHERE {d.in_array('uid', 'uids')})",
        params,
    )
    conn.execute(f"DELETE FROM entities WHERE {d.in_array('uid', 'uids')}", params)


# -- what comes ------------------------------------------------------------------------------------
#: The shared columns of ``entities`` a publish writes: the entity's fields (its body and
#: attributes live in ``entity_bodies``), then ours; ``uid`` is the key.
_FIELDS = tuple(name for name in ENTITY_FIELDS if name not in ("body", "attributes"))
_ENTITY_COLUMNS: tuple[Column, ...] = (
    *((name, "text") for name in _FIELDS),
    ("acl_set", "bigint"),
    ("content_hash", "text"),
    ("publish", "bigint"),
)
_BODY_COLUMNS: tuple[Column, ...] = (("entity", "bigint"), ("body", "text"), ("attributes", "json"))
_EDGE_COLUMNS: tuple[Column, ...] = (
    ("src", "text"),
    ("label", "text"),
    ("dst", "text"),
    ("position", "integer"),
)


def _upsert(
    d: SqlDialect, table: str, columns: Sequence[Column], key: str, returning: str = ""
) -> str:
    """``INSERT … SELECT`` the bound rows ``r``, replacing the row of the same ``key``."""
    names = [name for name, _ in columns]
    updates = ", ".join(f"{n} = excluded.{n}" for n in names if n != key)
    return (
        f"INSERT INTO {table} ({', '.join(names)})"
        f" SELECT {', '.join(f'r.{n}' for n in names)} FROM {d.rows_from('r', columns, 'r')}"
        # WHERE: SQLite reads ON after a SELECT … FROM as a join's unless something comes between
        f" WHERE true ON CONFLICT ({key}) DO UPDATE SET {updates}{returning}"
    )


def _acl_sets(conn: Executes, d: SqlDialect, acls: Iterable[Sequence[str]]) -> dict[str, int]:
    """The ACL set id of each distinct ACL of ``acls``, by its key (made when new)."""
    out: dict[str, int] = {}
    for acl in acls:
        key = d.acl_set_key(acl)
        if key not in out:
            out[key] = acl_set_id(conn, d, acl)
    return out


def acl_set_id(conn: Executes, d: SqlDialect, principals: Sequence[str]) -> int:
    """The id of the deduplicated ACL set holding exactly ``principals`` (made if new)."""
    members = sorted(set(principals))
    key = {"key": d.acl_set_key(members)}
    row = conn.execute(f"SELECT id FROM acl_sets WHERE key = {d.param('key')}", key).fetchone()
    if row is not None:
        return int(row[0])
    made = conn.execute(
        f"INSERT INTO acl_sets (key) VALUES ({d.param('key')}) RETURNING id", key
    ).fetchone()
    acl_set = int(made[0])
    if members:
        conn.execute(
            "INSERT INTO acl_set_principals (acl_set, principal)"
            f" SELECT {d.param('acl_set')}, value FROM ({d.array_rows('members')}) AS m",
            {"acl_set": acl_set, "members": d.bind_array(members)},
        )
    return acl_set


def _upsert_entities(
    conn: Executes,
    d: SqlDialect,
    chunks: ChunkStore,
    publish: int,
    upserts: Sequence[PreparedEntity],
    acl_sets: Mapping[str, int],
) -> dict[str, int]:
    """Insert or replace the rows of ``upserts``; their row ids by uid."""
    extra = list(chunks.entity_columns.values())
    columns = [*_ENTITY_COLUMNS, *(column for column, _ in extra)]
    rows = []
    for prepared in upserts:
        entity = prepared.entity
        fields = dict(zip(ENTITY_FIELDS, entity.field_values(), strict=True))
        ours = (acl_sets[d.acl_set_key(entity.acl)], entity.content_hash, publish)
        rows.append(
            (*(fields[n] for n in _FIELDS), *ours, *(value(prepared) for _, value in extra))
        )
    sql = _upsert(d, "entities", columns, "uid", " RETURNING uid, id")
    found = conn.execute(sql, d.bind_rows("r", columns, rows)).fetchall()
    return {str(uid): int(row_id) for uid, row_id in found}


def _upsert_bodies(conn: Executes, d: SqlDialect, placed: Sequence[Placed]) -> None:
    rows = [
        (
            row_id,
            p.entity.body,
            json.dumps(dict(p.entity.attributes), ensure_ascii=False, sort_keys=True),
        )
        for row_id, p in placed
    ]
    sql = _upsert(d, "entity_bodies", _BODY_COLUMNS, "entity")
    conn.execute(sql, d.bind_rows("r", _BODY_COLUMNS, rows))


def _insert_edges(conn: Executes, d: SqlDialect, upserts: Sequence[PreparedEntity]) -> None:
    """The outgoing edges of ``upserts`` (an edge named twice: its last position)."""
    edges: dict[tuple[str, str, str], int | None] = {}
    for prepared in upserts:
        for edge in prepared.entity.edges:
            edges[(prepared.entity.uid, edge.label, edge.dst)] = edge.position
    if edges:
        sql = _upsert(d, "edges", _EDGE_COLUMNS, "src, label, dst")
        rows = [(*key, position) for key, position in edges.items()]
        conn.execute(sql, d.bind_rows("r", _EDGE_COLUMNS, rows))


def _repoint_acls(
    conn: Executes,
    d: SqlDialect,
    publish: int,
    changed: Sequence[Entity],
    acl_sets: Mapping[str, int],
) -> None:
    """ACL-only changes: a new ACL set and content hash, one entity (by uid) at a time."""
    p = d.param
    sql = (
        f"UPDATE entities SET acl_set = {p('acl_set')}, content_hash = {p('hash')},"
        f" publish = {p('publish')} WHERE uid = {p('uid')}"
    )
    for entity in changed:
        params = {
            "acl_set": acl_sets[d.acl_set_key(entity.acl)],
            "hash": entity.content_hash,
            "publish": publish,
            "uid": entity.uid,
        }
        conn.execute(sql, params)


def _record(conn: Executes, sql: str, params: Mapping[str, Any]) -> None:
    """The ``publishes`` row."""
    conn.execute(sql, params)


# -- a re-embedding and the model -----------------------------------------------------------------
@dataclass(frozen=True)
class Reembedding:
    """Every chunk's vector replaced, and the model recorded (``meta``), as one publish.

    ``ids`` must be every chunk of the store at ``base_root``; ``vectors`` one row per id,
    checked (``shared.check_vectors``).
    """

    ids: Sequence[int]
    vectors: npt.NDArray[np.float32]
    meta: Mapping[str, str]
    base_root: str


def reembed(conn: Executes, d: SqlDialect, chunks: ChunkStore, job: Reembedding) -> tuple[int, str]:
    """``job`` as one publish (kind ``reembed``) in the caller's write transaction;
    ``(publish, root)``. Refused (StoreError), nothing changed, when the store moved on from
    ``job.base_root`` or ``job.ids`` are not all its chunks."""
    publish, parent = latest_publish(conn)
    (count,) = conn.execute("SELECT count(*) FROM chunks").fetchone()
    if parent != job.base_root or int(count) != len(job.ids):
        raise StoreError(
            "the store changed while it was being re-embedded; nothing was replaced —"
            " run it again (the vectors made so far are cached)"
        )
    publish += 1
    chunks.replace_vectors(conn, publish, job.ids, job.vectors)
    write_meta(conn, d, job.meta)
    root = content_root_of(parent, {})
    _record(conn, *publish_row(d, publish, root, parent, "reembed"))
    return publish, root


def write_meta(conn: Executes, d: SqlDialect, items: Mapping[str, str]) -> None:
    """Set each of ``items`` in ``meta``."""
    sql = (
        f"INSERT INTO meta (key, value) VALUES ({d.param('key')}, {d.param('value')})"
        " ON CONFLICT (key) DO UPDATE SET value = excluded.value"
    )
    for key, value in items.items():
        conn.execute(sql, {"key": key, "value": value})
