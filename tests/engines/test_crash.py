"""A killed writer never wedges the embedded store (docs/architecture.md, "Write path").

Every writer — ingest, delete, grant, revoke, principals load, rebuild — is
SIGKILLed at random points (a few times each here; bench/kill_soak.py runs the
long soak) and the store must reopen and agree with its catalog through every
primitive. Two states a kill can leave are also built exactly: the delete file
of a Tantivy commit that never reached ``meta.json``, and the temp files of
killed saves.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from knowledge_store.engines.embedded import lexfiles
from knowledge_store.engines.embedded.engine import EmbeddedEngine
from knowledge_store.ingest.embedding import Embedder
from knowledge_store.store import KnowledgeStore
from tests.engines.kill_harness import WRITERS, check_store, leftover_files, record, seed, soak

#: Kills per writer here (KS_CRASH_KILLS to change it); the soak runs 50 or more.
KILLS = int(os.environ.get("KS_CRASH_KILLS", "2"))
#: Entities of the two-writers test.
UIDS_HERE = 20


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory, embedder: Embedder) -> Path:
    path = tmp_path_factory.mktemp("crash") / "store"
    seed(path, embedder)
    return path


@pytest.mark.parametrize("writer", WRITERS)
def test_a_killed_writer_leaves_a_store_that_opens_and_agrees(
    seeded: Path, embedder: Embedder, writer: str
) -> None:
    figures = soak(seeded, embedder, (writer,), KILLS, random.Random(hash(writer) & 0xFFFF))
    got = figures[writer]
    assert got.tried == KILLS
    assert not got.misbehaved, "\n".join(got.misbehaved)


@pytest.mark.parametrize("writer", ["ingest", "rebuild"])
def test_a_killed_writer_and_a_damaged_index_file_leave_a_store_that_opens_and_agrees(
    seeded: Path, embedder: Embedder, writer: str
) -> None:
    """Issue 25, item 9: after each kill, 50 bytes flipped in a derived-index file."""
    rng = random.Random(hash(writer) & 0xFFFF)
    figures = soak(seeded, embedder, (writer,), KILLS, rng, corrupt=True)
    got = figures[writer]
    assert got.tried == got.corrupted == KILLS
    assert not got.misbehaved, "\n".join(got.misbehaved)


def test_a_delete_file_left_by_a_commit_that_never_finished_is_removed_on_open(
    tmp_path: Path, embedder: Embedder
) -> None:
    """The state of a kill inside Tantivy's commit: the ``<segment>.<opstamp>.del`` file is
    written, ``meta.json`` and the watermark are not. Catching up replays the same
    operations, reaches the same opstamp, and collided with that file (every open failed)."""
    path = tmp_path / "store"
    lexical = path / "lexical"
    seed(path, embedder)
    shutil.copytree(lexical, tmp_path / "before")
    old = {p.name for p in lexical.iterdir()}
    with KnowledgeStore.open(path, embedder=embedder) as store:
        store.delete(["c:1", "c:2"])
    written = [p for p in lexical.iterdir() if p.name not in old and p.name.endswith(".del")]
    assert written, "the delete wrote a delete file"
    for file in written:
        shutil.copy(file, tmp_path / file.name)
    # The index as it was before the delete, plus the delete files of its commit.
    shutil.rmtree(lexical)
    shutil.copytree(tmp_path / "before", lexical)
    for file in written:
        shutil.copy(tmp_path / file.name, lexical / file.name)
    check_store(path, embedder)
    with KnowledgeStore.open(path, embedder=embedder) as store:
        assert not {"c:1", "c:2"} & {h.uid for h in store.lexical("kiwi", k=1000).hits}


def test_temp_files_of_killed_writers_are_removed_on_open_but_never_a_live_writers(
    tmp_path: Path, embedder: Embedder
) -> None:
    path = tmp_path / "store"
    with KnowledgeStore.open(path, embedder=embedder) as store:
        store.ingest_records([record(n, 0) for n in range(3)])
    planted = [
        path / "dense.hnsw.tmp99999",
        path / "lexical" / ".tmpAbC123",
        path / "lexical" / "ks-lexical.tmp99999",
    ]
    live = EmbeddedEngine(path)
    with live._writer():
        for file in planted:
            file.write_bytes(b"partial")
        with KnowledgeStore.open(path, embedder=embedder):
            assert all(file.exists() for file in planted)
    live.close()
    with KnowledgeStore.open(path, embedder=embedder):
        assert not any(file.exists() for file in planted)
    assert not leftover_files(path)


def test_writers_of_two_processes_that_both_finish_leave_no_leftovers(
    tmp_path: Path, embedder: Embedder, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 25 (item 11): after two concurrent successful ingests the next command said
    "removed leftovers of a killed writer". No writer was killed: a store opened before the
    other's commits wrote back Tantivy's stale list of managed files, so the other's
    replaced segments were never collected. Two handles on one store play the processes."""
    path = tmp_path / "store"
    with KnowledgeStore.open(path, embedder=embedder) as store:
        store.ingest_records([record(n, 0) for n in range(UIDS_HERE)])
    with (
        KnowledgeStore.open(path, embedder=embedder) as first,
        KnowledgeStore.open(path, embedder=embedder) as second,
    ):
        for variant in (1, 2, 0, 1):  # each replaces every chunk the other wrote
            writer = first if variant % 2 else second
            writer.ingest_records([record(n, variant) for n in range(UIDS_HERE)])
    caplog.clear()
    with caplog.at_level("WARNING"), KnowledgeStore.open(path, embedder=embedder) as store:
        assert store.stats().chunks == UIDS_HERE
    assert not [r.message for r in caplog.records if "leftover" in r.message]
    assert lexfiles.remove_leftovers(path / "lexical") == []  # nothing unreferenced either
