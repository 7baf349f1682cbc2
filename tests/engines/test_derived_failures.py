"""A derived index that fails never blocks the catalog (issue 11, item 1), embedded engine;
nor one whose files are damaged (issue 25, item 9).

Whatever the catalog holds, the store opens; sql, aggregate, graph, query_graph,
content and stats answer from the catalog while the lexical or dense index is
behind; the primitives that need the failed index say so and name ``ks rebuild``;
and ``rebuild`` recovers from any data the catalog holds — including what older
versions wrote (unpadded years, vectors the dense index can't take).
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from knowledge_store.engines.embedded.engine import EmbeddedEngine
from knowledge_store.engines.embedded.lexical import LexicalIndex
from knowledge_store.engines.embedded.writelock import WriteLock
from knowledge_store.errors import StoreError
from knowledge_store.ingest.embedding import Embedder
from knowledge_store.model import Filters
from knowledge_store.store import KnowledgeStore


def _records(prefix: str, n: int, **extra: Any) -> list[dict[str, Any]]:
    return [
        {
            "uid": f"{prefix}:{i}",
            "type": "page",
            "title": f"Page {i}",
            "body": f"kiwi page {i}",
            "acl": ["everyone"],
            "edges": [{"label": "xref", "to": f"{prefix}:{(i + 1) % n}"}],
            **extra,
        }
        for i in range(n)
    ]


def _catalog_reads_answer(store: KnowledgeStore, entities: int) -> None:
    assert len(store.sql(k=100).hits) == entities
    assert [(r.key, r.value) for r in store.aggregate("count").rows] == [(None, entities)]
    assert store.graph(["p:0"]).hits
    assert store.query_graph("MATCH (n) RETURN count(*)").rows == [[entities]]
    assert store.content("p:0").entity.uid == "p:0"
    assert store.stats().entities == entities


def test_a_lexical_index_that_fails_blocks_neither_publishes_nor_catalog_reads(
    tmp_path: Path, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "store"
    with KnowledgeStore.open(path, embedder=embedder) as store:
        store.ingest_records(_records("p", 3))

    def broken(self: LexicalIndex, docs: Any) -> None:
        raise StoreError("lexical index: adding documents failed: the disk said no")

    monkeypatch.setattr(LexicalIndex, "add", broken)
    with KnowledgeStore.open(path, embedder=embedder) as store:
        store.ingest_records(_records("p", 4))  # the catalog commits; the index can't follow
        assert store.stats().extra["indexes"]["error"]
    with KnowledgeStore.open(path, embedder=embedder) as store:  # opens, though it can't catch up
        _catalog_reads_answer(store, 4)
        with pytest.raises(StoreError, match="ks rebuild"):
            store.lexical("kiwi")
        store.delete(["p:3"])  # a writer still works: the catalog is the truth
        _catalog_reads_answer(store, 3)
    monkeypatch.undo()
    with KnowledgeStore.open(path, embedder=embedder) as store:
        store.rebuild()
        assert {h.uid for h in store.lexical("kiwi", k=10).hits} == {"p:0", "p:1", "p:2"}
        assert store.stats().extra["indexes"]["error"] is None


def test_dates_older_versions_wrote_unpadded_are_repaired_and_indexed(
    tmp_path: Path, embedder: Embedder
) -> None:
    """An older version stored year 1 as ``1-01-01T00:00:00Z``: the lexical index could not
    read it back, and every open failed."""
    path = tmp_path / "store"
    with KnowledgeStore.open(path, embedder=embedder) as store:
        store.ingest_records(_records("p", 3, created_at="2024-01-01"))
    with sqlite3.connect(path / "catalog.sqlite") as conn:  # what the old version wrote
        conn.execute("UPDATE entities SET created_at = '1-01-01T00:00:00Z' WHERE uid = 'p:0'")
        conn.execute("UPDATE entities SET created_at = '500-06-01T00:00:00Z' WHERE uid = 'p:1'")
        conn.execute("DELETE FROM meta WHERE key = 'timestamps_four_digit'")
    for name in ("ks-lexical.json",):  # and its lexical index never caught up
        (path / "lexical" / name).write_text('{"watermark": 0, "schema": 2}')
    with KnowledgeStore.open(path, embedder=embedder) as store:
        dates = {h.uid: h.created_at for h in store.sql(k=10).hits}
        assert dates == {
            "p:0": "0001-01-01T00:00:00Z",
            "p:1": "0500-06-01T00:00:00Z",
            "p:2": "2024-01-01T00:00:00Z",
        }
        old = Filters.build(created_to="0500-06-01")
        assert {h.uid for h in store.sql(old).hits} == {"p:0", "p:1"}
        assert {h.uid for h in store.lexical("kiwi", filters=old).hits} == {"p:0", "p:1"}
        store.rebuild()
        assert {h.uid for h in store.lexical("kiwi", filters=old).hits} == {"p:0", "p:1"}


def test_rebuild_leaves_out_vectors_the_dense_index_cannot_take(
    tmp_path: Path, embedder: Embedder
) -> None:
    path = tmp_path / "store"
    with KnowledgeStore.open(path, embedder=embedder) as store:
        store.ingest_records(_records("p", 4))
    nan = np.full(384, np.nan, np.float32).tobytes()
    with sqlite3.connect(path / "catalog.sqlite") as conn:  # damage no publish can write now
        ids = [r[0] for r in conn.execute("SELECT id FROM chunks ORDER BY id")]
        conn.execute("UPDATE chunk_vectors SET embedding = ? WHERE id = ?", (nan, ids[0]))
        conn.execute("UPDATE chunk_vectors SET embedding = ? WHERE id = ?", (b"\x00" * 12, ids[1]))
        conn.execute("DELETE FROM chunk_vectors WHERE id = ?", (ids[2],))
    with KnowledgeStore.open(path, embedder=embedder) as store:
        store.rebuild()
        engine = store.engine
        assert isinstance(engine, EmbeddedEngine) and engine.dense is not None
        assert len(engine.dense) == 1
        assert len(store.vector("kiwi page", k=10).hits) == 1
        assert len(store.lexical("kiwi", k=10).hits) == 4  # the lexical index has them all


def test_rebuild_recreates_a_lexical_index_that_cannot_even_be_cleared(
    tmp_path: Path, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "store"
    with KnowledgeStore.open(path, embedder=embedder) as store:
        store.ingest_records(_records("p", 3))

    def broken(self: LexicalIndex) -> None:
        raise StoreError("lexical index: clearing failed: FileAlreadyExists")

    monkeypatch.setattr(LexicalIndex, "clear", broken)
    with KnowledgeStore.open(path, embedder=embedder) as store:
        store.rebuild()
        assert {h.uid for h in store.lexical("kiwi", k=10).hits} == {"p:0", "p:1", "p:2"}


def test_an_emptied_lexical_index_is_rebuilt_a_batch_at_a_time(
    tmp_path: Path, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lexical index of another schema is recreated empty on open; catching it up used to
    replay every publish's ops in one list (a million chunks' documents at once). It is now
    the batched rebuild: the same answers, never more than a batch of documents in hand."""
    import knowledge_store.engines.embedded.derived as derived_module

    path = tmp_path / "store"
    with KnowledgeStore.open(path, embedder=embedder) as store:
        store.ingest_records(_records("p", 5))
        store.ingest_records(_records("q", 4))
        store.delete(["p:4"])
        before = [(h.uid, h.chunk_id) for h in store.lexical("kiwi page", k=20).hits]
    assert len(before) == 8
    sidecar = path / "lexical" / "ks-lexical.json"
    sidecar.write_text(sidecar.read_text().replace('"schema": "', '"schema": "0-'))
    monkeypatch.setattr(derived_module, "REBUILD_BATCH", 3)
    batches: list[int] = []
    add = LexicalIndex.add

    def counted(self: LexicalIndex, docs: Any) -> None:
        docs = list(docs)
        batches.append(len(docs))
        add(self, docs)

    monkeypatch.setattr(LexicalIndex, "add", counted)
    with KnowledgeStore.open(path, embedder=embedder) as store:
        assert [(h.uid, h.chunk_id) for h in store.lexical("kiwi page", k=20).hits] == before
    assert batches == [3, 3, 2]


# -- damaged index files (issue 25, item 9) -------------------------------------------------------
def _flip(path: Path, *, keep_time: bool = False) -> None:
    """Invert 50 bytes of ``path`` in place (``keep_time``: as bit rot does, leaving its
    size and modification time as they were)."""
    before = path.stat()
    data = bytearray(path.read_bytes())
    rng = random.Random(3)
    for _ in range(50):
        data[rng.randrange(len(data))] ^= 0xFF
    with path.open("r+b") as fh:  # the same file, as a disk would change it
        fh.write(bytes(data))
    if keep_time:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def _term_file(path: Path) -> Path:
    return max((path / "lexical").glob("*.term"), key=lambda p: p.stat().st_size)


def _quarantined(path: Path, name: str) -> list[Path]:
    return sorted(p for p in path.glob(f"{name}.damaged-*") if p.suffix != ".json")


def _catalog_reads_answer_as(store: KnowledgeStore, entities: int) -> None:
    _catalog_reads_answer(store, entities)
    assert len(store.vector("kiwi page", k=10).hits) == min(entities, 10)


def test_a_damaged_lexical_index_is_never_read_and_is_rebuilt_by_the_next_lock_holder(
    tmp_path: Path, embedder: Embedder
) -> None:
    """Before: a flipped ``.term`` byte made every command fail with a Rust panic."""
    path = tmp_path / "store"
    with KnowledgeStore.open(path, embedder=embedder) as store:
        store.ingest_records(_records("p", 5))
    _flip(_term_file(path))
    with WriteLock(path).hold():  # another process writes: this one can't repair
        with KnowledgeStore.open(path, embedder=embedder) as store:
            _catalog_reads_answer_as(store, 5)
            for call in (lambda: store.lexical("kiwi"), lambda: store.search("kiwi")):
                with pytest.raises(StoreError, match="is damaged") as raised:
                    call()
                message = raised.value.message
                assert ".term: " in message and "`ks rebuild`" in message
                assert "sql, aggregate, graph, query_graph, content and vector" in message
                assert raised.value.details["damaged"] and raised.value.details["index"]
            assert "is damaged" in store.stats().extra["indexes"]["error"]
        assert not _quarantined(path, "lexical")
    with KnowledgeStore.open(path, embedder=embedder) as store:  # nobody writes: repaired
        assert {h.uid for h in store.lexical("kiwi", k=10).hits} == {f"p:{i}" for i in range(5)}
        report = store.check()
        (moved,) = _quarantined(path, "lexical")
        assert json.loads((moved / "ks-damage.json").read_text())["reason"].startswith(
            "the lexical index is damaged ("
        )
        assert [(f.kind, f.repaired) for f in report.damage] == [("lexical_files", True)]
        assert str(moved) in report.damage[0].details[0]
    with KnowledgeStore.open(path, embedder=embedder) as store:
        report = store.check()
        assert report.ok and any(str(moved) in note for note in report.notes)
        assert store.stats().extra["indexes"]["quarantined"][0]["path"] == str(moved)


def test_damage_that_appears_while_a_store_is_open_is_named_not_panicked(
    tmp_path: Path, embedder: Embedder
) -> None:
    """Bit rot under a running process: Tantivy reads garbage and panics (a BaseException
    that ``except Exception`` lets through); the engine says what is damaged, and the next
    write repairs it."""
    path = tmp_path / "store"
    with KnowledgeStore.open(path, embedder=embedder) as store:
        store.ingest_records(_records("p", 5))
        assert len(store.lexical("kiwi", k=10).hits) == 5
        _flip(_term_file(path), keep_time=True)
        with pytest.raises(StoreError, match="is damaged"):
            for _ in range(3):  # whichever read of the garbage fails first
                store.lexical("kiwi banana page", k=10)
                store.search("kiwi", k=10)
        with pytest.raises(StoreError, match="is damaged"):
            store.lexical("kiwi")  # and it stays unread
        _catalog_reads_answer_as(store, 5)
        store.ingest_records(_records("p", 6))  # the write repairs it, from the catalog
        assert len(store.lexical("kiwi", k=10).hits) == 6
        assert store.stats().extra["indexes"]["error"] is None
    assert len(_quarantined(path, "lexical")) == 1


def test_rebuild_works_when_it_is_what_finds_the_damage(tmp_path: Path, embedder: Embedder) -> None:
    path = tmp_path / "store"
    with KnowledgeStore.open(path, embedder=embedder) as store:
        store.ingest_records(_records("p", 5))
        _flip(_term_file(path), keep_time=True)
        store.rebuild()  # checks the files first: the damaged ones are kept, moved aside
        assert len(store.lexical("kiwi", k=10).hits) == 5
        assert [(f.kind, f.repaired) for f in store.check().damage] == [("lexical_files", True)]
    assert len(_quarantined(path, "lexical")) == 1
    with KnowledgeStore.open(path, embedder=embedder) as store:
        assert store.check().ok


def test_a_damaged_dense_file_is_never_read_and_is_rebuilt_from_the_catalogs_vectors(
    tmp_path: Path, embedder: Embedder
) -> None:
    path = tmp_path / "store"
    with KnowledgeStore.open(path, embedder=embedder) as store:
        store.ingest_records(_records("p", 5))
        want = [(h.uid, round(h.score, 5)) for h in store.vector("kiwi page 3", k=5).hits]
    _flip(path / "dense.hnsw")
    with WriteLock(path).hold():  # readers catch up in memory from the catalog
        with KnowledgeStore.open(path, embedder=embedder) as store:
            got = [(h.uid, round(h.score, 5)) for h in store.vector("kiwi page 3", k=5).hits]
            assert got == want
            assert "dense index is damaged" in store.stats().extra["indexes"]["error"]
        assert not _quarantined(path, "dense.hnsw")
    with KnowledgeStore.open(path, embedder=embedder) as store:
        assert [(h.uid, round(h.score, 5)) for h in store.vector("kiwi page 3", k=5).hits] == want
        report = store.check()
        assert [(f.kind, f.repaired) for f in report.damage] == [("dense_file", True)]
    (moved,) = _quarantined(path, "dense.hnsw")
    assert moved.is_file() and Path(f"{moved}.json").is_file()
