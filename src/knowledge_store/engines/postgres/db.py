"""Connections, transactions and error translation for the PostgreSQL engine.

One connection per thread (psycopg 3, server-side binding, autocommit with
explicit ``BEGIN``): a read is one ``REPEATABLE READ READ ONLY`` transaction —
one snapshot for the content root and the primitive's statement — and never
waits for a writer; a write is one ``READ COMMITTED`` transaction that takes
the store's advisory write lock first, so publishes are serialised and each
one's parent root is the latest. psycopg errors become the store's typed
errors here, at the engine boundary.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import pq, sql

from knowledge_store.engines.postgres.schema import ADVISORY_LOCK_WRITE
from knowledge_store.errors import InvalidRequest, KnowledgeStoreError, QueryTimeout, StoreError

__all__ = ["Connection", "Database", "check_schema_name", "translate"]

Connection = psycopg.Connection[Any]

_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
#: How long a publish waits for another one to finish before giving up.
WRITE_LOCK_TIMEOUT_MS = 120_000
#: Reader connections kept open for reuse.
_POOL = 8


def check_schema_name(name: str) -> str:
    if not _SCHEMA_NAME.match(name):
        raise InvalidRequest(
            f"{name!r} is not a usable schema name; use lowercase letters, digits and _",
            field="schema",
        )
    return name


@contextmanager
def translate(action: str) -> Iterator[None]:
    """psycopg errors → the store's errors, with ``raise … from exc``."""
    try:
        yield
    except KnowledgeStoreError:
        raise
    except pg_errors.QueryCanceled as exc:
        raise QueryTimeout(f"{action} was cancelled by the server's time limit: {exc}") from exc
    except (pg_errors.DataException, psycopg.DataError) as exc:
        raise InvalidRequest(f"{action}: a value cannot be used: {exc}".strip()) from exc
    except psycopg.Error as exc:
        raise StoreError(f"{action} failed in PostgreSQL: {exc}".strip(), action=action) from exc


class Database:
    """The store's database: a URL, the schema the store lives in, per-thread connections."""

    def __init__(self, url: str, schema: str, *, application: str = "knowledge-store") -> None:
        self.url = url
        self.schema = check_schema_name(schema)
        self.application = application
        self.search_path = schema
        self._local = threading.local()
        self._all: list[Connection] = []
        self._pool: list[Connection] = []
        self._all_lock = threading.Lock()
        self._vector_registered = False

    # -- connections -----------------------------------------------------------------------------
    def connect(self, *, register: bool = True) -> Connection:
        """A new autocommit connection on the store's schema (vector type registered).

        ``register=False``: a bare connection with the server's own search path
        (opening a store, before its schema and pgvector exist).
        """
        with translate(f"connecting to {_redacted(self.url)}"):
            conn = psycopg.connect(
                self.url, autocommit=True, application_name=self.application, connect_timeout=10
            )
            if register:
                conn.execute("SELECT set_config('search_path', %s, false)", (self.search_path,))
                from pgvector.psycopg import register_vector

                register_vector(conn)
        return conn

    def conn(self) -> Connection:
        """This thread's connection (opened on first use, reopened when broken)."""
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is None or conn.closed or conn.broken:
            conn = self.connect()
            self._local.conn = conn
            with self._all_lock:
                self._all = [c for c in self._all if not c.closed]
                self._all.append(conn)
        return conn

    def borrow(self) -> Connection:
        """A connection for one reader, for as long as it lives (give it back with :meth:`give`)."""
        with self._all_lock:
            while self._pool:
                conn = self._pool.pop()
                if not conn.closed and not conn.broken:
                    return conn
        conn = self.connect()
        with self._all_lock:
            self._all = [c for c in self._all if not c.closed]
            self._all.append(conn)
        return conn

    def give(self, conn: Connection) -> None:
        """Take a reader's connection back: its transaction ends; kept for the next reader."""
        _rollback(conn)
        with self._all_lock:
            if not conn.closed and not conn.broken and len(self._pool) < _POOL:
                self._pool.append(conn)
                return
        with contextlib.suppress(psycopg.Error):
            conn.close()

    def close(self) -> None:
        with self._all_lock:
            self._pool = []
            conns, self._all = self._all, []
        for conn in conns:
            with contextlib.suppress(psycopg.Error):  # closing a dead connection
                conn.close()
        self._local = threading.local()

    # -- transactions ---------------------------------------------------------------------------------
    @contextmanager
    def read(self) -> Iterator[Connection]:
        """One snapshot for the whole block (nested blocks share it); never blocks on writers."""
        conn = self.conn()
        if conn.info.transaction_status != pq.TransactionStatus.IDLE:
            yield conn
            return
        with translate("reading"):
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        try:
            yield conn
        except BaseException:
            _rollback(conn)
            raise
        else:
            with translate("reading"):
                conn.execute("COMMIT")

    @contextmanager
    def write(self, *, lock: bool = True) -> Iterator[Connection]:
        """One atomic transaction holding the store's write lock; rolled back on any error."""
        conn = self.conn()
        if conn.info.transaction_status != pq.TransactionStatus.IDLE:
            raise StoreError("a write cannot start inside another transaction")
        with translate("starting a write"):
            conn.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
        try:
            if lock:
                with translate("waiting for the write lock"):
                    conn.execute(f"SET LOCAL lock_timeout = {WRITE_LOCK_TIMEOUT_MS}")
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (ADVISORY_LOCK_WRITE,))
                    conn.execute("SET LOCAL lock_timeout = 0")
            yield conn
        except BaseException:
            _rollback(conn)
            raise
        else:
            with translate("committing"):
                conn.execute("COMMIT")

    def schema_ident(self) -> sql.Identifier:
        return sql.Identifier(self.schema)


def _rollback(conn: Connection) -> None:
    with contextlib.suppress(psycopg.Error):  # a dead connection: the server rolled back
        if not conn.closed and conn.info.transaction_status != pq.TransactionStatus.IDLE:
            conn.execute("ROLLBACK")


def _redacted(url: str) -> str:
    """The URL without its password, for messages."""
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)
