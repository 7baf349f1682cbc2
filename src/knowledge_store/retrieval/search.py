"""The fused planner (DESIGN §3).

1. the ``query`` retrievers run on the request: vector and lexical on the
   text, FILTERS inside each query; ``sql`` is a list only when there is no
   text (with a text it is the pre-filter and its rank stays null);
2. chunk hits fold to their entity (best chunk rank per list); the best
   chunks stay as evidence;
3. the query lists fuse; the top :data:`SEEDS` fused entities (not the
   query) seed the ``expand`` retrievers — graph, depth 1 by default;
4. every list fuses again (``rrf`` or ``convex``, per-list weights): one
   result per entity, with its rank in every list;
5. ``supersededBy``: a result with a visible successor (that passes the
   FILTERS) has the successor placed just above it (inserted if it was not
   a result, moved up if it ranked lower) and carries ``superseded_by``.

Engine-agnostic: it calls retrievers (:mod:`.retrievers`), which call the
engine's primitives; every primitive applies the caller's ACL inside its own
query. Fusion itself is the pure functions of :mod:`.fusion`; the stage
logic the planner and the evaluation share is :func:`fuse_stages`.

Defaults — chosen by measurement across both shared eval sets together
(postgres-docs: 1,500 index terms; sqlite-git-faq: 28 FAQ questions; code
samples excluded; the macro mean of the two with a stratified paired
bootstrap; ``bench/eval_adaptive.py``, docs/relevance.md):

* ``adaptive``: convex 0.5/0.5 (min-max per list) whose lexical weight is
  halved for a question or a long plain-words request (:mod:`.adaptive`;
  ``--explain`` says which and why). Against ``rrf`` (k=60, 1/1): macro
  +0.038 [+0.008, +0.070] (postgres-docs 0.833 vs 0.830, sqlite-git-faq 0.537
  vs 0.465); against plain convex +0.005 [−0.021, +0.030], and with the lists
  4× deeper (``retrievers.CHUNKS_PER_ENTITY``) +0.020 on the questions where
  convex loses 0.013. ``rrf`` and ``convex`` stay available by name;
* graph weight 0.05 (rrf) / 0.05 (convex): the graph list alone is no ranking
  (nDCG@10 0.007: a seed's neighbours are rarely the answer) and at weight
  ≥ 0.25 it costs nDCG (−0.005 at 0.25, −0.21 at 1). At 0.05 it changes
  nDCG@10 by −0.0000 [−0.0012, +0.0011] and adds Recall@100 +0.003
  [+0.001, +0.006]: it ranks linked entities below every text hit and
  breaks near-ties among them.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from knowledge_store.engines.base import Engine
from knowledge_store.errors import BoundExceeded, InvalidRequest
from knowledge_store.ingest.embedding import Embedder
from knowledge_store.model import (
    LIST_NAMES,
    Evidence,
    Filters,
    Identity,
    Result,
    SearchAnswer,
    VectorInfo,
)
from knowledge_store.retrieval.adaptive import AdaptiveParams, AdaptiveWeights, adaptive_weights
from knowledge_store.retrieval.fusion import Fused, RankedList, convex, rrf
from knowledge_store.retrieval.retrievers import (
    Candidate,
    Ranking,
    Request,
    Retriever,
    make_retrievers,
)

__all__ = [
    "CANDIDATES",
    "DEFAULT_DEPTH",
    "DEFAULT_MODE",
    "DEFAULT_WEIGHTS",
    "EVIDENCE_PER_RESULT",
    "MODES",
    "SEEDS",
    "Fuser",
    "Fusion",
    "fuse_stages",
    "search",
    "supersede",
]

#: Candidates each retriever returns (chunk hits before folding; entities).
CANDIDATES = 100
MODES: tuple[str, ...] = ("rrf", "convex", "adaptive")
#: The fusion mode used when none is given.
DEFAULT_MODE = "adaptive"
#: Per-list weights by mode; a list not named here weighs 1.
DEFAULT_WEIGHTS: Mapping[str, Mapping[str, float]] = {
    "rrf": {"vector": 1.0, "lexical": 1.0, "graph": 0.05, "sql": 1.0},
    "convex": {"vector": 0.5, "lexical": 0.5, "graph": 0.05, "sql": 1.0},
    "adaptive": {"vector": 0.5, "lexical": 0.5, "graph": 0.05, "sql": 1.0},
}
#: ``adaptive``: the mode its per-query weights fuse with, and how the query scales
#: them (:mod:`.adaptive`; chosen by bench/eval_adaptive.py, docs/relevance.md).
ADAPTIVE_BASE = "convex"
ADAPTIVE = AdaptiveParams(question=0.5, identifier=1.0)
#: How many fused entities of the query stage seed the expand stage.
SEEDS = 10
DEFAULT_DEPTH = 1
MAX_DEPTH = 3
EVIDENCE_PER_RESULT = 3
_SUCCESSOR_ROUNDS = 3

EmbedderArg = Embedder | Callable[[], Embedder]


class Fuser(Protocol):
    """Anything that fuses ranked lists (a :class:`Fusion`, or a variant under evaluation)."""

    def fuse(self, lists: Sequence[RankedList]) -> list[Fused]: ...


@dataclass(frozen=True)
class Fusion:
    """How lists fuse: the mode and the per-list weights (defaults overlaid by the caller's)."""

    mode: str = DEFAULT_MODE
    weights: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def of(cls, mode: str | None, weights: Mapping[str, float] | None = None) -> Fusion:
        chosen = mode or DEFAULT_MODE
        if chosen not in MODES:
            raise InvalidRequest(
                f"unknown fusion mode {chosen!r}; use one of: {', '.join(MODES)}",
                field="mode",
                allowed=list(MODES),
            )
        return cls(chosen, {**DEFAULT_WEIGHTS[chosen], **(weights or {})})

    def weight(self, name: str) -> float:
        return float(self.weights.get(name, 1.0))

    def for_query(self, text: str | None) -> tuple[Fusion, AdaptiveWeights | None]:
        """The fusion for one query: ``adaptive`` picks its weights from the text (and says why)."""
        if self.mode != "adaptive" or text is None:
            return self, None
        chosen = adaptive_weights(text, self.weights, ADAPTIVE)
        return Fusion(ADAPTIVE_BASE, chosen.weights), chosen

    def fuse(self, lists: Sequence[RankedList]) -> list[Fused]:
        """Fuse ``lists``; an entity found only by lists of weight 0 is left out."""
        weights = {lst.name: self.weight(lst.name) for lst in lists}
        mode = ADAPTIVE_BASE if self.mode == "adaptive" else self.mode
        fused = (rrf if mode == "rrf" else convex)(lists, weights=weights)
        return [
            f
            for f in fused
            if any(rank is not None and weights[name] > 0 for name, rank in f.ranks.items())
        ]


def fuse_stages(
    fusion: Fuser,
    query_lists: Sequence[RankedList],
    expand: Callable[[tuple[str, ...]], Sequence[RankedList]],
    *,
    seeds: int = SEEDS,
) -> tuple[list[Fused], tuple[str, ...], list[RankedList]]:
    """Steps 3–4: fuse the query lists, expand from the top ``seeds``, fuse everything.

    Returns ``(final fused ranking, the seeds, the expand lists)``. Shared by
    the planner and the evaluation, so both rank the same way.
    """
    first = fusion.fuse(query_lists)
    top = tuple(f.uid for f in first[:seeds])
    expanded = list(expand(top)) if top else []
    if not any(lst.items for lst in expanded):
        return first, top, expanded
    return fusion.fuse([*query_lists, *expanded]), top, expanded


def supersede(
    ranked: Sequence[str], successor_of: Mapping[str, str]
) -> list[tuple[str, str | None]]:
    """Place each successor just above the entity it supersedes — pure.

    ``ranked`` is a ranking of uids; ``successor_of`` maps a superseded uid
    to its (visible) successor. A successor ranked higher stays where it is;
    one ranked lower moves up; one absent is inserted. Returns ``(uid,
    superseded_by)`` in the new order. Each uid is handled once, so a cycle
    of successors terminates.
    """
    order = list(dict.fromkeys(ranked))
    marks: dict[str, str] = {}
    i = 0
    while i < len(order):
        uid = order[i]
        new = successor_of.get(uid)
        if new is None or new == uid or uid in marks:
            i += 1
            continue
        marks[uid] = new
        if new in order[:i]:
            i += 1
            continue
        if new in order:
            order.remove(new)
        order.insert(i, new)  # the successor takes the slot; the old one follows it
    return [(uid, marks.get(uid)) for uid in order]


def _embedder_source(embedder: EmbedderArg) -> Callable[[], Embedder]:
    if isinstance(embedder, Embedder):
        return lambda: embedder
    return embedder


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


def search(
    engine: Engine,
    embedder: EmbedderArg,
    identity: Identity,
    text: str | None,
    *,
    k: int = 10,
    filters: Filters | None = None,
    mode: str | None = None,
    weights: Mapping[str, float] | None = None,
    explain: bool = False,
    retrievers: Sequence[str | Retriever] | None = None,
    depth: int = DEFAULT_DEPTH,
) -> SearchAnswer:
    """Fused search (module docstring). ``text`` None or blank: a pure filter request."""
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 1000:
        raise InvalidRequest(f"k must be between 1 and 1000, not {k!r}", field="k")
    if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= MAX_DEPTH:
        raise BoundExceeded(
            f"depth {depth!r} is outside the bound of search's graph stage; use 1 to {MAX_DEPTH}",
            field="depth",
            minimum=1,
            maximum=MAX_DEPTH,
        )
    fusion = Fusion.of(mode, None)
    configured = make_retrievers(engine, _embedder_source(embedder), retrievers)
    names = [r.name for r in configured]
    unknown = sorted(set(weights or {}) - set(names))
    if unknown:
        raise InvalidRequest(
            f"--weights names {', '.join(map(repr, unknown))}, which is not a configured list;"
            f" the lists are {', '.join(names)}",
            allowed=names,
        )
    filters = filters or Filters()
    query = text if text is not None and text.strip() else None
    requested = Fusion.of(fusion.mode, weights)
    fusion, adapted = requested.for_query(query)
    request = Request(query, filters, k=max(CANDIDATES, k), depth=depth)

    started = time.perf_counter()
    rankings: dict[str, Ranking] = {}
    for retriever in configured:
        if retriever.stage == "query":
            rankings[retriever.name] = retriever.run(identity, request)
    query_lists = [rk.entity_list() for rk in rankings.values() if rk.ran]

    expanders = [r for r in configured if r.stage == "expand"]
    t_fuse = 0.0

    def expand(seeds: tuple[str, ...]) -> list[RankedList]:
        nonlocal t_fuse
        seeded = dataclasses.replace(request, seeds=seeds)
        out = []
        for retriever in expanders:
            ranking = retriever.run(identity, seeded)
            rankings[retriever.name] = ranking
            if ranking.ran:
                out.append(ranking.entity_list())
        return out

    t0 = time.perf_counter()
    fused, seeds, _ = fuse_stages(fusion, query_lists, expand)
    t_stages = time.perf_counter() - t0
    expand_ms = sum(sum(rankings[r.name].ms.values()) for r in expanders if r.name in rankings)

    t1 = time.perf_counter()
    candidates = _candidates(rankings.values())
    window = [f.uid for f in fused[:k]]
    successor_of = _successors(engine, identity, window, filters)
    missing = sorted({s for s in successor_of.values() if s not in candidates})
    if missing:
        found = engine.sql(identity, Filters(uids=tuple(missing)), k=min(len(missing), 1000))
        for h in found.hits:
            candidates[h.uid] = Candidate(h.uid, 0.0, h.title, h.type, h.href)
    by_uid = {f.uid: f for f in fused}
    ordered = supersede(window, successor_of)
    t_supersede = time.perf_counter() - t1

    evidence = _evidence(rankings.values())
    kept = [(uid, sup) for uid, sup in ordered[:k] if uid in candidates]
    # A successor moved up or inserted takes the score of the slot it fills, so
    # scores never increase down the list: a backward running maximum.
    scores = [by_uid[uid].score if uid in by_uid else 0.0 for uid, _ in kept]
    for i in range(len(scores) - 2, -1, -1):
        scores[i] = max(scores[i], scores[i + 1])
    results: list[Result] = []
    for (uid, superseded_by), score in zip(kept, scores, strict=True):
        info = candidates[uid]
        ranks: dict[str, int | None] = dict.fromkeys([*LIST_NAMES, *names])
        f = by_uid.get(uid)
        if f is not None:
            ranks.update(f.ranks)
        results.append(
            Result(
                uid=uid,
                title=info.title,
                type=info.type,
                href=info.href,
                score=score,
                ranks=ranks,
                superseded_by=superseded_by,
                evidence=tuple(evidence.get(uid, ())),
            )
        )
    total = time.perf_counter() - started
    content_root = next(
        (rk.content_root for rk in rankings.values() if rk.content_root is not None),
        engine.content_root(),
    )
    vector_info = _vector_info(rankings.values())
    details: dict[str, Any] | None = None
    if explain:
        ms: dict[str, float] = {}
        for rk in rankings.values():
            for stage, value in rk.ms.items():
                ms[stage] = ms.get(stage, 0.0) + value
        ms["fuse"] = _ms(max(t_stages - expand_ms / 1000.0, 0.0))
        ms["supersede"] = _ms(t_supersede)
        ms["total"] = _ms(total)
        ms["total_without_embed"] = round(ms["total"] - ms.get("embed", 0.0), 3)
        shown = max(k, 10)
        details = {
            "mode": requested.mode,
            "weights": {name: fusion.weight(name) for name in names},
            **({"adaptive": adapted.explain()} if adapted is not None else {}),
            "retrievers": [
                {
                    "name": r.name,
                    "granularity": r.granularity,
                    "stage": r.stage,
                    "ran": rankings[r.name].ran if r.name in rankings else False,
                    "candidates": len(rankings[r.name].candidates) if r.name in rankings else 0,
                    **(dict(rankings[r.name].details) if r.name in rankings else {}),
                }
                for r in configured
            ],
            "seeds": list(seeds),
            "depth": depth,
            "lists": {
                name: [uid for uid, _ in rankings[name].entity_list().items[:shown]]
                if name in rankings and rankings[name].ran
                else None
                for name in names
            },
            "fused": [r.uid for r in results],
            "ms": ms,
        }
    return SearchAnswer(content_root, requested.mode, results, vector_info, details)


def _successors(
    engine: Engine, identity: Identity, uids: Sequence[str], filters: Filters
) -> dict[str, str]:
    """Visible successors of ``uids``, and of the successors in turn (a few rounds)."""
    out: dict[str, str] = {}
    asked: set[str] = set()
    pending = list(uids)
    for _ in range(_SUCCESSOR_ROUNDS):
        pending = [u for u in dict.fromkeys(pending) if u not in asked]
        if not pending:
            break
        asked.update(pending)
        found = engine.successors(identity, pending, filters)
        out.update(found)
        pending = list(found.values())
    return out


def _candidates(rankings: Any) -> dict[str, Candidate]:
    """uid → the first candidate seen for it (title, type, href)."""
    out: dict[str, Candidate] = {}
    for ranking in rankings:
        for c in ranking.candidates:
            out.setdefault(c.uid, c)
    return out


def _evidence(rankings: Any) -> dict[str, list[Evidence]]:
    """uid → its best chunks across the chunk lists (Σ 1/(60 + chunk rank)), best first."""
    # keyed by (uid, chunk id): a chunk id is a 53-bit hash, unique within an entity
    best: dict[tuple[str, int], tuple[float, str, Evidence]] = {}
    for ranking in rankings:
        if ranking.granularity != "chunk":
            continue
        for rank, c in enumerate(ranking.candidates, start=1):
            if c.chunk is None:
                continue
            key = (c.uid, c.chunk.chunk_id)
            prev = best.get(key)
            score = 1.0 / (60 + rank) + (prev[0] if prev else 0.0)
            best[key] = (score, c.uid, c.chunk)
    grouped: dict[str, list[tuple[float, Evidence]]] = {}
    for score, uid, chunk in best.values():
        grouped.setdefault(uid, []).append((score, chunk))
    return {
        uid: [e for _, e in sorted(items, key=lambda t: (-t[0], t[1].chunk_id))][
            :EVIDENCE_PER_RESULT
        ]
        for uid, items in grouped.items()
    }


def _vector_info(rankings: Any) -> VectorInfo | None:
    for ranking in rankings:
        if ranking.vector is not None:
            info: VectorInfo = ranking.vector
            return info
    return None
