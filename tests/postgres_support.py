"""A real PostgreSQL + pgvector for the tests: one pgserver instance per test process.

Started on first use in a temporary directory (a second or so) and stopped —
its directory deleted — when the process exits. Each test module gets a fresh
database (:func:`fresh_database`); each store in it a fresh schema
(:func:`store_url`). Nothing beyond the virtual environment is needed.
"""

from __future__ import annotations

import atexit
import itertools
import re
import shutil
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any

import psycopg

_lock = threading.Lock()
_server: Any = None
_counter = itertools.count(1)


def server_url() -> str:
    """The URL of the session's server (its ``postgres`` database), started on first use."""
    global _server
    with _lock:
        if _server is None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                import pgserver

                root = Path(tempfile.mkdtemp(prefix="ks-pg-"))

                def _remove_root() -> None:
                    shutil.rmtree(root, ignore_errors=True)

                # registered first, so it runs last (LIFO), after pgserver's cleanup has stopped
                # the server: that cleanup reads its list of handles in pgdata, and with pgdata
                # already gone it left every test process's postmaster running
                atexit.register(_remove_root)
                _server = pgserver.get_server(root / "pgdata", cleanup_mode="delete")
        return str(_server.get_uri())


def _with_database(url: str, database: str) -> str:
    return re.sub(r"/[^/?]*(\?|$)", f"/{database}\\1", url, count=1)


def fresh_database(label: str) -> str:
    """A new, empty database named after ``label``; its URL."""
    name = re.sub(r"[^a-z0-9_]", "_", label.lower())[-40:] + f"_{next(_counter)}"
    with psycopg.connect(server_url(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return _with_database(server_url(), name)


def store_url(database_url: str, schema: str | None = None) -> str:
    """A store location in ``database_url``: a fresh schema unless one is named."""
    schema = schema or f"s{next(_counter)}"
    sep = "&" if "?" in database_url else "?"
    return f"{database_url}{sep}schema={schema}"
