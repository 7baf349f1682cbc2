"""Upgrading an older embedded catalog on open, in place, each step one write transaction.

Four steps, each idempotent and safe when several processes open the store at
once (each re-checks under the write lock, so one of them does the work):

- **facets** (:mod:`..sql.facets`): a filter field declared after the store was
  made gets its column and index, the default ``''``.
- **source columns** (:mod:`..sql.sources`): a column of the ``sources`` table added
  after it shipped (``uid_prefix``), NULL in every row (the source keeps its uids).
- **thin entity rows** (schema 2): an entity's ``body`` and ``attributes`` move
  from ``entities`` to ``entity_bodies``, as in the PostgreSQL catalog. A body
  averages ~1.8 KB and reaches 100 KB; inline, it put three entities on a page
  and pushed the columns after it (``acl_set``, ``href``, ``updated_at``: what
  every visibility check and card reads) onto overflow pages. The graph walk's
  hop read 2× the pages it reads now.
- **chunk vectors out of the chunk rows** (schema 3): a chunk's ``embedding``
  moves from ``chunks`` to ``chunk_vectors``. A vector is 1,536 bytes (384
  float32s), more than a chunk's text on average: inline, a 4 KB page held one
  or two chunks, and loading the text of 100 hits read a table five times the
  size it is now (100k chunks: 343 MB, now 70 MB). ``chunks`` is rebuilt, not
  altered: ``ALTER TABLE … DROP COLUMN`` rewrites each row where it lies and
  leaves every page as sparse as before. Its AUTOINCREMENT mark is kept.
- **chunk locations** (schema 4): ``chunks.location``, where a chunk of a paged
  document is (``{"page": 3}``, JSON; NULL elsewhere). Added in place, NULL for
  every stored chunk — no stored body has location markers, so none is missing.

A crash in a step rolls it back: the store opens as it was and the next open
runs the step again.
"""

from __future__ import annotations

import logging
import sqlite3
import time

from knowledge_store.engines.sql.dialect import SQLITE
from knowledge_store.engines.sql.facets import add_facet, missing_facets
from knowledge_store.engines.sql.sources import source_columns_missing

__all__ = [
    "CHUNKS_BY_ENTITY_DDL",
    "CHUNKS_DDL",
    "CHUNK_VECTORS_DDL",
    "ENTITY_BODIES_DDL",
    "LOCATION_SCHEMA",
    "SPLIT_VECTORS_SCHEMA",
    "THIN_ROWS_SCHEMA",
    "upgrade",
]

log = logging.getLogger(__name__)

#: The catalog schema version that moved bodies out of the entity rows.
THIN_ROWS_SCHEMA = 2

#: The catalog schema version that moved chunk vectors out of the chunk rows.
SPLIT_VECTORS_SCHEMA = 3

#: The catalog schema version that gave chunks their location.
LOCATION_SCHEMA = 4

#: The columns schema 2 moved out of ``entities`` into ``entity_bodies``.
_MOVED = ("body", "attributes")

ENTITY_BODIES_DDL = """CREATE TABLE IF NOT EXISTS entity_bodies (
    entity     INTEGER PRIMARY KEY REFERENCES entities(id) ON DELETE CASCADE,
    body       TEXT NOT NULL,
    attributes TEXT NOT NULL            -- JSON object
)"""

# Chunk ids are never reused (AUTOINCREMENT): the derived indexes key on them.
CHUNKS_DDL = """CREATE TABLE IF NOT EXISTS chunks (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    entity    INTEGER NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
    ordinal   INTEGER NOT NULL,
    text      TEXT NOT NULL,
    heading   TEXT NOT NULL,            -- JSON list
    start     INTEGER NOT NULL,
    "end"     INTEGER NOT NULL,
    location  TEXT                      -- JSON object: page, slide, sheet/rows; NULL elsewhere
)"""
CHUNKS_BY_ENTITY_DDL = "CREATE INDEX IF NOT EXISTS chunks_by_entity ON chunks (entity, ordinal)"

CHUNK_VECTORS_DDL = """CREATE TABLE IF NOT EXISTS chunk_vectors (
    id        INTEGER PRIMARY KEY REFERENCES chunks(id) ON DELETE CASCADE,
    embedding BLOB NOT NULL             -- float32, L2-normalised
)"""

#: What a chunk row keeps (schema 3), in its order.
_CHUNK_COLUMNS = 'id, entity, ordinal, text, heading, start, "end"'


def _entity_columns(conn: sqlite3.Connection) -> set[str]:
    return {str(r[1]) for r in conn.execute("PRAGMA table_info(entities)")}


def _source_columns(conn: sqlite3.Connection) -> list[str]:
    present = [str(r[1]) for r in conn.execute("PRAGMA table_info(sources)")]
    return source_columns_missing(SQLITE, present) if present else []


def _needs_source_columns(conn: sqlite3.Connection) -> bool:
    return bool(_source_columns(conn))


def _add_source_columns(conn: sqlite3.Connection) -> None:
    for statement in _source_columns(conn):
        conn.execute(statement)


def _needs_thin_rows(conn: sqlite3.Connection) -> bool:
    return any(c in _entity_columns(conn) for c in _MOVED)


def _needs_split_vectors(conn: sqlite3.Connection) -> bool:
    return any(str(r[1]) == "embedding" for r in conn.execute("PRAGMA table_info(chunks)"))


def _set_version(conn: sqlite3.Connection, version: int) -> None:
    conn.execute(
        "INSERT INTO meta(key, value) VALUES ('schema_version', ?)"
        " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (str(version),),
    )


def _add_facets(conn: sqlite3.Connection) -> None:
    for name in missing_facets(_entity_columns(conn)):
        for statement in add_facet(SQLITE, name):
            conn.execute(statement)


def _thin_rows(conn: sqlite3.Connection) -> None:
    started = time.perf_counter()
    conn.execute(ENTITY_BODIES_DDL)
    conn.execute(
        "INSERT OR REPLACE INTO entity_bodies(entity, body, attributes)"
        " SELECT id, body, attributes FROM entities"
    )
    for column in _MOVED:  # rewrites the table: a one-off, seconds per 100k entities
        conn.execute(f"ALTER TABLE entities DROP COLUMN {column}")
    _set_version(conn, THIN_ROWS_SCHEMA)
    log.warning(
        "catalog: moved entity bodies out of the entities table (schema 2) in %.1f s",
        time.perf_counter() - started,
    )


def _split_vectors(conn: sqlite3.Connection) -> None:
    started = time.perf_counter()
    # The AUTOINCREMENT high-water mark: ids are never reused, even those deleted since.
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'chunks'").fetchone()
    seq = 0 if row is None else int(row[0])
    conn.execute("DROP INDEX IF EXISTS chunks_by_entity")
    conn.execute("ALTER TABLE chunks RENAME TO chunks_inline")
    conn.execute(CHUNKS_DDL)
    conn.execute(
        f"INSERT INTO chunks({_CHUNK_COLUMNS}) SELECT {_CHUNK_COLUMNS} FROM chunks_inline"
        " ORDER BY id"
    )
    conn.execute(CHUNK_VECTORS_DDL)
    conn.execute(
        "INSERT INTO chunk_vectors(id, embedding) SELECT id, embedding FROM chunks_inline"
        " ORDER BY id"
    )
    conn.execute("DROP TABLE chunks_inline")
    conn.execute(CHUNKS_BY_ENTITY_DDL)
    conn.execute("DELETE FROM sqlite_sequence WHERE name = 'chunks'")
    conn.execute(
        "INSERT INTO sqlite_sequence(name, seq)"
        " SELECT 'chunks', max(?, coalesce(max(id), 0)) FROM chunks",
        (seq,),
    )
    _set_version(conn, SPLIT_VECTORS_SCHEMA)
    log.warning(
        "catalog: moved chunk vectors out of the chunks table (schema 3) in %.1f s",
        time.perf_counter() - started,
    )


def _chunk_columns(conn: sqlite3.Connection) -> set[str]:
    return {str(r[1]) for r in conn.execute("PRAGMA table_info(chunks)")}


def _version(conn: sqlite3.Connection) -> int | None:
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except sqlite3.OperationalError:  # a new, empty file
        return None
    return None if row is None else int(row[0])


def _needs_location(conn: sqlite3.Connection) -> bool:
    version = _version(conn)
    return version is not None and version < LOCATION_SCHEMA


def _add_location(conn: sqlite3.Connection) -> None:
    if "location" not in _chunk_columns(conn):  # schema 3's rebuilt table has it already
        conn.execute("ALTER TABLE chunks ADD COLUMN location TEXT")  # in place: no rewrite
    _set_version(conn, LOCATION_SCHEMA)


def upgrade(conn: sqlite3.Connection) -> None:
    """Bring the catalog on ``conn`` (autocommit) up to this version's schema.

    A new, empty file needs nothing (``SCHEMA`` makes it current). Each step
    that is due runs in its own ``BEGIN IMMEDIATE`` transaction.
    """
    steps = (
        (_needs_facets, _add_facets),
        (_needs_source_columns, _add_source_columns),
        (_needs_thin_rows, _thin_rows),
        (_needs_split_vectors, _split_vectors),
        (_needs_location, _add_location),
    )
    for due, step in steps:
        if not due(conn):
            continue
        _begin_waiting(conn)
        try:
            if due(conn):  # again, under the lock: another process may have done it
                step(conn)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")


#: How long an opening process waits for another one's upgrade step (or any writer) before
#: it gives up. A step holds the write lock for its whole transaction — 38 s for schema 3 at
#: 1M chunks — which is past the connection's busy timeout (30 s): the second worker of a
#: ``ks serve --workers 2`` failed to open, and took the server down with it.
UPGRADE_WAIT_S = 1200.0


def _begin_waiting(conn: sqlite3.Connection) -> None:
    """``BEGIN IMMEDIATE``, waiting out a busy catalog (one busy timeout a try) up to
    :data:`UPGRADE_WAIT_S`."""
    deadline = time.monotonic() + UPGRADE_WAIT_S
    told = False
    while True:
        try:
            conn.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError as exc:
            busy = "locked" in str(exc) or "busy" in str(exc)
            if not busy or time.monotonic() >= deadline:
                raise
            if not told:
                log.warning("catalog: another process is writing it (an upgrade?); waiting")
                told = True


def _needs_facets(conn: sqlite3.Connection) -> bool:
    columns = _entity_columns(conn)
    return bool(columns) and bool(missing_facets(columns))
