"""The embedded engine end to end: publishes, upserts, deletes, catch-up, rebuild, snapshots."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from knowledge_store.engines.base import PreparedEntity
from knowledge_store.engines.embedded.engine import EmbeddedEngine
from knowledge_store.engines.sql.publish import EMPTY_ROOT
from knowledge_store.errors import BatchRejected, ModelMismatch, NotFound
from knowledge_store.ingest.embedding import Embedder
from knowledge_store.ingest.pipeline import chunk_entity
from knowledge_store.model import Entity, Filters
from knowledge_store.store import KnowledgeStore
from tests.conftest import ESTATE

pytestmark = pytest.mark.embedded_only(
    reason="the embedded engine's own behaviour (its catalog, Tantivy, faiss)"
)


class CountingEmbedder:
    """The real model, counting the texts it is asked to embed."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.dimension = inner.dimension
        self.max_tokens = inner.max_tokens
        self.embedded = 0

    def embed(self, texts: Sequence[str], *, progress: bool = False) -> np.ndarray:
        self.embedded += len(texts)
        return self.inner.embed(texts, progress=progress)

    def embed_query(self, text: str) -> np.ndarray:
        return self.inner.embed_query(text)


def _uids(answer: object) -> list[str]:
    return [h.uid for h in answer.hits]  # type: ignore[attr-defined]


def test_empty_store_answers_at_the_empty_root(store: KnowledgeStore) -> None:
    assert store.content_root() == EMPTY_ROOT
    assert store.is_empty
    assert store.lexical("anything").hits == []
    answer = store.vector("anything")
    assert answer.hits == [] and answer.vector is not None and answer.vector.exhaustive


def test_ingest_publishes_once_and_reingest_publishes_nothing(
    tmp_path: Path, embedder: Embedder
) -> None:
    counting = CountingEmbedder(embedder)
    with KnowledgeStore.open(tmp_path / "s", embedder=counting) as store:
        first = store.ingest_records(ESTATE)
        assert (first.added, first.updated, first.unchanged) == (len(ESTATE), 0, 0)
        assert first.content_root != EMPTY_ROOT
        embedded = counting.embedded
        assert embedded > 0
        again = store.ingest_records(ESTATE)
        assert (again.added, again.updated, again.unchanged) == (0, 0, len(ESTATE))
        assert again.content_root == first.content_root
        assert counting.embedded == embedded  # nothing embedded twice
        assert not store.is_empty


def test_changed_entity_replaces_its_chunks_and_edges(estate_store: KnowledgeStore) -> None:
    before = estate_store.content_root()
    changed = dict(ESTATE[0], body="# Routine Vacuuming\n\nFreezing prevents wraparound.", edges=[])
    report = estate_store.ingest_records([changed])
    assert (report.added, report.updated) == (0, 1)
    assert report.content_root != before
    assert _uids(estate_store.lexical("wraparound")) == ["guide:vacuum"]
    assert "guide:vacuum" not in _uids(estate_store.lexical("autovacuum daemon"))
    edges = estate_store.engine.catalog.execute(  # type: ignore[attr-defined]
        "SELECT count(*) FROM edges WHERE src = 'guide:vacuum'"
    )
    assert edges[0][0] == 0


def test_content_root_is_deterministic(tmp_path: Path, embedder: Embedder) -> None:
    roots = []
    for name in ("a", "b"):
        with KnowledgeStore.open(tmp_path / name, embedder=embedder) as store:
            roots.append(store.ingest_records(ESTATE).content_root)
    assert roots[0] == roots[1]


def test_delete_removes_entity_chunks_and_outgoing_edges(estate_store: KnowledgeStore) -> None:
    assert "guide:monitoring" in _uids(estate_store.lexical("pg_stat_activity"))
    root = estate_store.delete(["guide:monitoring"]).content_root
    assert root == estate_store.content_root()
    assert estate_store.lexical("pg_stat_activity").hits == []
    assert "guide:monitoring" not in _uids(estate_store.vector("server process query", k=20))
    catalog = estate_store.engine.catalog  # type: ignore[attr-defined]
    assert catalog.execute("SELECT count(*) FROM edges WHERE src='guide:monitoring'")[0][0] == 0
    with pytest.raises(NotFound):
        estate_store.delete(["guide:monitoring"])


def test_edge_to_a_uid_not_yet_ingested_is_kept(store: KnowledgeStore) -> None:
    store.ingest_records([ESTATE[2]])  # points at guide:admin and guide:vacuum, not there yet
    catalog = store.engine.catalog  # type: ignore[attr-defined]
    rows = catalog.execute("SELECT dst FROM edges WHERE src='guide:monitoring' ORDER BY dst")
    assert [r[0] for r in rows] == ["guide:admin", "guide:vacuum"]


def test_a_bad_record_publishes_nothing_unless_skip_invalid(store: KnowledgeStore) -> None:
    bad = dict(ESTATE[1], uid="bad", edges=[{"label": "mentions", "to": "x"}])
    with pytest.raises(BatchRejected) as info:
        store.ingest_records([ESTATE[0], bad])
    assert "mentions" in info.value.message and "partOf" in info.value.message
    assert store.content_root() == EMPTY_ROOT
    report = store.ingest_records([ESTATE[0], bad], skip_invalid=True)
    assert report.added == 1 and len(report.rejected) == 1
    assert report.rejected[0].field is not None and "edges" in report.rejected[0].field


def test_filters_apply_inside_both_primitives(estate_store: KnowledgeStore) -> None:
    only_chapters = Filters.build(type=["chapter"])
    assert set(_uids(estate_store.lexical("database server", filters=only_chapters))) <= {
        "guide:admin"
    }
    assert set(_uids(estate_store.vector("database server", filters=only_chapters))) == {
        "guide:admin"
    }
    recent = Filters.build(updated_from="2024-02-10")
    got = set(_uids(estate_store.vector("database", k=50, filters=recent)))
    assert got and got <= {"guide:monitoring", "guide:vacuum"}


def test_derived_indexes_catch_up_after_a_crash_between_commits(
    estate_store: KnowledgeStore, tmp_path: Path
) -> None:
    engine = estate_store.engine
    assert isinstance(engine, EmbeddedEngine)
    entity = Entity(
        uid="late",
        type="page",
        title="Late arrival",
        body="Zygomorphic flowers appear late.",
        acl=("everyone",),
    )
    chunks = chunk_entity(entity)
    vectors = estate_store.embedder.embed([c.context_text(entity.title) for c in chunks])
    # Write the catalog only, as if the process died before updating Tantivy/HNSW.
    engine.catalog.apply_publish([PreparedEntity(entity, chunks, vectors)], [], kind="ingest")
    path = engine.path
    estate_store.close()
    with KnowledgeStore.open(path, embedder=estate_store.embedder) as reopened:
        assert _uids(reopened.lexical("zygomorphic")) == ["late"]
        assert _uids(reopened.vector("Zygomorphic flowers appear late.", k=1)) == ["late"]


def test_a_running_reader_sees_another_process_publish(
    estate_store: KnowledgeStore, embedder: Embedder
) -> None:
    engine = estate_store.engine
    assert isinstance(engine, EmbeddedEngine)
    with KnowledgeStore.open(engine.path, embedder=embedder) as other:
        assert other.lexical("quokka").hits == []
        estate_store.ingest_records(
            [
                {
                    "uid": "q",
                    "type": "page",
                    "title": "Quokka",
                    "body": "A quokka smiles.",
                    "acl": ["everyone"],
                }
            ]
        )
        assert _uids(other.lexical("quokka")) == ["q"]
        assert "q" in _uids(other.vector("A quokka smiles.", k=3))
        assert other.content_root() == estate_store.content_root()


def test_rebuild_restores_a_lost_lexical_index(estate_store: KnowledgeStore) -> None:
    engine = estate_store.engine
    assert isinstance(engine, EmbeddedEngine)
    expected = _uids(estate_store.lexical("vacuum"))
    estate_store.rebuild()
    assert _uids(estate_store.lexical("vacuum")) == expected
    path = engine.path
    estate_store.close()
    shutil.rmtree(path / "lexical")
    (path / "dense.hnsw").unlink(missing_ok=True)
    with KnowledgeStore.open(path, embedder=estate_store.embedder) as reopened:
        assert _uids(reopened.lexical("vacuum")) == expected
        assert reopened.vector("vacuum dead tuples", k=1).hits[0].uid == "guide:vacuum"


def test_model_mismatch_is_refused(estate_store: KnowledgeStore) -> None:
    with pytest.raises(ModelMismatch) as info:
        estate_store.engine.writer.set_model("openai:text-embedding-3-small", 1536, "openai:x")
    assert estate_store.embedder.model_id in info.value.message  # names the store's model
    with pytest.raises(ModelMismatch):
        estate_store.vector(np.ones(12, dtype=np.float32))


def test_a_writer_never_blocks_a_reader(estate_store: KnowledgeStore) -> None:
    engine = estate_store.engine
    assert isinstance(engine, EmbeddedEngine)
    root = estate_store.content_root()
    holding = threading.Event()
    release = threading.Event()

    def writer() -> None:
        with engine.catalog.write() as conn:
            conn.execute("UPDATE meta SET value = value WHERE key = 'model'")
            holding.set()
            release.wait(10)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert holding.wait(10)
        started = time.monotonic()
        with KnowledgeStore.open(engine.path, embedder=estate_store.embedder) as reader:
            assert reader.lexical("vacuum").content_root == root
        assert time.monotonic() - started < 5
    finally:
        release.set()
        thread.join()


def test_evidence_offsets_point_into_the_body(estate_store: KnowledgeStore) -> None:
    answer = estate_store.search("autovacuum daemon", k=3)
    top = answer.results[0]
    assert top.uid == "guide:vacuum"
    body = ESTATE[0]["body"]
    for ev in top.evidence:
        assert body[ev.start : ev.end] == ev.text
    assert top.ranks["lexical"] is not None and top.ranks["vector"] is not None
