"""Opening a store: pgvector, the schema, the migrations — once, under an advisory lock.

Every migration newer than the version recorded in ``meta`` is applied in one
transaction (all or none), so two processes opening a new store at once
don't race. A store written by a *newer* knowledge-store is refused with a
sentence saying to upgrade; a migration that can't convert data in place
records that a ``rebuild`` is due, and every read says so until it has run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql

from knowledge_store.engines.postgres.audit import create_audit_tables
from knowledge_store.engines.postgres.cursors import CURSORS_DDL
from knowledge_store.engines.postgres.db import Connection, translate
from knowledge_store.engines.postgres.schema import (
    ADVISORY_LOCK_MIGRATE,
    Features,
    Migration,
    detect_features,
)
from knowledge_store.engines.sql.declared import declared_ddl
from knowledge_store.engines.sql.dialect import POSTGRES
from knowledge_store.engines.sql.facets import add_facet, missing_facets
from knowledge_store.engines.sql.history import RECORD_MEMBERSHIPS, history_ddl
from knowledge_store.engines.sql.sources import source_columns_missing
from knowledge_store.errors import StoreError

__all__ = ["open_schema"]


def _installed(conn: Connection) -> list[tuple[str, str]]:
    with translate("reading the installed extensions"):
        return [
            (str(n), str(v))
            for n, v in conn.execute("SELECT extname, extversion FROM pg_extension")
        ]


def _ensure_pgvector(conn: Connection) -> list[tuple[str, str]]:
    found = _installed(conn)
    if any(name == "vector" for name, _ in found):
        return found
    try:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    except pg_errors.UniqueViolation:  # another process created it just now
        pass
    except psycopg.Error as exc:
        raise StoreError(
            "pgvector is not available in this database, and this role cannot create it"
            f" ({str(exc).strip()}); install pgvector on the server and run"
            " `CREATE EXTENSION vector;` as a superuser in this database, then retry"
        ) from exc
    return _installed(conn)


def _migrate(conn: Connection, schema: str, migrations: Sequence[Migration]) -> None:
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    current = 0 if row is None else int(row[0])
    latest = migrations[-1].version
    if current > latest:
        raise StoreError(
            f"the store in schema {schema!r} was written by a newer knowledge-store"
            f" (schema version {current}; this one knows up to {latest}); upgrade"
            " knowledge-store to open it",
            schema_version=current,
            supported=latest,
        )
    for migration in migrations:
        if migration.version <= current:
            continue
        for statement in migration.statements:
            conn.execute(statement)
        if migration.needs_rebuild and current > 0:
            conn.execute(
                "INSERT INTO meta (key, value) VALUES ('needs_rebuild', %s)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (str(migration.version),),
            )
        conn.execute(
            "INSERT INTO meta (key, value) VALUES ('schema_version', %s)"
            " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (str(migration.version),),
        )


def _add_facets(conn: Connection) -> None:
    """Add the facet columns a store made before their declaration lacks (every row ``''``)."""
    present = {
        str(name)
        for (name,) in conn.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND table_name = 'entities'"
        )
    }
    for name in missing_facets(present):
        for statement in add_facet(POSTGRES, name):
            conn.execute(statement)


def _add_source_columns(conn: Connection) -> None:
    """Add the ``sources`` columns a store made before them lacks (NULL in every row)."""
    present = [
        str(name)
        for (name,) in conn.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND table_name = 'sources'"
        )
    ]
    for statement in source_columns_missing(POSTGRES, present) if present else []:
        conn.execute(statement)


def open_schema(
    conn: Connection,
    schema: str,
    migrations: Sequence[Migration],
    extension_indexes: Mapping[str, str],
) -> tuple[str, Features]:
    """Make ``schema`` current on a bare autocommit connection; ``(search path, features)``.

    ``extension_indexes``: the index each BM25 extension needs, created when the
    extension is installed.
    """
    installed = _ensure_pgvector(conn)
    with translate("opening the store"):
        conn.execute("BEGIN")
        try:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (ADVISORY_LOCK_MIGRATE,))
            row = conn.execute(
                "SELECT n.nspname FROM pg_extension AS x"
                " JOIN pg_namespace AS n ON n.oid = x.extnamespace WHERE x.extname = 'vector'"
            ).fetchone()
            assert row is not None
            ident = sql.Identifier(schema)
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident))
            path = f"{ident.as_string(conn)}, {sql.Identifier(str(row[0])).as_string(conn)}"
            conn.execute("SELECT set_config('search_path', %s, true)", (path,))
            conn.execute(
                "CREATE TABLE IF NOT EXISTS meta (key text PRIMARY KEY, value text NOT NULL)"
            )
            _migrate(conn, schema, migrations)
            _add_facets(conn)
            _add_source_columns(conn)
            create_audit_tables(conn)
            # history, declared facets, cursors
            for statement in (*history_ddl(POSTGRES), *declared_ddl(POSTGRES), *CURSORS_DDL):
                conn.execute(statement)
            conn.execute(RECORD_MEMBERSHIPS)
            features = detect_features(installed)
            if features.bm25_extension is not None:
                conn.execute(extension_indexes[features.bm25_extension])
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    return path, features
