"""No PostgreSQL server outlives the suite: one a test leaves running is stopped by PID."""

from __future__ import annotations

import warnings
from pathlib import Path

import psutil

from tests import postgres_support


def test_a_server_left_running_is_stopped_by_the_sweep(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pgserver.postgres_server import get_server

    # as a `pg:DIR` store of a test whose process died: a server nobody will stop
    (tmp_path / "left").mkdir()
    server = get_server(tmp_path / "left" / "pgdata", cleanup_mode=None)
    pid = server.get_pid()
    assert pid is not None and psutil.pid_exists(pid)
    assert postgres_support.sweep([tmp_path], suite=False) == [tmp_path / "left" / "pgdata"]
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert postgres_support.sweep([tmp_path], suite=False) == []  # nothing left to stop
