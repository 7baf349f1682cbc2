"""The hits of ``lexical`` and ``vector`` are assigned from the catalog's checked data, not
validated again (``Answer.of_checked``): each must be exactly what validation makes of it —
the same values of the same types — on every engine, or its JSON would drift.
"""

from __future__ import annotations

import numpy as np
import pytest

from knowledge_store.model import ChunkHit, ChunkHits, Filters
from knowledge_store.store import KnowledgeStore

BODY = (
    "# Vacuum\n\nkiwi vacuum reclaims space held by dead rows.\n\n"
    "## Autovacuum\n\nkiwi the autovacuum daemon runs vacuum for you.\n\n"
    "### Tuning\n\nkiwi cost limits pace the daemon."
)


def _validated(answer: ChunkHits) -> ChunkHits:
    """The answer as validation makes it from its own field values."""
    return ChunkHits.model_validate(
        {
            **{name: getattr(answer, name) for name in ChunkHits.model_fields},
            "hits": [dict(hit.__dict__) for hit in answer.hits],
        }
    )


@pytest.fixture
def pages(store: KnowledgeStore) -> KnowledgeStore:
    store.ingest_records(
        [
            {"uid": "v:1", "type": "page", "title": "Vacuum", "body": BODY, "acl": ["everyone"]},
            {
                "uid": "v:2",
                "type": "guide",
                "title": "Routine upkeep",
                "body": "kiwi routine vacuum keeps tables lean.",
                "href": "https://example.org/upkeep",
                "acl": ["everyone"],
            },
        ]
    )
    return store


def test_checked_hits_are_what_validation_makes_of_them(pages: KnowledgeStore) -> None:
    dimension = pages.stats().dimension
    assert dimension
    answers = [
        pages.lexical("kiwi vacuum daemon", k=10),
        pages.vector("kiwi vacuum daemon", k=10),
        pages.vector(np.ones(dimension, np.float32), k=10),
        pages.lexical("kiwi vacuum", k=10, explain=True),
        pages.vector("kiwi vacuum", k=10, explain=True),
    ]
    for answer in answers:
        assert len(answer.hits) >= 3
        again = _validated(answer)
        assert again == answer
        assert again.model_dump_json() == answer.model_dump_json()
        for hit, checked in zip(answer.hits, again.hits, strict=True):
            assert hit.model_fields_set == checked.model_fields_set == set(ChunkHit.model_fields)
            for name in ChunkHit.model_fields:
                assert type(getattr(hit, name)) is type(getattr(checked, name)), name
        assert [h.rank for h in answer.hits] == list(range(1, len(answer.hits) + 1))
    assert any(h.href == "https://example.org/upkeep" for h in answers[0].hits)
    assert any(len(h.heading) > 1 for h in answers[0].hits)


def test_a_checked_hit_is_frozen_like_a_validated_one(pages: KnowledgeStore) -> None:
    hit = pages.lexical("kiwi vacuum", k=1).hits[0]
    with pytest.raises(ValueError, match="frozen"):
        hit.score = 0.0  # type: ignore[misc]


def test_an_answer_without_hits_keeps_its_warning(pages: KnowledgeStore) -> None:
    answer = pages.lexical("the and of", k=5)
    assert not answer.hits and answer.warnings
    assert _validated(answer) == answer
    assert answer.to_dict()["warnings"] == list(answer.warnings)


def test_a_note_added_to_a_checked_answer_is_in_its_copy_only(pages: KnowledgeStore) -> None:
    """A type no readable entity has gets a note: the answer is copied with it (the copy's
    fields set grows; the answer it was copied from is left as it was)."""
    answer = pages.vector("kiwi vacuum", k=5, filters={"type": ["pagee"]})
    assert not answer.hits and any("pagee" in w for w in answer.warnings)
    assert "warnings" in answer.model_fields_set
    assert _validated(answer) == answer


def test_hits_are_ranked_from_one_in_the_order_given_leaving_out_gone_chunks(
    pages: KnowledgeStore,
) -> None:
    """``Reader.chunk_hits`` (what a primitive's answer is made of): the hits of ranked
    chunk ids in that order, ranked 1…, each with its own score; an id whose chunk is not
    in the snapshot has no hit and is not counted in the ranks."""
    with pages.reader() as r:
        ranked = r.engine.lexical("kiwi vacuum", 10, Filters())
        assert len(ranked.ids) >= 3
        first, second, third = ranked.ids[:3]
        gone = max(ranked.ids) + 10_000
        ids, hits = r.engine.chunk_hits([third, gone, first, second], [0.9, 0.8, 0.7, 0.6])
        records = r.engine.chunks([first, second, third])
    assert ids == [third, first, second]
    assert [h.rank for h in hits] == [1, 2, 3]
    assert [h.score for h in hits] == [0.9, 0.7, 0.6]
    for chunk_id, hit in zip(ids, hits, strict=True):
        record = records[chunk_id]
        assert (hit.uid, hit.chunk_id, hit.title, hit.text, hit.heading, hit.href) == (
            record.uid,
            record.public_id,
            record.title,
            record.text,
            record.heading,
            record.href,
        )
        assert (hit.type, hit.start, hit.end) == (record.type, record.start, record.end)
        assert ChunkHit.model_validate(dict(hit.__dict__)) == hit
