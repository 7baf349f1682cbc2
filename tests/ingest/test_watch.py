"""watch(): a real watchfiles loop on a temp folder, syncing into a real embedded store."""

from __future__ import annotations

import os
import queue
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from watchfiles import Change

from knowledge_store.errors import BatchRejected, InvalidRequest
from knowledge_store.ingest.watch import ChangeFilter, WatchSummary, watch
from knowledge_store.model import IngestReport
from knowledge_store.store import KnowledgeStore

pytestmark = pytest.mark.embedded_only(
    reason="the watcher over a folder; what it publishes is the engines' ingest, tested on both"
)

QUIET_MS = 300


@dataclass
class Watching:
    synced: queue.Queue[tuple[list[Path], IngestReport]] = field(default_factory=queue.Queue)
    errors: queue.Queue[tuple[list[Path], Exception]] = field(default_factory=queue.Queue)
    summary: WatchSummary[IngestReport] | None = None

    def next_sync(self, timeout: float = 120) -> tuple[list[Path], IngestReport]:
        return self.synced.get(timeout=timeout)


@contextmanager
def watching(folder: Path, sync: Callable[[list[Path]], IngestReport]) -> Iterator[Watching]:
    seen = Watching()
    stop = threading.Event()

    def run() -> None:
        seen.summary = watch(
            [folder],
            sync,
            on_sync=lambda paths, report: seen.synced.put((paths, report)),
            on_error=lambda paths, exc: seen.errors.put((paths, exc)),
            suffixes=(".md",),
            quiet_ms=QUIET_MS,
            initial_sync=True,
            stop=stop,
        )

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        paths, _ = seen.next_sync()  # the initial sync: the watcher is running
        assert paths == []
        yield seen
    finally:
        stop.set()
        thread.join(timeout=60)
        assert not thread.is_alive()


def ingest_into(store: KnowledgeStore, folder: Path, **options: Any) -> Callable[..., Any]:
    store.embedder.embed(["load the model before the clock starts"])

    def sync(paths: list[Path]) -> IngestReport:
        return store.ingest([folder], format="markdown", acl=["everyone"], **options)

    return sync


def note(folder: Path, name: str, text: str) -> None:
    (folder / name).write_text(text, encoding="utf-8")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    notes = tmp_path / "notes"
    notes.mkdir()
    note(notes, "first.md", "# First\n\nThe first note, about beavers.\n")
    return notes


def test_a_save_storm_of_200_files_is_one_sync(store: KnowledgeStore, folder: Path) -> None:
    ingest = ingest_into(store, folder)

    def sync(paths: list[Path]) -> IngestReport:
        report = ingest(paths)
        if not paths:
            # The storm lands while the watcher is busy with the initial sync: every change
            # is pending when it looks again, however long the 200 writes take (a storm
            # written while it waits is grouped by the quiet window, which is time).
            for n in range(200):
                note(folder, f"storm-{n:03}.md", f"# Storm {n}\n\nNote number {n} of the storm.\n")
        return report

    with watching(folder, sync) as seen:
        paths, report = seen.next_sync()
    assert len(paths) == 200 and all(path.name.startswith("storm-") for path in paths)
    assert report.added == 200 and report.unchanged == 1
    assert store.stats().entities == 201
    assert seen.summary is not None and seen.summary.syncs == 2  # nothing came after the one
    assert seen.synced.empty() and seen.errors.empty()


def test_a_bad_file_is_reported_and_the_watch_goes_on(store: KnowledgeStore, folder: Path) -> None:
    with watching(folder, ingest_into(store, folder, skip_invalid=True)) as seen:
        note(folder, "bad.md", "---\ntitle: [unclosed\n---\n# Bad\n\nBroken front matter.\n")
        _, report = seen.next_sync()
        assert [(r.uid, r.field) for r in report.rejected] == [("bad", "front matter")]
        note(folder, "later.md", "# Later\n\nWritten after the bad one.\n")
        _, report = seen.next_sync()
        assert report.added == 1 and len(report.rejected) == 1
    hits = store.lexical("written after the bad one", identity="everyone", k=3)
    assert hits.hits[0].uid == "later"


def test_a_sync_that_raises_is_reported_and_the_watch_goes_on(
    store: KnowledgeStore, folder: Path
) -> None:
    with watching(folder, ingest_into(store, folder)) as seen:
        note(folder, "bad.md", "---\ntitle: [unclosed\n---\n# Bad\n\nBroken front matter.\n")
        paths, error = seen.errors.get(timeout=120)
        assert isinstance(error, BatchRejected) and paths == [folder / "bad.md"]
        (folder / "bad.md").unlink()
        _, report = seen.next_sync()
        assert report.rejected == []
    assert seen.summary is not None
    assert (seen.summary.syncs, seen.summary.failures) == (2, 1)


@pytest.fixture
def python_sigint() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt, as in a terminal, whatever handler an earlier test left
    installed (with another one the SIGINT was swallowed and the watch ran on to the suite's
    time limit)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("python_sigint")
def test_ctrl_c_stops_the_watch_cleanly(folder: Path) -> None:
    calls: list[list[Path]] = []

    def sync(paths: list[Path]) -> int:
        calls.append(paths)
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
        return len(calls)

    summary = watch([folder], sync, initial_sync=True, quiet_ms=100)
    assert summary.interrupted and summary.syncs == 1 and summary.last == 1


def test_ctrl_c_during_a_sync_stops_the_watch_cleanly(folder: Path) -> None:
    def sync(paths: list[Path]) -> int:
        raise KeyboardInterrupt

    summary = watch([folder], sync, initial_sync=True)
    assert summary.interrupted and summary.syncs == 0


def test_only_the_files_that_count_trigger_a_sync() -> None:
    keep = ChangeFilter((".md", ".markdown"))
    assert keep(Change.modified, "/notes/a.md") and keep(Change.added, "/notes/B.MARKDOWN")
    assert keep(Change.deleted, "/notes/sub")  # a folder deleted with its files
    assert not keep(Change.added, "/notes/.hidden.md")
    assert not keep(Change.modified, "/notes/image.png")
    assert not keep(Change.modified, "/notes/.git/index")
    assert not keep(Change.modified, "/notes/a.md~")
    assert ChangeFilter()(Change.modified, "/notes/image.png")


def test_watching_a_missing_folder_is_a_request_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest, match="does not exist"):
        watch([tmp_path / "nope"], lambda paths: None)
