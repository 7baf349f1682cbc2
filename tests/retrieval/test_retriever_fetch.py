"""Chunk retrievers answer k *entities*: they over-fetch chunks before folding (regression)."""

from __future__ import annotations

import pytest

from knowledge_store.model import Filters
from knowledge_store.retrieval import retrievers
from knowledge_store.retrieval.retrievers import LexicalRetriever, Request, VectorRetriever
from knowledge_store.store import KnowledgeStore

_SECTIONS = "\n\n".join(
    f"## Vacuum step {i}\n\n" + " ".join(["Vacuum reclaims dead tuples and frees space."] * 15)
    for i in range(3)
)
RECORDS = [
    {"uid": "doc:long", "type": "page", "title": "Vacuum", "body": _SECTIONS, "acl": ["everyone"]},
    {
        "uid": "doc:short",
        "type": "page",
        "title": "Autovacuum",
        "body": "Autovacuum runs vacuum for you when dead tuples pile up.",
        "acl": ["everyone"],
    },
    {
        "uid": "doc:other",
        "type": "page",
        "title": "Indexes",
        "body": "A B-tree index speeds up lookups by key.",
        "acl": ["everyone"],
    },
]


def test_k_entities_come_back_even_when_one_entity_owns_the_top_chunks(
    store: KnowledgeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(retrievers, "CHUNKS_PER_ENTITY", 4)
    store.ingest_records(RECORDS)
    assert store.stats().chunks >= 5  # the long page alone has more chunks than k
    request = Request("vacuum dead tuples", Filters(), k=2)
    for retriever in (LexicalRetriever(), VectorRetriever()):
        with store.reader() as reader:
            ranking = retriever.run(reader, request)
        uids = [uid for uid, _ in ranking.entity_list().items]
        # Asking the engine for k=2 chunks gave two chunks of doc:long: one entity.
        assert len(uids) == 2 and uids[0] == "doc:long", retriever.name
        assert len(ranking.candidates) <= 2 * 4
