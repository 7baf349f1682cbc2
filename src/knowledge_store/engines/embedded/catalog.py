"""The SQLite catalog: the source of truth of the embedded engine.

Entities, chunks (text and embedding), edges, principals, memberships, ACL
sets and publishes live here. Identity expansion, the visible ACL sets and the
final ACL check before fusion are SQL over this catalog. Readers run inside a
read transaction (one WAL snapshot); the single writer never blocks them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from knowledge_store.engines.base import PreparedEntity, PublishResult, Vector
from knowledge_store.engines.embedded.schema import (
    HELD_PRINCIPALS,
    SCHEMA,
    SCHEMA_VERSION,
    visible,
)
from knowledge_store.engines.shared import CHUNK_KEY_META, ChunkIds, membership_path
from knowledge_store.engines.sources import (
    SourceRecord,
    SourceSync,
    SourceView,
    plan_sync,
    source_views,
    statement,
)
from knowledge_store.engines.sqlfilters import filter_clause
from knowledge_store.errors import StoreError
from knowledge_store.model import (
    TIMESTAMP_FORM,
    Edge,
    Entity,
    Filters,
    compose_context,
    format_timestamp,
    stored_timestamp,
)

__all__ = ["EMPTY_ROOT", "Catalog", "ChunkRow", "PublishOp", "content_root_of"]

log = logging.getLogger(__name__)

EMPTY_ROOT = hashlib.sha256(b"knowledge-store:empty").hexdigest()
#: Meta key set once every stored date has a four-digit year (older versions wrote
#: years below 1000 unpadded, which neither sorts nor parses back).
_STAMPS_REPAIRED = "timestamps_four_digit"
_STAMP_GLOB = "[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9]Z"
_CHUNK_BATCH = 900  # below SQLite's default host-parameter limit


def _repaired(stamp: str | None) -> str | None:
    if stamp is None or TIMESTAMP_FORM.fullmatch(stamp):
        return stamp
    moment = stored_timestamp(stamp)
    return stamp if moment is None else format_timestamp(moment)


def content_root_of(parent: str, changes: Mapping[str, str | None]) -> str:
    """Root of a publish: hash of the parent root and each changed uid's content hash."""
    lines = [parent] + [f"{uid}\t{h or '-'}" for uid, h in sorted(changes.items())]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


@dataclass(frozen=True)
class ChunkRow:
    """A chunk joined with its entity, as the primitives return it."""

    chunk_id: int  # the row id: internal (answers name a chunk by ``ChunkIds``)
    uid: str
    title: str
    type: str
    href: str | None
    text: str
    heading: tuple[str, ...]
    start: int
    end: int
    acl_set: int
    source: str
    status: str
    created_at: str | None
    updated_at: str | None
    ordinal: int = 0


@dataclass(frozen=True)
class PublishOp:
    publish: int
    chunk: int
    op: str


# CROSS JOIN keeps chunks the outer loop (SQLite never reorders it): the callers
# pick chunks by id, and a plain JOIN let the planner walk every entity of the
# visible ACL sets instead — 39 ms against 0.9 ms for 110 ids at 100k chunks.
_CHUNK_SELECT = """
SELECT c.id, e.uid, e.title, e.type, e.href, c.text, c.heading, c.start, c."end",
       e.acl_set, e.source, e.status, e.created_at, e.updated_at, c.ordinal
FROM chunks AS c CROSS JOIN entities AS e ON e.id = c.entity
"""


def _chunk_row(r: sqlite3.Row) -> ChunkRow:
    return ChunkRow(
        chunk_id=r[0],
        uid=r[1],
        title=r[2],
        type=r[3],
        href=r[4],
        text=r[5],
        heading=tuple(json.loads(r[6])),
        start=r[7],
        end=r[8],
        acl_set=r[9],
        source=r[10],
        status=r[11],
        created_at=r[12],
        updated_at=r[13],
        ordinal=r[14],
    )


class Catalog:
    """SQLite in WAL mode; one connection per thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()
        try:
            self._conn().executescript(SCHEMA)
            version = self.get_meta("schema_version")
            if version is None:
                self.set_meta("schema_version", str(SCHEMA_VERSION))
            elif int(version) > SCHEMA_VERSION:
                raise StoreError(
                    f"the store at {path.parent} was written by a newer knowledge-store"
                    f" (schema {version}, this one knows {SCHEMA_VERSION}); upgrade knowledge-store"
                )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the catalog {path}: {exc}") from exc

    # -- connections and transactions -----------------------------------------
    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=30.0
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("PRAGMA busy_timeout=30000")
            conn.execute("PRAGMA cache_size=-8192")
            self._local.conn = conn
        return conn

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """One consistent snapshot for the whole block (nested blocks share it)."""
        conn = self._conn()
        if conn.in_transaction:
            yield conn
            return
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            if conn.in_transaction:
                conn.execute("COMMIT")

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One atomic write transaction; rolled back on any error."""
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        else:
            conn.execute("COMMIT")

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # -- meta ---------------------------------------------------------------------
    def get_meta(self, key: str) -> str | None:
        row = self._conn().execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str, conn: sqlite3.Connection | None = None) -> None:
        (conn or self._conn()).execute(
            "INSERT INTO meta(key, value) VALUES (?, ?)"
            " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def chunk_ids(self) -> ChunkIds:
        """The store's public chunk ids (its secret made on first use)."""
        key = self.get_meta(CHUNK_KEY_META)
        if key is None:
            with self.write() as conn:
                conn.execute(
                    "INSERT OR IGNORE INTO meta(key, value) VALUES (?, ?)",
                    (CHUNK_KEY_META, ChunkIds.new_key()),
                )
            key = self.get_meta(CHUNK_KEY_META)
        assert key is not None
        return ChunkIds(key)

    def repair_timestamps(self) -> int:
        """Rewrite dates stored by older versions with years below 1000 unpadded; how many.

        Once per store (a meta flag). A stamp that can't be read at all is left as it is:
        the derived indexes index such a chunk without that date.
        """
        if self.get_meta(_STAMPS_REPAIRED) is not None:
            return 0
        fixed = 0
        with self.write() as conn:
            rows = conn.execute(
                "SELECT id, created_at, updated_at FROM entities"
                f" WHERE created_at NOT GLOB '{_STAMP_GLOB}' OR updated_at NOT GLOB '{_STAMP_GLOB}'"
            ).fetchall()
            for row_id, *stamps in rows:
                repaired = [_repaired(stamp) for stamp in stamps]
                if repaired != stamps:
                    conn.execute(
                        "UPDATE entities SET created_at = ?, updated_at = ? WHERE id = ?",
                        (*repaired, row_id),
                    )
                    fixed += 1
            self.set_meta(_STAMPS_REPAIRED, "1", conn)
        if fixed:
            log.warning("catalog: rewrote the dates of %d entities with four-digit years", fixed)
        return fixed

    # -- publishes -----------------------------------------------------------------
    def latest_publish(self, conn: sqlite3.Connection | None = None) -> tuple[int, str]:
        row = (
            (conn or self._conn())
            .execute("SELECT id, root FROM publishes ORDER BY id DESC LIMIT 1")
            .fetchone()
        )
        return (0, EMPTY_ROOT) if row is None else (int(row[0]), str(row[1]))

    def ops_since(self, watermark: int) -> list[PublishOp]:
        rows = self._conn().execute(
            "SELECT publish, chunk, op FROM publish_ops WHERE publish > ? ORDER BY publish, chunk",
            (watermark,),
        )
        return [PublishOp(int(p), int(c), str(o)) for p, c, o in rows]

    # -- embeddings cache ------------------------------------------------------------
    def cached_embeddings(self, keys: Sequence[str]) -> dict[str, Vector]:
        out: dict[str, Vector] = {}
        conn = self._conn()
        for i in range(0, len(keys), _CHUNK_BATCH):
            part = keys[i : i + _CHUNK_BATCH]
            marks = ",".join("?" * len(part))
            for key, blob in conn.execute(
                f"SELECT key, vector FROM embedding_cache WHERE key IN ({marks})", part
            ):
                out[key] = np.frombuffer(blob, dtype=np.float32)
        return out

    def cache_embeddings(self, items: Mapping[str, Vector]) -> None:
        with self.write() as conn:
            conn.executemany(
                "INSERT OR IGNORE INTO embedding_cache(key, vector) VALUES (?, ?)",
                ((k, np.asarray(v, dtype=np.float32).tobytes()) for k, v in items.items()),
            )

    # -- entities ----------------------------------------------------------------------
    def content_hashes(self, uids: Sequence[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        conn = self._conn()
        for i in range(0, len(uids), _CHUNK_BATCH):
            part = list(uids[i : i + _CHUNK_BATCH])
            marks = ",".join("?" * len(part))
            for uid, h in conn.execute(
                f"SELECT uid, content_hash FROM entities WHERE uid IN ({marks})", part
            ):
                out[uid] = h
        return out

    def load_entity(self, conn: sqlite3.Connection, uid: str) -> Entity | None:
        """The stored entity with its outgoing edges and ACL (no ACL check: admin use)."""
        row = conn.execute(
            "SELECT uid, type, title, body, source, status, created_at, updated_at, href,"
            " attributes, acl_set FROM entities WHERE uid = ?",
            (uid,),
        ).fetchone()
        if row is None:
            return None
        edges = tuple(
            Edge(uid, label, dst, position)
            for label, dst, position in conn.execute(
                "SELECT label, dst, position FROM edges WHERE src = ? ORDER BY label, dst", (uid,)
            )
        )
        return Entity(
            uid=row[0],
            type=row[1],
            title=row[2],
            body=row[3],
            source=row[4],
            status=row[5],
            created_at=row[6],
            updated_at=row[7],
            href=row[8],
            attributes=json.loads(row[9]),
            edges=edges,
            acl=self.acl_principals(conn, row[10]),
        )

    def acl_principals(self, conn: sqlite3.Connection, acl_set: int) -> tuple[str, ...]:
        return self.acl_sets_principals(conn, [acl_set]).get(acl_set, ())

    def acl_sets_principals(
        self, conn: sqlite3.Connection, acl_sets: Iterable[int]
    ) -> dict[int, tuple[str, ...]]:
        """The principals of each of ``acl_sets``, sorted (an empty set maps to nothing)."""
        out: dict[int, list[str]] = {}
        ids = sorted({int(a) for a in acl_sets})
        for i in range(0, len(ids), _CHUNK_BATCH):
            marks = ",".join(str(a) for a in ids[i : i + _CHUNK_BATCH])
            for acl_set, principal in conn.execute(
                "SELECT acl_set, principal FROM acl_set_principals"
                f" WHERE acl_set IN ({marks}) ORDER BY acl_set, principal"
            ):
                out.setdefault(int(acl_set), []).append(str(principal))
        return {a: tuple(p) for a, p in out.items()}

    def acl_set_id(self, conn: sqlite3.Connection, principals: Sequence[str]) -> int:
        """The id of the deduplicated ACL set holding exactly ``principals`` (made if new)."""
        members = sorted(set(principals))
        key = "\n".join(members)
        row = conn.execute("SELECT id FROM acl_sets WHERE key = ?", (key,)).fetchone()
        if row is not None:
            return int(row[0])
        cur = conn.execute("INSERT INTO acl_sets(key) VALUES (?)", (key,))
        acl_set = int(cur.lastrowid or 0)
        conn.executemany(
            "INSERT INTO acl_set_principals(acl_set, principal) VALUES (?, ?)",
            ((acl_set, p) for p in members),
        )
        return acl_set

    def apply_publish(
        self,
        upserts: Sequence[PreparedEntity],
        deletes: Sequence[str],
        *,
        kind: str,
        acl_only: Sequence[Entity] = (),
        source: SourceSync | None = None,
    ) -> PublishResult:
        """Write one publish atomically; what it did, counted inside its transaction.

        An upsert whose stored content hash already matches is left as it is
        (``unchanged``). ``acl_only`` are entities whose ACL changed and nothing
        else: they keep their chunks; their chunks are re-pointed (op ``acl``) for
        the lexical index.
        """
        with self.write() as conn:
            publish, parent = self.latest_publish(conn)
            publish += 1
            if source is not None and source.sync:
                stored = conn.execute(statement("source_uids", "sqlite"), {"source": source.name})
                deletes = [*deletes, *plan_sync((str(uid) for (uid,) in stored), source)]
            changes: dict[str, str | None] = {}
            ops: list[tuple[int, int, str]] = []
            added = updated = deleted = unchanged = 0
            for prepared in upserts:
                entity = prepared.entity
                row = conn.execute(
                    "SELECT id, content_hash FROM entities WHERE uid = ?", (entity.uid,)
                ).fetchone()
                if row is not None and row[1] == entity.content_hash:
                    unchanged += 1
                    continue
                acl_set = self.acl_set_id(conn, entity.acl)
                values = (
                    entity.type,
                    entity.title,
                    entity.body,
                    entity.source,
                    entity.status,
                    entity.created_at,
                    entity.updated_at,
                    entity.href,
                    json.dumps(dict(entity.attributes), ensure_ascii=False, sort_keys=True),
                    acl_set,
                    entity.content_hash,
                    publish,
                )
                if row is None:
                    cur = conn.execute(
                        "INSERT INTO entities(type, title, body, source, status, created_at,"
                        " updated_at, href, attributes, acl_set, content_hash, publish, uid)"
                        " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                        (*values, entity.uid),
                    )
                    entity_row = int(cur.lastrowid or 0)
                    added += 1
                else:
                    entity_row = int(row[0])
                    conn.execute(
                        "UPDATE entities SET type=?, title=?, body=?, source=?, status=?,"
                        " created_at=?, updated_at=?, href=?, attributes=?, acl_set=?,"
                        " content_hash=?, publish=? WHERE uid=?",
                        (*values, entity.uid),
                    )
                    ops.extend(self._drop_chunks(conn, publish, entity_row))
                    conn.execute("DELETE FROM edges WHERE src = ?", (entity.uid,))
                    updated += 1
                for chunk, vector in zip(prepared.chunks, prepared.vectors, strict=True):
                    cur = conn.execute(
                        'INSERT INTO chunks(entity, ordinal, text, heading, start, "end",'
                        " embedding) VALUES (?,?,?,?,?,?,?)",
                        (
                            entity_row,
                            chunk.ordinal,
                            chunk.text,
                            json.dumps(list(chunk.heading), ensure_ascii=False),
                            chunk.start,
                            chunk.end,
                            np.asarray(vector, dtype=np.float32).tobytes(),
                        ),
                    )
                    ops.append((publish, int(cur.lastrowid or 0), "add"))
                conn.executemany(
                    "INSERT OR REPLACE INTO edges(src, label, dst, position) VALUES (?,?,?,?)",
                    ((entity.uid, e.label, e.dst, e.position) for e in entity.edges),
                )
                changes[entity.uid] = entity.content_hash
            for entity in acl_only:
                acl_set = self.acl_set_id(conn, entity.acl)
                row = conn.execute(
                    "UPDATE entities SET acl_set = ?, content_hash = ?, publish = ?"
                    " WHERE uid = ? RETURNING id",
                    (acl_set, entity.content_hash, publish, entity.uid),
                ).fetchone()
                if row is None:
                    continue
                ops.extend(
                    (publish, int(cid), "acl")
                    for (cid,) in conn.execute("SELECT id FROM chunks WHERE entity = ?", (row[0],))
                )
                changes[entity.uid] = entity.content_hash
                updated += 1
            for uid in deletes:
                row = conn.execute("SELECT id FROM entities WHERE uid = ?", (uid,)).fetchone()
                if row is None:
                    continue
                ops.extend(self._drop_chunks(conn, publish, int(row[0])))
                conn.execute("DELETE FROM edges WHERE src = ?", (uid,))
                conn.execute("DELETE FROM entities WHERE id = ?", (row[0],))
                changes[uid] = None
                deleted += 1
            if not changes:
                result = PublishResult(publish - 1, parent, unchanged=unchanged)
                self._record_source(conn, source, result)
                return result
            root = content_root_of(parent, changes)
            conn.execute(
                "INSERT INTO publishes(id, root, parent, kind, at, added, updated, deleted)"
                " VALUES (?,?,?,?,?,?,?,?)",
                (
                    publish,
                    root,
                    parent,
                    kind,
                    datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    added,
                    updated,
                    deleted,
                ),
            )
            conn.executemany("INSERT OR IGNORE INTO publish_ops VALUES (?,?,?)", ops)
            gone = tuple(sorted(uid for uid, h in changes.items() if h is None))
            result = PublishResult(publish, root, added, updated, deleted, unchanged, gone)
            self._record_source(conn, source, result)
            return result

    @staticmethod
    def _record_source(
        conn: sqlite3.Connection, source: SourceSync | None, result: PublishResult
    ) -> None:
        if source is not None:
            for sql, params in source.statements(result, "sqlite"):
                conn.execute(sql, params)

    # -- sources and crawl state -------------------------------------------------------
    def source_views(self) -> list[SourceView]:
        with self.read() as conn:
            counts = conn.execute(
                "SELECT e.source, count(*), coalesce(sum(c.n), 0) FROM entities AS e"
                " LEFT JOIN (SELECT entity, count(*) AS n FROM chunks GROUP BY entity) AS c"
                " ON c.entity = e.id GROUP BY e.source"
            ).fetchall()
            rows = conn.execute(statement("source_rows", "sqlite")).fetchall()
        return source_views(counts, (SourceRecord.from_row(row) for row in rows))

    def crawl_pages(self, source: str) -> dict[str, str]:
        with self.read() as conn:
            rows = conn.execute(statement("crawl_pages", "sqlite"), {"source": source})
            return {str(url): str(state) for url, state in rows}

    def save_crawl_pages(self, source: str, pages: Mapping[str, str | None]) -> None:
        with self.write() as conn:
            for url, state in pages.items():
                if state is None:
                    conn.execute(
                        statement("forget_crawl_page", "sqlite"), {"source": source, "url": url}
                    )
                else:
                    conn.execute(
                        statement("put_crawl_page", "sqlite"),
                        {"source": source, "url": url, "state": state},
                    )

    def replace_embeddings(
        self, ids: Sequence[int], vectors: Vector, meta: Mapping[str, str], *, base_root: str
    ) -> tuple[int, str]:
        """Every chunk's embedding and the model ``meta``, as one publish.

        Each chunk is logged as re-added (op ``add``): the derived indexes catch
        up as after any publish, HNSW replacing the vectors (and Tantivy, which
        has one op kind for a changed chunk, re-indexing the same text).
        """
        matrix = np.asarray(vectors, dtype=np.float32)
        with self.write() as conn:
            publish, parent = self.latest_publish(conn)
            (count,) = conn.execute("SELECT count(*) FROM chunks").fetchone()
            if parent != base_root or count != len(ids):
                raise StoreError(
                    "the store changed while it was being re-embedded; nothing was replaced —"
                    " run it again (the vectors made so far are cached)"
                )
            publish += 1
            conn.executemany(
                "UPDATE chunks SET embedding = ? WHERE id = ?",
                ((matrix[i].tobytes(), int(c)) for i, c in enumerate(ids)),
            )
            for key, value in meta.items():
                self.set_meta(key, value, conn)
            root = content_root_of(parent, {})
            at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            conn.execute(
                "INSERT INTO publishes(id, root, parent, kind, at, added, updated, deleted)"
                " VALUES (?,?,?,?,?,?,?,?)",
                (publish, root, parent, "reembed", at, 0, 0, 0),
            )
            conn.executemany(
                "INSERT OR IGNORE INTO publish_ops VALUES (?,?,?)",
                ((publish, int(c), "add") for c in ids),
            )
            return publish, root

    def chunk_contexts(
        self, conn: sqlite3.Connection, after: int, limit: int
    ) -> list[tuple[int, str]]:
        """``(id, embedded text)`` of chunks with ids above ``after``, in id order."""
        rows = conn.execute(
            "SELECT c.id, e.title, c.heading, c.text FROM chunks AS c"
            " JOIN entities AS e ON e.id = c.entity WHERE c.id > ? ORDER BY c.id LIMIT ?",
            (after, limit),
        ).fetchall()
        return [(int(r[0]), compose_context(r[1], json.loads(r[2]), r[3])) for r in rows]

    @staticmethod
    def _drop_chunks(
        conn: sqlite3.Connection, publish: int, entity_row: int
    ) -> list[tuple[int, int, str]]:
        ids = [
            int(c) for (c,) in conn.execute("SELECT id FROM chunks WHERE entity = ?", (entity_row,))
        ]
        conn.execute("DELETE FROM chunks WHERE entity = ?", (entity_row,))
        return [(publish, c, "del") for c in ids]

    def with_acl(self, uid: str, change: str, principal: str) -> Entity | None:
        """The entity as it would be after granting/revoking ``principal`` (None if missing)."""
        with self.read() as conn:
            entity = self.load_entity(conn, uid)
        if entity is None:
            return None
        acl = set(entity.acl)
        if change == "grant":
            acl.add(principal)
        else:
            acl.discard(principal)
        return replace(entity, acl=tuple(sorted(acl)))

    # -- identity and visibility ----------------------------------------------------------
    def held_principals(self, conn: sqlite3.Connection, principal: str) -> list[str]:
        """What ``principal`` holds: itself, ``everyone`` and its groups — expanded live."""
        return [
            str(p)
            for (p,) in conn.execute(
                HELD_PRINCIPALS + "SELECT p FROM held ORDER BY p", {"principal": principal}
            )
        ]

    def visible_chunk_ids(
        self, conn: sqlite3.Connection, principal: str, filters: Filters
    ) -> np.ndarray:
        """Sorted ids of the chunks ``principal`` may read that pass ``filters``."""
        where, params = filter_clause(filters)
        rows = conn.execute(
            HELD_PRINCIPALS + "SELECT c.id FROM chunks AS c JOIN entities AS e ON e.id = c.entity"
            f" WHERE {visible()} AND {where} ORDER BY c.id",
            {"principal": principal, **params},
        ).fetchall()
        return np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))

    def count_chunks(self, conn: sqlite3.Connection) -> int:
        return int(conn.execute("SELECT count(*) FROM chunks").fetchone()[0])

    def checked_chunks(
        self,
        conn: sqlite3.Connection,
        chunk_ids: Sequence[int],
        principal: str | None,
        filters: Filters,
    ) -> dict[int, ChunkRow]:
        """The final check: rows of ``chunk_ids`` that exist, pass filters and ``principal`` may read.

        The identity is expanded again inside the statement, in the caller's
        snapshot; ``principal=None`` skips the ACL (the derived indexes' own reads).
        """
        where, params = filter_clause(filters)
        prefix, acl = ("", "1=1") if principal is None else (HELD_PRINCIPALS, visible(by_key=True))
        # The ids go in as one JSON parameter: the statement's text stays the same from
        # query to query, so it is prepared once (0.10 → 0.07 ms for 20 ids at 100k).
        statement = (
            prefix
            + _CHUNK_SELECT
            + f" WHERE c.id IN (SELECT value FROM json_each(:ids)) AND {acl} AND {where}"
        )
        ids = json.dumps([int(c) for c in chunk_ids])
        rows = conn.execute(statement, {"principal": principal, "ids": ids, **params})
        return {r[0]: _chunk_row(r) for r in rows}

    def chunk_rows(self, conn: sqlite3.Connection, chunk_ids: Sequence[int]) -> list[ChunkRow]:
        """Rows for the derived indexes (no ACL check: they store the ACL's principals)."""
        return list(self.checked_chunks(conn, chunk_ids, None, Filters()).values())

    def chunk_vectors(
        self, conn: sqlite3.Connection, chunk_ids: Sequence[int], dimension: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, vectors)`` of these chunks: those whose stored vector the dense index
        can take (``dimension`` floats — the store's when not given —, all finite, not
        zero). Any other is left out (and logged): no row of the catalog can stop the
        dense index from being built."""
        if dimension is None:
            recorded = conn.execute("SELECT value FROM meta WHERE key = 'dimension'").fetchone()
            dimension = int(recorded[0]) if recorded else 0
        ids: list[int] = []
        blobs: list[bytes] = []
        size = 4 * dimension
        all_ids = [int(c) for c in chunk_ids]
        for i in range(0, len(all_ids), _CHUNK_BATCH):
            marks = ",".join(str(c) for c in all_ids[i : i + _CHUNK_BATCH])
            for cid, blob in conn.execute(
                f"SELECT id, embedding FROM chunks WHERE id IN ({marks}) ORDER BY id"
            ):
                if isinstance(blob, bytes) and len(blob) == size:
                    ids.append(int(cid))
                    blobs.append(blob)
                else:
                    log.warning(
                        "catalog: chunk %s has no usable vector; not in the dense index", cid
                    )
        if not ids:
            return np.zeros(0, dtype=np.int64), np.zeros((0, dimension), dtype=np.float32)
        matrix = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(ids), dimension)
        usable = np.isfinite(matrix).all(axis=1) & (np.abs(matrix).sum(axis=1) > 0)
        if not usable.all():
            log.warning(
                "catalog: chunks %s have NaN, infinite or zero vectors; not in the dense index",
                [ids[i] for i in np.flatnonzero(~usable)],
            )
        return np.asarray(ids, dtype=np.int64)[usable], matrix[usable]

    def all_chunk_ids(self, conn: sqlite3.Connection) -> list[int]:
        return [int(c) for (c,) in conn.execute("SELECT id FROM chunks ORDER BY id")]

    # -- stats ------------------------------------------------------------------------------
    def counts(self, conn: sqlite3.Connection) -> tuple[int, int, dict[str, int]]:
        entities = int(conn.execute("SELECT count(*) FROM entities").fetchone()[0])
        chunks = self.count_chunks(conn)
        edges = {
            str(label): int(n)
            for label, n in conn.execute(
                "SELECT label, count(*) FROM edges GROUP BY label ORDER BY label"
            )
        }
        return entities, chunks, edges

    def has_chunks(self) -> bool:
        return self._conn().execute("SELECT 1 FROM chunks LIMIT 1").fetchone() is not None

    # -- memberships ----------------------------------------------------------------------------
    def memberships_of(self, conn: sqlite3.Connection, member: str) -> list[str]:
        return [
            str(g)
            for (g,) in conn.execute(
                "SELECT grp FROM memberships WHERE member = ? ORDER BY grp", (member,)
            )
        ]

    def members_of(self, conn: sqlite3.Connection, group: str) -> list[str]:
        return [
            str(m)
            for (m,) in conn.execute(
                "SELECT member FROM memberships WHERE grp = ? ORDER BY member", (group,)
            )
        ]

    def path_between(self, conn: sqlite3.Connection, start: str, goal: str) -> list[str] | None:
        """A membership chain ``start → … → goal`` (breadth-first), or None."""
        return membership_path(
            start, goal, lambda members: {m: self.memberships_of(conn, m) for m in members}
        )

    def execute(self, sql: str, params: Mapping[str, Any] | Sequence[Any] = ()) -> list[Any]:
        return self._conn().execute(sql, params).fetchall()
