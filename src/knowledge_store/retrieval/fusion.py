"""Fusion of ranked lists into one ranking (DESIGN §3) — pure functions.

The inputs are ranked lists of *entity* uids, one per retriever (chunk hits
are folded to their entity first: ``fold_chunks``). Two modes:

* ``rrf``: ``score(e) = Σ_list w_list / (k + rank_list(e))`` — ranks only;
* ``convex``: ``score(e) = Σ_list w_list × norm(score_list(e))`` — scores, each
  list normalised on its own (:data:`NORMALISATIONS`: min-max by default, down to
  the list's ``floor`` when it has one; or divided by the list's top score; or
  z-scores).

An entity in several lists is one result; a list an entity is absent from
contributes nothing and reports a null rank. Sums are exact (``math.fsum``), so
the result does not depend on the order the lists are given in. Results are
sorted by score, then by best rank across the lists, then by uid.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple

from knowledge_store.errors import InvalidRequest
from knowledge_store.model import LIST_NAMES, list_names

__all__ = [
    "LIST_NAMES",
    "NORMALISATIONS",
    "Fused",
    "RankedList",
    "agreement",
    "convex",
    "fold_chunks",
    "parse_weights",
    "rrf",
]

#: k of reciprocal rank fusion (Cormack et al. 2009); DESIGN §3.
RRF_K = 60


@dataclass(frozen=True)
class RankedList:
    """One retriever's answer: ``(uid, score)`` best first; rank = position + 1.

    ``floor`` is the score of every entity the list leaves out, when the
    retriever knows it: 0 for a BM25 list that holds every match (an entity
    outside it matched no query term). ``convex``'s min-max then spans
    ``[floor, top]`` instead of ``[last, top]``, so a list of two matches gives
    its second one a share of the weight rather than nothing. None (the
    default): unknown — the list was cut at its length, and the rest score
    somewhere below its last.
    """

    name: str
    items: Sequence[tuple[str, float]]
    floor: float | None = None

    def __post_init__(self) -> None:
        if self.floor is not None and not math.isfinite(self.floor):
            raise InvalidRequest(
                f"list {self.name!r} has the floor {self.floor}; a floor must be finite",
                list=self.name,
            )
        items = tuple((uid, float(score)) for uid, score in self.items)
        seen: dict[str, int] = {}
        for rank, (uid, score) in enumerate(items, start=1):
            if uid in seen:
                raise InvalidRequest(
                    f"list {self.name!r} holds uid {uid!r} twice (ranks {seen[uid]} and {rank});"
                    " a ranked list names each entity once — fold chunk hits with fold_chunks",
                    list=self.name,
                    uid=uid,
                )
            if not math.isfinite(score):
                raise InvalidRequest(
                    f"list {self.name!r} gives uid {uid!r} the score {score}; scores must be finite",
                    list=self.name,
                    uid=uid,
                )
            seen[uid] = rank
        object.__setattr__(self, "items", items)

    def ranks(self) -> dict[str, int]:
        """uid → 1-based rank."""
        return {uid: rank for rank, (uid, _) in enumerate(self.items, start=1)}


class Fused(NamedTuple):
    """One fused entity: its score and its rank in every list given (None where absent).

    A named tuple: each fusion makes one per candidate entity (a few hundred per search).
    """

    uid: str
    score: float
    ranks: Mapping[str, int | None] = MappingProxyType({})

    @property
    def best_rank(self) -> int | None:
        present = [r for r in self.ranks.values() if r is not None]
        return min(present) if present else None


def _check_lists(
    lists: Sequence[RankedList], weights: Mapping[str, float] | None
) -> dict[str, float]:
    """Distinct list names; the weight of each list (default 1), all finite and ≥ 0."""
    names = [lst.name for lst in lists]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise InvalidRequest(
            f"lists to fuse must have distinct names; {', '.join(map(repr, twice))} given twice"
        )
    given: dict[str, float] = {}
    for name, weight in (weights or {}).items():
        try:
            value = float(weight)
        except (TypeError, ValueError):
            value = math.nan
        if not math.isfinite(value) or value < 0:
            raise InvalidRequest(
                f"weight {name}={weight!r} must be a finite number ≥ 0", list=name, weight=weight
            )
        given[name] = value
    return {name: given.get(name, 1.0) for name in names}


def _rank(
    lists: Sequence[RankedList],
    contributions: dict[str, list[float]],
    ranks: dict[str, dict[str, int]],
) -> list[Fused]:
    names = [lst.name for lst in lists]
    rows: list[tuple[float, float, str, dict[str, int | None]]] = []
    for uid, parts in contributions.items():
        found = {name: ranks[name].get(uid) for name in names}
        present = [r for r in found.values() if r is not None]
        rows.append((-math.fsum(parts), min(present) if present else math.inf, uid, found))
    rows.sort()  # score, best rank, uid: uids are unique, so the ranks are never compared
    return [Fused(uid, -negated, found) for negated, _, uid, found in rows]


def rrf(
    lists: Sequence[RankedList], *, k: int = RRF_K, weights: Mapping[str, float] | None = None
) -> list[Fused]:
    """Reciprocal rank fusion: ``Σ w_list / (k + rank)``; weight 0 keeps the ranks, adds nothing."""
    if isinstance(k, bool) or not isinstance(k, int | float) or not math.isfinite(k) or k < 0:
        raise InvalidRequest(f"the RRF constant k must be a number ≥ 0, not {k!r}", k=k)
    weight = _check_lists(lists, weights)
    ranks = {lst.name: lst.ranks() for lst in lists}
    contributions: dict[str, list[float]] = {}
    for lst in lists:
        w = weight[lst.name]
        for uid, rank in ranks[lst.name].items():
            contributions.setdefault(uid, []).append(w / (k + rank))
    return _rank(lists, contributions, ranks)


def _minmax(scores: Sequence[float], floor: float | None = None) -> list[float]:
    """Scores → [0, 1] over ``[min(floor, lowest), top]``; all equal (no lower floor) → 1.0."""
    lo, hi = min(scores), max(scores)
    if floor is not None:
        lo = min(lo, floor)
    if lo == hi:
        return [1.0] * len(scores)
    span = hi - lo
    if not math.isfinite(span):  # huge scores of both signs: scale before subtracting
        return [min(1.0, (s / 2 - lo / 2) / (hi / 2 - lo / 2)) for s in scores]
    return [min(1.0, (s - lo) / span) for s in scores]


def _by_max(scores: Sequence[float]) -> list[float]:
    """Scores over the list's top score (a lower bound of 0: BM25, cosine); ≤ 1."""
    top = max(scores)
    if top <= 0 or not math.isfinite(top):
        return _minmax(scores)
    return [max(0.0, s / top) for s in scores]


def _zscore(scores: Sequence[float]) -> list[float]:
    """Standard scores; a list whose scores are all equal maps to 0."""
    mean = math.fsum(scores) / len(scores)
    spread = math.sqrt(math.fsum((s - mean) ** 2 for s in scores) / len(scores))
    if not math.isfinite(spread):  # huge scores of both signs: fall back to min-max
        return _minmax(scores)
    if spread == 0:
        return [0.0] * len(scores)
    return [(s - mean) / spread for s in scores]


#: How ``convex`` normalises each list's scores before weighting them.
NORMALISATIONS = {"minmax": _minmax, "max": _by_max, "zscore": _zscore}


def convex(
    lists: Sequence[RankedList],
    *,
    weights: Mapping[str, float] | None = None,
    normalise: str = "minmax",
) -> list[Fused]:
    """Convex combination: ``Σ w_list × norm(score)``; ``minmax``/``max`` bound it by ``[0, Σ w]``."""
    scale = NORMALISATIONS.get(normalise)
    if scale is None:
        raise InvalidRequest(
            f"unknown normalisation {normalise!r}; use one of: {', '.join(NORMALISATIONS)}",
            allowed=list(NORMALISATIONS),
        )
    weight = _check_lists(lists, weights)
    ranks = {lst.name: lst.ranks() for lst in lists}
    contributions: dict[str, list[float]] = {}
    for lst in lists:
        if not lst.items:
            continue
        w = weight[lst.name]
        scores = [score for _, score in lst.items]
        normalised = _minmax(scores, lst.floor) if scale is _minmax else scale(scores)
        for (uid, _), value in zip(lst.items, normalised, strict=True):
            contributions.setdefault(uid, []).append(w * value)
    return _rank(lists, contributions, ranks)


def fold_chunks(hits: Sequence[tuple[str, int, float]]) -> list[tuple[str, float, list[int]]]:
    """Chunk hits ``(uid, chunk_id, score)`` best first → one row per entity.

    Each row is ``(uid, best score, chunk ids best first)``; rows come in the
    order of each entity's first (best) chunk, so the entity rank is its best
    chunk's rank. A repeated ``(uid, chunk_id)`` is kept once.
    """
    best: dict[str, float] = {}
    chunks: dict[str, list[int]] = {}
    for uid, chunk_id, score in hits:
        if uid not in best:
            best[uid], chunks[uid] = score, [chunk_id]
            continue
        best[uid] = max(best[uid], score)
        if chunk_id not in chunks[uid]:
            chunks[uid].append(chunk_id)
    return [(uid, best[uid], chunks[uid]) for uid in best]


def parse_weights(text: str) -> dict[str, float]:
    """``"vector=1,lexical=0.5"`` → ``{"vector": 1.0, "lexical": 0.5}`` (the CLI's spelling of ``weights``)."""
    example = "write NAME=WEIGHT pairs separated by commas, e.g. vector=1,lexical=0.5"
    weights: dict[str, float] = {}
    pairs = [p.strip() for p in text.split(",")]
    if not any(pairs):
        raise InvalidRequest(f"weights is empty; {example}", field="weights", value=text)
    for pair in pairs:
        name, sep, value = (part.strip() for part in pair.partition("="))
        if not sep or not name or not value:
            raise InvalidRequest(
                f"weights: {pair!r} is not NAME=WEIGHT; {example}", field="weights", value=text
            )
        if name not in list_names():
            raise InvalidRequest(
                f"weights: unknown list {name!r}; the lists are {', '.join(list_names())}",
                field="weights",
                value=text,
                allowed=list(list_names()),
            )
        if name in weights:
            raise InvalidRequest(f"weights: {name!r} is given twice", field="weights", value=text)
        try:
            weight = float(value)
        except ValueError:
            raise InvalidRequest(
                f"weights: {value!r} for {name} is not a number; {example}",
                field="weights",
                value=text,
            ) from None
        if not math.isfinite(weight) or weight < 0:
            raise InvalidRequest(
                f"weights: {name}={value} must be a finite number ≥ 0 (0 switches a list off)",
                field="weights",
                value=text,
            )
        weights[name] = weight
    return weights


def agreement(a: Sequence[str], b: Sequence[str], depth: int = 10) -> float:
    """How much two rankings agree at the top, in [0, 1]: their *average overlap*.

    ``mean over d = 1..n of |top_d(a) ∩ top_d(b)| / d`` with ``n = min(depth,
    longer list)``: 1 for the same top ``depth`` in the same order, 0 for
    disjoint tops, and agreement near rank 1 counts more than near ``depth``
    (a top-weighted measure, like rank-biased overlap). Two empty lists give 0.
    """
    if depth < 1:
        raise InvalidRequest(f"agreement depth must be at least 1, not {depth}", depth=depth)
    top_a = list(dict.fromkeys(a))[:depth]
    top_b = list(dict.fromkeys(b))[:depth]
    n = max(len(top_a), len(top_b))
    if n == 0:
        return 0.0
    seen_a: set[str] = set()
    seen_b: set[str] = set()
    common = 0
    total = 0.0
    for d in range(n):
        x = top_a[d] if d < len(top_a) else None
        y = top_b[d] if d < len(top_b) else None
        if x is not None:
            seen_a.add(x)
            common += x in seen_b
        if y is not None:
            seen_b.add(y)
            common += y in seen_a
        total += common / (d + 1)
    return min(1.0, total / n)
