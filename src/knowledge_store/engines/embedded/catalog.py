"""The SQLite catalog: the source of truth of the embedded engine.

Entities (their bodies in ``entity_bodies``), chunks (their vectors in
``chunk_vectors``), edges, principals, memberships, ACL sets and publishes
live here. The single writer writes publishes (planned by
:mod:`knowledge_store.engines.sql.publish`) on its thread's connection; each
reader borrows a connection of its own from a small pool for its lifetime
and reads one WAL snapshot on it, never blocking the writer nor blocked by it.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from knowledge_store.engines.base import PreparedEntity, Published
from knowledge_store.engines.embedded.db import Database
from knowledge_store.engines.embedded.migrate import upgrade
from knowledge_store.engines.embedded.schema import SCHEMA, SCHEMA_VERSION
from knowledge_store.engines.shared import CHUNK_KEY_META, ChunkIds
from knowledge_store.engines.sql.acl import load_entity
from knowledge_store.engines.sql.dialect import SQLITE, Column
from knowledge_store.engines.sql.history import MEMBERSHIPS_UNRECORDED, RECORD_MEMBERSHIPS
from knowledge_store.engines.sql.statements import location_text
from knowledge_store.engines.sql.write import Batch, Placed, latest_publish, publish_batch
from knowledge_store.errors import StoreError
from knowledge_store.model import (
    FACET_NAMES,
    TIMESTAMP_FORM,
    Entity,
    format_timestamp,
    stored_timestamp,
)

__all__ = ["Catalog", "ChunkRow", "EmbeddedChunks", "PublishOp"]

log = logging.getLogger(__name__)

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


@dataclass(frozen=True)
class ChunkRow:
    """A chunk joined with its entity's fields, as the derived indexes store it."""

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
    facets: Mapping[str, str] = field(default_factory=dict)  # every facet, "" when unset


@dataclass(frozen=True)
class PublishOp:
    publish: int
    chunk: int
    op: str


_CHUNK_ROWS = f"""
SELECT c.id, e.uid, e.title, e.type, e.href, c.text, c.heading, c.start, c."end",
       e.acl_set, e.source, e.status, e.created_at, e.updated_at, c.ordinal
       {"".join(f", e.{name}" for name in FACET_NAMES)}
FROM chunks AS c CROSS JOIN entities AS e ON e.id = c.entity
WHERE c.id IN (SELECT value FROM json_each(:ids))
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
        facets=dict(zip(FACET_NAMES, r[15:], strict=True)),
    )


class EmbeddedChunks:
    """The embedded engine's part of a publish (``engines.sql.write.ChunkStore``): the chunk
    rows, their vectors in ``chunk_vectors``, and every change to a chunk logged in
    ``publish_ops`` — ``add``, ``del``, ``acl`` (its entity's ACL set changed) — which the
    derived indexes follow inside the publish's transaction and catch up from after it."""

    entity_columns: Mapping[str, tuple[Column, Callable[[PreparedEntity], Any]]] = {}

    def add(self, conn: sqlite3.Connection, publish: int, placed: Sequence[Placed]) -> None:
        # Ids never reused (AUTOINCREMENT): after the highest ever given, as SQLite would.
        (last,) = conn.execute(
            "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'chunks'), 0),"
            " coalesce((SELECT max(id) FROM chunks), 0))"
        ).fetchone()
        rows: list[tuple[Any, ...]] = []
        vectors: list[tuple[int, bytes]] = []
        for entity_row, prepared in placed:
            matrix = np.asarray(prepared.vectors, dtype=np.float32)
            for chunk, vector in zip(prepared.chunks, matrix, strict=True):
                last += 1
                heading = json.dumps(list(chunk.heading), ensure_ascii=False)
                location = location_text(chunk.location)
                rows.append(
                    (
                        last,
                        entity_row,
                        chunk.ordinal,
                        chunk.text,
                        heading,
                        chunk.start,
                        chunk.end,
                        location,
                    )
                )
                vectors.append((last, vector.tobytes()))
        conn.executemany(
            'INSERT INTO chunks (id, entity, ordinal, text, heading, start, "end", location)'
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        conn.executemany("INSERT INTO chunk_vectors (id, embedding) VALUES (?, ?)", vectors)
        self._log(conn, publish, (chunk_id for chunk_id, _ in vectors), "add")

    def drop(self, conn: sqlite3.Connection, publish: int, chunk_ids: Sequence[int]) -> None:
        self._log(conn, publish, chunk_ids, "del")

    def repoint(self, conn: sqlite3.Connection, publish: int, uids: Sequence[str]) -> None:
        conn.execute(
            "INSERT OR IGNORE INTO publish_ops (publish, chunk, op)"
            " SELECT ?, c.id, 'acl' FROM entities AS e JOIN chunks AS c ON c.entity = e.id"
            " WHERE e.uid IN (SELECT value FROM json_each(?))",
            (publish, json.dumps(list(uids), ensure_ascii=False)),
        )

    def replace_vectors(
        self, conn: sqlite3.Connection, publish: int, ids: Sequence[int], vectors: np.ndarray
    ) -> None:
        """Each chunk is logged as re-added (``add``): a derived index catching up replays it
        as after any publish (HNSW replacing the vectors, Tantivy re-indexing the same text)."""
        matrix = np.asarray(vectors, dtype=np.float32)
        conn.executemany(
            "INSERT INTO chunk_vectors (id, embedding) VALUES (?, ?)"
            " ON CONFLICT (id) DO UPDATE SET embedding = excluded.embedding",
            ((int(c), matrix[i].tobytes()) for i, c in enumerate(ids)),
        )
        self._log(conn, publish, ids, "add")

    def set_dimension(self, conn: sqlite3.Connection, dimension: int) -> None:
        """Nothing to do: ``chunk_vectors`` holds vectors of any length."""

    def vector_bytes(self, conn: sqlite3.Connection, ids: Sequence[int]) -> dict[int, bytes]:
        return chunk_vector_bytes(conn, ids)

    @staticmethod
    def _log(conn: sqlite3.Connection, publish: int, chunk_ids: Iterable[int], op: str) -> None:
        conn.executemany(
            "INSERT OR IGNORE INTO publish_ops (publish, chunk, op) VALUES (?, ?, ?)",
            ((publish, int(c), op) for c in chunk_ids),
        )


def chunk_vector_bytes(conn: sqlite3.Connection, ids: Sequence[int]) -> dict[int, bytes]:
    """The stored vectors of chunk rows ``ids`` (float32 bytes), for the history."""
    rows = conn.execute(
        "SELECT id, embedding FROM chunk_vectors WHERE id IN (SELECT value FROM json_each(?))",
        (json.dumps(list(ids)),),
    ).fetchall()
    return {int(i): bytes(v) for i, v in rows}


class Catalog:
    """The catalog's statements, on SQLite in WAL mode (connections: :class:`Database`)."""

    #: What a publish writes of chunks (``engines.sql.write``).
    chunk_store = EmbeddedChunks()

    def __init__(self, path: Path) -> None:
        self.path = path
        self.db = Database(path)
        try:
            upgrade(self._conn())
            self._conn().executescript(SCHEMA)
            if self._conn().execute(MEMBERSHIPS_UNRECORDED).fetchone()[0]:
                with self.write() as conn:
                    conn.execute(RECORD_MEMBERSHIPS)
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

    # -- connections and transactions (engines/embedded/db.py) ---------------------------
    def _conn(self) -> sqlite3.Connection:
        return self.db.conn()

    def read(self) -> AbstractContextManager[sqlite3.Connection]:
        """One consistent snapshot for the whole block (nested blocks share it)."""
        return self.db.read()

    def write(self) -> AbstractContextManager[sqlite3.Connection]:
        """One atomic write transaction; rolled back on any error."""
        return self.db.write()

    def borrow(self) -> sqlite3.Connection:
        """A connection for one reader, for as long as it lives (give it back with :meth:`give`)."""
        return self.db.borrow()

    def give(self, conn: sqlite3.Connection) -> None:
        self.db.give(conn)

    def close(self) -> None:
        self.db.close()

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
        return latest_publish(conn or self._conn())

    def ops_since(self, watermark: int, conn: sqlite3.Connection | None = None) -> list[PublishOp]:
        rows = (conn or self._conn()).execute(
            "SELECT publish, chunk, op FROM publish_ops WHERE publish > ? ORDER BY publish, chunk",
            (watermark,),
        )
        return [PublishOp(int(p), int(c), str(o)) for p, c, o in rows]

    # -- entities ----------------------------------------------------------------------
    def load_entity(self, conn: sqlite3.Connection, uid: str) -> Entity | None:
        """The stored entity with its outgoing edges and ACL (no ACL check: admin use)."""
        return load_entity(conn, SQLITE, uid)

    def acl_sets_principals(
        self, conn: sqlite3.Connection, acl_sets: Iterable[int]
    ) -> dict[int, tuple[str, ...]]:
        """The principals of each of ``acl_sets``, sorted (an empty set maps to nothing)."""
        out: dict[int, list[str]] = {}
        ids = sorted({int(a) for a in acl_sets})
        for acl_set, principal in conn.execute(
            "SELECT acl_set, principal FROM acl_set_principals"
            " WHERE acl_set IN (SELECT value FROM json_each(?)) ORDER BY acl_set, principal",
            (json.dumps(ids),),
        ):
            out.setdefault(int(acl_set), []).append(str(principal))
        return {a: tuple(p) for a, p in out.items()}

    def apply_publish(
        self, upserts: Sequence[PreparedEntity], deletes: Sequence[str], *, kind: str
    ) -> tuple[int, str]:
        """Plan and write one publish to the catalog alone (the derived indexes catch up on
        their next open or read) — for tools and tests that write a catalog directly."""
        with self.write() as conn:
            plan = publish_batch(conn, SQLITE, self.chunk_store, Batch(upserts, deletes, kind))
            return Published.of(plan).publish, Published.of(plan).root

    # -- what the derived indexes read (no ACL check: they store the ACL's principals) ------
    def chunk_rows(self, conn: sqlite3.Connection, chunk_ids: Sequence[int]) -> list[ChunkRow]:
        ids = json.dumps([int(c) for c in chunk_ids])
        return [_chunk_row(r) for r in conn.execute(_CHUNK_ROWS, {"ids": ids})]

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
            part = json.dumps(all_ids[i : i + _CHUNK_BATCH])
            for cid, blob in conn.execute(
                "SELECT c.id, v.embedding FROM chunks AS c"
                " LEFT JOIN chunk_vectors AS v ON v.id = c.id"
                " WHERE c.id IN (SELECT value FROM json_each(?)) ORDER BY c.id",
                (part,),
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
    def count_chunks(self, conn: sqlite3.Connection) -> int:
        return int(conn.execute("SELECT count(*) FROM chunks").fetchone()[0])

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

    def execute(self, sql: str, params: Mapping[str, Any] | Sequence[Any] = ()) -> list[Any]:
        return self._conn().execute(sql, params).fetchall()
