"""The embedded catalog's SQLite connections: one per writing thread, a pool for readers.

Every connection is in autocommit mode (transactions are explicit) on the WAL
journal. The single writer writes on its thread's connection; each reader
borrows a connection of its own for its lifetime and reads one WAL snapshot on
it, never blocking the writer nor blocked by it. (The PostgreSQL engine's
counterpart is ``engines/postgres/db.py``.)
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["Database", "connect"]

#: Reader connections kept open for reuse (each keeps its prepared statements).
_POOL = 8


def connect(path: Path) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), WAL, foreign keys on."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA busy_timeout=30000")
    conn.execute("PRAGMA cache_size=-8192")  # per connection: a server holds many
    return conn


class Database:
    """The connections of one catalog file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()
        # Last in, first out: a reader gets the connection used last, whose page cache is
        # warm; a FIFO rotated readers over every pooled connection (and cold caches). A list
        # under the pool's lock: a LifoQueue's condition variable cost 1.5% of a vector@10.
        self._pool: list[sqlite3.Connection] = []
        self._pool_lock = threading.Lock()
        self._all: list[sqlite3.Connection] = []

    def conn(self) -> sqlite3.Connection:
        """This thread's connection (the writer's; short reads outside a reader)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self.path)
            self._local.conn = conn
            with self._pool_lock:
                self._all.append(conn)
        return conn

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """One consistent snapshot for the whole block (nested blocks share it)."""
        conn = self.conn()
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
        conn = self.conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        else:
            conn.execute("COMMIT")

    def borrow(self) -> sqlite3.Connection:
        """A connection for one reader, for as long as it lives (give it back with :meth:`give`)."""
        with self._pool_lock:
            if self._pool:
                return self._pool.pop()
        conn = connect(self.path)
        with self._pool_lock:
            self._all.append(conn)
        return conn

    def give(self, conn: sqlite3.Connection) -> None:
        if conn.in_transaction:
            conn.execute("COMMIT")
        with self._pool_lock:
            if len(self._pool) < _POOL:
                self._pool.append(conn)
                return
            self._all.remove(conn)
        conn.close()

    def close(self) -> None:
        with self._pool_lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
        self._local = threading.local()
        self._pool = []
