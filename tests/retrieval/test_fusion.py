"""Fusion: worked examples, a reference implementation, and hypothesis properties."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from knowledge_store.errors import InvalidRequest
from knowledge_store.retrieval.fusion import (
    Fused,
    RankedList,
    agreement,
    convex,
    fold_chunks,
    parse_weights,
    rrf,
)

UIDS = [f"e{i}" for i in range(12)]
NAMES = ["vector", "lexical", "graph", "sql", "splade"]


def reference_rrf(lists, k=60, weights=None):
    """RRF written the obvious way, independently of the module."""
    weights = weights or {}
    scores = {}
    for lst in lists:
        for position, (uid, _score) in enumerate(lst.items):
            scores[uid] = scores.get(uid, 0.0) + weights.get(lst.name, 1.0) / (k + position + 1)
    return scores


@st.composite
def ranked_list(draw, name):
    uids = draw(st.lists(st.sampled_from(UIDS), unique=True, max_size=len(UIDS)))
    scores = draw(
        st.lists(
            st.floats(min_value=-1e6, max_value=1e6, allow_nan=False),
            min_size=len(uids),
            max_size=len(uids),
        )
    )
    return RankedList(name, list(zip(uids, sorted(scores, reverse=True), strict=True)))


@st.composite
def ranked_lists(draw, min_size=0):
    names = draw(st.lists(st.sampled_from(NAMES), unique=True, min_size=min_size))
    return [draw(ranked_list(name)) for name in names]


weights_st = st.dictionaries(
    st.sampled_from(NAMES), st.floats(min_value=0, max_value=10, allow_nan=False)
)


def by_uid(results: list[Fused]) -> dict[str, Fused]:
    return {r.uid: r for r in results}


def position(results: list[Fused], uid: str) -> int:
    return [r.uid for r in results].index(uid)


# --- worked examples --------------------------------------------------------------------


def test_rrf_worked_example():
    vector = RankedList("vector", [("a", 0.9), ("b", 0.8), ("c", 0.7)])
    lexical = RankedList("lexical", [("c", 12.0), ("a", 3.0)])
    out = rrf([vector, lexical])
    assert [r.uid for r in out] == ["a", "c", "b"]
    assert out[0].score == pytest.approx(1 / 61 + 1 / 62)
    assert out[1].score == pytest.approx(1 / 63 + 1 / 61)
    assert out[2].score == pytest.approx(1 / 62)
    assert out[2].ranks == {"vector": 2, "lexical": None}
    assert out[0].ranks == {"vector": 1, "lexical": 2}


def test_rrf_k_and_weights():
    vector = RankedList("vector", [("a", 1.0), ("b", 0.5)])
    lexical = RankedList("lexical", [("b", 1.0)])
    out = rrf([vector, lexical], k=1, weights={"lexical": 0.25})
    assert by_uid(out)["a"].score == pytest.approx(1 / 2)
    assert by_uid(out)["b"].score == pytest.approx(1 / 3 + 0.25 / 2)


def test_weight_zero_keeps_ranks_and_members():
    vector = RankedList("vector", [("a", 1.0)])
    graph = RankedList("graph", [("g", 1.0), ("a", 0.5)])
    out = rrf([vector, graph], weights={"graph": 0})
    assert [r.uid for r in out] == ["a", "g"]
    assert by_uid(out)["g"].score == 0.0
    assert by_uid(out)["g"].ranks == {"vector": None, "graph": 1}
    assert by_uid(out)["a"].ranks == {"vector": 1, "graph": 2}


def test_ties_break_by_best_rank_then_uid():
    vector = RankedList("vector", [("b", 0.9), ("a", 0.1)])
    lexical = RankedList("lexical", [("a", 7.0), ("b", 1.0)])
    assert [r.uid for r in rrf([vector, lexical])] == ["a", "b"]  # same score, same best rank
    # convex: every score 1.0; best ranks a=1, c=1, b=2
    vector = RankedList("vector", [("a", 1.0), ("b", 0.0)])
    lexical = RankedList("lexical", [("c", 5.0), ("b", 5.0)])
    out = convex([vector, lexical])
    assert [r.score for r in out] == [1.0, 1.0, 1.0]
    assert [r.uid for r in out] == ["a", "c", "b"]


def test_convex_worked_example():
    vector = RankedList("vector", [("a", 0.9), ("b", 0.7), ("c", 0.5)])
    lexical = RankedList("lexical", [("c", 20.0), ("d", 10.0)])
    out = by_uid(convex([vector, lexical], weights={"vector": 2.0}))
    assert out["a"].score == pytest.approx(2.0)
    assert out["b"].score == pytest.approx(1.0)
    assert out["c"].score == pytest.approx(0.0 + 1.0)
    assert out["d"].score == pytest.approx(0.0)
    assert out["d"].ranks == {"vector": None, "lexical": 2}


def test_convex_equal_scores_normalise_to_one():
    out = convex([RankedList("graph", [("a", 3.0), ("b", 3.0)])], weights={"graph": 0.5})
    assert [r.score for r in out] == [0.5, 0.5]


def test_empty_inputs():
    assert rrf([]) == []
    assert convex([RankedList("vector", [])]) == []


def test_bad_inputs_are_rejected():
    with pytest.raises(InvalidRequest, match="twice"):
        RankedList("vector", [("a", 1.0), ("a", 0.5)])
    with pytest.raises(InvalidRequest, match="finite"):
        RankedList("vector", [("a", math.nan)])
    lst = RankedList("vector", [("a", 1.0)])
    with pytest.raises(InvalidRequest, match="distinct names"):
        rrf([lst, lst])
    with pytest.raises(InvalidRequest, match="≥ 0"):
        rrf([lst], weights={"vector": -1})
    with pytest.raises(InvalidRequest, match="≥ 0"):
        convex([lst], weights={"vector": math.inf})
    with pytest.raises(InvalidRequest, match="k"):
        rrf([lst], k=-1)


# --- rrf properties ---------------------------------------------------------------------


@given(ranked_lists(), st.integers(min_value=0, max_value=100), weights_st)
def test_rrf_matches_reference(lists, k, weights):
    out = rrf(lists, k=k, weights=weights)
    expected = reference_rrf(lists, k, weights)
    assert {r.uid for r in out} == set(expected)
    for r in out:
        assert r.score == pytest.approx(expected[r.uid], rel=1e-12, abs=1e-15)
    for first, second in itertools.pairwise(out):
        assert expected[first.uid] >= expected[second.uid] - 1e-12


@given(ranked_lists(), weights_st)
def test_dedupe_and_ranks_reported(lists, weights):
    for fuse in (rrf, convex):
        out = fuse(lists, weights=weights)
        uids = [r.uid for r in out]
        assert len(uids) == len(set(uids))
        assert set(uids) == {uid for lst in lists for uid, _ in lst.items}
        for r in out:
            assert set(r.ranks) == {lst.name for lst in lists}
            for lst in lists:
                listed = [uid for uid, _ in lst.items]
                want = listed.index(r.uid) + 1 if r.uid in listed else None
                assert r.ranks[lst.name] == want


@given(ranked_lists(), weights_st, st.randoms(use_true_random=False))
def test_permutation_invariant(lists, weights, rnd):
    shuffled = list(lists)
    rnd.shuffle(shuffled)
    assert rrf(shuffled, weights=weights) == rrf(lists, weights=weights)
    assert convex(shuffled, weights=weights) == convex(lists, weights=weights)


@given(ranked_lists(min_size=1), weights_st, st.data())
def test_rrf_monotonic_in_rank(lists, weights, data):
    which = data.draw(st.integers(0, len(lists) - 1))
    lst = lists[which]
    if len(lst.items) < 2:
        return
    old_pos = data.draw(st.integers(1, len(lst.items) - 1))
    new_pos = data.draw(st.integers(0, old_pos - 1))
    items = list(lst.items)
    moved = items.pop(old_pos)
    items.insert(new_pos, moved)
    improved = [*lists[:which], RankedList(lst.name, items), *lists[which + 1 :]]
    uid = moved[0]

    before, after = rrf(lists, weights=weights), rrf(improved, weights=weights)
    assert by_uid(after)[uid].score >= by_uid(before)[uid].score
    behind_before = {r.uid for r in before[position(before, uid) + 1 :]}
    behind_after = {r.uid for r in after[position(after, uid) + 1 :]}
    assert behind_before <= behind_after


@given(
    ranked_lists(min_size=1),
    weights_st,
    st.data(),
    st.floats(min_value=0, max_value=10, allow_nan=False),
)
def test_raising_a_weight_never_lowers_its_items(lists, weights, data, extra):
    name = data.draw(st.sampled_from([lst.name for lst in lists]))
    raised = {**weights, name: weights.get(name, 1.0) + extra}
    items = {uid for lst in lists if lst.name == name for uid, _ in lst.items}
    for fuse in (rrf, convex):
        before = by_uid(fuse(lists, weights=weights))
        after = by_uid(fuse(lists, weights=raised))
        for uid in items:
            assert after[uid].score >= before[uid].score


@given(ranked_lists(min_size=1), weights_st, st.data())
def test_weight_zero_ignores_a_list_for_scores(lists, weights, data):
    name = data.draw(st.sampled_from([lst.name for lst in lists]))
    others = [lst for lst in lists if lst.name != name]
    for fuse in (rrf, convex):
        with_zero = by_uid(fuse(lists, weights={**weights, name: 0.0}))
        without = by_uid(fuse(others, weights=weights))
        for uid, result in with_zero.items():
            assert result.score == (without[uid].score if uid in without else 0.0)


# --- convex properties ------------------------------------------------------------------


@given(ranked_lists(), weights_st)
def test_convex_bounded(lists, weights):
    total = math.fsum(weights.get(lst.name, 1.0) for lst in lists)
    for r in convex(lists, weights=weights):
        assert 0.0 <= r.score <= total


@given(ranked_lists(), weights_st)
def test_convex_by_max_is_bounded_too(lists, weights):
    total = math.fsum(weights.get(lst.name, 1.0) for lst in lists)
    for r in convex(lists, weights=weights, normalise="max"):
        assert 0.0 <= r.score <= total * (1 + 1e-12)


@given(ranked_list("lexical"), st.sampled_from(["minmax", "max", "zscore"]))
def test_one_list_keeps_its_order_under_every_normalisation(lst, normalise):
    scores = [r.score for r in convex([lst], normalise=normalise)]
    assert scores == sorted(scores, reverse=True)
    assert {r.uid for r in convex([lst], normalise=normalise)} == {u for u, _ in lst.items}


def test_convex_normalisation_examples():
    vec = RankedList("vector", [("a", 0.8), ("b", 0.6), ("c", 0.4)])
    lex = RankedList("lexical", [("c", 20.0), ("a", 5.0)])
    by_max = by_uid(convex([vec, lex], normalise="max"))
    assert by_max["a"].score == pytest.approx(1.0 + 0.25)
    assert by_max["c"].score == pytest.approx(0.5 + 1.0)
    z = by_uid(convex([vec], normalise="zscore"))
    assert z["b"].score == pytest.approx(0.0)
    assert z["a"].score == pytest.approx(-z["c"].score)
    assert (
        by_uid(convex([RankedList("x", [("a", 2.0), ("b", 2.0)])], normalise="zscore"))["a"].score
        == 0.0
    )
    with pytest.raises(InvalidRequest, match="unknown normalisation 'rank'"):
        convex([vec], normalise="rank")


def test_convex_spans_a_list_from_its_floor():
    """A lexical list holding every match (floor 0): its last match keeps a share (regression:
    min-max over [last, top] gave the second of two matches 0, below every vector-only page)."""
    vector = RankedList("vector", [("v", 0.9), ("b", 0.8), ("x", 0.4)])
    lexical = RankedList("lexical", [("a", 12.0), ("b", 9.0)], floor=0.0)
    out = convex([vector, lexical])
    assert by_uid(out)["b"].score == pytest.approx(0.8 + 0.75)
    assert out[0].uid == "b"  # found by both lists, first
    cut = convex([vector, RankedList("lexical", lexical.items)])
    assert by_uid(cut)["b"].score == pytest.approx(0.8)  # without a floor: [9, 12] → b gets 0
    assert cut[0].uid != "b"
    # A floor above the list's lowest score never lifts the lowest above 0.
    above = by_uid(convex([RankedList("lexical", [("a", 3.0), ("b", -1.0)], floor=0.0)]))
    assert above["b"].score == 0.0
    # The other normalisations ignore the floor.
    assert by_uid(convex([lexical], normalise="max"))["b"].score == pytest.approx(0.75)


@given(ranked_list("lexical"), st.floats(min_value=-1e6, max_value=1e6, allow_nan=False))
def test_a_floor_keeps_order_and_bounds(lst, floor):
    floored = RankedList(lst.name, lst.items, floor=floor)
    out = convex([floored])
    scores = [r.score for r in out]
    assert scores == sorted(scores, reverse=True)
    assert all(0.0 <= s <= 1.0 for s in scores)
    if lst.items and floor <= min(s for _, s in lst.items):
        plain = by_uid(convex([lst]))
        # Lowering the bottom of the span never lowers a score.
        assert all(r.score >= plain[r.uid].score - 1e-12 for r in out)


def test_a_floor_must_be_finite():
    with pytest.raises(InvalidRequest, match="floor"):
        RankedList("lexical", [("a", 1.0)], floor=math.inf)


def test_convex_handles_huge_score_ranges():
    lst = RankedList("lexical", [("a", 1.7e308), ("b", 0.0), ("c", -1.7e308)])
    out = by_uid(convex([lst]))
    assert out["a"].score == 1.0
    assert out["b"].score == pytest.approx(0.5)
    assert out["c"].score == 0.0


# --- fold_chunks ------------------------------------------------------------------------


@given(
    st.lists(
        st.tuples(
            st.sampled_from(UIDS[:5]),
            st.integers(0, 30),
            st.floats(-100, 100, allow_nan=False),
        ),
        unique_by=lambda hit: hit[1],
    )
)
def test_fold_chunks_keeps_best_per_entity(hits):
    hits = sorted(hits, key=lambda hit: -hit[2])
    folded = fold_chunks(hits)
    assert [uid for uid, _, _ in folded] == list(dict.fromkeys(uid for uid, _, _ in hits))
    for uid, best, chunk_ids in folded:
        mine = [hit for hit in hits if hit[0] == uid]
        assert best == max(score for _, _, score in mine)
        assert chunk_ids == [chunk for _, chunk, _ in mine]


def test_fold_chunks_example():
    hits = [("a", 3, 0.9), ("b", 7, 0.8), ("a", 1, 0.7), ("a", 3, 0.7), ("c", 2, 0.1)]
    assert fold_chunks(hits) == [("a", 0.9, [3, 1]), ("b", 0.8, [7]), ("c", 0.1, [2])]
    assert fold_chunks([]) == []


# --- parse_weights ----------------------------------------------------------------------


def test_parse_weights():
    assert parse_weights("vector=1,lexical=0.5") == {"vector": 1.0, "lexical": 0.5}
    assert parse_weights(" graph = 0 , sql=2e-1 ") == {"graph": 0.0, "sql": 0.2}


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "empty"),
        ("vector", "NAME=WEIGHT"),
        ("vector=", "NAME=WEIGHT"),
        ("=1", "NAME=WEIGHT"),
        ("vector=1,,lexical=1", "NAME=WEIGHT"),
        ("dense=1", "unknown list 'dense'; the lists are vector, lexical, graph, sql"),
        ("vector=-1", "≥ 0"),
        ("vector=nan", "≥ 0"),
        ("vector=inf", "≥ 0"),
        ("vector=one", "not a number"),
        ("vector=1,vector=2", "twice"),
    ],
)
def test_parse_weights_rejects(text, match):
    with pytest.raises(InvalidRequest, match=match):
        parse_weights(text)


# --- agreement --------------------------------------------------------------------------


def test_agreement_examples():
    assert agreement(["a", "b", "c"], ["a", "b", "c"]) == 1.0
    assert agreement(["a", "b"], ["c", "d"]) == 0.0
    assert agreement([], []) == 0.0
    assert agreement(["a", "b"], ["b", "a"]) == pytest.approx((0 + 1) / 2)
    # top-weighted: agreeing at rank 1 counts more than agreeing at rank 3
    assert agreement(["x", "b", "c"], ["x", "e", "f"]) > agreement(["a", "b", "x"], ["d", "e", "x"])
    # only the top `depth` count
    assert agreement(["a", "b", "z"], ["a", "b", "y"], depth=2) == 1.0
    with pytest.raises(InvalidRequest):
        agreement(["a"], ["a"], depth=0)


@given(
    st.lists(st.sampled_from(UIDS), unique=True),
    st.lists(st.sampled_from(UIDS), unique=True),
    st.integers(1, 15),
)
@settings(max_examples=200)
def test_agreement_properties(a, b, depth):
    value = agreement(a, b, depth)
    assert 0.0 <= value <= 1.0
    assert value == pytest.approx(agreement(b, a, depth))
    assert agreement(a, a, depth) == (1.0 if a else 0.0)
    if not set(a[:depth]) & set(b[:depth]):
        assert value == 0.0
