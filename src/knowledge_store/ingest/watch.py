"""Watch folders and call ``sync`` when files change: one call per burst, bad input survived.

:func:`watch` runs a `watchfiles <https://watchfiles.helpmanual.io>`_ loop (Rust
``notify``: inotify, FSEvents, ReadDirectoryChangesW; polling on request) over
``paths``. Changes are grouped: a burst ends when no change has come for
``quiet_ms`` (or after ``max_wait_ms`` in all), so a save storm of hundreds of
files is one call. ``sync(changed paths)`` is the caller's: typically a
re-ingest of the whole folder as one publish. What it returns is handed to
``on_sync`` (print one line per publish); an input or store error it raises
(:class:`KnowledgeStoreError`, :class:`OSError`) is handed to ``on_error`` and
the loop keeps watching. Ctrl-C, or ``stop.set()``, ends the loop cleanly (a
sync in progress is one transaction: it completes or publishes nothing).

With ``initial_sync`` the first call is made as soon as the watcher runs (with
the paths changed so far, often none), so no change made meanwhile is missed.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from watchfiles import Change, DefaultFilter
from watchfiles import watch as watch_changes

from knowledge_store.errors import InvalidRequest, KnowledgeStoreError

__all__ = ["ChangeFilter", "WatchSummary", "watch"]

R = TypeVar("R")


class ChangeFilter(DefaultFilter):
    """watchfiles' default filter (VCS folders, caches, editor swap files) + hidden names +
    the given file suffixes (names without a suffix pass: a deleted folder has none)."""

    def __init__(self, suffixes: Sequence[str] = ()) -> None:
        super().__init__()
        self.suffixes = tuple(suffix.lower() for suffix in suffixes)

    def __call__(self, change: Change, path: str) -> bool:
        name = os.path.basename(path)
        if name.startswith(".") or not super().__call__(change, path):
            return False
        suffix = os.path.splitext(name)[1].lower()
        return not self.suffixes or not suffix or suffix in self.suffixes


@dataclass
class WatchSummary(Generic[R]):
    """What a watch did before it stopped."""

    syncs: int = 0
    failures: int = 0
    interrupted: bool = False
    last: R | None = None


def watch(
    paths: Sequence[str | Path],
    sync: Callable[[list[Path]], R],
    *,
    on_sync: Callable[[list[Path], R], None] | None = None,
    on_error: Callable[[list[Path], Exception], None] | None = None,
    suffixes: Sequence[str] = (),
    quiet_ms: int = 300,
    max_wait_ms: int = 10_000,
    initial_sync: bool = False,
    stop: threading.Event | None = None,
    force_polling: bool | None = None,
) -> WatchSummary[R]:
    """Call ``sync`` for each burst of changes under ``paths`` until Ctrl-C or ``stop``.

    ``suffixes`` limits the files that count (e.g. ``(".md",)``; empty: all).
    Returns a :class:`WatchSummary`. Raises :class:`InvalidRequest` for a path
    that does not exist or a bad timing.
    """
    for path in paths:
        if not Path(path).exists():
            raise InvalidRequest(f"{str(path)!r} does not exist; nothing to watch", path=str(path))
    if quiet_ms < 1 or max_wait_ms < quiet_ms:
        raise InvalidRequest(
            f"quiet_ms must be at least 1 and max_wait_ms at least quiet_ms (got {quiet_ms},"
            f" {max_wait_ms})"
        )
    summary: WatchSummary[R] = WatchSummary()

    def run(changed: list[Path]) -> None:
        try:
            result = sync(changed)
        except (KnowledgeStoreError, OSError) as exc:
            summary.failures += 1
            if on_error is not None:
                on_error(changed, exc)
            return
        summary.syncs += 1
        summary.last = result
        if on_sync is not None:
            on_sync(changed, result)

    pending_initial = initial_sync
    try:
        for changes in watch_changes(
            *paths,
            watch_filter=ChangeFilter(suffixes),
            debounce=max_wait_ms,
            step=quiet_ms,
            stop_event=stop,
            rust_timeout=1_000,
            yield_on_timeout=True,
            raise_interrupt=True,
            force_polling=force_polling,
        ):
            if changes or pending_initial:
                pending_initial = False
                run(sorted({Path(path) for _, path in changes}))
    except KeyboardInterrupt:
        summary.interrupted = True
    return summary
