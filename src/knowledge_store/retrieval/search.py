"""The fused planner (DESIGN §3): plan → run → supersede → answer (and explain).

1. **plan** (:func:`plan`): the validated request becomes a :class:`Plan` —
   which retrievers, the fusion mode and weights, how many candidates;
2. **run** (:func:`run`), on one reader (one snapshot, one identity
   expansion): the ``query`` retrievers run on the request — vector and
   lexical on the text, FILTERS inside each query; ``sql`` is a list only
   when there is no text (with a text it is the pre-filter and its rank
   stays null); chunk hits fold to their entity (best chunk rank per list);
   the query lists fuse; the top :data:`SEEDS` fused entities (not the
   query) seed the ``expand`` retrievers — graph, depth 1 by default; every
   list fuses again (``rrf`` or ``convex``, per-list weights): one result
   per entity, with its rank in every list;
3. **supersede** (:func:`supersede`, pure): a result with a visible successor
   (that passes the FILTERS) has the successor placed just above it
   (inserted if it was not a result, moved up if it ranked lower) and carries
   ``superseded_by``;
4. **answer**: what the answer returns is hydrated once, after fusion — the
   results' cards and at most :data:`EVIDENCE_PER_RESULT` evidence chunks
   each; :func:`explain` describes the plan and the run.

Fusion itself is the pure functions of :mod:`.fusion`; the stage logic the
planner and the evaluation share is :func:`fuse_stages`.

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
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from knowledge_store.engines.base import ChunkRecord, EntityCard
from knowledge_store.errors import BoundExceeded, InvalidRequest
from knowledge_store.model import (
    DEFAULT_DEPTH,
    FUSION_MODES,
    GRAPH_MAX_DEPTH,
    LIST_NAMES,
    Filters,
    Result,
    SearchAnswer,
)
from knowledge_store.retrieval.adaptive import AdaptiveParams, AdaptiveWeights, adaptive_weights
from knowledge_store.retrieval.fusion import Fused, RankedList, convex, rrf
from knowledge_store.retrieval.retrievers import (
    Ranking,
    Request,
    Retriever,
    make_retrievers,
    weighted_retrievers,
)

if TYPE_CHECKING:
    from knowledge_store.retrieval.reader import StoreReader

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
    "Plan",
    "Run",
    "answer",
    "evidence_item",
    "explain",
    "fuse_stages",
    "plan",
    "result_items",
    "run",
    "search",
    "supersede",
]

#: Candidates each retriever returns (chunk hits before folding; entities).
CANDIDATES = 100
MODES: tuple[str, ...] = FUSION_MODES
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
EVIDENCE_PER_RESULT = 3
_SUCCESSOR_ROUNDS = 3


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
        silent = [name for name, w in weights.items() if w <= 0]
        if not silent:
            return fused
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
    """Fuse the query lists, expand from the top ``seeds``, fuse everything.

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


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


# -- plan ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Plan:
    """What a search will do: validated, before anything runs."""

    text: str | None
    filters: Filters
    k: int
    fusion: Fusion
    retrievers: tuple[Retriever, ...]
    depth: int = DEFAULT_DEPTH
    explain: bool = False
    #: The mode asked for (``fusion`` is what this query fuses with: ``adaptive``
    #: resolves to its base mode with per-query weights, ``adapted`` says why).
    mode: str = DEFAULT_MODE
    adapted: AdaptiveWeights | None = None
    #: Evidence chunks hydrated per result (0: the caller reads the entities instead).
    evidence: int = EVIDENCE_PER_RESULT

    @property
    def request(self) -> Request:
        """What each retriever is asked (more candidates than the answer returns)."""
        return Request(self.text, self.filters, k=max(CANDIDATES, self.k), depth=self.depth)

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.retrievers]


def plan(
    text: str | None,
    *,
    k: int,
    filters: Filters,
    mode: str | None = None,
    weights: Mapping[str, float] | None = None,
    explain: bool = False,
    retrievers: Sequence[str | Retriever] | None = None,
    depth: int = DEFAULT_DEPTH,
    evidence: int = EVIDENCE_PER_RESULT,
) -> Plan:
    """Validate and choose: the retrievers, the fusion and its weights (each list named)."""
    if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= GRAPH_MAX_DEPTH:
        raise BoundExceeded(
            f"depth {depth!r} is outside the bound of search's graph stage; use 1 to"
            f" {GRAPH_MAX_DEPTH}",
            field="depth",
            minimum=1,
            maximum=GRAPH_MAX_DEPTH,
        )
    fusion = Fusion.of(mode, None)
    if retrievers is None:  # the default lists, and any other a weight names (``fuzzy=1``)
        retrievers = weighted_retrievers(weights)
    configured = tuple(make_retrievers(retrievers))
    names = [r.name for r in configured]
    unknown = sorted(set(weights or {}) - set(names))
    if unknown:
        raise InvalidRequest(
            f"weights names {', '.join(map(repr, unknown))}, which is not a configured list;"
            f" the lists are {', '.join(names)}",
            field="weights",
            allowed=names,
        )
    query = text if text is not None and text.strip() else None
    requested = Fusion.of(fusion.mode, weights)
    chosen, adapted = requested.for_query(query)
    return Plan(
        query, filters, k, chosen, configured, depth, explain, requested.mode, adapted, evidence
    )


# -- run ------------------------------------------------------------------------------------------------
@dataclass
class Run:
    """What a run found: the rankings, the fused and superseded order, timings."""

    rankings: dict[str, Ranking] = field(default_factory=dict)
    fused: list[Fused] = field(default_factory=list)
    seeds: tuple[str, ...] = ()
    ordered: list[tuple[str, str | None]] = field(default_factory=list)
    ms: dict[str, float] = field(default_factory=dict)
    started: float = field(default_factory=time.perf_counter)


Hook = Callable[[str], None]


def run(reader: StoreReader, p: Plan, *, after_each: Hook | None = None) -> Run:
    """Run ``p`` on ``reader``: retrievers, fusion, expansion, supersession.

    ``after_each`` is called with a retriever's name after it ran (a test
    publishes from another process there: the answer must not change).
    """
    out = Run()
    request = p.request
    for retriever in p.retrievers:
        if retriever.stage == "query":
            out.rankings[retriever.name] = retriever.run(reader, request)
            if after_each is not None:
                after_each(retriever.name)
    query_lists = [rk.entity_list() for rk in out.rankings.values() if rk.ran]
    # an expand list of weight 0 could change nothing in the fused ranking: it does not run
    expanders = [r for r in p.retrievers if r.stage == "expand" and p.fusion.weight(r.name) > 0]

    def expand(seeds: tuple[str, ...]) -> list[RankedList]:
        seeded = dataclasses.replace(request, seeds=seeds)
        lists = []
        for retriever in expanders:
            ranking = retriever.run(reader, seeded)
            out.rankings[retriever.name] = ranking
            if after_each is not None:
                after_each(retriever.name)
            if ranking.ran:
                lists.append(ranking.entity_list())
        return lists

    t0 = time.perf_counter()
    out.fused, out.seeds, _ = fuse_stages(p.fusion, query_lists, expand)
    t_stages = time.perf_counter() - t0
    expand_ms = sum(
        sum(out.rankings[r.name].ms.values()) for r in expanders if r.name in out.rankings
    )
    t1 = time.perf_counter()
    window = [f.uid for f in out.fused[: p.k]]
    out.ordered = supersede(window, _successors(reader, window, p.filters))
    out.ms = {
        "fuse": _ms(max(t_stages - expand_ms / 1000.0, 0.0)),
        "supersede": _ms(time.perf_counter() - t1),
    }
    return out


def _successors(reader: StoreReader, uids: Sequence[str], filters: Filters) -> dict[str, str]:
    """Visible successors of ``uids``, and of the successors in turn (a few rounds)."""
    out: dict[str, str] = {}
    asked: set[str] = set()
    pending = list(uids)
    for _ in range(_SUCCESSOR_ROUNDS):
        pending = [u for u in dict.fromkeys(pending) if u not in asked]
        if not pending:
            break
        asked.update(pending)
        found = reader.engine.successors(pending, filters)
        out.update(found)
        pending = list(found.values())
    return out


# -- answer --------------------------------------------------------------------------------------------
def evidence_item(c: ChunkRecord) -> dict[str, Any]:
    """A result's evidence chunk as its answer shows it (DESIGN §6: ``evidence``)."""
    return {
        "chunk_id": c.public_id,
        "text": c.text,
        "heading": c.heading,
        "start": c.start,
        "end": c.end,
        "location": c.location,
    }


def _evidence(
    rankings: Mapping[str, Ranking], wanted: Set[str], per_result: int
) -> dict[str, list[int]]:
    """uid → its best chunk ids across the chunk lists (Σ 1/(60 + chunk rank)), best first,
    for the ``wanted`` uids (the results)."""
    best: dict[int, tuple[float, str]] = {}
    for ranking in rankings.values():
        if ranking.granularity != "chunk":
            continue
        for rank, c in enumerate(ranking.candidates, start=1):
            if c.chunk_id is None or c.uid not in wanted:
                continue
            prev = best.get(c.chunk_id)
            best[c.chunk_id] = (1.0 / (60 + rank) + (prev[0] if prev else 0.0), c.uid)
    grouped: dict[str, list[tuple[float, int]]] = {}
    for chunk_id, (score, uid) in best.items():
        grouped.setdefault(uid, []).append((score, chunk_id))
    return {
        uid: [c for _, c in sorted(items, key=lambda t: (-t[0], t[1]))][:per_result]
        for uid, items in grouped.items()
    }


def answer(reader: StoreReader, p: Plan, r: Run) -> SearchAnswer:
    """The answer: the first ``k`` results, hydrated once (cards and evidence)."""
    started = time.perf_counter()
    window = r.ordered[: p.k]
    shown = {uid for uid, _ in window}
    cards: dict[str, EntityCard] = {}
    for ranking in r.rankings.values():
        for c in ranking.candidates:
            if c.card is not None and c.uid in shown:
                cards.setdefault(c.uid, c.card)
    evidence = _evidence(r.rankings, shown, p.evidence)
    similarity = _best_scores(r.rankings.get("vector"), shown)
    wanted = [cid for uid, _ in window for cid in evidence.get(uid, ())]
    chunks = reader.engine.chunks(wanted)
    for uid, _ in window:
        first = next((chunks[c] for c in evidence.get(uid, ()) if c in chunks), None)
        if first is not None and uid not in cards:
            cards[uid] = EntityCard(first.uid, first.title, first.type, first.href, None)
    missing = [uid for uid, _ in window if uid not in cards]
    cards.update(reader.engine.entities(missing))
    by_uid = {f.uid: f for f in r.fused}
    kept = [(uid, sup) for uid, sup in window if uid in cards]
    # A successor moved up or inserted takes the score of the slot it fills, so
    # scores never increase down the list: a backward running maximum.
    scores = [by_uid[uid].score if uid in by_uid else 0.0 for uid, _ in kept]
    for i in range(len(scores) - 2, -1, -1):
        scores[i] = max(scores[i], scores[i + 1])
    # Plain data, validated once by the answer (one call into pydantic's core for all).
    results: list[dict[str, Any]] = []
    for (uid, superseded_by), score in zip(kept, scores, strict=True):
        card = cards[uid]
        ranks: dict[str, int | None] = dict.fromkeys([*LIST_NAMES, *p.names])
        f = by_uid.get(uid)
        if f is not None:
            ranks.update(f.ranks)
        results.append(
            {
                "uid": uid,
                "title": card.title,
                "type": card.type,
                "href": card.href,
                "score": score,
                "ranks": ranks,
                "superseded_by": superseded_by,
                "evidence": [
                    evidence_item(chunks[i]) for i in evidence.get(uid, ()) if i in chunks
                ],
                "similarity": similarity.get(uid),
            }
        )
    r.ms["hydrate"] = _ms(time.perf_counter() - started)
    vector_info = next((rk.vector for rk in r.rankings.values() if rk.vector is not None), None)
    lexical = r.rankings.get("lexical")
    answered = SearchAnswer(
        content_root=reader.content_root,
        mode=p.mode,
        results=results,  # validated here, into Result
        vector=vector_info,
        words_matched=None if lexical is None or not lexical.ran else bool(lexical.candidates),
    )
    if not p.explain:
        return answered
    return answered.model_copy(update={"explain": explain(reader, p, r, answered.results)})


def result_items(p: Plan, r: Run) -> list[list[Any]]:
    """The results of a run as plain rows, to hydrate later (``retrieval/paging.py``): per
    result ``[uid, superseded_by, score, ranks, evidence chunk ids, similarity]``, in order —
    the first ``p.k`` of the fused and superseded ranking, each successor placed above what it
    supersedes taking the score of the slot it fills (as :func:`answer` does)."""
    window = r.ordered[: p.k]
    shown = {uid for uid, _ in window}
    evidence = _evidence(r.rankings, shown, p.evidence)
    similarity = _best_scores(r.rankings.get("vector"), shown)
    by_uid = {f.uid: f for f in r.fused}
    scores = [by_uid[uid].score if uid in by_uid else 0.0 for uid, _ in window]
    for i in range(len(scores) - 2, -1, -1):
        scores[i] = max(scores[i], scores[i + 1])
    return [
        [
            uid,
            superseded_by,
            float(score),
            {name: rank for name, rank in by_uid[uid].ranks.items()} if uid in by_uid else {},
            evidence.get(uid, []),
            similarity.get(uid),
        ]
        for (uid, superseded_by), score in zip(window, scores, strict=True)
    ]


#: Decimal places of a result's ``similarity``. An HNSW search and an exact scan score the
#: same chunk a float32 rounding apart (~1e-7), and which one ran depends on the share of
#: the store the caller can see; rounded, the figure is the same either way.
SIMILARITY_PLACES = 4


def _best_scores(ranking: Ranking | None, wanted: Set[str]) -> dict[str, float]:
    """uid → the best score of its chunks in ``ranking`` (the vector list: cosine), rounded,
    for the ``wanted`` uids."""
    best: dict[str, float] = {}
    if ranking is not None and ranking.ran:
        for c in ranking.candidates:
            if c.uid in wanted:
                best[c.uid] = max(c.score, best.get(c.uid, c.score))
    return {uid: round(float(score), SIMILARITY_PLACES) for uid, score in best.items()}


def explain(reader: StoreReader, p: Plan, r: Run, results: Sequence[Result]) -> dict[str, Any]:
    """The plan and the run side by side: retrievers, lists, seeds, timings, the snapshot."""
    ms: dict[str, float] = {}
    for rk in r.rankings.values():
        for stage, value in rk.ms.items():
            ms[stage] = ms.get(stage, 0.0) + value
    ms.update(fuse=r.ms["fuse"], supersede=r.ms["supersede"], hydrate=r.ms.get("hydrate", 0.0))
    ms["total"] = _ms(time.perf_counter() - r.started)
    ms["total_without_embed"] = round(ms["total"] - ms.get("embed", 0.0), 3)
    shown = max(p.k, 10)
    rankings = r.rankings
    return {
        "mode": p.mode,
        "weights": {name: p.fusion.weight(name) for name in p.names},
        **({"adaptive": p.adapted.explain()} if p.adapted is not None else {}),
        "retrievers": [
            {
                "name": rt.name,
                "granularity": rt.granularity,
                "stage": rt.stage,
                "ran": rankings[rt.name].ran if rt.name in rankings else False,
                "candidates": len(rankings[rt.name].candidates) if rt.name in rankings else 0,
                **(dict(rankings[rt.name].details) if rt.name in rankings else {}),
            }
            for rt in p.retrievers
        ],
        "seeds": list(r.seeds),
        "depth": p.depth,
        "lists": {
            name: [uid for uid, _ in rankings[name].entity_list().items[:shown]]
            if name in rankings and rankings[name].ran
            else None
            for name in p.names
        },
        "fused": [res.uid for res in results],
        "reader": reader.explain(),
        "ms": ms,
    }


def search(reader: StoreReader, p: Plan, *, after_each: Hook | None = None) -> SearchAnswer:
    """Fused search on one reader (module docstring)."""
    return answer(reader, p, run(reader, p, after_each=after_each))
