"""What the catalog was, at any retained publish and moment: written once for both engines.

A publish ends versions: the entities it replaces, deletes or re-points to another ACL, and
the chunks of those it replaces or deletes. Before it writes, :func:`retire` keeps them:

* ``entity_history`` — one row per ended version: its uid, the publish that wrote it
  (``valid_from``, the entity row's ``publish``) and the one that ended it (``valid_to``),
  its content hash, its whole record (fields, body, attributes, edges, ACL — canonical
  JSON, as ingested) and the row ids of its chunks;
* ``chunk_history`` — each chunk a publish removes, by its row id (never reused): text,
  heading, offsets, location, its vector (float32), and the publish that removed it.

So the entities at publish ``P`` are the live rows written at or before ``P`` and the
history rows with ``valid_from <= P < valid_to``; their chunks are live or kept
(:func:`entities_at`). An ACL-only change keeps its chunks live: the version it ends names
the same chunk ids as the next one.

Memberships are not publishes: ``membership_history`` keeps each membership's interval —
when it was added, when removed (NULL: held now) — in UTC with microseconds, written in
the same transaction as the change (:func:`note_memberships`); memberships that existed
before the table did start at the beginning of time (``''``). :func:`memberships_at`
gives those held at a moment.

Growth: an entity update keeps the version it ends (its record: its body and fields) and,
for a content change, its chunks with their vectors (1,536 bytes each at 384 dimensions);
``ks gc`` removes what ended before the oldest retained moment (:func:`prune`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from knowledge_store.engines.shared import stored_entity
from knowledge_store.engines.sql.dialect import SqlDialect
from knowledge_store.engines.sql.facets import entity_columns
from knowledge_store.model import ENTITY_FIELDS, Chunk, Edge, Entity
from knowledge_store.model.audit import canonical_json

__all__ = [
    "ChunkVectors",
    "EntityVersion",
    "History",
    "Publish",
    "VersionAt",
    "entities_at",
    "entity_of_record",
    "history_ddl",
    "membership_changes",
    "memberships_at",
    "note_memberships",
    "prune",
    "replace_memberships",
    "retire",
    "versions",
]

#: An engine's vectors of live chunk rows: ``(connection, row ids) → {row id: float32 bytes}``.
ChunkVectors = Callable[[Any, Sequence[int]], dict[int, bytes]]
#: Entities read at once when a replica of a publish is built.
BATCH = 500


def history_ddl(d: SqlDialect) -> list[str]:
    """The history tables (idempotent), and the memberships held before they existed."""
    return [
        f"""CREATE TABLE IF NOT EXISTS entity_history (
            uid          TEXT NOT NULL,
            valid_from   {d.big_integer} NOT NULL,
            valid_to     {d.big_integer} NOT NULL,
            content_hash TEXT NOT NULL,
            record       TEXT NOT NULL,
            chunks       TEXT NOT NULL,
            PRIMARY KEY (uid, valid_from)
        )""",
        "CREATE INDEX IF NOT EXISTS entity_history_by_end ON entity_history (valid_to)",
        f"""CREATE TABLE IF NOT EXISTS chunk_history (
            id        {d.big_integer} PRIMARY KEY,
            uid       TEXT NOT NULL,
            ordinal   INTEGER NOT NULL,
            text      TEXT NOT NULL,
            heading   TEXT NOT NULL,
            start     INTEGER NOT NULL,
            "end"     INTEGER NOT NULL,
            location  TEXT,
            embedding {d.blob},
            removed   {d.big_integer} NOT NULL
        )""",
        "CREATE INDEX IF NOT EXISTS chunk_history_by_end ON chunk_history (removed)",
        """CREATE TABLE IF NOT EXISTS membership_history (
            grp        TEXT NOT NULL,
            member     TEXT NOT NULL,
            added_at   TEXT NOT NULL,
            removed_at TEXT,
            PRIMARY KEY (grp, member, added_at)
        )""",
        "CREATE INDEX IF NOT EXISTS membership_history_by_end ON membership_history (removed_at)",
    ]


#: Whether a store made before the history has memberships its history doesn't know yet.
MEMBERSHIPS_UNRECORDED = (
    "SELECT EXISTS (SELECT 1 FROM memberships) AND NOT EXISTS (SELECT 1 FROM membership_history)"
)
#: Those memberships recorded as held since the beginning (run only when
#: :data:`MEMBERSHIPS_UNRECORDED`: an INSERT takes SQLite's write lock even when it adds
#: nothing, and opening a store must never wait for a writer).
RECORD_MEMBERSHIPS = (
    "INSERT INTO membership_history (grp, member, added_at) SELECT grp, member, ''"
    " FROM memberships WHERE NOT EXISTS (SELECT 1 FROM membership_history)"
)


# -- writing: what a publish ends ----------------------------------------------------------------------
def _json(value: Any) -> str | None:
    """A column the engines store as JSON text (SQLite) or jsonb (PostgreSQL), as text."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _live_entities(conn: Any, d: SqlDialect, where: str, params: dict[str, Any]) -> list[Any]:
    """``(entity, publish, chunk ids)`` of the live entities ``where`` picks (alias ``e``)."""
    join, body, attributes = d.body("e")
    rows = conn.execute(
        f"SELECT {entity_columns('e', body, attributes)}, e.publish, e.id"
        f" FROM entities AS e{join} WHERE {where}",
        params,
    ).fetchall()
    if not rows:
        return []
    ids = [int(r[-1]) for r in rows]
    p = d.in_array("e.id", "ids", "bigint")
    bound = {"ids": d.bind_array(ids)}
    acl: dict[int, list[str]] = {}
    for eid, principal in conn.execute(
        "SELECT e.id, s.principal FROM entities AS e"
        f" JOIN acl_set_principals AS s ON s.acl_set = e.acl_set WHERE {p} ORDER BY s.principal",
        bound,
    ).fetchall():
        acl.setdefault(int(eid), []).append(str(principal))
    edges: dict[int, list[Edge]] = {}
    for eid, src, label, dst, position in conn.execute(
        "SELECT e.id, g.src, g.label, g.dst, g.position FROM entities AS e"
        f" JOIN edges AS g ON g.src = e.uid WHERE {p} ORDER BY g.label, g.dst",
        bound,
    ).fetchall():
        edges.setdefault(int(eid), []).append(Edge(str(src), str(label), str(dst), position))
    chunks: dict[int, list[int]] = {}
    for eid, cid in conn.execute(
        f"SELECT c.entity, c.id FROM chunks AS c WHERE {d.in_array('c.entity', 'ids', 'bigint')}"
        " ORDER BY c.entity, c.ordinal",
        bound,
    ).fetchall():
        chunks.setdefault(int(eid), []).append(int(cid))
    out = []
    for row in rows:
        eid = int(row[-1])
        entity = stored_entity(row, tuple(edges.get(eid, ())), tuple(acl.get(eid, ())))
        out.append((entity, int(row[-2]), chunks.get(eid, [])))
    return out


def retire(
    conn: Any,
    d: SqlDialect,
    publish: int,
    *,
    replaced: Sequence[str],
    deleted: Sequence[str],
    acl_only: Sequence[str],
    vectors: ChunkVectors,
) -> None:
    """Keep what publish ``publish`` ends, before it writes (in its transaction): the versions
    of every entity it replaces, deletes or re-points to another ACL, and the chunks of those
    it replaces or deletes."""
    ending = list(dict.fromkeys([*replaced, *deleted, *acl_only]))
    if not ending:
        return
    live = _live_entities(conn, d, d.in_array("e.uid", "uids"), {"uids": d.bind_array(ending)})
    p = d.param
    conn.cursor().executemany(
        "INSERT INTO entity_history (uid, valid_from, valid_to, content_hash, record, chunks)"
        f" VALUES ({p('uid')}, {p('valid_from')}, {p('valid_to')}, {p('hash')}, {p('record')},"
        f" {p('chunks')}) ON CONFLICT (uid, valid_from) DO NOTHING",
        [
            {
                "uid": entity.uid,
                "valid_from": written,
                "valid_to": publish,
                "hash": entity.content_hash,
                "record": canonical_json(entity.to_record()),
                "chunks": json.dumps(ids),
            }
            for entity, written, ids in live
        ],
    )
    content = set(replaced) | set(deleted)
    gone = [cid for entity, _, ids in live if entity.uid in content for cid in ids]
    if not gone:
        return
    rows = conn.execute(
        'SELECT c.id, e.uid, c.ordinal, c.text, c.heading, c.start, c."end", c.location'
        " FROM chunks AS c JOIN entities AS e ON e.id = c.entity"
        f" WHERE {d.in_array('c.id', 'ids', 'bigint')}",
        {"ids": d.bind_array(gone)},
    ).fetchall()
    kept = vectors(conn, gone)
    conn.cursor().executemany(
        'INSERT INTO chunk_history (id, uid, ordinal, text, heading, start, "end", location,'
        f" embedding, removed) VALUES ({p('id')}, {p('uid')}, {p('ordinal')}, {p('text')},"
        f" {p('heading')}, {p('start')}, {p('end')}, {p('location')}, {p('embedding')},"
        f" {p('removed')}) ON CONFLICT (id) DO NOTHING",
        [
            {
                "id": int(r[0]),
                "uid": str(r[1]),
                "ordinal": int(r[2]),
                "text": str(r[3]),
                "heading": _json(r[4]),
                "start": int(r[5]),
                "end": int(r[6]),
                "location": _json(r[7]),
                "embedding": kept.get(int(r[0])),
                "removed": publish,
            }
            for r in rows
        ],
    )


# -- reading: the catalog at a publish ------------------------------------------------------------------
@dataclass(frozen=True)
class VersionAt:
    """An entity as it was at a publish: the record, its chunks and their vectors."""

    entity: Entity
    chunks: tuple[Chunk, ...]
    vectors: np.ndarray  # (len(chunks), dimension) float32; empty: none kept
    #: The row ids its chunks had (a replica writes entities in their order, so that rows
    #: tied in score are ranked as they were: the indexes break ties by row).
    rows: tuple[int, ...] = ()


def _chunks(conn: Any, d: SqlDialect, ids: Sequence[int], vectors: ChunkVectors) -> dict[int, Any]:
    """``row id → (Chunk, vector bytes | None)`` of chunks live or kept."""
    out: dict[int, Any] = {}
    if not ids:
        return out
    bound = {"ids": d.bind_array(list(ids))}
    columns = 'c.id, c.ordinal, c.text, c.heading, c.start, c."end", c.location'
    live = conn.execute(
        f"SELECT {columns} FROM chunks AS c WHERE {d.in_array('c.id', 'ids', 'bigint')}", bound
    ).fetchall()
    found = vectors(conn, [int(r[0]) for r in live])
    for r in live:
        out[int(r[0])] = (_chunk(r), found.get(int(r[0])))
    missing = [i for i in ids if i not in out]
    if missing:
        for r in conn.execute(
            f"SELECT {columns}, c.embedding FROM chunk_history AS c"
            f" WHERE {d.in_array('c.id', 'ids', 'bigint')}",
            {"ids": d.bind_array(missing)},
        ).fetchall():
            out[int(r[0])] = (_chunk(r), None if r[7] is None else bytes(r[7]))
    return out


def _chunk(r: Sequence[Any]) -> Chunk:
    heading = json.loads(r[3]) if isinstance(r[3], str) else r[3]
    location = json.loads(r[6]) if isinstance(r[6], str) else r[6]
    return Chunk(int(r[1]), str(r[2]), tuple(heading), int(r[4]), int(r[5]), location)


def _version(entity: Entity, ids: Sequence[int], found: dict[int, Any]) -> VersionAt:
    pairs = [found[i] for i in ids if i in found]
    chunks = tuple(c for c, _ in pairs)
    blobs = [v for _, v in pairs]
    if blobs and all(v is not None for v in blobs):
        matrix = np.stack([np.frombuffer(v, dtype=np.float32) for v in blobs])
    else:
        matrix = np.zeros((0, 0), dtype=np.float32)
    return VersionAt(entity, chunks, matrix, tuple(i for i in ids if i in found))


def entity_of_record(record: dict[str, Any]) -> Entity:
    """The entity a kept record holds (what ``Entity.to_record`` wrote)."""
    uid = str(record["uid"])
    edges = tuple(
        Edge(uid, str(e["label"]), str(e["to"]), e.get("position")) for e in record["edges"]
    )
    fields = {name: record.get(name) for name in ENTITY_FIELDS}
    return Entity.from_fields(fields, edges=edges, acl=tuple(record["acl"]))


def entities_at(
    conn: Any, d: SqlDialect, publish: int, vectors: ChunkVectors, batch: int = BATCH
) -> Iterator[list[VersionAt]]:
    """Every entity as it was at ``publish``, ``batch`` at a time (one read transaction: the
    caller's ``conn``)."""
    live = _live_entities(conn, d, f"e.publish <= {d.param('p')}", {"p": publish})
    for start in range(0, len(live), batch):
        part = live[start : start + batch]
        found = _chunks(conn, d, [i for _, _, ids in part for i in ids], vectors)
        yield [_version(entity, ids, found) for entity, _, ids in part]
    p = d.param
    rows = conn.execute(
        "SELECT record, chunks FROM entity_history"
        f" WHERE valid_from <= {p('p')} AND valid_to > {p('p')} ORDER BY uid",
        {"p": publish},
    ).fetchall()
    for start in range(0, len(rows), batch):
        part = [(json.loads(r), json.loads(c)) for r, c in rows[start : start + batch]]
        found = _chunks(conn, d, [i for _, ids in part for i in ids], vectors)
        yield [_version(entity_of_record(record), ids, found) for record, ids in part]


@dataclass(frozen=True)
class EntityVersion:
    """One version of an entity: the publishes it was live between (``valid_to`` None: now),
    its content hash and its ACL (None for a deletion's marker)."""

    uid: str
    valid_from: int
    valid_to: int | None
    content_hash: str
    acl: tuple[str, ...]
    record: dict[str, Any]


def versions(conn: Any, d: SqlDialect, uids: Sequence[str]) -> dict[str, list[EntityVersion]]:
    """Every kept and live version of each of ``uids``, oldest first."""
    out: dict[str, list[EntityVersion]] = {uid: [] for uid in uids}
    if not uids:
        return out
    for uid, start, end, content_hash, text in conn.execute(
        "SELECT uid, valid_from, valid_to, content_hash, record FROM entity_history"
        f" WHERE {d.in_array('uid', 'uids')} ORDER BY uid, valid_from",
        {"uids": d.bind_array(list(uids))},
    ).fetchall():
        record = json.loads(text)
        out[str(uid)].append(
            EntityVersion(
                str(uid), int(start), int(end), str(content_hash), tuple(record["acl"]), record
            )
        )
    live = _live_entities(conn, d, d.in_array("e.uid", "uids"), {"uids": d.bind_array(list(uids))})
    for entity, written, _ in live:
        out[entity.uid].append(
            EntityVersion(
                entity.uid, written, None, entity.content_hash, entity.acl, entity.to_record()
            )
        )
    return out


# -- memberships --------------------------------------------------------------------------------------------
def note_memberships(
    conn: Any,
    d: SqlDialect,
    added: Sequence[tuple[str, str]],
    removed: Sequence[tuple[str, str]],
    at: str,
) -> None:
    """Keep the memberships a change added and removed, at ``at`` (in its transaction)."""
    p = d.param
    if removed:
        conn.cursor().executemany(
            f"UPDATE membership_history SET removed_at = {p('at')} WHERE grp = {p('grp')}"
            f" AND member = {p('member')} AND removed_at IS NULL",
            [{"grp": g, "member": m, "at": at} for g, m in removed],
        )
    if added:
        conn.cursor().executemany(
            "INSERT INTO membership_history (grp, member, added_at)"
            f" VALUES ({p('grp')}, {p('member')}, {p('at')}) ON CONFLICT DO NOTHING",
            [{"grp": g, "member": m, "at": at} for g, m in added],
        )


def follow_source(replica: Any, source: Any) -> None:
    """A replica's engine names chunks with ``source``'s key and records its model (the
    replica of either engine: ``engines.base.Replica``)."""
    replica.chunk_ids = source.chunk_ids  # the same public chunk ids
    model = source.writer.model()
    if model is not None:
        replica.writer.set_model(model[0], model[1], source.writer.model_spec() or "")


def replace_memberships(conn: Any, d: SqlDialect, pairs: Sequence[tuple[str, str]]) -> None:
    """Every membership of a replica replaced by ``pairs`` (the memberships of a moment)."""
    conn.execute("DELETE FROM memberships")
    if pairs:
        conn.cursor().executemany(
            f"INSERT INTO memberships (grp, member) VALUES ({d.param('grp')}, {d.param('member')})",
            [{"grp": g, "member": m} for g, m in pairs],
        )
    conn.execute(
        "INSERT INTO meta (key, value) VALUES ('membership_version', '1') ON CONFLICT (key)"
        " DO UPDATE SET value = CAST(CAST(meta.value AS BIGINT) + 1 AS TEXT)"
    )


def memberships_at(conn: Any, d: SqlDialect, at: str) -> list[tuple[str, str]]:
    """The memberships held at moment ``at``."""
    p = d.param("at")
    return [
        (str(g), str(m))
        for g, m in conn.execute(
            f"SELECT grp, member FROM membership_history WHERE added_at <= {p}"
            f" AND (removed_at IS NULL OR removed_at > {p}) ORDER BY grp, member",
            {"at": at},
        ).fetchall()
    ]


def membership_changes(conn: Any, d: SqlDialect, since: str) -> list[tuple[str, str, str, str]]:
    """``(at, "add" | "remove", group, member)`` of every change after ``since``, in order."""
    p = d.param("since")
    rows = conn.execute(
        f"SELECT added_at, 'add', grp, member FROM membership_history WHERE added_at > {p}"
        " UNION ALL SELECT removed_at, 'remove', grp, member FROM membership_history"
        f" WHERE removed_at > {p} ORDER BY 1, 2, 3, 4",
        {"since": since},
    ).fetchall()
    return [(str(a), str(op), str(g), str(m)) for a, op, g, m in rows]


# -- gc ------------------------------------------------------------------------------------------------------
def prune(
    conn: Any, d: SqlDialect, before_publish: int, before: str, *, dry_run: bool = False
) -> dict[str, int]:
    """Remove what no moment from publish ``before_publish`` and time ``before`` on needs; how
    many rows of each kind (``dry_run``: would go, nothing removed).

    A version that ended at or before that publish was live at no retained publish; a chunk
    removed at or before it belonged only to such versions (every version naming a chunk
    ended by the time the chunk was removed). Memberships removed before ``before``.
    """
    p = d.param
    where = {
        "versions": ("entity_history", f"valid_to <= {p('publish')}"),
        "chunks": ("chunk_history", f"removed <= {p('publish')}"),
        "memberships": (
            "membership_history",
            f"removed_at IS NOT NULL AND removed_at < {p('at')}",
        ),
    }
    params = {"publish": before_publish, "at": before}
    out: dict[str, int] = {}
    for kind, (table, condition) in where.items():
        if dry_run:
            (count,) = conn.execute(
                f"SELECT count(*) FROM {table} WHERE {condition}", params
            ).fetchone()
        else:
            count = conn.execute(f"DELETE FROM {table} WHERE {condition}", params).rowcount
        out[kind] = int(count)
    return out


# -- the history of one snapshot, for the store ---------------------------------------------------------
@dataclass(frozen=True)
class Publish:
    """A row of ``publishes``."""

    id: int
    root: str
    kind: str
    at: str

    @property
    def moment(self) -> str:
        """``at`` as the audit log writes moments (a store's older rows have whole seconds)."""
        return self.at if "." in self.at else self.at.replace("Z", ".000000Z")


class History:
    """The catalog's history on one read transaction (an engine's ``history()``)."""

    def __init__(self, conn: Any, dialect: SqlDialect, vectors: ChunkVectors) -> None:
        self._conn = conn
        self._d = dialect
        self._vectors = vectors

    def entities_at(self, publish: int) -> Iterator[list[VersionAt]]:
        return entities_at(self._conn, self._d, publish, self._vectors)

    def versions(self, uids: Sequence[str]) -> dict[str, list[EntityVersion]]:
        return versions(self._conn, self._d, uids)

    def memberships_at(self, at: str) -> list[tuple[str, str]]:
        return memberships_at(self._conn, self._d, at)

    def membership_changes(self, since: str) -> list[tuple[str, str, str, str]]:
        return membership_changes(self._conn, self._d, since)

    def publishes(self, since: int = 0) -> list[Publish]:
        """Every publish after ``since``, oldest first."""
        rows = self._conn.execute(
            f"SELECT id, root, kind, at FROM publishes WHERE id > {self._d.param('since')}"
            " ORDER BY id",
            {"since": since},
        ).fetchall()
        return [Publish(int(i), str(r), str(k), str(a)) for i, r, k, a in rows]

    def publish_of(self, root: str) -> Publish | None:
        """The publish whose content root is ``root`` (the latest, for a root seen twice)."""
        row = self._conn.execute(
            f"SELECT id, root, kind, at FROM publishes WHERE root = {self._d.param('root')}"
            " ORDER BY id DESC LIMIT 1",
            {"root": root},
        ).fetchone()
        return None if row is None else Publish(int(row[0]), str(row[1]), str(row[2]), str(row[3]))

    def chunks_removed_by(self, publish: int) -> int:
        """How many kept chunks were removed at or before ``publish`` (a derived index may still
        count them, until its segments merge)."""
        (count,) = self._conn.execute(
            f"SELECT count(*) FROM chunk_history WHERE removed <= {self._d.param('p')}",
            {"p": publish},
        ).fetchone()
        return int(count)

    def latest(self) -> int:
        row = self._conn.execute("SELECT coalesce(max(id), 0) FROM publishes").fetchone()
        return int(row[0])

    def sizes(self) -> dict[str, int]:
        """Rows of each history table (``stats``, the growth figures)."""
        out = {}
        for table in ("entity_history", "chunk_history", "membership_history"):
            (count,) = self._conn.execute(f"SELECT count(*) FROM {table}").fetchone()
            out[table] = int(count)
        return out
