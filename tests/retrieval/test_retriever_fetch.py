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


def test_a_lexical_list_holding_every_match_has_floor_zero(store: KnowledgeStore) -> None:
    """Fewer matches than asked: every entity outside the list scored 0, and fusion knows it."""
    store.ingest_records(RECORDS)
    retriever = LexicalRetriever()
    with store.reader() as reader:
        few = retriever.run(reader, Request("autovacuum", Filters(), k=10))
        cut = retriever.run(reader, Request("vacuum", Filters(), k=1))
    assert [uid for uid, _ in few.entity_list().items] == ["doc:short"]
    assert few.floor == 0.0 and few.entity_list().floor == 0.0
    assert few.details["every_match"] is True
    # More matching chunks than asked: the rest score somewhere below the last; no floor.
    assert cut.floor is None and cut.entity_list().floor is None
    assert cut.details["every_match"] is False


def test_no_floor_when_entities_were_cut(
    store: KnowledgeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fewer chunks than asked, but ``k`` entities reached: an entity was left out; no floor."""
    monkeypatch.setattr(retrievers, "CHUNKS_PER_ENTITY", 4)
    store.ingest_records(RECORDS)
    with store.reader() as reader:
        ranking = LexicalRetriever().run(reader, Request("vacuum", Filters(), k=1))
    assert len({c.uid for c in ranking.candidates}) == 1
    assert ranking.floor is None
