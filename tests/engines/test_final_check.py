"""The embedded reader's final check: ranked ids are probed against the caller's visibility.

It probes the selection of visible chunk ids the engine holds for the snapshot, the
held principals and the FILTERS (what the vector pre-filter reads) when it is there,
and the catalog otherwise: the same answer either way, and a hit the caller may not
read never survives it, whatever the derived index said.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from knowledge_store.engines.embedded.engine import EmbeddedEngine
from knowledge_store.ingest.embedding import Embedder
from knowledge_store.model import Filters, Identity
from knowledge_store.store import KnowledgeStore
from tests import graph_estate

pytestmark = pytest.mark.embedded_only(reason="the final check is the embedded reader's own")

QUERIES = ["overview", "storage", "private notes", "module", "page about"]
WHO = ["everyone", "user:alice", "user:bob", "user:nobody"]
FILTERS = [Filters(), Filters.build(type=("page",)), Filters.build(not_type=("module",))]


@pytest.fixture(scope="module")
def estate(tmp_path_factory: pytest.TempPathFactory, embedder: Embedder) -> Iterator[Any]:
    store = graph_estate.build(tmp_path_factory.mktemp("final-check") / "store", embedder)
    yield store
    store.close()


def _engine(store: KnowledgeStore) -> EmbeddedEngine:
    engine = store.engine
    assert isinstance(engine, EmbeddedEngine)
    return engine


def _lexical(store: KnowledgeStore, who: str, text: str, filters: Filters) -> Any:
    with _engine(store).reader(Identity(who)) as r:
        ranked = r.lexical(text, 20, filters)
        return ranked, dict(ranked.details)


def test_the_visible_set_and_the_catalog_agree(estate: KnowledgeStore) -> None:
    engine = _engine(estate)
    for who in WHO:
        for filters in FILTERS:
            engine.views.reset()  # no selection held: the catalog decides
            by_catalog = [_lexical(estate, who, text, filters) for text in QUERIES]
            with engine.reader(Identity(who)) as r:  # the vector pre-filter makes the selection
                r.vector(np.ones(engine.dense.dimension, np.float32), 5, filters)  # type: ignore[union-attr]
            by_set = [_lexical(estate, who, text, filters) for text in QUERIES]
            for (old, old_details), (new, new_details) in zip(by_catalog, by_set, strict=True):
                assert old_details["final_check"] == "catalog"
                assert new_details["final_check"] == "visible set"
                assert (old.ids, old.uids, old.scores) == (new.ids, new.uids, new.scores)


@pytest.mark.parametrize("held_selection", [False, True])
def test_a_hit_the_caller_may_not_read_never_survives(
    estate: KnowledgeStore, monkeypatch: pytest.MonkeyPatch, held_selection: bool
) -> None:
    """The derived index answers a chunk of an entity only user:alice may read (as a stale
    or broken index would): both ways of the final check drop it for everyone."""
    engine = _engine(estate)
    with engine.catalog.read() as conn:
        hidden = [
            (int(cid), uid)
            for cid, uid in conn.execute(
                "SELECT c.id, e.uid FROM chunks AS c JOIN entities AS e ON e.id = c.entity"
            )
            if uid in graph_estate.UNREADABLE_BY_EVERYONE
        ]
    assert hidden
    index = engine.lexical_index
    honest = index.search_ids

    def leaky(text: str, k: int, **kwargs: Any) -> list[tuple[int, float]]:
        return [(cid, 99.0) for cid, _ in hidden] + honest(text, k, **kwargs)

    engine.views.reset()
    if held_selection:
        with engine.reader(Identity("everyone")) as r:
            r.vector(np.ones(engine.dense.dimension, np.float32), 5, Filters())  # type: ignore[union-attr]
    monkeypatch.setattr(index, "search_ids", leaky)
    ranked, details = _lexical(estate, "everyone", "overview", Filters())
    assert details["final_check"] == ("visible set" if held_selection else "catalog")
    assert ranked.ids and not set(ranked.uids) & graph_estate.UNREADABLE_BY_EVERYONE
    assert details["dropped_by_final_check"] >= len(hidden)


def test_a_vector_hit_outside_the_selection_never_survives(
    estate: KnowledgeStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The dense index answers chunks outside the caller's selection (as a broken index
    would): the final check against that selection drops them."""
    engine = _engine(estate)
    with engine.catalog.read() as conn:
        rows = conn.execute(
            "SELECT c.id, e.uid FROM chunks AS c JOIN entities AS e ON e.id = c.entity"
        ).fetchall()
    hidden = [int(cid) for cid, uid in rows if uid in graph_estate.UNREADABLE_BY_EVERYONE]
    dense = engine.dense
    assert dense is not None and hidden
    honest = dense.generation().search

    def leaky(query: np.ndarray, k: int, *, allowed: np.ndarray | None) -> Any:
        ids, scores, info = honest(query, k, allowed=allowed)
        extra = np.asarray(hidden, dtype=np.int64)
        return np.concatenate([extra, ids]), np.concatenate([np.ones(len(extra)), scores]), info

    engine.views.reset()
    with engine.reader(Identity("everyone")) as r:
        monkeypatch.setattr(r._dense, "search", leaky)  # type: ignore[attr-defined]
        ranked = r.vector(np.ones(dense.dimension, np.float32), 10, Filters())
    assert ranked.ids and not set(ranked.uids) & graph_estate.UNREADABLE_BY_EVERYONE
    assert ranked.details["dropped_by_final_check"] >= len(hidden)


def test_lexical_drops_the_acl_and_filter_clauses_only_when_the_snapshot_hides_nothing(
    tmp_path: Path, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing hidden from the reader (and nothing filtered out): BM25 runs alone, with the
    same ranking as with the clauses. One entity hidden, or one filtered out: the clauses
    are back, and the hidden entity is never a hit."""
    pages = [
        {"uid": f"p{i}", "type": "page", "title": f"Vacuum {i}", "body": "vacuum " * (i + 1)}
        for i in range(6)
    ]
    with KnowledgeStore.open(tmp_path / "s", embedder=embedder) as store:
        store.ingest_records(pages, acl=["everyone"])
        engine = _engine(store)

        def ranked(who: str, filters: Filters) -> tuple[list[str], str]:
            with engine.reader(Identity(who)) as r:
                got = r.lexical("vacuum", 10, filters)
                return got.uids, str(got.details["acl_clause"])

        open_uids, clause = ranked("everyone", Filters())
        assert clause == "none" and len(open_uids) == 6
        assert ranked("everyone", Filters.build(type=("page",))) == (open_uids, "none")
        monkeypatch.setattr(engine.views, "hides_any", lambda reader, filters: True)
        assert ranked("everyone", Filters()) == (open_uids, "query")
        monkeypatch.undo()

        assert ranked("everyone", Filters.build(not_type=("page",))) == ([], "query")
        store.ingest_records(
            [{"uid": "secret", "type": "note", "title": "Vacuum", "body": "vacuum vacuum"}],
            acl=["user:alice"],
        )
        uids, clause = ranked("everyone", Filters())
        assert clause == "query" and "secret" not in uids and len(uids) == 6
        assert "secret" in ranked("user:alice", Filters())[0]
        assert ranked("everyone", Filters.build(type=("page",)))[1] == "query"


@pytest.mark.parametrize("k", [1, 3, 20])
def test_post_filtering_the_plain_ranking_equals_the_filtered_query(
    estate: KnowledgeStore, monkeypatch: pytest.MonkeyPatch, k: int
) -> None:
    """Whoever asks, whatever the FILTERS: the plain BM25 ranking over-fetched and cut by the
    visible selection is the ranking of the query that holds the ACL and FILTERS clauses —
    or, when the fetch cannot tell (too few passed, a tie at its end), that query runs."""
    from knowledge_store.engines.embedded import reader as embedded_reader

    engine = _engine(estate)
    ways: set[str] = set()
    for who in WHO:
        for filters in FILTERS:
            with engine.reader(Identity(who)) as r:  # the selection, made by the vector pre-filter
                r.vector(np.ones(engine.dense.dimension, np.float32), 5, filters)  # type: ignore[union-attr]
            for text in QUERIES:
                answers = []
                for share, margin in ((2.0, 1.5), (0.0, 1.5), (0.0, 0.01)):
                    monkeypatch.setattr(embedded_reader, "_POST_FILTER_SHARE", share)
                    monkeypatch.setattr(embedded_reader, "_POST_FILTER_MARGIN", margin)
                    with engine.reader(Identity(who)) as r:
                        got = r.lexical(text, k, filters)
                    answers.append((got.ids, got.uids, got.scores))
                    ways.add(str(got.details["acl_clause"]))
                assert answers[1] == answers[0] and answers[2] == answers[0], (who, filters, text)
    assert {"query", "post-filter"} <= ways
