"""A reader pins the derived indexes at its snapshot without the write lock; catching up is the
writer's job (DESIGN §4): an index no writer will bring to the reader's publish says so, the
catalog answers the rest, and the next writer catches it up."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from knowledge_store.engines.base import PreparedEntity
from knowledge_store.engines.embedded.engine import EmbeddedEngine
from knowledge_store.errors import StoreError
from knowledge_store.ingest.embedding import Embedder
from knowledge_store.ingest.pipeline import chunk_entity
from knowledge_store.model import Entity
from knowledge_store.store import KnowledgeStore
from tests.conftest import ESTATE

pytestmark = pytest.mark.embedded_only(reason="the embedded engine's derived indexes and lock")


def _late(store: KnowledgeStore) -> PreparedEntity:
    entity = Entity(
        uid="late",
        type="page",
        title="Late arrival",
        body="Zygomorphic flowers appear late.",
        acl=("everyone",),
    )
    chunks = chunk_entity(entity)
    vectors = store.embedder.embed([c.context_text(entity.title) for c in chunks])
    return PreparedEntity(entity, chunks, vectors)


def test_a_reader_never_takes_the_write_lock(tmp_path: Path, embedder: Embedder) -> None:
    with KnowledgeStore.open(tmp_path / "s", embedder=embedder) as store:
        store.ingest_records(ESTATE)
        engine = store.engine
        assert isinstance(engine, EmbeddedEngine)
        held, release = threading.Event(), threading.Event()

        def writer() -> None:
            with engine.write_lock():
                held.set()
                release.wait(60)

        thread = threading.Thread(target=writer)
        thread.start()
        try:
            assert held.wait(60)
            # the lock is held by another thread for as long as these take: none waits for it
            assert store.lexical("vacuum").hits and store.vector("vacuum").hits
            assert store.search("autovacuum daemon").results
        finally:
            release.set()
            thread.join(60)


def test_an_index_no_writer_brings_to_the_snapshot_says_so_and_the_next_writer_catches_up(
    tmp_path: Path, embedder: Embedder
) -> None:
    with KnowledgeStore.open(tmp_path / "s", embedder=embedder) as store:
        store.ingest_records(ESTATE)
        engine = store.engine
        assert isinstance(engine, EmbeddedEngine)
        before = engine.lexical_index.watermark
        # a publish in the catalog alone, as if its writer died before updating the indexes
        engine.catalog.apply_publish([_late(store)], [], kind="ingest")
        with pytest.raises(StoreError, match="lexical index is behind publish") as behind:
            store.lexical("zygomorphic")
        assert "the next write catches them up" in behind.value.message
        assert engine.lexical_index.watermark == before  # the reader caught nothing up
        assert [h.uid for h in store.sql({"uid": ["late"]}).hits] == ["late"]  # catalog answers
        assert store.vector("Zygomorphic flowers appear late.", k=1).hits[0].uid == "late"
        store.ingest_records([{**ESTATE[0], "title": "Routine Vacuuming, again"}])  # a writer
        assert [h.uid for h in store.lexical("zygomorphic").hits] == ["late"]
