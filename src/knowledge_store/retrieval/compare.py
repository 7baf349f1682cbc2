"""Comparing two runs on the same queries: paired bootstrap intervals — pure functions.

The measures are ir-measures' nDCG@10, Recall@100 and MRR@10 (the ones
``ks eval`` reports). Two runs are compared **per query** (paired): the
difference ``b − a`` of each query is resampled with replacement, and the
2.5th and 97.5th percentiles of the resampled means are the 95 % interval
(Efron's percentile bootstrap, as Sakai 2014 recommends for IR). With
several eval sets the resampling is *stratified*: each set is resampled
within itself and the per-set means are averaged with equal weight, so a
1,500-query set does not drown a 28-query one (:func:`paired_bootstrap`).

Everything is seeded: the same inputs give the same intervals.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from knowledge_store.errors import InvalidRequest

__all__ = [
    "MEASURES",
    "Comparison",
    "Interval",
    "MeasureDelta",
    "Moved",
    "compare_runs",
    "paired_bootstrap",
    "per_query",
]

Run = Mapping[str, Mapping[str, float]]
Qrels = Mapping[str, Mapping[str, int]]

#: Measure names as ``ks eval`` prints them → ir-measures notation.
MEASURES: Mapping[str, str] = {"ndcg@10": "nDCG@10", "recall@100": "R@100", "mrr@10": "RR@10"}


@dataclass(frozen=True)
class Interval:
    """A mean difference and its bootstrap interval."""

    mean: float
    low: float
    high: float

    @property
    def significant(self) -> bool:
        """The interval excludes 0."""
        return self.low > 0 or self.high < 0

    def __str__(self) -> str:
        return f"{self.mean:+.4f} [{self.low:+.4f}, {self.high:+.4f}]"


def per_query(
    qrels: Qrels, run: Run, measures: Sequence[str] = tuple(MEASURES)
) -> dict[str, dict[str, float]]:
    """``measure → qid → value`` for every judged query (a query the run lacks scores 0)."""
    import ir_measures

    unknown = [m for m in measures if m not in MEASURES]
    if unknown:
        raise InvalidRequest(
            f"unknown measure {unknown[0]!r}; use one of: {', '.join(MEASURES)}",
            allowed=list(MEASURES),
        )
    parsed = {name: ir_measures.parse_measure(MEASURES[name]) for name in measures}
    by_measure = {str(m): name for name, m in parsed.items()}
    judged = {q: dict(d) for q, d in qrels.items()}
    full = {q: dict(run.get(q, {})) for q in judged}
    out: dict[str, dict[str, float]] = {name: dict.fromkeys(judged, 0.0) for name in measures}
    for metric in ir_measures.iter_calc(list(parsed.values()), judged, full):
        out[by_measure[str(metric.measure)]][metric.query_id] = float(metric.value)
    return out


def paired_bootstrap(
    diffs: Mapping[str, Sequence[float]] | Sequence[float],
    *,
    rounds: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Interval:
    """The mean of paired differences and its percentile-bootstrap interval.

    ``diffs``: one difference per query, or ``stratum → differences`` (one
    stratum per eval set): each stratum is resampled within itself and the
    statistic is the unweighted mean of the per-stratum means.
    """
    strata = {"": diffs} if not isinstance(diffs, Mapping) else dict(diffs)
    arrays = [np.asarray(v, dtype=np.float64) for v in strata.values()]
    if not arrays or any(a.size == 0 for a in arrays):
        raise InvalidRequest("paired_bootstrap needs at least one difference in every stratum")
    if not all(np.isfinite(a).all() for a in arrays):
        raise InvalidRequest("paired_bootstrap: differences must be finite numbers")
    if rounds < 1 or not 0 < confidence < 1:
        raise InvalidRequest(
            f"paired_bootstrap needs rounds ≥ 1 and 0 < confidence < 1, not {rounds}, {confidence}"
        )
    rng = np.random.default_rng(seed)
    means = np.zeros(rounds)
    for a in arrays:
        picks = rng.integers(0, a.size, size=(rounds, a.size))
        means += a[picks].mean(axis=1)
    means /= len(arrays)
    point = float(np.mean([a.mean() for a in arrays]))
    tail = (1 - confidence) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    # Floating-point sums can put a constant sample a hair off its mean.
    return Interval(point, min(float(low), point), max(float(high), point))


@dataclass(frozen=True)
class MeasureDelta:
    """One measure of a comparison: both means and the paired difference ``b − a``."""

    measure: str
    a: float
    b: float
    delta: Interval
    queries: int


@dataclass(frozen=True)
class Moved:
    """A query whose value moved between the runs (``b − a``)."""

    qid: str
    a: float
    b: float

    @property
    def delta(self) -> float:
        return self.b - self.a


@dataclass(frozen=True)
class Comparison:
    """Run ``b`` against run ``a``: each measure, the queries that moved most, each query type."""

    measures: tuple[MeasureDelta, ...]
    moved: tuple[Moved, ...]
    by_group: Mapping[str, tuple[MeasureDelta, ...]]

    def measure(self, name: str) -> MeasureDelta:
        return next(m for m in self.measures if m.measure == name)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: ``measures`` (name → a, b, delta, low, high), ``moved``, ``by_type``."""
        return {
            "measures": _measures_dict(self.measures),
            "moved": [
                {"qid": m.qid, "a": _r(m.a), "b": _r(m.b), "delta": _r(m.delta)} for m in self.moved
            ],
            "by_type": {
                group: {"queries": deltas[0].queries, **_measures_dict(deltas)}
                for group, deltas in self.by_group.items()
            },
        }


def _r(value: float) -> float:
    return round(value, 4)


def _measures_dict(deltas: Sequence[MeasureDelta]) -> dict[str, dict[str, float]]:
    return {
        d.measure: {
            "a": _r(d.a),
            "b": _r(d.b),
            "delta": _r(d.delta.mean),
            "low": _r(d.delta.low),
            "high": _r(d.delta.high),
        }
        for d in deltas
    }


def _deltas(
    a: Mapping[str, Mapping[str, float]],
    b: Mapping[str, Mapping[str, float]],
    qids: Sequence[str],
    rounds: int,
    seed: int,
) -> tuple[MeasureDelta, ...]:
    out = []
    for name in a:
        va = np.array([a[name][q] for q in qids])
        vb = np.array([b[name][q] for q in qids])
        interval = paired_bootstrap(list(vb - va), rounds=rounds, seed=seed)
        out.append(MeasureDelta(name, float(va.mean()), float(vb.mean()), interval, len(qids)))
    return tuple(out)


def compare_runs(
    qrels: Qrels,
    run_a: Run,
    run_b: Run,
    *,
    groups: Mapping[str, str] | None = None,
    moved: int = 10,
    moved_by: str = "ndcg@10",
    rounds: int = 2000,
    seed: int = 0,
) -> Comparison:
    """Compare ``run_b`` with ``run_a`` over the judged queries of ``qrels``.

    ``groups`` (qid → query type) adds a breakdown per type; ``moved`` is how
    many queries to list, largest ``|b − a|`` of ``moved_by`` first (ties by qid).
    """
    if not qrels:
        raise InvalidRequest("compare_runs needs at least one judged query")
    if moved_by not in MEASURES:
        raise InvalidRequest(f"unknown measure {moved_by!r}; use one of: {', '.join(MEASURES)}")
    a = per_query(qrels, run_a)
    b = per_query(qrels, run_b)
    qids = sorted(qrels)
    shift = sorted(
        (Moved(q, a[moved_by][q], b[moved_by][q]) for q in qids),
        key=lambda m: (-abs(m.delta), m.qid),
    )
    by_group: dict[str, tuple[MeasureDelta, ...]] = {}
    if groups:
        members: dict[str, list[str]] = {}
        for q in qids:
            members.setdefault(groups.get(q, "?"), []).append(q)
        for group in sorted(members):
            by_group[group] = _deltas(a, b, members[group], rounds, seed)
    return Comparison(
        _deltas(a, b, qids, rounds, seed),
        tuple(m for m in shift[:moved] if m.delta != 0),
        by_group,
    )
