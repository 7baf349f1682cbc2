"""The embedded store's single writer: a thread lock in this process, a file lock across them.

``WriteLock(path).hold()`` is re-entrant in one thread. With ``wait=False`` it
yields False at once when someone else is writing (an open repairs what a killed
writer left only when no writer is alive: a writer that died released its
``flock``). Readers never take it: :meth:`WriteLock.busy` tells them, without
holding anything, whether a writer is at work.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from knowledge_store.errors import StoreError

__all__ = ["WRITE_LOCK_TIMEOUT_S", "WriteLock"]

WRITE_LOCK_TIMEOUT_S = 120.0


class WriteLock:
    """``flock`` on ``<store>/write.lock``, with a re-entrant thread lock in front of it."""

    def __init__(self, store: Path) -> None:
        self._store = store
        self._path = store / "write.lock"
        self._thread_lock = threading.RLock()
        self._depth = 0

    @contextmanager
    def hold(self, *, wait: bool = True) -> Iterator[bool]:
        """Hold the lock for the block; yields whether it is held (always True with ``wait``)."""
        if not self._thread_lock.acquire(
            blocking=wait, timeout=WRITE_LOCK_TIMEOUT_S if wait else -1
        ):
            if not wait:
                yield False
                return
            raise StoreError(f"timed out waiting for the write lock of {self._store}")
        try:
            if self._depth:
                self._depth += 1
                try:
                    yield True
                finally:
                    self._depth -= 1
                return
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
            if not _flock(fd, WRITE_LOCK_TIMEOUT_S if wait else 0.0):
                os.close(fd)
                if not wait:
                    yield False
                    return
                raise StoreError(
                    f"another process has been writing to {self._store} for over"
                    f" {WRITE_LOCK_TIMEOUT_S:.0f} s; try again when it is done"
                )
            self._depth = 1
            try:
                yield True
            finally:
                self._depth = 0
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
        finally:
            self._thread_lock.release()

    def busy(self) -> bool:
        """Whether a writer holds the lock now, in this process or another: a probe that
        never waits and writes nothing (a shared ``flock`` on a descriptor of its own,
        refused while a writer holds the exclusive one, else dropped at once). A reader
        asks it to tell a writer's commit that is coming from one that never will."""
        if self._depth:
            return True
        try:
            fd = os.open(self._path, os.O_RDONLY | os.O_CREAT, 0o644)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # closing the descriptor drops a shared lock it got
        return False


def _flock(fd: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
