"""Reading untrusted files within bounds: a parser runs in a worker process with a time
and a memory limit, and a file it can't finish is refused, naming the bound it passed.

A PDF whose object graph loops, a DOCX whose parts inflate to gigabytes, an HTML page
whose parse time grows with the square of its depth: a parser in the loader's own
process would hold the whole ingest (or the server) for as long as it likes and take
all the memory it asks for. Here each call runs in a worker — a fresh Python process
(no state shared with the caller), limited to :attr:`Limits.memory_bytes`
of address space (``RLIMIT_AS``) and :attr:`Limits.cpu_seconds` of CPU per call
(``RLIMIT_CPU``), and killed when a call takes longer than :attr:`Limits.seconds` of
wall-clock time. A call that passes a bound answers :class:`Refused` and the worker is
replaced; the next call is not affected.

Workers are started on first use and kept for the next calls (starting one costs
~0.2 s): :func:`shared_runner` is the process-wide pool, stopped at exit. A worker
also exits as soon as its parent does (its end of the pipe closes). Workers are
``python -c`` processes: they import the parser, not the caller's ``__main__``.
"""

from __future__ import annotations

import atexit
import os
import queue
import resource
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

__all__ = ["DEFAULT_LIMITS", "Limits", "Refused", "Runner", "shared_runner"]


@dataclass(frozen=True)
class Limits:
    """The bounds of one call: wall-clock and CPU seconds, and the worker's address space."""

    seconds: float = 60.0
    cpu_seconds: int = 60
    memory_bytes: int = 2 * 1024**3


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True)
class Refused:
    """A call that passed a bound or failed in its parser: ``reason`` says which, for a person."""

    reason: str


def _size(n: int) -> str:
    return f"{n / 1024**3:g} GiB" if n >= 1024**3 else f"{n / 1024**2:g} MiB"


def _serve(conn: Connection, memory_bytes: int) -> None:
    """The worker: calls from ``conn`` one at a time, each answer back, until EOF."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    while True:
        try:
            function, args, cpu_seconds = conn.recv()
        except (EOFError, OSError):
            return
        used = resource.getrusage(resource.RUSAGE_SELF)
        limit = int(used.ru_utime + used.ru_stime) + 1 + cpu_seconds
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_CPU, (limit, hard))
        try:
            answer: tuple[str, Any] = ("ok", function(*args))
        except MemoryError:
            answer = ("memory", None)
        except RecursionError:
            answer = ("error", "it nests too deeply to read")
        except Exception as exc:
            last = traceback.extract_tb(exc.__traceback__)[-1:]
            where = f" (in {last[0].name})" if last else ""
            answer = ("error", f"{type(exc).__name__}: {str(exc)[:300]}{where}")
        try:
            conn.send(answer)
        except MemoryError:
            conn.send(("memory", None))


def worker_main(read_fd: int, write_fd: int, memory_bytes: int) -> None:
    """The worker process's entry: the caller's import path first, then :func:`_serve`."""
    conn = _Duplex(read_fd, write_fd)
    sys.path[:] = conn.recv()
    _serve(conn, memory_bytes)  # type: ignore[arg-type]


class _Duplex:
    """Two one-way pipes as one connection (what ``_serve`` reads and writes)."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.reader = Connection(read_fd, writable=False)
        self.writer = Connection(write_fd, readable=False)

    def recv(self) -> Any:
        return self.reader.recv()

    def send(self, value: Any) -> None:
        self.writer.send(value)

    def poll(self, timeout: float) -> bool:
        return self.reader.poll(timeout)

    def close(self) -> None:
        self.reader.close()
        self.writer.close()


class _Worker:
    """A worker process (``python -c`` — nothing of the caller's ``__main__`` is imported)."""

    def __init__(self, limits: Limits) -> None:
        child_reads, parent_writes = os.pipe()
        parent_reads, child_writes = os.pipe()
        # The caller's import path first (the package may be found through it only).
        code = (
            f"import sys; sys.path[:0] = {[p for p in sys.path if p]!r};"
            "from knowledge_store.ingest.loaders.bounded import worker_main;"
            f"worker_main({child_reads}, {child_writes}, {limits.memory_bytes})"
        )
        self.process = subprocess.Popen(
            [sys.executable, "-c", code],
            pass_fds=(child_reads, child_writes),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,  # parsers print warnings: the answer says what matters
        )
        os.close(child_reads)
        os.close(child_writes)
        self.conn = _Duplex(parent_reads, parent_writes)
        self.conn.send(list(sys.path))

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        if self.alive():
            self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        self.conn.close()
        self.kill()


class Runner:
    """A pool of bounded workers (see the module docstring); safe to use from threads."""

    def __init__(self, limits: Limits = DEFAULT_LIMITS, *, workers: int | None = None) -> None:
        self.limits = limits
        self.size = workers or max(1, min(4, (os.cpu_count() or 1)))
        self._idle: queue.LifoQueue[_Worker] = queue.LifoQueue()
        self._started = 0
        self._lock = threading.Lock()
        self._closed = False

    def _take(self) -> _Worker:
        with self._lock:
            if self._closed:
                raise RuntimeError("the runner is closed")
            start = self._idle.empty() and self._started < self.size
            if start:
                self._started += 1
        if start:
            return _Worker(self.limits)
        return self._idle.get()

    def _give_back(self, worker: _Worker | None) -> None:
        with self._lock:
            if worker is not None and not self._closed:
                self._idle.put(worker)
                return
            self._started -= 1
        if worker is not None:
            worker.stop()

    def call(self, function: Callable[..., Any], *args: Any, limits: Limits | None = None) -> Any:
        """``function(*args)`` in a worker: its answer, or :class:`Refused`.

        ``function`` and its arguments and answer must pickle (a module-level function).
        """
        bounds = limits or self.limits
        worker = self._take()
        try:
            answer = self._call(worker, function, args, bounds)
        except BaseException:
            worker.stop()
            self._give_back(None)
            raise
        if isinstance(answer, Refused) and not worker.alive():
            worker.stop()
            self._give_back(None)
        else:
            self._give_back(worker)
        return answer

    def _call(
        self, worker: _Worker, function: Callable[..., Any], args: tuple[Any, ...], bounds: Limits
    ) -> Any:
        started = time.monotonic()
        try:
            worker.conn.send((function, args, bounds.cpu_seconds))
            ready = worker.conn.poll(bounds.seconds)
        except (BrokenPipeError, EOFError, OSError):
            ready = True
        if not ready:
            worker.kill()
            return Refused(f"reading it took longer than {bounds.seconds:g} s (the limit)")
        try:
            status, value = worker.conn.recv()
        except (EOFError, OSError):
            try:
                code: int | None = worker.process.wait(5)
            except subprocess.TimeoutExpired:
                code = None
            return Refused(_death(code, bounds, time.monotonic() - started))
        if status == "ok":
            return value
        if status == "memory":
            worker.kill()  # its heap may be spent: start afresh
            return Refused(f"reading it needs more than {_size(bounds.memory_bytes)} of memory")
        return Refused(f"it could not be read: {value}")

    def map(self, function: Callable[..., Any], calls: Iterable[tuple[Any, ...]]) -> Iterator[Any]:
        """``function(*args)`` for each ``args`` of ``calls``, on every worker, answers in order."""
        with ThreadPoolExecutor(self.size) as pool:
            window: list[Any] = []
            for args in calls:
                window.append(pool.submit(self.call, function, *args))
                if len(window) >= 2 * self.size:
                    yield window.pop(0).result()
            for future in window:
                yield future.result()

    def close(self) -> None:
        with self._lock:
            self._closed = True
        while True:
            try:
                worker = self._idle.get_nowait()
            except queue.Empty:
                return
            worker.stop()


def _death(code: int | None, bounds: Limits, took: float) -> str:
    if code is not None and code < 0:
        number = -code
        if number == signal.SIGXCPU or (number == signal.SIGKILL and took >= bounds.cpu_seconds):
            return f"reading it took more than {bounds.cpu_seconds} s of CPU (the limit)"
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        return f"its parser crashed ({name}); the file may be damaged or hostile"
    return f"its parser stopped (exit status {code}); the file may be damaged or hostile"


_SHARED: dict[str, Runner] = {}
_SHARED_LOCK = threading.Lock()


def shared_runner() -> Runner:
    """The process-wide runner with :data:`DEFAULT_LIMITS` (stopped at exit)."""
    with _SHARED_LOCK:
        runner = _SHARED.get("runner")
        if runner is None:
            runner = _SHARED["runner"] = Runner()
            atexit.register(runner.close)
        return runner
