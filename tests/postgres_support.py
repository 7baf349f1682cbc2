"""A real PostgreSQL + pgvector for the tests: one pgserver instance per test process.

Started on first use in a temporary directory (a second or so) named after the test run
(:data:`RUN`), and stopped by PID — its directory deleted — when the session ends
(:func:`stop_server`, from a session fixture of ``tests/conftest.py``: ``atexit`` does
not run in a pytest-xdist worker, and two or three servers outlived every run). The
run's controller then sweeps: any postmaster still running from a data directory of this
run, this suite's or a ``pg:DIR`` a test made under the run's temporary directory, is
stopped by the PID in its ``postmaster.pid`` (:func:`sweep`). Each test module gets a
fresh database (:func:`fresh_database`); each store in it a fresh schema
(:func:`store_url`). Nothing beyond the virtual environment is needed.
"""

from __future__ import annotations

import atexit
import itertools
import os
import re
import shutil
import signal
import tempfile
import threading
import uuid
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import psutil
import psycopg

#: The test run: its servers' directories are named after it (``ks-pg-<run>-…``); the
#: controller sets it before the workers start, and they inherit it.
RUN_VARIABLE = "KS_TEST_RUN"
RUN = os.environ.setdefault(RUN_VARIABLE, uuid.uuid4().hex[:12])

_lock = threading.Lock()
_server: Any = None
_root: Path | None = None
_counter = itertools.count(1)


def server_url() -> str:
    """The URL of the session's server (its ``postgres`` database), started on first use."""
    global _server, _root
    with _lock:
        if _server is None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                import pgserver

                root = _root = Path(tempfile.mkdtemp(prefix=f"ks-pg-{os.environ[RUN_VARIABLE]}-"))

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


def _postmaster(pgdata: Path) -> psutil.Process | None:
    """The running postmaster of ``pgdata`` (the PID its ``postmaster.pid`` names, if that
    process is a postgres serving this directory), else None."""
    try:
        pid = int((pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
        process = psutil.Process(pid)
        command = " ".join(process.cmdline())
    except (OSError, ValueError, psutil.Error):
        return None
    return process if "postgres" in process.name() and str(pgdata) in command else None


def stop(pgdata: Path, timeout: float = 30) -> bool:
    """Stop the postmaster of ``pgdata`` by its PID: a fast shutdown (SIGINT), then SIGKILL
    if it has not exited within ``timeout``. True when one was running."""
    process = _postmaster(pgdata)
    if process is None:
        return False
    try:
        process.send_signal(signal.SIGINT)
        process.wait(timeout)
    except psutil.TimeoutExpired:
        process.kill()
        process.wait(timeout)
    except psutil.NoSuchProcess:
        pass
    return True


def stop_server() -> None:
    """Stop this process's server (by PID) and delete its directory (the session's end)."""
    global _server, _root
    with _lock:
        root, _server, _root = _root, None, None
    if root is not None:
        stop(root / "pgdata")
        shutil.rmtree(root, ignore_errors=True)


def sweep(places: Iterable[Path], *, suite: bool = True) -> list[Path]:
    """Stop every postmaster still serving a data directory of this run — the suite's servers
    (``ks-pg-<run>-*`` in the temporary directory) and any ``pgdata`` under ``places`` (the
    run's temporary directory, where ``pg:DIR`` stores of the tests live) — and delete the
    suite's directories (``suite=False``: only ``places``; a test must not stop the servers
    other workers of the run still use). Returns the data directories stopped."""
    roots = Path(tempfile.gettempdir()).glob(f"ks-pg-{os.environ[RUN_VARIABLE]}-*")
    suite_roots = sorted(roots) if suite else []
    found = {p.parent for root in places for p in Path(root).rglob("postmaster.pid")}
    found |= {root / "pgdata" for root in suite_roots}
    stopped = [pgdata for pgdata in sorted(found) if stop(pgdata)]
    for root in suite_roots:
        shutil.rmtree(root, ignore_errors=True)
    return stopped
