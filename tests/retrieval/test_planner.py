"""The fused planner on a fixture estate: ranks in every list, FILTERS in every list, the
graph stage, supersededBy, the retriever plug-in interface, and bad input."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from knowledge_store.errors import BoundExceeded, InvalidRequest, UnknownField
from knowledge_store.model import LIST_NAMES, Filters, Order, SearchAnswer
from knowledge_store.retrieval.fusion import RankedList
from knowledge_store.retrieval.reader import StoreReader
from knowledge_store.retrieval.retrievers import (
    BUILT_IN,
    Candidate,
    Granularity,
    Ranking,
    Request,
    Retriever,
    Stage,
    register_retriever,
    unregister_retriever,
)
from knowledge_store.retrieval.search import Fusion, fuse_stages, supersede
from knowledge_store.store import KnowledgeStore
from tests.fields_estate import fields_store, visible_records

__all__ = ["fields_store"]


def _uids(answer: SearchAnswer) -> list[str]:
    return [r.uid for r in answer.results]


def _result(answer: SearchAnswer, uid: str) -> Any:
    return next(r for r in answer.results if r.uid == uid)


# -- the shape of an answer ----------------------------------------------------------------------
def test_every_result_has_a_rank_in_every_list(fields_store: KnowledgeStore) -> None:
    answer = fields_store.search("vacuum dead tuples", k=5)
    assert answer.mode == "adaptive" and answer.content_root == fields_store.content_root()
    assert _uids(answer)[0] == "doc:vacuum"
    top = answer.to_dict()["results"][0]
    assert list(top["ranks"]) == list(LIST_NAMES)
    assert top["ranks"]["vector"] == 1 and top["ranks"]["lexical"] == 1
    assert top["ranks"]["sql"] is None  # with a text, sql is the pre-filter, not a list
    assert top["superseded_by"] is None
    ev = top["evidence"][0]
    body = next(r["body"] for r in visible_records("everyone") if r["uid"] == "doc:vacuum")
    assert 0 <= ev["start"] < ev["end"] <= len(body)
    assert "dead tuples" in ev["text"] and isinstance(ev["heading"], list)
    scores = [r.score for r in answer.results]
    assert scores == sorted(scores, reverse=True)
    assert answer.vector is not None


def test_graph_list_is_seeded_by_the_top_fused_entities(fields_store: KnowledgeStore) -> None:
    answer = fields_store.search("vacuum dead tuples", k=20, explain=True)
    assert answer.explain is not None
    seeds = answer.explain["seeds"]
    assert seeds[0] == "doc:vacuum" and len(seeds) <= 10
    graph = answer.explain["lists"]["graph"]
    # neighbours of the seeds (partOf doc:admin, xref from ticket:4, xref to doc:monitoring)
    assert graph, "the graph stage found nothing"
    assert set(graph).isdisjoint(seeds)
    ranked = {r.uid: r.ranks["graph"] for r in answer.results}
    assert (
        any(rank is not None for rank in ranked.values()) or answer.explain["weights"]["graph"] == 0
    )


def test_explain_shows_the_lists_and_the_timings(fields_store: KnowledgeStore) -> None:
    answer = fields_store.search("replication standby", explain=True)
    explain = answer.explain
    assert explain is not None
    assert set(explain["lists"]) == set(BUILT_IN)
    assert explain["lists"]["sql"] is None  # not run: the request has a text
    for stage in ("embed", "vector", "lexical", "fuse", "total", "total_without_embed"):
        assert stage in explain["ms"], stage
    assert explain["fused"] == _uids(answer)
    assert answer.to_dict()["explain"]["mode"] == "adaptive"


# -- FILTERS and the ACL restrict every list -------------------------------------------------------
def test_filters_restrict_every_list_including_graph(fields_store: KnowledgeStore) -> None:
    unfiltered = fields_store.search("pg_dump backup restore", k=20, explain=True)
    assert "code:backup-1" in _uids(unfiltered)
    filtered = fields_store.search(
        "pg_dump backup restore", k=20, filters={"not_type": ["codeSample"]}, explain=True
    )
    assert filtered.explain is not None
    for name, items in filtered.explain["lists"].items():
        assert "code:backup-1" not in (items or []), name
    assert all(r.type != "codeSample" for r in filtered.results)
    pages = fields_store.search("replication", k=20, filters=Filters.build(type=("page",)))
    assert {r.type for r in pages.results} == {"page"}


def test_nothing_invisible_is_ever_a_result(fields_store: KnowledgeStore) -> None:
    for text in ("replication runbook lag", "payroll salary", "unpublished draft", "WAL disk"):
        for who in ("everyone", "user:sam", "user:fay"):
            visible = {r["uid"] for r in visible_records(who)}
            answer = fields_store.search(text, identity=who, k=50, explain=True)
            assert set(_uids(answer)) <= visible
            assert answer.explain is not None
            for items in answer.explain["lists"].values():
                assert set(items or []) <= visible


def test_a_text_less_request_ranks_by_sql(fields_store: KnowledgeStore) -> None:
    answer = fields_store.search(None, filters={"type": "ticket"}, identity="user:sam", k=10)
    first_three = _uids(answer)[:3]
    assert set(first_three) == {"ticket:1", "ticket:2", "ticket:4"}
    assert first_three[0] == "ticket:2"  # the most recently updated
    for r in answer.results:
        assert r.ranks["vector"] is None and r.ranks["lexical"] is None
    assert [r.ranks["sql"] for r in answer.results[:3]] == [1, 2, 3]
    blank = fields_store.search("  ", filters={"type": "ticket"}, identity="user:sam")
    assert _uids(blank) == _uids(answer) and blank.vector is None


# -- supersededBy -------------------------------------------------------------------------------------
def test_a_visible_successor_is_surfaced_just_above(fields_store: KnowledgeStore) -> None:
    answer = fields_store.search("legacy backup procedure cron tape", k=5)
    order = _uids(answer)
    assert "doc:backup-old" in order and "doc:backup-new" in order
    old = _result(answer, "doc:backup-old")
    assert old.superseded_by == "doc:backup-new"
    assert order.index("doc:backup-new") < order.index("doc:backup-old")
    assert _result(answer, "doc:backup-new").superseded_by is None
    scores = [r.score for r in answer.results]
    assert scores == sorted(scores, reverse=True)


def test_an_invisible_or_missing_successor_changes_nothing(fields_store: KnowledgeStore) -> None:
    public = fields_store.search("log shipping warm standby archive_command", k=5)
    assert _uids(public)[0] == "doc:replication-old"
    assert _result(public, "doc:replication-old").superseded_by is None
    assert "doc:replication-sre" not in _uids(public)
    sre = fields_store.search("log shipping warm standby archive_command", k=5, identity="user:sam")
    order = _uids(sre)
    assert _result(sre, "doc:replication-old").superseded_by == "doc:replication-sre"
    assert order.index("doc:replication-sre") == order.index("doc:replication-old") - 1
    orphan = fields_store.search("tablespace another disk", k=3)
    assert _uids(orphan)[0] == "doc:orphan" and orphan.results[0].superseded_by is None


@pytest.mark.parametrize(
    ("ranked", "successors", "expected"),
    [
        (["a", "b", "c"], {"b": "x"}, [("a", None), ("x", None), ("b", "x"), ("c", None)]),
        (["a", "b", "c"], {"a": "c"}, [("c", None), ("a", "c"), ("b", None)]),
        (["c", "a", "b"], {"a": "c"}, [("c", None), ("a", "c"), ("b", None)]),
        (["a"], {"a": "b", "b": "c"}, [("c", None), ("b", "c"), ("a", "b")]),
        (["a", "b"], {"a": "b", "b": "a"}, [("a", "b"), ("b", "a")]),
        (["a"], {"a": "a"}, [("a", None)]),
    ],
)
def test_supersede_places_successors_above(
    ranked: list[str], successors: dict[str, str], expected: list[tuple[str, str | None]]
) -> None:
    assert supersede(ranked, successors) == expected


# -- fusion settings and bad input ---------------------------------------------------------------------
def test_modes_and_weights(fields_store: KnowledgeStore) -> None:
    convex = fields_store.search("vacuum", mode="convex")
    assert convex.mode == "convex" and _uids(convex)[0] == "doc:vacuum"
    lexical_only = fields_store.search(
        "standby primary", weights={"vector": 0, "graph": 0}, explain=True
    )
    assert lexical_only.explain is not None
    assert (
        _uids(lexical_only) == lexical_only.explain["lists"]["lexical"][: len(lexical_only.results)]
    )


def test_adaptive_mode_explains_the_weights_it_chose(fields_store: KnowledgeStore) -> None:
    question = fields_store.search(
        "how do I reclaim space from dead rows?", mode="adaptive", explain=True
    )
    assert question.mode == "adaptive" and question.explain is not None
    chosen = question.explain["adaptive"]
    assert chosen["features"]["question"] is True
    assert chosen["weights"]["lexical"] < chosen["weights"]["vector"]
    assert question.explain["weights"]["lexical"] == chosen["weights"]["lexical"]
    assert "question" in chosen["why"][0]
    keyword = fields_store.search("vacuum", mode="adaptive", explain=True)
    assert keyword.explain is not None
    assert keyword.explain["adaptive"]["weights"]["lexical"] == keyword.explain["weights"]["vector"]
    # Without --explain nothing extra is computed into the answer.
    assert fields_store.search("vacuum", mode="adaptive").explain is None


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"mode": "borda"}, InvalidRequest, "rrf, convex, adaptive"),
        ({"k": 0}, InvalidRequest, "k must be"),
        ({"k": 1001}, InvalidRequest, "k must be"),
        ({"weights": {"splade": 1.0}}, InvalidRequest, "not a configured list"),
        ({"retrievers": ["vector", "bm42"]}, InvalidRequest, "vector, lexical, sql, graph"),
        ({"filters": {"owner": "me"}}, UnknownField, "unknown filter"),
        (
            {"filters": {"created_from": "2024-05-01", "created_to": "2024-01-01"}},
            InvalidRequest,
            "swap",
        ),
    ],
)
def test_bad_search_requests(
    fields_store: KnowledgeStore, kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        fields_store.search("vacuum", **kwargs)


def test_search_depth_bounds(fields_store: KnowledgeStore) -> None:
    from knowledge_store.retrieval import search as planner

    with pytest.raises(BoundExceeded, match="use 1 to 3"):
        planner.plan("x", k=10, filters=Filters(), depth=0)
    with pytest.raises(BoundExceeded, match="use 1 to 3"):
        planner.plan("x", k=10, filters=Filters(), depth=5)


# -- the retriever plug-in interface --------------------------------------------------------------------
class TitlePrefixRetriever:
    """A test retriever: entities whose title starts with the query text (through sql)."""

    name = "title_prefix"
    granularity: Granularity = "entity"
    stage: Stage = "query"

    def run(self, reader: StoreReader, request: Request) -> Ranking:
        if not request.has_text or request.text is None:
            return Ranking(self.name, "entity", ran=False)
        prefix = request.text.strip().lower()
        hits = reader.engine.sql(request.filters, Order.parse("title"), 1000).hits
        found = [h for h in hits if h.title.lower().startswith(prefix)]
        return Ranking(
            self.name,
            "entity",
            [Candidate(h.uid, 1.0) for h in found[: request.k]],
            ms={"title_prefix": 0.0},
        )


@pytest.fixture
def title_prefix() -> Iterator[str]:
    register_retriever("title_prefix", TitlePrefixRetriever)
    try:
        yield "title_prefix"
    finally:
        unregister_retriever("title_prefix")


def test_a_plugged_in_retriever_is_fused_and_ranked(
    fields_store: KnowledgeStore, title_prefix: str
) -> None:
    assert isinstance(TitlePrefixRetriever(), Retriever)
    text = "write"  # "Write-Ahead Logging" starts with it; little else matches the word
    without = fields_store.search(text, k=5)
    configured = [*BUILT_IN, title_prefix]
    plugged = fields_store.search(text, k=5, retrievers=configured, weights={title_prefix: 3.0})
    assert _uids(plugged)[0] == "doc:wal"
    top = plugged.to_dict()["results"][0]
    assert top["ranks"]["title_prefix"] == 1
    assert list(top["ranks"])[:4] == list(LIST_NAMES)
    assert "title_prefix" not in without.to_dict()["results"][0]["ranks"]
    # its weight is respected: at 0 it adds nothing
    silent = fields_store.search(text, k=5, retrievers=configured, weights={title_prefix: 0.0})
    assert [r.score for r in silent.results] == [r.score for r in without.results]
    # an instance can be passed directly, too
    direct = fields_store.search("glossary", k=3, retrievers=["lexical", TitlePrefixRetriever()])
    assert _uids(direct)[0] == "doc:glossary"
    assert direct.results[0].ranks["title_prefix"] == 1


def test_registering_twice_or_removing_a_built_in_fails(title_prefix: str) -> None:
    with pytest.raises(InvalidRequest, match="already registered"):
        register_retriever(title_prefix, TitlePrefixRetriever)
    with pytest.raises(InvalidRequest, match="cannot be removed"):
        unregister_retriever("vector")


def test_fuse_stages_expands_from_the_top_of_the_first_fusion() -> None:
    seen: list[tuple[str, ...]] = []

    def expand(seeds: tuple[str, ...]) -> list[RankedList]:
        seen.append(seeds)
        return [RankedList("graph", [("z", 1.0), ("b", 0.5)])]

    lists = [RankedList("vector", [("a", 0.9), ("b", 0.8)]), RankedList("lexical", [("b", 3.0)])]
    fused, seeds, expanded = fuse_stages(Fusion.of("rrf"), lists, expand, seeds=1)
    assert seen == [("b",)] and seeds == ("b",)
    assert [f.uid for f in fused][:1] == ["b"] and "z" in [f.uid for f in fused]
    assert fused[0].ranks == {"vector": 2, "lexical": 1, "graph": 2}
    assert expanded[0].name == "graph"


def test_the_evaluation_ranks_exactly_like_the_planner(fields_store: KnowledgeStore) -> None:
    from knowledge_store.retrieval.evaluation import Variant, collect, run_variant

    filters = Filters.build(status=("published",))  # no visible supersession in this slice
    queries = [("q1", "vacuum dead tuples"), ("q2", "replication standby"), ("q3", "backup")]
    collected = collect(fields_store, queries, filters=filters)
    for mode in ("rrf", "convex", "adaptive"):
        fusion = Fusion.of(mode)
        run = run_variant(collected, Variant(mode, fusion=fusion))
        for qid, text in queries:
            answer = fields_store.search(text, k=100, filters=filters, mode=mode)
            ranked = sorted(run[qid], key=lambda uid: -run[qid][uid])
            assert ranked == _uids(answer), (mode, text)
    assert collected.expand_calls["computed"] >= 1
