"""Rebuilding the lexical index after an upgrade, with other processes on the store.

After an upgrade that changes the lexical schema, the first process to hold the
store's write lock rebuilds the Tantivy index from the catalog (214 s at 1M
chunks). Other processes — the second worker of ``ks serve --workers 2``, a CLI
command run beside a server — used to wipe the index in their constructor, before
taking the lock (destroying a rebuild under way), and their lexical reads failed
with an opaque "did not reach publish" for the whole rebuild. Here the rebuilder is
a real process, held at gates (files) the test opens: before the rebuild (write
lock held) and midway through it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from knowledge_store.engines.embedded import views
from knowledge_store.engines.embedded.engine import EmbeddedEngine
from knowledge_store.engines.embedded.lexical import SIDECAR
from knowledge_store.errors import StoreError
from knowledge_store.ingest.embedding import Embedder
from knowledge_store.store import KnowledgeStore

CHUNKS = 60
BATCH = 10
QUERY = "kiwi page w3"

#: The rebuilder: opens the store (rebuilding its lexical index, BATCH chunks a batch),
#: stopping at gate "locked" (the write lock held, nothing rebuilt yet) and at gate
#: "midway" (two batches staged), then prints its hits for QUERY.
REBUILDER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    import knowledge_store.engines.embedded.derived as derived_module
    from knowledge_store.engines.embedded.lexical import LexicalIndex
    from knowledge_store.store import KnowledgeStore

    path, gates, batch, query = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4]

    def gate(name):
        (gates / f"at-{name}").touch()
        deadline = time.monotonic() + 120
        while not (gates / f"go-{name}").exists():
            if time.monotonic() > deadline:
                sys.exit(f"gate {name} never opened")
            time.sleep(0.02)

    derived_module.REBUILD_BATCH = batch
    leftovers, add, added = LexicalIndex.remove_leftovers, LexicalIndex.add, []

    def held(self):
        if not (gates / "at-locked").exists():
            gate("locked")
        return leftovers(self)

    def counted(self, docs):
        if len(added) == 2:
            gate("midway")
        added.append(1)
        add(self, docs)

    LexicalIndex.remove_leftovers, LexicalIndex.add = held, counted
    with KnowledgeStore.open(path, embedder="hash:384") as store:
        hits = store.lexical(query, k=100).hits
        print(json.dumps([[h.uid, h.chunk_id] for h in hits]), flush=True)
    """
)


def _records() -> list[dict[str, Any]]:
    return [
        {
            "uid": f"p:{i}",
            "type": "page",
            "title": f"Page {i}",
            "body": f"kiwi page {i} " + " ".join(f"w{(i * 7 + j) % 13}" for j in range(i % 5 + 1)),
            "acl": ["everyone"],
        }
        for i in range(CHUNKS)
    ]


def _hits(store: KnowledgeStore) -> list[list[Any]]:
    return [[h.uid, h.chunk_id] for h in store.lexical(QUERY, k=100).hits]


def _files(path: Path) -> dict[str, bytes]:
    """Every file of the lexical index and its content (Tantivy's lock files left out)."""
    return {
        f.name: f.read_bytes()
        for f in sorted((path / "lexical").iterdir())
        if f.is_file() and not f.name.endswith(".lock")
    }


@pytest.fixture
def upgraded(tmp_path: Path, embedder: Embedder) -> tuple[Path, list[list[Any]]]:
    """A store whose lexical index an older version built (lexical schema 5), and the
    hits of a fresh build of this version's."""
    path = tmp_path / "store"
    with KnowledgeStore.open(path, embedder=embedder) as store:
        store.ingest_records(_records())
        fresh = _hits(store)
    assert len(fresh) == CHUNKS
    sidecar = path / "lexical" / SIDECAR
    data = json.loads(sidecar.read_text())
    assert data["schema"].startswith("6:")
    data["schema"] = "5:" + data["schema"].partition(":")[2]  # as schema 5's sidecar reads
    sidecar.write_text(json.dumps(data))
    return path, fresh


class Rebuilder:
    """The rebuilding process and its gates."""

    def __init__(self, path: Path, gates: Path) -> None:
        gates.mkdir()
        self.gates = gates
        self.proc = subprocess.Popen(
            [sys.executable, "-c", REBUILDER, str(path), str(gates), str(BATCH), QUERY],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def reach(self, name: str) -> None:
        deadline = time.monotonic() + 120
        while not (self.gates / f"at-{name}").exists():
            if self.proc.poll() is not None:
                raise AssertionError(f"the rebuilder exited: {self.proc.communicate()}")
            assert time.monotonic() < deadline, f"the rebuilder never reached {name}"
            time.sleep(0.02)

    def release(self, name: str) -> None:
        (self.gates / f"go-{name}").touch()

    def hits(self) -> list[list[Any]]:
        out, err = self.proc.communicate(timeout=120)
        assert self.proc.returncode == 0, err
        return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.communicate(timeout=30)


@pytest.fixture
def rebuilder(upgraded: tuple[Path, list[list[Any]]], tmp_path: Path) -> Iterator[Rebuilder]:
    started = Rebuilder(upgraded[0], tmp_path / "gates")
    yield started
    if started.proc.poll() is None:
        started.kill()


def test_a_process_opening_during_anothers_rebuild_leaves_it_alone_and_says_so(
    upgraded: tuple[Path, list[list[Any]]],
    rebuilder: Rebuilder,
    embedder: Embedder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path, fresh = upgraded
    before = _files(path)
    rebuilder.reach("locked")
    # The rebuilder holds the write lock and has not started: nobody touched the old files.
    assert _files(path) == before
    with KnowledgeStore.open(path, embedder=embedder) as other:
        with pytest.raises(StoreError, match=r"must be rebuilt .*lexical schema 5") as waiting:
            other.lexical(QUERY)
        assert waiting.value.details["retryable"] is True
        assert "try again shortly" in waiting.value.message
        assert _files(path) == before  # opening and reading touched nothing
        assert len(other.vector("kiwi page", k=5).hits) == 5  # the rest answers
        assert len(other.sql(k=100).hits) == CHUNKS

        rebuilder.release("locked")
        rebuilder.reach("midway")
        # told at once, not after a wait: with one try the reader has no backoff to wait
        # out; had it waited for the index to reach its publish, it would say "did not reach
        # publish" (asserted below) — the rebuilder stays parked at midway meanwhile
        monkeypatch.setattr(views, "_VIEW_TRIES", 1)
        with pytest.raises(StoreError, match="is being rebuilt by process") as rebuilding:
            other.lexical(QUERY)
        assert f"{2 * BATCH:,} of {CHUNKS:,} chunks indexed" in rebuilding.value.message
        details = rebuilding.value.details
        assert (details["indexed"], details["total"]) == (2 * BATCH, CHUNKS)
        assert "did not reach publish" not in rebuilding.value.message
        # and stats, which never fails, tells an operator the same
        assert "is being rebuilt by process" in str(other.stats().indexes["error"])

        rebuilder.release("midway")
        theirs = rebuilder.hits()
        assert theirs == fresh
        assert _hits(other) == theirs  # the new index, picked up without reopening the store
        assert other.stats().indexes["error"] is None
    sidecar = json.loads((path / "lexical" / SIDECAR).read_text())
    assert sidecar["schema"].startswith("6:") and "rebuild" not in sidecar


def test_a_rebuild_killed_midway_is_redone_by_the_next_holder_of_the_write_lock(
    upgraded: tuple[Path, list[list[Any]]], rebuilder: Rebuilder, embedder: Embedder
) -> None:
    path, fresh = upgraded
    rebuilder.release("locked")
    rebuilder.reach("midway")
    rebuilder.kill()
    sidecar = json.loads((path / "lexical" / SIDECAR).read_text())
    assert sidecar["watermark"] == 0 and sidecar["rebuild"]["indexed"] == 2 * BATCH
    with KnowledgeStore.open(path, embedder=embedder) as store:
        engine = store.engine
        assert isinstance(engine, EmbeddedEngine)
        assert _hits(store) == fresh
        assert engine.lexical_index.num_docs() == CHUNKS
        assert engine.lexical_index.rebuilding() is None
    assert os.listdir(path / "lexical")  # rebuilt in place


def test_the_record_of_a_rebuild_killed_before_it_emptied_the_index_is_dropped_on_open(
    tmp_path: Path, embedder: Embedder
) -> None:
    """Killed between recording the rebuild and emptying the index: the index is whole (its
    commit holds the latest publish), so nothing is rebuilt — but the record must go, or
    other processes would later say a dead process is rebuilding it."""
    path = tmp_path / "store"
    with KnowledgeStore.open(path, embedder=embedder) as store:
        store.ingest_records(_records())
        fresh = _hits(store)
    sidecar = path / "lexical" / SIDECAR
    data = json.loads(sidecar.read_text())
    data["rebuild"] = {"reason": "`ks rebuild`", "pid": 1, "started": 0, "indexed": 0, "total": 1}
    sidecar.write_text(json.dumps(data))
    segments = sorted(f.name for f in (path / "lexical").iterdir() if f.suffix == ".idx")
    with KnowledgeStore.open(path, embedder=embedder) as store:
        engine = store.engine
        assert isinstance(engine, EmbeddedEngine)
        assert engine.lexical_index.rebuilding() is None
        assert _hits(store) == fresh
    assert sorted(f.name for f in (path / "lexical").iterdir() if f.suffix == ".idx") == segments
