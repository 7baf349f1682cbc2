"""Retrievers: the plug-in interface of fused search (DESIGN §3).

A retriever is a named object that ranks chunks or entities for a request, on
a reader (one point-in-time view for one identity)::

    class Retriever(Protocol):
        name: str                       # its list name: a key of ``ranks`` and ``--weights``
        granularity: "chunk" | "entity" # chunk hits are folded to their entity
        stage: "query" | "expand"       # query: runs on the request; expand: on the seeds
        def run(self, reader, request) -> Ranking

``query`` retrievers run on the text and FILTERS (vector, lexical; sql when
the request has no text). ``expand`` retrievers run after the query lists are
fused, seeded with the top fused entities (graph). The planner
(:mod:`knowledge_store.retrieval.search`) fuses whatever retrievers are
configured, so adding one — learned sparse, a late-interaction rerank, a
title match — is a class and one :func:`register_retriever` call; no other
code changes. Every retriever reads through the reader it is given, so the
ACL and the FILTERS apply inside its own query, and every list of an answer
comes from the same snapshot. Retrievers rank ids: the planner hydrates what
the answer returns, once, after fusion.

The registry maps a name to a factory (no arguments) making the retriever.
An unknown name fails listing the registered ones.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol, runtime_checkable

from knowledge_store.engines.base import EntityCard, RankedChunks
from knowledge_store.engines.components import ListQuery
from knowledge_store.errors import InvalidRequest
from knowledge_store.model import (
    DEFAULT_DEPTH,
    DEFAULT_ORDER,
    MAX_K,
    Filters,
    GraphQuery,
    VectorInfo,
    register_list,
    unregister_list,
)
from knowledge_store.retrieval.fusion import RankedList, fold_chunks

if TYPE_CHECKING:
    from knowledge_store.retrieval.reader import StoreReader

__all__ = [
    "BUILT_IN",
    "Candidate",
    "FuzzyRetriever",
    "Granularity",
    "GraphRetriever",
    "LexicalRetriever",
    "Ranking",
    "Request",
    "Retriever",
    "RetrieverFactory",
    "SqlRetriever",
    "Stage",
    "VectorRetriever",
    "make_retrievers",
    "register_retriever",
    "retriever_names",
    "unregister_retriever",
    "weighted_retrievers",
]

#: Chunk hits a chunk retriever asks for per entity candidate. Chunks fold to their
#: entity, and on the shared eval sets 100 chunk hits folded to only 32–42 entities,
#: so a list's "top 100" was a top 35. Four per entity restores each list's recall,
#: but the fused answer — what search returns — does not gain: measured again after
#: issue 12 made the primitives rank ids and hydrate only what the answer returns
#: (``bench/eval_overfetch.py``, ``ks eval``'s path, code samples excluded; ×4 − ×1
#: with the paired bootstrap 95 % interval):
#:
#: ==============  =========================  ===========================  ==========================
#: set             lexical / vector R@100     fused nDCG@10                fused R@100
#: ==============  =========================  ===========================  ==========================
#: postgres-docs   +0.011 / +0.016 (both >0)  +0.0016 [−0.0009, +0.0041]  −0.0019 [−0.0055, +0.0012]
#: sqlite-git-faq  +0.133 / +0.107 (both >0)  −0.0023 [−0.0216, +0.0130]  −0.0071 [−0.0214, +0.0000]
#: ==============  =========================  ===========================  ==========================
#:
#: Fused Recall@100 does not rise on either set (the fused list already draws on both
#: lists' ~35 entities plus the graph), so it stays 1: a deeper primitive for no gain.
CHUNKS_PER_ENTITY = 1

Granularity = Literal["chunk", "entity"]
Stage = Literal["query", "expand"]


@dataclass(frozen=True)
class Request:
    """What the planner asks every retriever.

    ``text`` is None for a pure filter request. ``k`` is the number of
    candidates a retriever should return (the planner fuses more than it
    answers). ``seeds`` and ``depth`` are for ``expand`` retrievers.
    """

    text: str | None
    filters: Filters = field(default_factory=Filters)
    k: int = 100
    seeds: tuple[str, ...] = ()
    depth: int = DEFAULT_DEPTH

    @property
    def has_text(self) -> bool:
        return self.text is not None and bool(self.text.strip())


class Candidate(NamedTuple):
    """One ranked item: an entity, or (``chunk_id`` set) one chunk of an entity.

    ``card`` is what the retriever already knows of the entity (title, type,
    href), when it does; chunk candidates are hydrated after fusion. A named
    tuple: a fused search makes several hundred (a frozen dataclass costs 3× as
    much to make).
    """

    uid: str
    score: float
    chunk_id: int | None = None
    card: EntityCard | None = None


@dataclass(frozen=True)
class Ranking:
    """A retriever's answer: candidates best first, and how it was computed.

    ``ran`` is False when the retriever does not apply to the request (sql
    when there is a text, graph without seeds): its ranks stay null.
    ``floor`` is the score of every entity left out, when known
    (:class:`~knowledge_store.retrieval.fusion.RankedList`).
    """

    name: str
    granularity: Granularity
    candidates: Sequence[Candidate] = ()
    ms: Mapping[str, float] = field(default_factory=dict)
    vector: VectorInfo | None = None
    ran: bool = True
    details: Mapping[str, Any] = field(default_factory=dict)
    floor: float | None = None

    def entity_list(self) -> RankedList:
        """The ranked entity list fusion takes: chunk candidates fold to their best chunk."""
        if self.granularity == "entity":
            return RankedList(self.name, [(c.uid, c.score) for c in self.candidates], self.floor)
        folded = fold_chunks(
            [
                (c.uid, c.chunk_id if c.chunk_id is not None else i, c.score)
                for i, c in enumerate(self.candidates)
            ]
        )
        return RankedList(self.name, [(uid, score) for uid, score, _ in folded], self.floor)


@runtime_checkable
class Retriever(Protocol):
    """Ranks chunks or entities for a request on a reader (see the module docstring)."""

    @property
    def name(self) -> str: ...

    @property
    def granularity(self) -> Granularity: ...

    @property
    def stage(self) -> Stage: ...

    def run(self, reader: StoreReader, request: Request) -> Ranking: ...


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


def _chunks_to_ask(k: int) -> int:
    return min(MAX_K, k * CHUNKS_PER_ENTITY)


def _first_entities(ranked: RankedChunks, k: int) -> list[Candidate]:
    """The candidates of the first ``k`` distinct entities' chunks, in rank order."""
    kept: set[str] = set()
    out = []
    for chunk_id, uid, score in zip(ranked.ids, ranked.uids, ranked.scores, strict=True):
        if uid not in kept:
            if len(kept) == k:
                continue
            kept.add(uid)
        out.append(Candidate(uid, score, chunk_id))
    return out


def _every_match(ranked: RankedChunks, asked: int, kept: Sequence[Candidate]) -> bool:
    """The engine ran out of matches before ``asked`` and no entity was cut: the whole answer.

    Both engines answer the first ``asked`` visible matches — the ACL and FILTERS as
    clauses of the query, or (embedded) no clause when nothing is hidden, or a
    post-filtered over-fetch that falls back to the clauses unless it fetched every match
    — so a short answer is the index running out (the embedded reader's final check drops
    only hits a concurrent publish made invisible, and fetches a slack for them).
    """
    return len(ranked.ids) < asked and len(kept) == len(ranked.ids)


class LexicalRetriever:
    """BM25 over chunks (the reader's ``lexical``); needs a text.

    Asks for :data:`CHUNKS_PER_ENTITY` chunks per entity candidate and keeps the
    chunks of the first ``k`` entities. When the engine had fewer matches than
    asked, the list holds every match, and every entity outside it scored 0: its
    ``floor`` is 0 (convex fusion normalises it over ``[0, top]``; an identifier
    found on two pages gives the second one a share, not nothing). Measured on
    both shared eval sets (docs/relevance.md, section 7): postgres-docs fused
    nDCG@10 +0.0061 [+0.0033, +0.0093] (388 of 1,500 lists hold every match),
    sqlite-git-faq unchanged (no question's list does).
    """

    name = "lexical"
    granularity: Granularity = "chunk"
    stage: Stage = "query"

    def run(self, reader: StoreReader, request: Request) -> Ranking:
        if not request.has_text or request.text is None:
            return Ranking(self.name, self.granularity, ran=False)
        started = time.perf_counter()
        asked = _chunks_to_ask(request.k)
        ranked = reader.engine.rank(self.name, ListQuery(request.text, asked, request.filters))
        kept = _first_entities(ranked, request.k)
        # BM25 scores are ≥ 0; a ranker with other scores (pg_textsearch's are negated) has no floor.
        every = _every_match(ranked, asked, kept) and min(ranked.scores, default=0.0) >= 0
        return Ranking(
            self.name,
            self.granularity,
            kept,
            {"lexical": _ms(time.perf_counter() - started)},
            details={"every_match": every},
            floor=0.0 if every else None,
        )


class FuzzyRetriever(LexicalRetriever):
    """Typo-tolerant BM25 (the engine's ``fuzzy`` component): the lexical list of the query
    with each word that no readable chunk holds replaced by the nearest one that some do
    (``ks lexical replicaton`` finds nothing; ``ks fuzzy replicaton`` searches
    ``replication``). Not in fusion by default: ``weights={"fuzzy": w}`` adds it."""

    name = "fuzzy"


class VectorRetriever:
    """Dense nearest chunks (the reader's ``vector``) of the embedded text; needs a text.

    Asks for :data:`CHUNKS_PER_ENTITY` chunks per entity candidate and keeps the
    chunks of the first ``k`` entities.
    """

    name = "vector"
    granularity: Granularity = "chunk"
    stage: Stage = "query"

    def run(self, reader: StoreReader, request: Request) -> Ranking:
        if not request.has_text or request.text is None:
            return Ranking(self.name, self.granularity, ran=False)
        started = time.perf_counter()
        query = reader.embed(request.text)
        embedded = time.perf_counter()
        asked = ListQuery(request.text, _chunks_to_ask(request.k), request.filters, query)
        ranked = reader.engine.rank(self.name, asked)
        return Ranking(
            self.name,
            self.granularity,
            _first_entities(ranked, request.k),
            {"embed": _ms(embedded - started), "vector": _ms(time.perf_counter() - embedded)},
            vector=ranked.vector,
        )


class SqlRetriever:
    """The ``sql`` primitive as a list — only for a request without text.

    With a text, FILTERS already restrict every list inside its own query (sql
    is the pre-filter) and this list does not run: its ranks stay null.
    Entities come in the primitive's default order (most recently updated
    first); the score falls linearly with the rank.
    """

    name = "sql"
    granularity: Granularity = "entity"
    stage: Stage = "query"

    def run(self, reader: StoreReader, request: Request) -> Ranking:
        if request.has_text:
            return Ranking(self.name, self.granularity, ran=False)
        started = time.perf_counter()
        answer = reader.engine.sql(request.filters, DEFAULT_ORDER, request.k)
        n = len(answer.hits)
        return Ranking(
            self.name,
            self.granularity,
            [
                Candidate(
                    h.uid,
                    float(n - h.rank + 1),
                    card=EntityCard(h.uid, h.title, h.type, h.href, h.updated_at),
                )
                for h in answer.hits
            ],
            {"sql": _ms(time.perf_counter() - started)},
        )


class GraphRetriever:
    """Entities linked to the seeds (the reader's ``graph``), within FILTERS.

    Seeded by the top fused entities of the query stage, never by the text.
    The graph walk applies the ACL and says which entities it reached pass
    FILTERS (in the hop's own statement: the walk is one statement per hop
    beside the starts'), so an entity outside the filters never enters the
    list. The score is ``paths / hops``.
    """

    name = "graph"
    granularity: Granularity = "entity"
    stage: Stage = "expand"

    def run(self, reader: StoreReader, request: Request) -> Ranking:
        if not request.seeds:
            return Ranking(self.name, self.granularity, ran=False)
        started = time.perf_counter()
        query = GraphQuery(starts=request.seeds, depth=request.depth, k=request.k)
        walk = reader.engine.walk(query, request.filters)
        seeds = set(request.seeds)
        hits = [r for r in walk.reached[: request.k] if r.uid not in seeds and r.passes]
        return Ranking(
            self.name,
            self.granularity,
            [
                Candidate(
                    h.uid,
                    h.paths / max(h.hops, 1),
                    card=EntityCard(h.uid, h.title, h.type, h.href, h.updated_at),
                )
                for h in hits
            ],
            {"graph": _ms(time.perf_counter() - started)},
            details={"capped": walk.capped},
        )


RetrieverFactory = Callable[[], Retriever]

_FACTORIES: dict[str, RetrieverFactory] = {
    "vector": VectorRetriever,
    "lexical": LexicalRetriever,
    "sql": SqlRetriever,
    "graph": GraphRetriever,
    "fuzzy": FuzzyRetriever,
}
#: The retrievers fused search runs by default, in this order.
BUILT_IN: tuple[str, ...] = ("vector", "lexical", "sql", "graph")
#: Built-in retrievers fused search runs only when asked (a weight names it): ``fuzzy``
#: (docs/relevance.md: measured, it does not help the shared sets' fused ranking).
_OFF_BY_DEFAULT: tuple[str, ...] = ("fuzzy",)
for _name in _FACTORIES:
    register_list(_name)


def register_retriever(name: str, factory: RetrieverFactory, *, replace: bool = False) -> None:
    """Make ``name`` available to ``search(..., retrievers=[…, name])``."""
    if not name or not name.replace("_", "").replace("-", "").isalnum():
        raise InvalidRequest(
            f"a retriever name is letters, digits, '_' or '-', not {name!r}", retriever=name
        )
    if name in _FACTORIES and not replace:
        raise InvalidRequest(
            f"a retriever named {name!r} is already registered; pass replace=True to replace it",
            retriever=name,
        )
    _FACTORIES[name] = factory
    register_list(name)


def unregister_retriever(name: str) -> None:
    """Remove a registered retriever (the built-ins stay)."""
    if name in BUILT_IN or name in _OFF_BY_DEFAULT:
        raise InvalidRequest(f"the built-in retriever {name!r} cannot be removed")
    _FACTORIES.pop(name, None)
    unregister_list(name)


def retriever_names() -> tuple[str, ...]:
    """Every registered name, the default ones first."""
    return BUILT_IN + tuple(n for n in _FACTORIES if n not in BUILT_IN)


def weighted_retrievers(*weights: Mapping[str, float] | None) -> list[str] | None:
    """The retrievers a search with ``weights`` runs when none are configured: the default
    ones, and any other registered list a weight names (``{"fuzzy": 1}`` adds ``fuzzy``);
    None: just the default ones. The planner and the evaluation both ask here."""
    named = [n for w in weights for n in (w or {}) if n not in BUILT_IN and n in _FACTORIES]
    return [*BUILT_IN, *dict.fromkeys(named)] if named else None


def make_retrievers(configured: Sequence[str | Retriever] | None = None) -> list[Retriever]:
    """Instances for ``configured`` (names or ready retrievers; default :data:`BUILT_IN`)."""
    out: list[Retriever] = []
    for item in BUILT_IN if configured is None else configured:
        if isinstance(item, str):
            factory = _FACTORIES.get(item)
            if factory is None:
                raise InvalidRequest(
                    f"unknown retriever {item!r}; use one of: {', '.join(retriever_names())}",
                    retriever=item,
                    allowed=list(retriever_names()),
                )
            out.append(factory())
        elif isinstance(item, Retriever):
            out.append(item)
        else:
            raise InvalidRequest(
                f"a retriever is a registered name or an object with name, granularity, stage"
                f" and run(reader, request); got {type(item).__name__}"
            )
    names = [r.name for r in out]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InvalidRequest(f"retriever {', '.join(map(repr, twice))} is configured twice")
    if not out:
        raise InvalidRequest("search needs at least one retriever")
    return out
