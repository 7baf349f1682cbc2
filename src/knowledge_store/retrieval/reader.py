"""``StoreReader``: every read of one request, on one point-in-time view.

``with store.reader(identity) as r:`` opens one engine reader — one catalog
snapshot, the derived indexes at that snapshot, the identity expanded once —
and every primitive, fused search, docs tool and content call made on ``r``
answers from it, with its one content root. Each method takes its request
model or the keyword arguments that build it (validated once, here), turns
the engine's ranked ids into the answer, and hydrates only what the answer
returns.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from knowledge_store.engines.base import RankedChunks, Reader, Vector
from knowledge_store.engines.components import ListQuery
from knowledge_store.engines.cursors import Cursors
from knowledge_store.errors import InvalidRequest, NotFound
from knowledge_store.graphquery.check import checked_query
from knowledge_store.ingest.embedding import Embedder
from knowledge_store.model import (
    AggregateAnswer,
    ChunkHit,
    ChunkHits,
    Content,
    Filters,
    GraphHits,
    Identity,
    QueryAnswer,
    SearchAnswer,
    SqlHits,
    VectorInfo,
    near_misses,
)
from knowledge_store.model.queries import unsearched_words
from knowledge_store.requests import (
    AggregateRequest,
    ContentRequest,
    DocsSearchRequest,
    FacetsRequest,
    FilterSpec,
    FuzzyRequest,
    GraphRequest,
    KnowledgeRequest,
    LearningPathRequest,
    LexicalRequest,
    QueryGraphRequest,
    RelatedRequest,
    Request,
    SearchRequest,
    SqlRequest,
    VectorRequest,
    XrefRequest,
)
from knowledge_store.retrieval import docs_tools, knowledge, paging
from knowledge_store.retrieval import search as planner
from knowledge_store.retrieval.retrievers import Retriever

__all__ = [
    "StoreReader",
    "TypesSeen",
    "lexical_request",
    "request_of",
    "search_request",
    "vector_request",
]

R = TypeVar("R", bound=Request)
Noted = TypeVar("Noted", ChunkHits, SearchAnswer, SqlHits, AggregateAnswer)


def request_of(model: type[R], given: object, **fields: Any) -> R:
    """``given`` if it is already the request, else the request built from ``fields``.

    A field passed as None takes the model's default.
    """
    if isinstance(given, model):
        return given
    return model.parse({k: v for k, v in fields.items() if v is not None})


def lexical_request(
    text: str | LexicalRequest,
    *,
    k: int | None,
    filters: Any,
    explain: bool,
    cursor: str | None = None,
) -> LexicalRequest:
    """The lexical request of a text, or the request itself."""
    return request_of(
        LexicalRequest, text, query=text, k=k, filters=filters, explain=explain, cursor=cursor
    )


def search_request(
    text: str | SearchRequest | None,
    *,
    k: int | None,
    filters: Any,
    mode: str | None,
    weights: Mapping[str, float] | None,
    explain: bool,
    cursor: str | None = None,
) -> SearchRequest:
    """The fused-search request of a text (None: a pure filter request), or the request."""
    return request_of(
        SearchRequest,
        text,
        query=text,
        k=k,
        filters=filters,
        mode=mode,
        weights=weights,
        explain=explain,
        cursor=cursor,
    )


def vector_request(
    query: str | np.ndarray | VectorRequest,
    *,
    k: int | None,
    filters: Any,
    explain: bool,
    cursor: str | None = None,
) -> VectorRequest:
    """The vector request of a text, a query vector, or the request itself."""
    if isinstance(query, np.ndarray):
        given = {"k": k, "filters": filters, "cursor": cursor}
        return VectorRequest.of_array(
            query, explain=explain, **{name: v for name, v in given.items() if v is not None}
        )
    return request_of(
        VectorRequest, query, query=query, k=k, filters=filters, explain=explain, cursor=cursor
    )


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


class TypesSeen:
    """The types a caller can read, per snapshot (content root) and held principals: the type
    notes of a request that names a type cost a count over every readable entity, so a store
    keeps the last few answers (a snapshot never changes; a publish makes a new root)."""

    SIZE = 64

    def __init__(self) -> None:
        self._seen: OrderedDict[tuple[str, tuple[str, ...]], list[str]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, root: str, held: tuple[str, ...], compute: Callable[[], list[str]]) -> list[str]:
        key = (root, held)
        with self._lock:
            if key in self._seen:
                self._seen.move_to_end(key)
                return self._seen[key]
        types = compute()
        with self._lock:
            self._seen[key] = types
            while len(self._seen) > self.SIZE:
                self._seen.popitem(last=False)
        return types


#: The reads whose answers carry the store's notes on their FILTERS (a type nobody can read).
_NOTED = frozenset({"search", "lexical", "fuzzy", "vector", "sql", "aggregate"})

#: The reads of a :class:`StoreReader` (:meth:`StoreReader.answer`'s methods) and the request
#: each takes — what a recorded read is run again with (``ks audit replay``). The operation
#: table declares the same pairs; a test holds them together.
READS: Mapping[str, type[Request]] = {
    "search": SearchRequest,
    "docs_search": DocsSearchRequest,
    "code_sample_search": DocsSearchRequest,
    "search_knowledge": KnowledgeRequest,
    "lexical": LexicalRequest,
    "fuzzy": FuzzyRequest,
    "vector": VectorRequest,
    "graph": GraphRequest,
    "sql": SqlRequest,
    "aggregate": AggregateRequest,
    "query_graph": QueryGraphRequest,
    "content": ContentRequest,
    "get_related": RelatedRequest,
    "get_learning_path": LearningPathRequest,
    "resolve_xref": XrefRequest,
    "graph_facets": FacetsRequest,
}


def _unsearched(words: tuple[str, ...]) -> str:
    """Why a lexical query whose every word the index drops found nothing."""
    listed = ", ".join(repr(w) for w in words)
    return (
        f"every word of the query ({listed}) is a stop word, which the lexical index does not"
        " hold, so nothing can match; search for a word that carries the meaning, or search by"
        " meaning (vector, or the fused search)"
    )


class StoreReader:
    """One request's reads (see the module docstring). Made by ``KnowledgeStore.reader``."""

    def __init__(
        self,
        reader: Reader,
        embedder: Callable[[], Embedder],
        types: TypesSeen | None = None,
        cursors: Cursors | None = None,
    ) -> None:
        self.engine = reader
        self._embedder = embedder
        self._types = types if types is not None else TypesSeen()
        self._cursors = cursors

    @property
    def engine_cursors(self) -> Cursors:
        """Where this store keeps the rankings of paged reads (``retrieval/paging.py``)."""
        if self._cursors is None:
            raise InvalidRequest("this reader was opened without the store's cursors: no paging")
        return self._cursors

    @property
    def content_root(self) -> str:
        return self.engine.content_root

    @property
    def identity(self) -> Identity:
        return self.engine.identity

    @property
    def held(self) -> tuple[str, ...]:
        return self.engine.held

    def resolved(self, filters: FilterSpec | Filters) -> Filters:
        """FILTERS with the names of the store's declared facets resolved (``Filters.resolve``:
        an unknown one is refused, naming the filters there are)."""
        value = filters.value if isinstance(filters, FilterSpec) else filters
        return value.resolve(self.engine.declared_facets()) if value.pending else value

    def embed(self, text: str) -> Vector:
        return self._embedder().embed_query(text)

    def explain(self) -> dict[str, Any]:
        """The snapshot, the identity's one expansion, the statements run so far."""
        return self.engine.explain()

    # -- notes on how a request was read -------------------------------------------------------------
    def type_warnings(self, filters: Filters) -> tuple[str, ...]:
        """A sentence for each type that ``filters`` names and no entity the caller can read
        has, with the near miss (as the CLI suggests a mistyped flag) and the types there are.

        Not an error: "no such type" and "none of it readable" look alike by design, and a
        type may appear with the next publish.
        """
        named = list(dict.fromkeys([*filters.values("type"), *filters.excluded("type")]))
        if not named:
            return ()
        present = self._types.get(self.content_root, self.held, self._present_types)
        notes: list[str] = []
        for name in (t for t in named if t not in present):
            close = near_misses(name, present)
            hint = f"did you mean {' or '.join(close)}? " if close else ""
            listed = ", ".join(present) if present else "none"
            notes.append(f"no entity you can read has type {name!r}; {hint}the types are: {listed}")
        return tuple(notes)

    def _present_types(self) -> list[str]:
        by_type = AggregateRequest.parse(metric="count", dimension="type").spec
        counts = self.engine.aggregate(by_type, Filters()).pairs()
        return sorted(str(key) for key, n in counts if key is not None and n)

    def noted(self, answer: Noted, filters: Filters) -> Noted:
        """``answer`` with :meth:`type_warnings` of ``filters`` added to its ``warnings``."""
        notes: tuple[str, ...] = self.type_warnings(filters)
        if not notes:
            return answer
        return answer.model_copy(update={"warnings": (*answer.warnings, *notes)})

    def answer(self, method: str, request: Request) -> Any:
        """The answer of the read ``method`` (``search``, ``content``, ``get_related``…) to its
        validated ``request`` — what every surface serves, the store's notes on the request's
        FILTERS included (:meth:`noted`) — on this reader: the operation table's way in
        (``surfaces.operations.read_on``), for a request that makes several reads."""
        found = getattr(self, method)(request)
        if method in _NOTED:
            spec = getattr(request, "filters", None)
            return self.noted(found, spec.value if isinstance(spec, FilterSpec) else Filters())
        return found

    # -- primitives ---------------------------------------------------------------------------
    def _chunk_hits(self, ranked: RankedChunks) -> list[ChunkHit]:
        """The hits: made by the primitive with its final check, else by the reader."""
        if ranked.hits is not None:
            return ranked.hits
        return self.engine.chunk_hits(ranked.ids, ranked.scores)[1]

    def lexical(
        self,
        text: str | LexicalRequest,
        *,
        k: int | None = None,
        filters: Any = None,
        explain: bool = False,
        cursor: str | None = None,
    ) -> ChunkHits:
        """BM25 over chunks (exact terms, identifiers, codes)."""
        return self._words_list(
            "lexical", lexical_request(text, k=k, filters=filters, explain=explain, cursor=cursor)
        )

    def fuzzy(
        self,
        text: str | FuzzyRequest,
        *,
        k: int | None = None,
        filters: Any = None,
        explain: bool = False,
        cursor: str | None = None,
    ) -> ChunkHits:
        """BM25 over chunks with misspelt words corrected (``replicaton`` → ``replication``)."""
        request = request_of(
            FuzzyRequest, text, query=text, k=k, filters=filters, explain=explain, cursor=cursor
        )
        return self._words_list("fuzzy", request)

    def _words_list(self, name: str, request: LexicalRequest) -> ChunkHits:
        """The answer of a list that ranks chunks by words (``lexical``, ``fuzzy``)."""
        if request.cursor is not None:
            return paging.chunk_page(self, name, request)
        started = time.perf_counter()
        query = ListQuery(request.query, request.k, self.resolved(request.filters), hydrate=True)
        ranked = self.engine.rank(name, query)
        t_rank = time.perf_counter()
        hits = self._chunk_hits(ranked)
        details = None
        if request.explain:
            details = self._explained(ranked.details, started, t_rank)
        warnings = tuple(
            f"searched {word!r} as {to!r}, the nearest word the chunks you can read hold"
            for word, to in ranked.details.get("corrected", {}).items()
        )
        dropped = None if hits else unsearched_words(request.query)
        if dropped is not None:
            warnings += (_unsearched(dropped),)
        return self._answer(hits, None, details, warnings)

    def vector(
        self,
        query: str | np.ndarray | VectorRequest,
        *,
        k: int | None = None,
        filters: Any = None,
        explain: bool = False,
        cursor: str | None = None,
    ) -> ChunkHits:
        """Dense nearest chunks by meaning; ``query`` is a text, a vector, or the request."""
        request = vector_request(query, k=k, filters=filters, explain=explain, cursor=cursor)
        if request.cursor is not None:
            given = request.query_vector()
            return paging.chunk_page(
                self,
                "vector",
                request,
                vector=lambda: given if given is not None else self.embed(request.query),
            )
        started = time.perf_counter()
        vec = request.query_vector()
        if vec is None:
            vec = self.embed(request.query)
        t_embed = time.perf_counter()
        asked = ListQuery(
            request.query, request.k, self.resolved(request.filters), vec, hydrate=True
        )
        ranked = self.engine.rank("vector", asked)
        t_rank = time.perf_counter()
        hits = self._chunk_hits(ranked)
        details = None
        if request.explain:
            details = self._explained(ranked.details, t_embed, t_rank)
            details["ms"]["embed"] = _ms(t_embed - started)
        return self._answer(hits, ranked.vector, details)

    def _answer(
        self,
        hits: list[ChunkHit],
        vector: VectorInfo | None,
        details: dict[str, Any] | None,
        warnings: tuple[str, ...] = (),
    ) -> ChunkHits:
        """A primitive's answer, of checked parts (its hits are; the rest is the reader's)."""
        return ChunkHits.of_checked(
            {
                "content_root": self.content_root,
                "hits": hits,
                "vector": vector,
                "explain": details,
                "warnings": warnings,
                "next": None,
            }
        )

    def _explained(
        self, details: Mapping[str, Any], started: float, ranked: float
    ) -> dict[str, Any]:
        ms = {**details.get("ms", {}), "hydrate": _ms(time.perf_counter() - ranked)}
        ms["total"] = _ms(time.perf_counter() - started)
        return {
            "identity": self.identity.principal,
            "held_principals": len(self.held),
            **{k: v for k, v in details.items() if k != "ms"},
            "ms": ms,
            "reader": self.explain(),
        }

    def sql(
        self,
        filters: Any = None,
        *,
        order: str | None = None,
        k: int | None = None,
        cursor: str | None = None,
    ) -> SqlHits:
        """Entities by their typed fields (closed list), ``order`` = ``FIELD[:asc|:desc]``."""
        request = request_of(SqlRequest, filters, filters=filters, order=order, k=k, cursor=cursor)
        if request.cursor is not None:
            return paging.sql_page(self, request)
        return self.engine.sql(self.resolved(request.filters), request.order_value, request.k)

    def aggregate(
        self, metric: str | AggregateRequest, dimension: str | None = None, *, filters: Any = None
    ) -> AggregateAnswer:
        """A catalog metric by a dimension over the visible slice (DESIGN §2)."""
        request = request_of(
            AggregateRequest, metric, metric=metric, dimension=dimension, filters=filters
        )
        spec = (
            request.spec.resolve(self.engine.declared_facets())
            if request.spec.facet == ""
            else request.spec
        )
        return self.engine.aggregate(spec, self.resolved(request.filters))

    def graph(
        self,
        starts: Sequence[str] | GraphRequest,
        *,
        depth: int | None = None,
        labels: Sequence[str] = (),
        direction: str | None = None,
        k: int | None = None,
        cursor: str | None = None,
    ) -> GraphHits:
        """Entities linked to ``starts`` (depth 1–3), ranked by hops, paths, recency.

        When the caller can read none of ``starts`` it is ``NotFound`` — alike for a
        missing uid and a hidden one, as for :meth:`content` — not an answer with no
        hits; among readable starts an unreadable one contributes nothing.
        """
        request = request_of(
            GraphRequest,
            starts,
            starts=starts,
            depth=depth,
            labels=labels,
            direction=direction,
            k=k,
            cursor=cursor,
        )
        wanted = list(dict.fromkeys(request.value.starts))
        if not self.engine.entities(wanted):
            shown = ", ".join(repr(uid) for uid in wanted[:5])
            more = f" (and {len(wanted) - 5} more)" if len(wanted) > 5 else ""
            raise NotFound(f"no entity with uid {shown}{more}", uid=wanted[0])
        if request.cursor is not None:
            return paging.graph_page(self, request)
        return self.engine.graph(request.value)

    def query_graph(
        self,
        text: str | QueryGraphRequest,
        params: Mapping[str, Any] | None = None,
        *,
        lenient: bool = False,
    ) -> QueryAnswer:
        """Run a bounded, read-only openCypher query (docs/query_graph.md)."""
        request = request_of(QueryGraphRequest, text, query=text, params=params, lenient=lenient)
        query = checked_query(request.query, request.params, lenient=request.lenient)
        return self.engine.query_graph(query, request.params)

    def content(self, uid: str | ContentRequest) -> Content:
        """The entity ``uid`` with its chunks and its edges to entities the caller can read.

        Raises ``NotFound`` alike for a missing uid and for one the caller may not read.
        """
        request = request_of(ContentRequest, uid, uid=uid)
        found = self.engine.content(request.uid)
        if found is None:
            raise NotFound(f"no entity with uid {request.uid!r}", uid=request.uid)
        return found

    # -- fused search --------------------------------------------------------------------------
    def search(
        self,
        text: str | SearchRequest | None = None,
        *,
        k: int | None = None,
        filters: Any = None,
        mode: str | None = None,
        weights: Mapping[str, float] | None = None,
        explain: bool = False,
        retrievers: Sequence[str | Retriever] | None = None,
        after_each: planner.Hook | None = None,
        evidence: int = planner.EVIDENCE_PER_RESULT,
        cursor: str | None = None,
    ) -> SearchAnswer:
        """Fused retrieval (DESIGN §3); ``text`` None or blank is a pure filter request.

        ``evidence``: chunks hydrated per result (0 for a caller that reads the entities).
        """
        request = search_request(
            text, k=k, filters=filters, mode=mode, weights=weights, explain=explain, cursor=cursor
        )
        if request.cursor is not None:
            return paging.search_page(self, request, retrievers)
        plan = planner.plan(
            request.query,
            k=request.k,
            filters=self.resolved(request.filters),
            mode=request.mode,
            weights=request.weights,
            explain=request.explain,
            retrievers=retrievers,
            evidence=evidence,
        )
        return planner.search(self, plan, after_each=after_each)

    # -- docs tools ------------------------------------------------------------------------------
    def docs_search(
        self,
        text: str | DocsSearchRequest | None = None,
        *,
        k: int | None = None,
        filters: Any = None,
    ) -> SearchAnswer:
        """Fused search over every type but ``codeSample``."""
        request = request_of(DocsSearchRequest, text, query=text, k=k, filters=filters)
        return knowledge.docs_search(self, request)

    def code_sample_search(
        self,
        text: str | DocsSearchRequest | None = None,
        *,
        k: int | None = None,
        filters: Any = None,
    ) -> knowledge.CodeSamples:
        """Fused search over ``codeSample`` entities: each with its code, language and page."""
        request = request_of(DocsSearchRequest, text, query=text, k=k, filters=filters)
        return knowledge.code_sample_search(self, request)

    def search_knowledge(
        self, text: str | KnowledgeRequest, *, k: int | None = None, filters: Any = None
    ) -> knowledge.Knowledge:
        """Fused search as cited passages and one context block, for a chat model."""
        request = request_of(KnowledgeRequest, text, query=text, k=k, filters=filters)
        return knowledge.search_knowledge(self, request)

    def get_related(
        self,
        uid: str | RelatedRequest,
        *,
        labels: Sequence[str] = (),
        depth: int | None = None,
        direction: str | None = None,
        k: int | None = None,
    ) -> docs_tools.Related:
        """Entities linked to ``uid`` within ``depth`` hops, ranked as the graph primitive."""
        request = request_of(
            RelatedRequest, uid, uid=uid, labels=labels, depth=depth, direction=direction, k=k
        )
        return docs_tools.related(self, request)

    def get_learning_path(self, uid: str | LearningPathRequest) -> docs_tools.LearningPath:
        """The ordered path or module ``uid`` belongs to, with ``uid``'s place in it."""
        request = request_of(LearningPathRequest, uid, uid=uid)
        return docs_tools.learning_path(self, request.uid)

    def resolve_xref(self, ref: str | XrefRequest) -> docs_tools.XrefResolution:
        """A uid, an href (with or without ``#anchor``) or an exact title → the entity."""
        request = request_of(XrefRequest, ref, ref=ref.strip() if isinstance(ref, str) else ref)
        return docs_tools.xref(self, request.ref)

    def graph_facets(self, uids: Sequence[str] | FacetsRequest) -> docs_tools.GraphFacets:
        """Visible neighbours of a result set, counted by edge label and entity type."""
        request = request_of(FacetsRequest, uids, uids=uids)
        return docs_tools.facets(self, request.uids)
