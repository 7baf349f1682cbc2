"""The PostgreSQL engine's audit log: :mod:`knowledge_store.engines.sql.audit`'s tables in the
store's schema (made when the store is opened, :func:`create_audit_tables`).

An append is its own ``READ COMMITTED`` transaction that locks the head row — never the
store's write lock, so a read's record does not wait for a publish. It is durable when the
commit returns as far as the server's ``synchronous_commit`` makes commits durable (on by
default: flushed to the WAL on disk). The checkpoint is a row of ``meta``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from knowledge_store.engines.postgres.db import Connection, Database, translate
from knowledge_store.engines.sql.audit import audit_ddl, creation_params
from knowledge_store.engines.sql.dialect import POSTGRES, PostgresDialect
from knowledge_store.errors import StoreError

__all__ = ["AuditTables", "create_audit_tables"]

#: The ``meta`` key of the checkpoint: ``"<seq> <digest>"``.
CHECKPOINT_META = "audit_checkpoint"


#: The guard against changing the log by accident (the hash chain detects tampering): a
#: trigger refuses every UPDATE, and every DELETE but gc's, whose transaction sets
#: ``ks.audit_gc``.
APPEND_ONLY = (
    """CREATE OR REPLACE FUNCTION audit_log_append_only() RETURNS trigger AS $$
    BEGIN
        IF TG_OP = 'DELETE' AND current_setting('ks.audit_gc', true) = 'on' THEN
            RETURN OLD;
        END IF;
        RAISE EXCEPTION 'the audit log is append-only (% refused)', TG_OP;
    END $$ LANGUAGE plpgsql""",
    "CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log"
    " FOR EACH ROW EXECUTE FUNCTION audit_log_append_only()",
)


def create_audit_tables(conn: Connection) -> None:
    """The audit tables, in the open's migration transaction (once: a trigger redefined at
    every open would lock the log)."""
    found = conn.execute("SELECT to_regclass('audit_head') IS NOT NULL").fetchone()
    if found is not None and found[0]:
        return
    params = creation_params()
    for statement in audit_ddl(POSTGRES):
        conn.execute(statement, params if "%(" in statement else None)
    for statement in APPEND_ONLY:
        conn.execute(statement)


class AuditTables:
    """The audit log's transactions on the store's database."""

    dialect: PostgresDialect = POSTGRES

    def __init__(self, db: Database) -> None:
        self._db = db
        self.fsync = False  # the server's synchronous_commit decides

    @contextmanager
    def audit_reading(self) -> Iterator[Connection]:
        with self._db.read() as conn, translate("reading the audit log"):
            yield conn

    @contextmanager
    def audit_appending(self) -> Iterator[Connection]:
        with self._db.write(lock=False) as conn, translate("appending to the audit log"):
            yield conn

    def checkpoint(self) -> tuple[int, str] | None:
        with self._db.read() as conn, translate("reading the audit checkpoint"):
            row = conn.execute(
                "SELECT value FROM meta WHERE key = %s", (CHECKPOINT_META,)
            ).fetchone()
        if row is None:
            return None
        seq, _, digest = str(row[0]).partition(" ")
        return (int(seq), digest) if seq.isdigit() and digest else None

    def set_checkpoint(self, seq: int, digest: str, *, wait: bool) -> bool:
        try:
            with self._db.write(lock=False) as conn, translate("keeping the audit checkpoint"):
                if not wait:
                    conn.execute("SET LOCAL lock_timeout = '1ms'")
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE"
                    " SET value = excluded.value"
                    " WHERE split_part(meta.value, ' ', 1)::bigint < %s",
                    (CHECKPOINT_META, f"{seq} {digest}", seq),
                )
        except StoreError:
            if wait:
                raise
            return False
        return True

    def disk_bytes(self) -> int:
        with self._db.read() as conn, translate("measuring the audit log"):
            row = conn.execute(
                "SELECT pg_total_relation_size('audit_log') + pg_total_relation_size('audit_names')"
            ).fetchone()
        return int(row[0]) if row is not None else 0

    @contextmanager
    def pruning(self, conn: Connection) -> Iterator[None]:
        conn.execute("SET LOCAL ks.audit_gc = 'on'")
        yield
        conn.execute("SET LOCAL ks.audit_gc = 'off'")

    def close(self) -> None:
        """Nothing of its own: the engine closes the database's connections."""
