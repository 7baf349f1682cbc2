"""``audit.sqlite``: the embedded engine's audit log, beside the catalog.

The tables are :mod:`knowledge_store.engines.sql.audit`'s, in a SQLite file of their own
(WAL): an append is a write transaction, and on the catalog it would wait for every
publish's write transaction (seconds, for a large ingest) — a read's record must not. A
change's record is appended right after its publish commits. The catalog keeps the
*checkpoint* (the seq and digest of a recent record, ``meta.audit_checkpoint``), so that a
tail cut from this file together with its head row is still seen (``audit verify``).

Durability: a commit is in the WAL when an append returns, so a killed process loses no
acknowledged record (tests/engines/test_audit_kill.py). With ``fsync`` (``ks audit
settings --fsync on``) each commit is also flushed to disk (``synchronous=FULL``): a power
loss loses none either, for about 0.3 ms a commit on an SSD (shared by the records of
concurrent requests, which append together).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from knowledge_store.engines.embedded.db import Database
from knowledge_store.engines.sql.audit import audit_ddl, creation_params
from knowledge_store.engines.sql.dialect import SQLITE, SqliteDialect
from knowledge_store.errors import StoreError

__all__ = ["AUDIT_FILE", "AuditFile"]

AUDIT_FILE = "audit.sqlite"
#: The catalog's meta key holding the checkpoint: ``"<seq> <digest>"``.
CHECKPOINT_META = "audit_checkpoint"


#: The guard against changing the log by accident (the hash chain detects tampering): a
#: trigger refuses every UPDATE, and every DELETE but gc's, which marks its transaction.
APPEND_ONLY = (
    "CREATE TABLE IF NOT EXISTS audit_gc (marker INTEGER NOT NULL)",
    "CREATE TRIGGER IF NOT EXISTS audit_log_no_update BEFORE UPDATE ON audit_log"
    " BEGIN SELECT RAISE(ABORT, 'the audit log is append-only (UPDATE refused)'); END",
    "CREATE TRIGGER IF NOT EXISTS audit_log_no_delete BEFORE DELETE ON audit_log"
    " WHEN NOT EXISTS (SELECT 1 FROM audit_gc)"
    " BEGIN SELECT RAISE(ABORT, 'the audit log is append-only (DELETE refused)'); END",
)


class AuditFile:
    """The audit tables in ``audit.sqlite`` (made on first use), and the checkpoint in the
    catalog's ``meta``."""

    dialect: SqliteDialect = SQLITE

    def __init__(self, path: Path, catalog_path: Path) -> None:
        self.path = path
        self._catalog_path = catalog_path
        self._db: Database | None = None
        self._made = threading.Lock()
        self.fsync = False
        self._synchronous: dict[int, bool] = {}  # connection → what its PRAGMA says

    def _database(self) -> Database:
        with self._made:
            if self._db is None:
                db = Database(self.path)
                try:
                    conn = db.conn()
                    conn.execute("BEGIN IMMEDIATE")
                    try:
                        params = creation_params()
                        for statement in [*audit_ddl(SQLITE), *APPEND_ONLY]:
                            conn.execute(statement, params)
                    except BaseException:
                        conn.execute("ROLLBACK")
                        raise
                    conn.execute("COMMIT")
                except sqlite3.Error as exc:
                    db.close()
                    raise StoreError(f"cannot open the audit log {self.path}: {exc}") from exc
                self._db = db
            return self._db

    @contextmanager
    def audit_reading(self) -> Iterator[sqlite3.Connection]:
        try:
            with self._database().read() as conn:
                yield conn
        except sqlite3.Error as exc:
            raise StoreError(f"reading the audit log {self.path} failed: {exc}") from exc

    @contextmanager
    def audit_appending(self) -> Iterator[sqlite3.Connection]:
        db = self._database()
        try:
            conn = db.conn()
            if self._synchronous.get(id(conn)) != self.fsync:  # once per connection and change
                conn.execute(f"PRAGMA synchronous={'FULL' if self.fsync else 'NORMAL'}")
                self._synchronous[id(conn)] = self.fsync
            with db.write() as conn:
                yield conn
        except sqlite3.Error as exc:
            raise StoreError(f"writing the audit log {self.path} failed: {exc}") from exc

    def disk_bytes(self) -> int:
        """The file's pages (the WAL copied into it first)."""
        conn = self._database().conn()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        (pages,) = conn.execute("PRAGMA page_count").fetchone()
        (size,) = conn.execute("PRAGMA page_size").fetchone()
        return int(pages) * int(size)

    @contextmanager
    def pruning(self, conn: sqlite3.Connection) -> Iterator[None]:
        conn.execute("INSERT INTO audit_gc (marker) VALUES (1)")
        yield
        conn.execute("DELETE FROM audit_gc")

    # -- the checkpoint, in the catalog ----------------------------------------------------------
    def checkpoint(self) -> tuple[int, str] | None:
        with _catalog(self._catalog_path, timeout=30.0) as conn:
            row = conn.execute(
                "SELECT value FROM meta WHERE key = ?", (CHECKPOINT_META,)
            ).fetchone()
        return None if row is None else _parse_checkpoint(str(row[0]))

    def set_checkpoint(self, seq: int, digest: str, *, wait: bool) -> bool:
        """Keep ``(seq, digest)`` in the catalog; without ``wait``, only if no publish is
        writing it now (False: skipped)."""
        try:
            with _catalog(self._catalog_path, timeout=30.0 if wait else 0.0) as conn:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE"
                    " SET value = excluded.value WHERE CAST(substr(meta.value, 1,"
                    " instr(meta.value, ' ') - 1) AS INTEGER) < ?",
                    (CHECKPOINT_META, f"{seq} {digest}", seq),
                )
                conn.execute("COMMIT")
        except sqlite3.OperationalError:
            if wait:
                raise
            return False
        return True

    def close(self) -> None:
        with self._made:
            if self._db is not None:
                self._db.close()
                self._db = None
                self._synchronous.clear()


def _parse_checkpoint(text: str) -> tuple[int, str] | None:
    seq, _, digest = text.partition(" ")
    return (int(seq), digest) if seq.isdigit() and digest else None


@contextmanager
def _catalog(path: Path, *, timeout: float) -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(path, isolation_level=None, timeout=timeout)
    try:
        yield conn
    finally:
        conn.close()
