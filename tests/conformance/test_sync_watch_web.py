"""``ingest --sync --watch`` and ``ingest URL --format web --sync`` on both engines: a real
watchfiles loop on a temp folder, a real HTTP site on 127.0.0.1, the CLI in other processes."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from knowledge_store.model import IngestReport
from knowledge_store.store import KnowledgeStore
from tests.conformance.sync_support import by_source, docs, open_at, where, write_pages
from tests.conftest import HASH_SPEC
from tests.ingest.site_server import Route, Site, page, serve

__all__ = ["docs", "where"]  # fixtures

QUIET_MS = 800  # generous: a loaded machine may pause between two writes of a storm
KS = [sys.executable, "-m", "knowledge_store.surfaces.cli"]
ENV = {**os.environ, "KS_EMBEDDER": HASH_SPEC, "HF_HUB_OFFLINE": "1"}


@contextmanager
def watching(
    store: KnowledgeStore, folder: Path, source: str
) -> Iterator[tuple[queue.Queue[IngestReport], queue.Queue[Exception]]]:
    synced: queue.Queue[IngestReport] = queue.Queue()
    errors: queue.Queue[Exception] = queue.Queue()
    stop = threading.Event()

    def run() -> None:
        try:
            store.watch(
                [folder],
                source=source,
                acl=["everyone"],
                on_sync=lambda _paths, report: synced.put(report),
                on_error=lambda _paths, exc: errors.put(exc),
                stop=stop,
                quiet_ms=QUIET_MS,
            )
        except Exception as exc:  # the watch must not die: the test then fails on this
            errors.put(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield synced, errors
    finally:
        stop.set()
        thread.join(timeout=60)
        assert not thread.is_alive()


def test_watch_syncs_a_save_storm_as_one_publish_and_survives_a_bad_file(
    where: str, docs: Path
) -> None:
    with open_at(where) as store, watching(store, docs, "docs") as (synced, errors):
        first = synced.get(timeout=120)  # the initial sync
        assert first.added == 8
        write_pages(docs / "storm", [f"s{i:03d}" for i in range(200)])
        storm = synced.get(timeout=120)
        assert (storm.added, storm.deleted) == (400, 0)  # 200 pages and their samples
        assert synced.empty() and errors.empty()
        root = storm.content_root
        assert store.content_root() == root  # what a reader sees now: the whole storm

        (docs / "a.md").write_bytes(b"# Page a\n\nnot UTF-8 \xff\n")
        (docs / "b.md").write_text("# Page b\n\nbeavers rebuilt\n", encoding="utf-8")
        (docs / "c.md").unlink()
        bad = synced.get(timeout=120)
        # rejected; its stored version stays (the source's uids: "docs:PATH", docs/sources.md)
        assert [r.uid for r in bad.rejected] == ["docs:a"]
        # b, and d: its link to a resolves only against pages read this time.
        assert bad.updated == 2
        assert bad.deleted_uids == ["docs:b#code-1", "docs:c", "docs:c#code-1"]
        assert {h.uid for h in store.lexical("rebuilt").hits} == {"docs:b"}
        assert "docs:a" in {h.uid for h in store.lexical("beavers", k=100).hits}

        for path in (docs / "storm").iterdir():  # 400 of 405: refused, and the watch goes on
            path.unlink()
        refused = errors.get(timeout=120)
        assert "--allow-mass-delete" in str(refused), (refused, list(synced.queue))
        write_pages(docs / "storm", [f"s{i:03d}" for i in range(200)])  # back as they were
        back = synced.get(timeout=120)
        assert (back.added, back.updated, back.deleted) == (0, 400, 0)  # new file dates
        assert by_source(store) == [("docs", 405)]


def _interruptible() -> None:
    """A program started with SIGINT ignored keeps ignoring it (POSIX; pytest-xdist's workers
    ignore it, and a child inherits that): Ctrl-C must reach this one."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_the_cli_watch_prints_one_line_per_publish_and_ends_on_ctrl_c(
    tmp_path: Path, docs: Path
) -> None:
    store = tmp_path / "store"
    args = [*KS, "--store", str(store), "ingest", str(docs), "--source", "docs"]
    proc = subprocess.Popen(
        [*args, "--acl", "everyone", "--sync", "--watch", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        preexec_fn=_interruptible,
    )
    try:
        assert proc.stdout is not None
        assert json.loads(proc.stdout.readline())["added"] == 8
        (docs / "d.md").unlink()
        line = json.loads(proc.stdout.readline())
        assert (line["deleted"], line["deleted_uids"]) == (2, ["docs:d", "docs:d#code-1"])
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out == ""  # nothing else was printed: there was no other publish


def test_watch_needs_sync_and_a_source(tmp_path: Path, docs: Path) -> None:
    args = [*KS, "--store", str(tmp_path / "s"), "ingest", str(docs), "--watch", "--json"]
    done = subprocess.run(args, capture_output=True, text=True, env=ENV, timeout=60)
    assert done.returncode == 2
    assert "--source NAME and --sync" in json.loads(done.stdout)["error"]["message"]


def _site(site: Site, pages: dict[str, str]) -> None:
    site.routes.clear()
    links = tuple(f"{name}.html" for name in pages)
    site.routes["/docs/"] = Route(page("Docs", "<p>the index</p>", links=links))
    for name, text in pages.items():
        site.routes[f"/docs/{name}.html"] = Route(
            page(name.title(), f"<p>{text}</p><pre><code>select {name};</code></pre>")
        )


@pytest.fixture
def site() -> Iterator[Site]:
    with serve() as running:
        _site(running, {"alpha": "beavers alpha", "beta": "beavers beta", "gamma": "beavers"})
        yield running


def _ks(where: str, *args: str) -> Any:
    done = subprocess.run(
        [*KS, "--store", where, *args, "--json"],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_a_re_crawl_in_a_new_process_is_conditional_and_a_sync_drops_what_is_gone(
    engine_kind: str, tmp_path: Path, pg_database: str, site: Site
) -> None:
    from tests.conformance.sync_support import location

    at = location(engine_kind, tmp_path, pg_database)
    crawl = ["ingest", site.url("/docs/"), "--format", "web", "--source", "site", "--sync"]
    crawl += ["--acl", "everyone", "--delay", "0"]
    first = _ks(at, *crawl)
    assert (first["added"], first["deleted"]) == (7, 0)  # 4 pages, 3 code samples
    assert first["crawls"][0]["complete"] is True
    site.reset_log()

    again = _ks(at, *crawl)  # another process: the validators come from the store
    pages = [hit for hit in site.log if hit.path in site.routes]
    assert {hit.status for hit in pages} == {304} and all(hit.conditional for hit in pages)
    assert (again["added"], again["updated"], again["deleted"]) == (0, 0, 0)

    _site(site, {"alpha": "beavers alpha", "gamma": "beavers gamma, rewritten"})
    site.reset_log()
    changed = _ks(at, *crawl)
    assert changed["deleted_uids"] == ["beta", "beta#code-1"]
    assert changed["updated"] >= 2  # the index (its links) and gamma
    assert {hit.path: hit.status for hit in site.log}["/docs/alpha.html"] == 304
    sources = _ks(at, "sources")["sources"]
    assert [(s["source"], s["entities"], s["loader"]) for s in sources] == [("site", 5, "web")]
    assert sources[0]["locations"] == [site.url("/docs/")]
