"""The embedded engine's cursor table: ``cursors.sqlite`` in the store directory (see
:mod:`knowledge_store.engines.cursors`). A file of its own, so that saving a cursor never
waits on a publish's catalog transaction; not part of a backup (cursors are transient)."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from knowledge_store.errors import StoreError

__all__ = ["CURSORS_FILE", "CursorFile"]

CURSORS_FILE = "cursors.sqlite"
_DDL = (
    "CREATE TABLE IF NOT EXISTS cursors (id TEXT PRIMARY KEY, expires REAL NOT NULL,"
    " payload BLOB NOT NULL)",
    "CREATE INDEX IF NOT EXISTS cursors_by_expiry ON cursors (expires)",
)


class CursorFile:
    """``cursors.sqlite``, opened on first use (one connection, a lock around it)."""

    def __init__(self, path: Path, key: bytes) -> None:
        self._path = path
        self._key = key
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    @property
    def key(self) -> bytes:
        return self._key

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA busy_timeout=10000")
            for statement in _DDL:
                conn.execute(statement)
            self._conn = conn
        return self._conn

    def save(self, cursor: str, payload: bytes, expires: float) -> None:
        try:
            with self._lock:
                conn = self._connection()
                conn.execute("BEGIN IMMEDIATE")
                try:
                    conn.execute("DELETE FROM cursors WHERE expires < ?", (expires - 2 * 3600,))
                    conn.execute(
                        "INSERT OR REPLACE INTO cursors VALUES (?, ?, ?)",
                        (cursor, expires, payload),
                    )
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise StoreError(f"saving a cursor in {self._path} failed: {exc}") from exc

    def load(self, cursor: str, now: float) -> bytes | None:
        try:
            with self._lock:
                row = (
                    self._connection()
                    .execute(
                        "SELECT payload FROM cursors WHERE id = ? AND expires >= ?", (cursor, now)
                    )
                    .fetchone()
                )
        except sqlite3.Error as exc:
            raise StoreError(f"reading a cursor in {self._path} failed: {exc}") from exc
        return None if row is None else bytes(row[0])

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
