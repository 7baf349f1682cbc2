"""Upgrading an older embedded catalog on open, in place, each step one write transaction.

Two steps, each idempotent and safe when several processes open the store at
once (each re-checks under the write lock, so one of them does the work):

- **facets** (:mod:`..sql.facets`): a filter field declared after the store was
  made gets its column and index, the default ``''``.
- **thin entity rows** (schema 2): an entity's ``body`` and ``attributes`` move
  from ``entities`` to ``entity_bodies``, as in the PostgreSQL catalog. A body
  averages ~1.8 KB and reaches 100 KB; inline, it put three entities on a page
  and pushed the columns after it (``acl_set``, ``href``, ``updated_at``: what
  every visibility check and card reads) onto overflow pages. The graph walk's
  hop read 2× the pages it reads now.

A crash in a step rolls it back: the store opens as it was and the next open
runs the step again.
"""

from __future__ import annotations

import logging
import sqlite3
import time

from knowledge_store.engines.sql.dialect import SQLITE
from knowledge_store.engines.sql.facets import add_facet, missing_facets

__all__ = ["ENTITY_BODIES_DDL", "THIN_ROWS_SCHEMA", "upgrade"]

log = logging.getLogger(__name__)

#: The catalog schema version that moved bodies out of the entity rows.
THIN_ROWS_SCHEMA = 2

#: The columns schema 2 moved out of ``entities`` into ``entity_bodies``.
_MOVED = ("body", "attributes")

ENTITY_BODIES_DDL = """CREATE TABLE IF NOT EXISTS entity_bodies (
    entity     INTEGER PRIMARY KEY REFERENCES entities(id) ON DELETE CASCADE,
    body       TEXT NOT NULL,
    attributes TEXT NOT NULL            -- JSON object
)"""


def _entity_columns(conn: sqlite3.Connection) -> set[str]:
    return {str(r[1]) for r in conn.execute("PRAGMA table_info(entities)")}


def _needs_thin_rows(conn: sqlite3.Connection) -> bool:
    return any(c in _entity_columns(conn) for c in _MOVED)


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
    conn.execute(
        "INSERT INTO meta(key, value) VALUES ('schema_version', ?)"
        " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (str(THIN_ROWS_SCHEMA),),
    )
    log.warning(
        "catalog: moved entity bodies out of the entities table (schema 2) in %.1f s",
        time.perf_counter() - started,
    )


def upgrade(conn: sqlite3.Connection) -> None:
    """Bring the catalog on ``conn`` (autocommit) up to this version's schema.

    A new, empty file needs nothing (``SCHEMA`` makes it current). Each step
    that is due runs in its own ``BEGIN IMMEDIATE`` transaction.
    """
    for due, step in ((_needs_facets, _add_facets), (_needs_thin_rows, _thin_rows)):
        if not due(conn):
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            if due(conn):  # again, under the lock: another process may have done it
                step(conn)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")


def _needs_facets(conn: sqlite3.Connection) -> bool:
    columns = _entity_columns(conn)
    return bool(columns) and bool(missing_facets(columns))
