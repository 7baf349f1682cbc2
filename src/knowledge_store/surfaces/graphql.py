"""GraphQL at ``/graphql`` (strawberry): the same service layer, the same identity rules.

Read-only: every field calls one method of
:class:`~knowledge_store.store.KnowledgeStore` (or one docs tool) as the
caller; administration stays on REST. A store error becomes a GraphQL error
whose ``extensions`` are the one error shape's ``{"code", "message",
"details"}`` — an entity the caller can't read gives exactly the error of one
that doesn't exist. Free-form values (attributes, query_graph rows, tool
outputs without a fixed shape) are the ``JSON`` scalar. A document over the
bounds of :mod:`.graphql_limits` (tokens, depth, aliases, top-level fields) is
refused before anything runs, and the store calls of one request run one
after another.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Annotated, Any, TypeVar

import strawberry
from fastapi import Depends
from graphql import FieldNode, GraphQLError
from strawberry.fastapi import GraphQLRouter
from strawberry.scalars import JSON
from strawberry.types import ExecutionContext, Info

from knowledge_store.errors import KnowledgeStoreError
from knowledge_store.retrieval import docs_tools
from knowledge_store.surfaces.auth import AuthError, Caller
from knowledge_store.surfaces.graphql_limits import RequestBounds
from knowledge_store.surfaces.knowledge_tools import DOCS_TOOLS
from knowledge_store.surfaces.rest import capabilities_of, sources_of, stats_of
from knowledge_store.surfaces.tools import SearchArgs
from knowledge_store.surfaces.web import AnyCaller, Service, service
from knowledge_store.surfaces.workers import is_heavy

__all__ = ["graphql_router", "schema"]

T = TypeVar("T")
Ctx = Info[dict[str, Any], None]


async def _run(
    info: Ctx,
    fn: Callable[..., T],
    /,
    *args: Any,
    weight: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> T:
    """Run one store call of this request — after the request's previous one has finished.

    It runs in the heavy lane (``workers``) when the document asks for several
    store calls or when ``weight`` (the field's size arguments) says so.
    """
    svc: Service = info.context["service"]
    heavy = _several_calls(info) or is_heavy(info.python_name, weight)
    try:
        async with info.context["one_at_a_time"]:
            return await svc.run(fn, *args, heavy=heavy, **kwargs)
    except KnowledgeStoreError as exc:
        raise GraphQLError(exc.message, extensions=exc.to_dict()["error"]) from None


def _several_calls(info: Ctx) -> bool:
    """Whether the operation may ask for more than one top-level field (fragments: maybe)."""
    selections = info.operation.selection_set.selections
    return len(selections) > 1 or not isinstance(selections[0], FieldNode)


def _who(info: Ctx) -> Caller:
    found: Caller = info.context["caller"]
    return found


def _store(info: Ctx) -> Any:
    return info.context["service"].store


# -- types --------------------------------------------------------------------------------------------
@strawberry.input(description="FILTERS: lists mean 'any of'; dates are inclusive ISO 8601")
class FilterInput:
    type: list[str] | None = None
    not_type: list[str] | None = None
    source: list[str] | None = None
    status: list[str] | None = None
    uid: list[str] | None = None
    created_from: str | None = None
    created_to: str | None = None
    updated_from: str | None = None
    updated_to: str | None = None

    def mapping(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if v is not None}


def _f(filters: FilterInput | None) -> dict[str, Any]:
    return filters.mapping() if filters is not None else {}


@strawberry.type
class Evidence:
    chunk_id: int
    text: str
    heading: list[str]
    start: int
    end: int


@strawberry.type(description="A result's rank in each list (null where absent)")
class Ranks:
    vector: int | None
    lexical: int | None
    graph: int | None
    sql: int | None


@strawberry.type
class SearchResult:
    uid: str
    title: str
    type: str
    href: str | None
    score: float
    ranks: Ranks
    superseded_by: str | None
    evidence: list[Evidence]


@strawberry.type
class SearchAnswer:
    content_root: str
    mode: str
    results: list[SearchResult]


@strawberry.type
class ChunkHit:
    uid: str
    chunk_id: int
    title: str
    type: str
    score: float
    rank: int
    text: str
    heading: list[str]
    start: int
    end: int


@strawberry.type
class ChunkHits:
    content_root: str
    hits: list[ChunkHit]


@strawberry.type
class PathStep:
    uid: str
    label: str | None


@strawberry.type
class GraphHit:
    uid: str
    title: str
    type: str
    rank: int
    hops: int
    paths: int
    path: list[PathStep]


@strawberry.type
class GraphHits:
    content_root: str
    hits: list[GraphHit]
    capped: bool


@strawberry.type
class SqlHit:
    uid: str
    title: str
    type: str
    source: str
    status: str
    created_at: str | None
    updated_at: str | None
    rank: int


@strawberry.type
class SqlHits:
    content_root: str
    hits: list[SqlHit]


@strawberry.type
class AggregateRow:
    key: str | None
    value: int


@strawberry.type
class AggregateAnswer:
    content_root: str
    metric: str
    dimension: str | None
    rows: list[AggregateRow]


@strawberry.type
class QueryAnswer:
    content_root: str
    columns: list[str]
    rows: JSON
    truncated: bool


@strawberry.type
class EdgeRef:
    label: str
    uid: str
    title: str
    type: str
    href: str | None
    position: int | None


@strawberry.type
class ContentChunk:
    chunk_id: int
    ordinal: int
    text: str
    heading: list[str]
    start: int
    end: int


@strawberry.type
class Content:
    content_root: str
    uid: str
    type: str
    title: str
    body: str
    source: str
    status: str
    created_at: str | None
    updated_at: str | None
    href: str | None
    attributes: JSON
    chunks: list[ContentChunk]
    outgoing: list[EdgeRef]
    incoming: list[EdgeRef]


@strawberry.type
class ToolInfo:
    name: str
    description: str
    input_schema: JSON


@strawberry.type
class Capabilities:
    content_root: str
    is_empty: bool
    identity: str
    admin: bool
    tools: list[ToolInfo]


def _search_answer(d: dict[str, Any]) -> SearchAnswer:
    return SearchAnswer(
        content_root=d["content_root"],
        mode=d["mode"],
        results=[
            SearchResult(
                uid=r["uid"],
                title=r["title"],
                type=r["type"],
                href=r["href"],
                score=r["score"],
                ranks=Ranks(
                    **{k: r["ranks"].get(k) for k in ("vector", "lexical", "graph", "sql")}
                ),
                superseded_by=r["superseded_by"],
                evidence=[Evidence(**e) for e in r["evidence"]],
            )
            for r in d["results"]
        ],
    )


def _chunk_hits(d: dict[str, Any]) -> ChunkHits:
    return ChunkHits(content_root=d["content_root"], hits=[ChunkHit(**h) for h in d["hits"]])


def _limit_k(k: int, most: int = 100) -> int:
    if not 1 <= k <= most:
        raise GraphQLError(
            f"k must be between 1 and {most}, not {k}",
            extensions={"code": "invalid_request", "message": "k out of range", "details": {}},
        )
    return k


# -- the query type -------------------------------------------------------------------------------------
async def _search(
    info: Ctx,
    query: str = "",
    k: int = 10,
    filters: FilterInput | None = None,
    mode: str | None = None,
) -> SearchAnswer:
    answer = await _run(
        info,
        _store(info).search,
        query,
        identity=_who(info).identity,
        k=_limit_k(k),
        filters=_f(filters),
        mode=mode,
        weight={"query": query, "k": k, "filters": _f(filters)},
    )
    return _search_answer(answer.to_dict())


async def _docs_search(
    info: Ctx, query: str = "", k: int = 10, filters: FilterInput | None = None
) -> SearchAnswer:
    args = await _run(info, _search_args, query, k, _f(filters))
    out = await _run(
        info,
        DOCS_TOOLS["docs_search"].function,
        _store(info),
        _who(info).identity,
        args,
        weight=args.model_dump(),
    )
    return _search_answer(out)


async def _code_sample_search(
    info: Ctx, query: str = "", k: int = 10, filters: FilterInput | None = None
) -> JSON:
    args = await _run(info, _search_args, query, k, _f(filters))
    out = await _run(
        info,
        DOCS_TOOLS["code_sample_search"].function,
        _store(info),
        _who(info).identity,
        args,
        weight=args.model_dump(),
    )
    return JSON(out)


async def _lexical(
    info: Ctx, query: str, k: int = 10, filters: FilterInput | None = None
) -> ChunkHits:
    answer = await _run(
        info,
        _store(info).lexical,
        query,
        identity=_who(info).identity,
        k=_limit_k(k),
        filters=_coerce(filters),
        weight={"query": query, "k": k, "filters": _f(filters)},
    )
    return _chunk_hits(answer.to_dict())


async def _vector(
    info: Ctx, query: str, k: int = 10, filters: FilterInput | None = None
) -> ChunkHits:
    answer = await _run(
        info,
        _store(info).vector,
        query,
        identity=_who(info).identity,
        k=_limit_k(k),
        filters=_coerce(filters),
        weight={"query": query, "k": k, "filters": _f(filters)},
    )
    return _chunk_hits(answer.to_dict())


async def _graph(
    info: Ctx,
    starts: list[str],
    depth: int = 1,
    labels: list[str] | None = None,
    direction: str = "both",
    k: int = 10,
) -> GraphHits:
    answer = await _run(
        info,
        _store(info).graph,
        starts,
        identity=_who(info).identity,
        depth=depth,
        labels=labels or (),
        direction=direction,
        k=_limit_k(k),
        weight={"starts": starts, "depth": depth, "labels": labels, "k": k},
    )
    d = answer.to_dict()
    return GraphHits(
        content_root=d["content_root"],
        capped=d["capped"],
        hits=[GraphHit(**{**h, "path": [PathStep(**s) for s in h["path"]]}) for h in d["hits"]],
    )


async def _sql(
    info: Ctx,
    filters: FilterInput | None = None,
    order: str | None = None,
    k: int = 10,
) -> SqlHits:
    answer = await _run(
        info,
        _store(info).sql,
        _f(filters),
        identity=_who(info).identity,
        order=order,
        k=_limit_k(k, 1000),
        weight={"k": k, "filters": _f(filters)},
    )
    d = answer.to_dict()
    return SqlHits(content_root=d["content_root"], hits=[SqlHit(**h) for h in d["hits"]])


async def _aggregate(
    info: Ctx,
    metric: str = "count",
    dimension: str | None = None,
    filters: FilterInput | None = None,
) -> AggregateAnswer:
    answer = await _run(
        info,
        _store(info).aggregate,
        metric,
        dimension,
        identity=_who(info).identity,
        filters=_f(filters),
        weight={"filters": _f(filters)},
    )
    d = answer.to_dict()
    return AggregateAnswer(
        content_root=d["content_root"],
        metric=d["metric"],
        dimension=d["dimension"],
        rows=[AggregateRow(**r) for r in d["rows"]],
    )


async def _query_graph(info: Ctx, query: str, params: JSON | None = None) -> QueryAnswer:
    answer = await _run(
        info, _store(info).query_graph, query, params or {}, identity=_who(info).identity
    )
    d = answer.to_dict()
    return QueryAnswer(**d)


async def _content(info: Ctx, uid: str) -> Content:
    d = await _run(info, _store(info).content, uid, identity=_who(info).identity)
    return Content(
        content_root=d["content_root"],
        **d["entity"],
        chunks=[ContentChunk(**c) for c in d["chunks"]],
        outgoing=[EdgeRef(**e) for e in d["edges"]["out"]],
        incoming=[EdgeRef(**e) for e in d["edges"]["in"]],
    )


async def _related(
    info: Ctx, uid: str, depth: int = 1, labels: list[str] | None = None, k: int = 10
) -> JSON:
    out = await _run(
        info,
        docs_tools.get_related,
        _store(info),
        uid,
        identity=_who(info).identity,
        depth=depth,
        labels=labels or (),
        k=_limit_k(k),
        weight={"depth": depth, "labels": labels, "k": k},
    )
    return JSON(out.to_dict())


async def _learning_path(info: Ctx, uid: str) -> JSON:
    out = await _run(
        info, docs_tools.get_learning_path, _store(info), uid, identity=_who(info).identity
    )
    return JSON(out.to_dict())


async def _resolve_xref(info: Ctx, ref: str) -> JSON:
    out = await _run(
        info,
        docs_tools.resolve_xref,
        _store(info),
        ref,
        identity=_who(info).identity,
        weight={"ref": ref},
    )
    return JSON(out.to_dict())


async def _capabilities(info: Ctx) -> Capabilities:
    d = await _run(info, capabilities_of, info.context["service"], _who(info))
    return Capabilities(
        content_root=d["content_root"],
        is_empty=d["is_empty"],
        identity=d["identity"],
        admin=d["admin"],
        tools=[ToolInfo(**t) for t in d["tools"]],
    )


async def _stats(info: Ctx) -> JSON:
    return JSON(await _run(info, stats_of, info.context["service"], _who(info)))


async def _sources(info: Ctx) -> JSON:
    if not _who(info).admin:
        denied = AuthError(403, "sources is an administration view: it needs the admin scope")
        raise GraphQLError(denied.message, extensions=denied.to_dict()["error"])
    return JSON(await _run(info, sources_of, _store(info)))


@strawberry.type
class Query:
    search: SearchAnswer = strawberry.field(
        resolver=_search, description="Fused search: vector + lexical [+ sql], then graph; fused"
    )
    docs_search: SearchAnswer = strawberry.field(
        resolver=_docs_search, description="Fused search over every type but codeSample"
    )
    code_sample_search: JSON = strawberry.field(
        resolver=_code_sample_search,
        description="codeSample entities: code, language, the page it belongs to",
    )
    lexical: ChunkHits = strawberry.field(resolver=_lexical, description="BM25 over chunks")
    vector: ChunkHits = strawberry.field(
        resolver=_vector, description="Dense nearest chunks by meaning"
    )
    graph: GraphHits = strawberry.field(
        resolver=_graph, description="Entities linked to start uids, depth 1–3"
    )
    sql: SqlHits = strawberry.field(
        resolver=_sql, description="Entities by their typed fields, ordered"
    )
    aggregate: AggregateAnswer = strawberry.field(
        resolver=_aggregate, description="A catalog metric by a dimension over the visible slice"
    )
    query_graph: QueryAnswer = strawberry.field(
        resolver=_query_graph,
        description="A bounded, read-only openCypher query; values as $params",
    )
    content: Content = strawberry.field(
        resolver=_content,
        description="One entity with its chunks and its edges to visible entities",
    )
    related: JSON = strawberry.field(
        resolver=_related, description="Neighbours of an entity (get_related)"
    )
    learning_path: JSON = strawberry.field(
        resolver=_learning_path, description="The ordered learning path an entity belongs to"
    )
    resolve_xref: JSON = strawberry.field(
        resolver=_resolve_xref,
        description="A uid, href or exact title → the entity (or candidates)",
    )
    capabilities: Capabilities = strawberry.field(
        resolver=_capabilities, description="The tools this caller sees now (the harness's list)"
    )
    stats: JSON = strawberry.field(
        resolver=_stats, description="Store figures (the visible slice unless admin)"
    )
    sources: JSON = strawberry.field(
        resolver=_sources,
        description="Each source: entities, chunks, its last ingest or sync (admin only)",
    )


def _search_args(query: str, k: int, filters: dict[str, Any]) -> SearchArgs:
    from knowledge_store.surfaces.tools import TOOLS

    parsed = TOOLS["search"].parse({"query": query, "k": k, "filters": filters})
    assert isinstance(parsed, SearchArgs)
    return parsed


def _coerce(filters: FilterInput | None) -> Any:
    from knowledge_store.retrieval.filters import coerce_filters

    try:
        return coerce_filters(_f(filters))
    except KnowledgeStoreError as exc:
        raise GraphQLError(exc.message, extensions=exc.to_dict()["error"]) from None


class _Schema(strawberry.Schema):
    def process_errors(
        self, errors: list[GraphQLError], execution_context: ExecutionContext | None = None
    ) -> None:
        """Log only what is not a caller's error (those are answers, not incidents)."""
        unexpected = [e for e in errors if not (e.extensions or {}).get("code")]
        super().process_errors(unexpected, execution_context)


schema = _Schema(query=Query, extensions=[RequestBounds])


async def _context(svc: Annotated[Service, Depends(service)], who: AnyCaller) -> dict[str, Any]:
    return {"service": svc, "caller": who, "one_at_a_time": asyncio.Lock()}


def graphql_router() -> GraphQLRouter[dict[str, Any], None]:
    """The ``/graphql`` route (POST, and GET for queries); no browser IDE (it needs a CDN)."""
    return GraphQLRouter(schema, path="/graphql", context_getter=_context, graphql_ide=None)
