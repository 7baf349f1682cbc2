"""REST under ``/v1/`` (OpenAPI at ``/openapi.json``): every primitive, fused search, content, admin.

Each route validates its JSON body with a pydantic model (the tools' argument
models where a tool exists, so the schemas agree) and calls one method of
:class:`~knowledge_store.store.KnowledgeStore` — or one tool function — as the
caller's identity, in a worker lane chosen by the request's size
(:func:`~knowledge_store.surfaces.workers.is_heavy`). Answers are the ``--json``
shapes of DESIGN §6; errors the one error shape. The admin ingest takes records
in its body only — no route reads a path on the server.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import BaseModel, Field

from knowledge_store.engines.sources import DELETED_UIDS_SHOWN
from knowledge_store.errors import InvalidRequest
from knowledge_store.ingest.records import loads_strict
from knowledge_store.model import MAX_ACL_PRINCIPALS, MAX_NAME_CHARS
from knowledge_store.retrieval import docs_tools
from knowledge_store.surfaces.auth import Caller
from knowledge_store.surfaces.harness import resolve_tool, visible_tools
from knowledge_store.surfaces.knowledge_tools import (
    DOCS_TOOLS,
    KnowledgeArgs,
    QueryGraphArgs,
    RelatedArgs,
    UidArgs,
    XrefArgs,
)
from knowledge_store.surfaces.tools import (
    Dimension,
    FilterArgs,
    GraphArgs,
    Metric,
    OrderSpec,
    SearchArgs,
    _Args,
)
from knowledge_store.surfaces.web import AdminCaller, AnyCaller, Service, service
from knowledge_store.surfaces.workers import is_heavy

__all__ = ["ErrorEnvelope", "admin", "router", "routers", "sources_of"]

if TYPE_CHECKING:
    from knowledge_store.store import KnowledgeStore

Svc = Annotated[Service, Depends(service)]
UidPath = Annotated[str, Path(min_length=1, max_length=4096, description="the entity's uid")]
Weight = Annotated[float, Field(ge=0, le=1000)]


class ErrorBody(BaseModel):
    code: str
    message: str
    details: dict[str, Any]


class ErrorEnvelope(BaseModel):
    """The one error shape."""

    error: ErrorBody


_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorEnvelope, "description": text}
    for status, text in (
        (400, "invalid request (which field, what was expected)"),
        (401, "no or unknown bearer token"),
        (404, "not found — or not readable by the caller (they look the same)"),
    )
}
_ADMIN_ERRORS = {
    **_ERRORS,
    403: {"model": ErrorEnvelope, "description": "needs a token with the admin scope"},
    422: {"model": ErrorEnvelope, "description": "a bad ingest record; nothing was published"},
}

router = APIRouter(prefix="/v1", responses=_ERRORS)
admin = APIRouter(prefix="/v1/admin", tags=["admin"], responses=_ADMIN_ERRORS)


# -- bodies -----------------------------------------------------------------------------------------
class FusedBody(SearchArgs):
    mode: Literal["rrf", "convex"] | None = Field(None, description="fusion mode (default rrf)")
    weights: dict[Literal["vector", "lexical", "graph", "sql"], Weight] | None = Field(
        None, description="per-list weights; 0 switches a list off"
    )
    explain: bool = Field(False, description="include the lists side by side with timings")


class ChunkBody(_Args):
    query: str = Field(..., min_length=1, max_length=4096, description="the text to look for")
    k: int = Field(10, ge=1, le=100)
    filters: FilterArgs = Field(default_factory=FilterArgs)
    explain: bool = False


class SqlBody(_Args):
    filters: FilterArgs = Field(default_factory=FilterArgs)
    order: OrderSpec = "updated_at:desc"
    k: int = Field(10, ge=1, le=1000)


class AggregateBody(_Args):
    metric: Metric = "count"
    dimension: Dimension | None = None
    filters: FilterArgs = Field(default_factory=FilterArgs)


class FacetsBody(_Args):
    uids: list[Annotated[str, Field(min_length=1, max_length=4096)]] = Field(
        ..., min_length=1, max_length=100
    )


class AclBody(_Args):
    uid: str = Field(..., min_length=1, max_length=4096)
    principal: str = Field(..., min_length=1, max_length=300, examples=["group:sre"])


class MemberBody(_Args):
    group: str = Field(..., min_length=1, max_length=300, examples=["group:sre"])
    member: str = Field(..., min_length=1, max_length=300, examples=["user:sam"])


# -- reads ------------------------------------------------------------------------------------------
@router.post("/search", summary="Fused search (vector + lexical [+ sql], then graph), fused")
async def search(body: FusedBody, svc: Svc, who: AnyCaller) -> dict[str, Any]:
    answer = await svc.run(
        svc.store.search,
        body.query,
        heavy=_heavy("search", body),
        identity=who.identity,
        k=body.k,
        filters=body.filters.as_mapping(),
        mode=body.mode,
        weights=body.weights,
        explain=body.explain,
    )
    return answer.to_dict()


@router.post("/docs_search", summary="Fused search over every type but codeSample")
async def docs_search(body: SearchArgs, svc: Svc, who: AnyCaller) -> dict[str, Any]:
    return await svc.run(
        DOCS_TOOLS["docs_search"].function,
        svc.store,
        who.identity,
        body,
        heavy=_heavy("docs_search", body),
    )


@router.post("/code_sample_search", summary="Fused search over codeSample entities: code + page")
async def code_sample_search(body: SearchArgs, svc: Svc, who: AnyCaller) -> dict[str, Any]:
    return await svc.run(
        DOCS_TOOLS["code_sample_search"].function,
        svc.store,
        who.identity,
        body,
        heavy=_heavy("code_sample_search", body),
    )


@router.post("/search_knowledge", summary="Fused search as cited passages for context packing")
async def search_knowledge(body: KnowledgeArgs, svc: Svc, who: AnyCaller) -> dict[str, Any]:
    return await svc.run(
        DOCS_TOOLS["search_knowledge"].function,
        svc.store,
        who.identity,
        body,
        heavy=_heavy("search_knowledge", body),
    )


@router.post("/lexical", summary="BM25 over chunks")
async def lexical(body: ChunkBody, svc: Svc, who: AnyCaller) -> dict[str, Any]:
    answer = await svc.run(
        svc.store.lexical,
        body.query,
        heavy=_heavy("lexical", body),
        identity=who.identity,
        k=body.k,
        filters=_filters(body.filters),
    )
    out = answer.to_dict()
    if not body.explain:
        out.pop("explain", None)
    return out


@router.post("/vector", summary="Dense nearest chunks by meaning")
async def vector(body: ChunkBody, svc: Svc, who: AnyCaller) -> dict[str, Any]:
    answer = await svc.run(
        svc.store.vector,
        body.query,
        heavy=_heavy("vector", body),
        identity=who.identity,
        k=body.k,
        filters=_filters(body.filters),
    )
    out = answer.to_dict()
    if not body.explain:
        out.pop("explain", None)
    return out


@router.post("/graph", summary="Entities linked to start uids (depth 1–3)")
async def graph(body: GraphArgs, svc: Svc, who: AnyCaller) -> dict[str, Any]:
    answer = await svc.run(
        svc.store.graph,
        body.starts,
        heavy=_heavy("graph", body),
        identity=who.identity,
        depth=body.depth,
        labels=list(body.labels),
        direction=body.direction,
        k=body.k,
    )
    return answer.to_dict()


@router.post("/sql", summary="Entities by their typed fields (closed list), ordered")
async def sql(body: SqlBody, svc: Svc, who: AnyCaller) -> dict[str, Any]:
    answer = await svc.run(
        svc.store.sql,
        body.filters.as_mapping(),
        identity=who.identity,
        order=body.order,
        k=body.k,
        heavy=_heavy("sql", body),
    )
    return answer.to_dict()


@router.post("/aggregate", summary="A catalog metric by a dimension over the visible slice")
async def aggregate(body: AggregateBody, svc: Svc, who: AnyCaller) -> dict[str, Any]:
    answer = await svc.run(
        svc.store.aggregate,
        body.metric,
        body.dimension,
        heavy=_heavy("aggregate", body),
        identity=who.identity,
        filters=body.filters.as_mapping(),
    )
    return answer.to_dict()


@router.post("/query_graph", summary="A bounded, read-only openCypher query")
async def query_graph(body: QueryGraphArgs, svc: Svc, who: AnyCaller) -> dict[str, Any]:
    answer = await svc.run(
        svc.store.query_graph, body.query, body.params, identity=who.identity, heavy=True
    )
    return answer.to_dict()


@router.get("/content/{uid:path}", summary="One entity: fields, chunks, edges to visible entities")
async def content(uid: UidPath, svc: Svc, who: AnyCaller) -> dict[str, Any]:
    return await svc.run(svc.store.content, uid, identity=who.identity)


@router.post("/related", summary="Neighbours of an entity (get_related)")
async def related(body: RelatedArgs, svc: Svc, who: AnyCaller) -> dict[str, Any]:
    return await svc.run(
        DOCS_TOOLS["get_related"].function,
        svc.store,
        who.identity,
        body,
        heavy=_heavy("get_related", body),
    )


@router.post("/learning_path", summary="The ordered path an entity belongs to")
async def learning_path(body: UidArgs, svc: Svc, who: AnyCaller) -> dict[str, Any]:
    return await svc.run(DOCS_TOOLS["get_learning_path"].function, svc.store, who.identity, body)


@router.post("/resolve_xref", summary="A uid, href or exact title → the entity")
async def resolve_xref(body: XrefArgs, svc: Svc, who: AnyCaller) -> dict[str, Any]:
    return await svc.run(
        DOCS_TOOLS["resolve_xref"].function,
        svc.store,
        who.identity,
        body,
        heavy=_heavy("resolve_xref", body),
    )


@router.post("/graph_facets", summary="Neighbours of a result set, counted by label and type")
async def graph_facets(body: FacetsBody, svc: Svc, who: AnyCaller) -> dict[str, Any]:
    facets = await svc.run(
        docs_tools.graph_facets,
        svc.store,
        body.uids,
        identity=who.identity,
        heavy=_heavy("graph_facets", body),
    )
    return facets.to_dict()


@router.get("/capabilities", summary="The tools this caller sees now (the harness's list)")
async def capabilities(svc: Svc, who: AnyCaller) -> dict[str, Any]:
    return await svc.run(capabilities_of, svc, who)


@router.post("/tools/{name}", summary="Call a listed tool by name (the MCP tools over REST)")
async def call_tool(
    name: Annotated[str, Path(max_length=100)],
    arguments: dict[str, Any],
    svc: Svc,
    who: AnyCaller,
) -> dict[str, Any]:
    tool = await svc.run(resolve_tool, svc.store, name, admin=who.admin)
    out = await svc.run(
        tool.call, svc.store, who.identity, arguments, heavy=is_heavy(name, arguments)
    )
    await svc.watcher.check()
    return out


@router.get("/stats", summary="Store figures (global for admins; the visible slice otherwise)")
async def stats(svc: Svc, who: AnyCaller) -> dict[str, Any]:
    return await svc.run(stats_of, svc, who)


def capabilities_of(svc: Service, who: Caller) -> dict[str, Any]:
    return {
        "content_root": svc.store.content_root(),
        "is_empty": svc.store.is_empty,
        "identity": who.principal,
        "admin": who.admin,
        "tools": [tool.to_dict() for tool in visible_tools(svc.store, admin=who.admin)],
        "endpoints": {
            "rest": "/v1",
            "openapi": "/openapi.json",
            "graphql": "/graphql",
            "mcp": "/mcp",
            "page": "/",
        },
    }


def stats_of(svc: Service, who: Caller) -> dict[str, Any]:
    figures = svc.store.stats().to_dict()
    if who.admin:
        return figures
    # Global counts would tell a reader how much it can't see: give it its own slice.
    visible = svc.store.aggregate("count", None, identity=who.identity)
    return {
        "content_root": figures["content_root"],
        "entities": visible.rows[0][1] if visible.rows else 0,
        "model": figures["model"],
        "dimension": figures["dimension"],
        "is_empty": figures["is_empty"],
        "identity": who.principal,
    }


def sources_of(store: KnowledgeStore) -> dict[str, Any]:
    """The ``sources`` answer (an admin view: counts of every entity, whatever its ACL)."""
    return {
        "content_root": store.content_root(),
        "sources": [view.to_dict() for view in store.sources()],
    }


def _heavy(operation: str, body: _Args) -> bool:
    """Whether the request goes to the heavy lane (``workers.is_heavy``) — its arguments' sizes."""
    return is_heavy(operation, body.model_dump())


def _filters(args: FilterArgs) -> Any:
    from knowledge_store.retrieval.filters import coerce_filters

    return coerce_filters(args.as_mapping())


# -- administration ---------------------------------------------------------------------------------
_INGEST_BODY = {
    "requestBody": {
        "required": True,
        "description": "JSON Lines (one canonical record a line), a JSON list of records, or"
        ' {"records": [...]}',
        "content": {
            "application/x-ndjson": {"schema": {"type": "string"}},
            "application/json": {
                "schema": {
                    "oneOf": [
                        {"type": "array", "items": {"type": "object"}},
                        {
                            "type": "object",
                            "properties": {
                                "records": {"type": "array", "items": {"type": "object"}}
                            },
                            "required": ["records"],
                        },
                    ]
                }
            },
        },
    }
}


@admin.post(
    "/ingest",
    summary="Publish records as one atomic batch",
    openapi_extra=_INGEST_BODY,
)
async def ingest(
    request: Request,
    svc: Svc,
    who: AdminCaller,
    acl: Annotated[
        list[str] | None,
        Query(max_length=MAX_ACL_PRINCIPALS, description="default ACL (repeatable)"),
    ] = None,
    skip_invalid: Annotated[bool, Query(description="publish the good records")] = False,
    source: Annotated[
        str | None,
        Query(max_length=MAX_NAME_CHARS, description="the source of every record"),
    ] = None,
    sync: Annotated[
        bool, Query(description="the records are the whole source: delete the rest")
    ] = False,
    allow_mass_delete: Annotated[
        bool, Query(description="let a sync delete more than half its source")
    ] = False,
) -> dict[str, Any]:
    body = await request.body()  # bounded before it arrives (surfaces.limits)
    records = await svc.run(_records, body, request.headers.get("content-type", ""), heavy=True)
    report = await svc.run(
        svc.store.ingest_records,
        records,
        acl=acl or None,
        skip_invalid=skip_invalid,
        source=source,
        sync=sync,
        allow_mass_delete=allow_mass_delete,
        heavy=True,
    )
    await svc.watcher.check()
    return report.to_dict()


@admin.get("/sources", summary="Each source: what it holds, its last ingest or sync")
async def sources(svc: Svc, who: AdminCaller) -> dict[str, Any]:
    return await svc.run(sources_of, svc.store)


@admin.delete("/sources/{name:path}", summary="Delete every entity of a source (one publish)")
async def delete_source(
    name: Annotated[str, Path(min_length=1, max_length=MAX_NAME_CHARS)],
    svc: Svc,
    who: AdminCaller,
) -> dict[str, Any]:
    result = await svc.run(svc.store.delete_source, name)
    await svc.watcher.check()
    return {
        "content_root": result.root,
        "deleted": result.deleted,
        "deleted_uids": list(result.deleted_uids[:DELETED_UIDS_SHOWN]),
    }


@admin.delete("/entities/{uid:path}", summary="Delete an entity (one publish)")
async def delete_entity(uid: UidPath, svc: Svc, who: AdminCaller) -> dict[str, Any]:
    root = await svc.run(svc.store.delete, [uid])
    await svc.watcher.check()
    return {"content_root": root, "deleted": 1}


@admin.post("/acl/grant", summary="Let a principal read an entity")
async def acl_grant(body: AclBody, svc: Svc, who: AdminCaller) -> dict[str, Any]:
    return await svc.run(_acl_change, svc.store.grant, svc.store, body)


@admin.post("/acl/revoke", summary="Stop a principal reading an entity through its ACL")
async def acl_revoke(body: AclBody, svc: Svc, who: AdminCaller) -> dict[str, Any]:
    return await svc.run(_acl_change, svc.store.revoke, svc.store, body)


def _acl_change(change: Callable[[str, str], str], store: Any, body: AclBody) -> dict[str, Any]:
    """Grant or revoke, then read the new ACL — both in the worker, off the event loop."""
    root = change(body.uid, body.principal)
    return {"content_root": root, "uid": body.uid, "acl": list(store.acl_show(body.uid))}


@admin.get("/acl/{uid:path}", summary="The principals in an entity's ACL")
async def acl_show(uid: UidPath, svc: Svc, who: AdminCaller) -> dict[str, Any]:
    return {"uid": uid, "acl": list(await svc.run(svc.store.acl_show, uid))}


@admin.post("/principals/add-member", summary="Make MEMBER a member of GROUP")
async def add_member(body: MemberBody, svc: Svc, who: AdminCaller) -> dict[str, Any]:
    await svc.run(svc.store.add_member, body.group, body.member)
    return (await svc.run(svc.store.principal_show, body.member)).to_dict()


@admin.post("/principals/remove-member", summary="Remove MEMBER from GROUP")
async def remove_member(body: MemberBody, svc: Svc, who: AdminCaller) -> dict[str, Any]:
    await svc.run(svc.store.remove_member, body.group, body.member)
    return (await svc.run(svc.store.principal_show, body.member)).to_dict()


@admin.get("/principals/{principal:path}", summary="A principal's groups (and a group's members)")
async def principal_show(
    principal: Annotated[str, Path(min_length=1, max_length=300)], svc: Svc, who: AdminCaller
) -> dict[str, Any]:
    return (await svc.run(svc.store.principal_show, principal)).to_dict()


def _records(raw: bytes, content_type: str) -> list[Any]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidRequest("the ingest body is not UTF-8 text") from None
    if not text.strip():
        raise InvalidRequest("the ingest body is empty; send JSON Lines records")
    if "json" in content_type and "ndjson" not in content_type and "jsonl" not in content_type:
        try:
            document = loads_strict(text)
        except ValueError as exc:
            raise InvalidRequest(f"the ingest body is not JSON: {exc}") from None
        if isinstance(document, dict) and isinstance(document.get("records"), list):
            return list(document["records"])
        if isinstance(document, list):
            return document
        raise InvalidRequest('send a JSON list of records or {"records": [...]}')
    records: list[Any] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(loads_strict(line))
        except ValueError as exc:
            raise InvalidRequest(
                f"line {number} of the ingest body is not JSON: {exc}", line=number
            ) from None
    return records


def routers() -> list[APIRouter]:
    return [router, admin]
