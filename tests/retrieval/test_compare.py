"""Paired bootstrap intervals and run comparison (retrieval.compare)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from knowledge_store.errors import InvalidRequest
from knowledge_store.retrieval.compare import compare_runs, paired_bootstrap, per_query

diffs = st.lists(
    st.floats(min_value=-1, max_value=1, allow_nan=False, allow_infinity=False),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(diffs)
def test_the_interval_holds_the_mean_and_lies_within_the_sample(values: list[float]) -> None:
    interval = paired_bootstrap(values, rounds=200)
    assert interval.low <= interval.mean <= interval.high
    assert min(values) - 1e-12 <= interval.low and interval.high <= max(values) + 1e-12
    assert math.isclose(interval.mean, sum(values) / len(values), abs_tol=1e-12)


@settings(max_examples=40, deadline=None)
@given(diffs)
def test_swapping_the_runs_mirrors_the_interval(values: list[float]) -> None:
    forward = paired_bootstrap(values, rounds=200, seed=3)
    backward = paired_bootstrap([-v for v in values], rounds=200, seed=3)
    assert math.isclose(forward.mean, -backward.mean, abs_tol=1e-12)
    assert math.isclose(forward.low, -backward.high, abs_tol=1e-9)
    assert math.isclose(forward.high, -backward.low, abs_tol=1e-9)


def test_identical_runs_give_a_zero_interval_and_a_clear_gain_is_significant() -> None:
    assert str(paired_bootstrap([0.0] * 10)) == "+0.0000 [+0.0000, +0.0000]"
    assert not paired_bootstrap([0.0] * 10).significant
    gain = paired_bootstrap([0.1, 0.2, 0.15, 0.12, 0.3, 0.05] * 5)
    assert gain.significant and gain.low > 0


def test_strata_weigh_equally_whatever_their_size() -> None:
    interval = paired_bootstrap({"big": [0.0] * 1000, "small": [1.0] * 4})
    assert interval.mean == pytest.approx(0.5)
    assert interval.low == pytest.approx(0.5) and interval.high == pytest.approx(0.5)


def test_the_same_seed_gives_the_same_interval() -> None:
    values = [0.3, -0.1, 0.0, 0.25, 0.4, -0.2]
    assert paired_bootstrap(values, seed=7) == paired_bootstrap(values, seed=7)


@pytest.mark.parametrize("bad", [[], {"a": []}, [math.nan], {"a": [1.0], "b": [math.inf]}], ids=str)
def test_bad_differences_are_refused(bad: object) -> None:
    with pytest.raises(InvalidRequest):
        paired_bootstrap(bad)  # type: ignore[arg-type]


QRELS = {"q1": {"d1": 1}, "q2": {"d2": 1}, "q3": {"d3": 1, "d4": 1}}
RUN_A = {"q1": {"d1": 2.0, "x": 1.0}, "q2": {"x": 2.0, "d2": 1.0}, "q3": {"y": 1.0}}
RUN_B = {"q1": {"d1": 2.0, "x": 1.0}, "q2": {"d2": 2.0, "x": 1.0}, "q3": {"d3": 1.0}}


def test_per_query_values_match_the_definitions() -> None:
    values = per_query(QRELS, RUN_A)
    assert values["mrr@10"] == {"q1": 1.0, "q2": 0.5, "q3": 0.0}
    assert values["recall@100"] == {"q1": 1.0, "q2": 1.0, "q3": 0.0}
    assert values["ndcg@10"]["q2"] == pytest.approx(1 / math.log2(3))


def test_compare_reports_each_measure_the_moved_queries_and_each_group() -> None:
    result = compare_runs(QRELS, RUN_A, RUN_B, groups={"q1": "term", "q2": "term", "q3": "see"})
    mrr = result.measure("mrr@10")
    assert (mrr.a, mrr.b, mrr.queries) == (pytest.approx(0.5), pytest.approx(1.0), 3)
    assert mrr.delta.mean == pytest.approx(0.5)
    assert [m.qid for m in result.moved] == ["q3", "q2"]  # q1 did not move
    assert result.moved[0].delta == pytest.approx(result.moved[0].b)
    assert set(result.by_group) == {"term", "see"}
    term = next(d for d in result.by_group["term"] if d.measure == "recall@100")
    assert term.queries == 2 and term.delta.mean == 0.0


def test_compare_refuses_an_unknown_measure() -> None:
    with pytest.raises(InvalidRequest, match="unknown measure"):
        compare_runs(QRELS, RUN_A, RUN_B, moved_by="map")
    with pytest.raises(InvalidRequest, match="unknown measure"):
        per_query(QRELS, RUN_A, ["map"])
