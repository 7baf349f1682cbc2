"""``ks serve --workers 2`` as a real process tree on an ephemeral port, for the tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

WAIT_S = 120  # a bound on waiting for a process to start or go; never a measurement


def until(what: str, check: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"gave up waiting: {what}")


#: The suite's environment less its KS_EMBEDDER: a server embeds with its store's model
#: (an empty store: the default one).
_INHERITED = {k: v for k, v in os.environ.items() if k != "KS_EMBEDDER"}


class Workers:
    """``ks serve --workers N`` (default 2) on an ephemeral port, its log in a file."""

    def __init__(
        self,
        store: Path | str,
        log: Path,
        *args: str,
        env: dict[str, str] | None = None,
        workers: int = 2,
    ) -> None:
        self.log = log
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "knowledge_store.surfaces.cli", "--store", str(store)),
                *("serve", "--port", "0", "--workers", str(workers), *args),
            ],
            env={**_INHERITED, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=log.open("w"),
            text=True,
        )
        assert self.proc.stdout is not None
        banner = ""
        while "serving on" not in banner and (line := self.proc.stdout.readline()):
            banner += line
        assert "serving on http://127.0.0.1:" in banner, self.text()
        self.url = banner.split("serving on ", 1)[1].split()[0]

    def text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def started(self) -> int:
        return self.text().count("Application startup complete")

    def workers(self) -> list[int]:
        try:
            children = psutil.Process(self.proc.pid).children()
        except psutil.NoSuchProcess:
            return []
        return sorted(
            c.pid
            for c in children
            if c.is_running()
            and c.status() != psutil.STATUS_ZOMBIE
            and "resource_tracker" not in " ".join(c.cmdline())
        )

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            for pid in self.workers():
                os.kill(pid, signal.SIGKILL)
            self.proc.kill()
            return self.proc.wait(timeout=10)
