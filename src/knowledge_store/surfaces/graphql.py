"""GraphQL at ``/graphql`` (strawberry), generated from the operation table.

Every read operation with a GraphQL name (:data:`~.operations.OPERATIONS`) is a
field of ``Query``: its arguments are the request model's fields (GraphQL
spells them in camelCase: ``notType``, ``createdFrom``), FILTERS is one
``FilterInput`` generated from the same model, and its type is generated from
the answer model with strawberry's pydantic integration — typed all the way
down; only data without a shape (entity ``attributes``, query_graph rows,
``explain``, counts by label) is the ``JSON`` scalar. The arguments go to the
request model unchanged, so a field has the bounds and the error wording of
every other surface; a store error becomes a GraphQL error whose
``extensions`` are the one error shape's ``{"code", "message", "details"}``,
its field names in GraphQL's spelling. An entity the caller can't read gives
exactly the error of one that doesn't exist. Read-only: administration stays
on REST, but for the administration views the table names a field for
(``sources``), which answer a caller without the admin scope ``forbidden``.

A document over the bounds of :mod:`.graphql_limits` (tokens, depth, aliases,
top-level fields) is refused before anything runs, and the store calls of one
request run one after another.
"""

from __future__ import annotations

import asyncio
import inspect
import types
from collections.abc import Callable, Mapping
from functools import cache
from typing import Annotated, Any, Literal, NewType, TypeVar, Union, get_args, get_origin

import strawberry
from cross_web import HTTPException
from fastapi import Depends
from fastapi.responses import JSONResponse
from graphql import FieldNode, GraphQLError
from pydantic import BaseModel
from pydantic_core import PydanticUndefined
from strawberry.experimental import pydantic as strawberry_pydantic
from strawberry.fastapi import GraphQLRouter
from strawberry.scalars import JSON
from strawberry.schema.config import StrawberryConfig
from strawberry.types import ExecutionContext, Info
from strawberry.types.scalar import ScalarDefinition
from strawberry.types.unset import UNSET

from knowledge_store.errors import InvalidRequest, KnowledgeStoreError, NotFound, clip
from knowledge_store.requests import FilterSpec
from knowledge_store.surfaces.auth import AuthError, Caller
from knowledge_store.surfaces.graphql_limits import RequestBounds
from knowledge_store.surfaces.operations import OPERATIONS, Operation, perform
from knowledge_store.surfaces.shapes import Capabilities
from knowledge_store.surfaces.spelling import camel, respell
from knowledge_store.surfaces.tools import capabilities
from knowledge_store.surfaces.web import AnyCaller, Service, the_service
from knowledge_store.surfaces.workers import is_heavy

__all__ = ["graphql_router", "output_type", "schema", "spelling"]

T = TypeVar("T")
Ctx = Info[dict[str, Any], None]
_NONE = type(None)


# -- answers → types (strawberry's pydantic integration) ---------------------------------------------
@strawberry.type(description="A result's rank in one list (null where the list did not find it)")
class ListRank:
    list: str
    rank: int | None


@strawberry.type(description="Where a paged read stands (cursor '*' starts one)")
class PageInfo:
    has_next_page: bool
    end_cursor: str | None


def _page_info(root: Any) -> PageInfo:
    return PageInfo(has_next_page=root.next is not None, end_cursor=root.next)


def _ranks(root: Any) -> list[ListRank]:
    """``ranks``: the answer's mapping as a list of ``{list, rank}`` — the four lists of
    DESIGN §6, then any other list the search ran (a new list changes no type)."""
    return [ListRank(list=name, rank=rank) for name, rank in root.ranks.items()]


#: Public chunk ids are 53-bit (engines.shared.ChunkIds); GraphQL's ``Int`` is 32-bit, so
#: they have a scalar of their own, serialised as the same JSON number REST and MCP give.
ChunkId = NewType("ChunkId", int)
_SCALARS: dict[object, ScalarDefinition] = {
    ChunkId: ScalarDefinition(
        name="ChunkId",
        description="A chunk's public id: an integer below 2^53 (a JSON number).",
        specified_by_url=None,
        serialize=int,
        parse_value=int,
        parse_literal=None,
    )
}


def _output(kind: Any, field: str) -> Any:
    """The GraphQL-able annotation of an answer field's annotation."""
    origin = get_origin(kind)
    if field == "ranks":
        return strawberry.Private[dict[str, int | None]]  # served by _ranks, as a list
    if field == "chunk_id" and kind is int:
        return ChunkId
    if kind is Any or origin is dict or kind is dict:
        return JSON
    if origin in (Union, types.UnionType):
        inner = [a for a in get_args(kind) if a is not _NONE]
        out = _output(inner[0], field) if len(inner) == 1 else JSON
        return out | None if _NONE in get_args(kind) else out
    if origin is Literal:
        return str
    if origin in (list, tuple):
        return list[_output(get_args(kind)[0], field)]  # type: ignore[misc]
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return output_type(kind)
    return kind


@cache
def output_type(model: type[BaseModel]) -> Any:
    """The strawberry type of an answer model (generated once per model)."""
    annotations = {name: _output(f.annotation, name) for name, f in model.model_fields.items()}
    members: dict[str, Any] = {"__annotations__": annotations}
    if "ranks" in annotations:
        members["rank_list"] = strawberry.field(
            name="ranks",
            resolver=_ranks,
            description="The result's rank in each list: the four lists of fused search"
            " (vector, lexical, graph, sql), then any other list the search ran",
        )
    if "next" in annotations:
        members["page_info"] = strawberry.field(
            name="pageInfo",
            resolver=_page_info,
            description="Paging, as a Relay connection has it: hasNextPage, and endCursor (the"
            " answer's next), to pass as cursor for the next page",
        )
    shell = type(model.__name__, (), members)
    doc = (model.__doc__ or "").strip().replace("``", "`") or None
    return strawberry_pydantic.type(model=model, description=doc)(shell)


def _typed(answer: BaseModel) -> Any:
    return output_type(type(answer)).from_pydantic(answer)


# -- requests → arguments -----------------------------------------------------------------------
#: FilterInput's field for the store's declared facets (``ks facets add``): one JSON object
#: of their request names, since a GraphQL input type is fixed when the schema is built.
DECLARED = "facets"


def _filter_input() -> Any:
    annotations: dict[str, Any] = {}
    defaults: dict[str, Any] = {}
    for name, info in FilterSpec.model_fields.items():
        kind = list[str] | None if get_origin(info.annotation) is list else str | None
        annotations[name] = kind
        defaults[name] = strawberry.field(default=None, description=info.description)
    annotations[DECLARED] = JSON | None
    defaults[DECLARED] = strawberry.field(
        default=None,
        description="the store's declared facets (the facets field lists them), by their"
        ' filter names: {"team": ["search"], "not_team": ["docs"], "deadline_from":'
        ' "2024-01-01", "priority_to": 3}',
    )
    shell = type("FilterInput", (), {"__annotations__": annotations, **defaults})
    return strawberry.input(shell, description=(FilterSpec.__doc__ or "").strip())


FilterInput = _filter_input()


def _input(kind: Any) -> Any:
    """The GraphQL input annotation of a request field's annotation."""
    origin = get_origin(kind)
    if origin is Annotated:
        return _input(get_args(kind)[0])
    if isinstance(kind, type) and issubclass(kind, FilterSpec):
        return FilterInput
    if kind is Any or origin is dict:
        return JSON
    if origin in (Union, types.UnionType):
        inner = [a for a in get_args(kind) if a is not _NONE]
        return _input(inner[0]) if len(inner) == 1 else JSON
    if origin is Literal:
        return str
    if origin is list:
        return list[_input(get_args(kind)[0])]  # type: ignore[misc]
    return kind


def _arguments(op: Operation) -> list[inspect.Parameter]:
    kw = inspect.Parameter.KEYWORD_ONLY
    params = [inspect.Parameter("info", kw, annotation=Info)]
    for name, info in op.request.model_fields.items():
        kind = _input(info.annotation)
        required = info.is_required()
        default = info.default
        plain = default is not PydanticUndefined and isinstance(default, str | int | float | bool)
        argument = strawberry.argument(description=info.description)
        params.append(
            inspect.Parameter(
                name,
                kw,
                annotation=Annotated[kind if required else kind | None, argument],
                default=inspect.Parameter.empty if required else (default if plain else None),
            )
        )
    return params


def _plain(value: Any) -> Any:
    """An argument as the request model takes it (an input object as a mapping; FILTERS'
    declared facets beside the built-in fields)."""
    if hasattr(value, "__strawberry_definition__"):
        out = {k: v for k, v in vars(value).items() if v is not None}
        declared = out.pop(DECLARED, None) if isinstance(value, FilterInput) else None
        if isinstance(declared, Mapping):
            out.update({k: v for k, v in declared.items() if k not in out})
        elif declared is not None:
            raise InvalidRequest(
                f"filters.{DECLARED} takes an object of declared facets' filters,"
                ' e.g. {"team": ["search"]}',
                field=f"filters.{DECLARED}",
            )
        return out
    return value


def spelling(op: Operation) -> dict[str, str]:
    """Request field paths → GraphQL's names (``filters.created_from`` → ``filters.createdFrom``)."""
    out = {name: camel(name) for name in op.request.model_fields}
    if "filters" in op.request.model_fields:
        out.update({f"filters.{n}": f"filters.{camel(n)}" for n in FilterSpec.model_fields})
    return out


async def _run(
    info: Ctx, op: Operation, fn: Callable[..., T], /, *args: Any, weight: Mapping[str, Any]
) -> T:
    """Run one store call of this request — after the request's previous one has finished.

    It runs in the heavy lane (``workers``) when the document asks for several
    store calls or when ``weight`` (the field's arguments) says so.
    """
    svc: Service = info.context["service"]
    heavy = _several_calls(info) or op.heavy or is_heavy(op.name, weight)
    async with info.context["one_at_a_time"]:
        return await svc.run(fn, *args, heavy=heavy)


def _perform(op: Operation, store: Any, caller: Caller, raw: dict[str, Any]) -> Any:
    """The operation of a field, parsed and recorded (:func:`~.operations.perform`)."""
    return perform(op, store, caller, raw, surface="graphql")


def _several_calls(info: Ctx) -> bool:
    """Whether the operation may ask for more than one top-level field (fragments: maybe)."""
    selections = info.operation.selection_set.selections
    return len(selections) > 1 or not isinstance(selections[0], FieldNode)


def _graphql_error(exc: KnowledgeStoreError, op: Operation) -> GraphQLError:
    spelled = respell(exc, spelling(op))
    return GraphQLError(spelled.message, extensions=spelled.to_dict()["error"])


def _resolver(op: Operation) -> Callable[..., Any]:
    async def resolve(info: Ctx, **arguments: Any) -> Any:
        svc: Service = info.context["service"]
        caller: Caller = info.context["caller"]
        if op.admin and not caller.admin:
            denied = AuthError(
                403, f"{op.graphql} is an administration view: it needs the admin scope"
            )
            raise GraphQLError(denied.message, extensions=denied.to_dict()["error"])
        raw: dict[str, Any] = {}
        try:
            raw = {k: _plain(v) for k, v in arguments.items() if v is not None}
            answer = await _run(info, op, _perform, op, svc.store, caller, raw, weight=raw)
        except KnowledgeStoreError as exc:
            raise _graphql_error(exc, op) from None
        return _typed(answer)

    params = _arguments(op)
    kinds = [output_type(answer) for answer in op.answers]
    returns = (
        kinds[0]
        if len(kinds) == 1
        else Annotated[Union[tuple(kinds)], strawberry.union(op.name.title())]  # noqa: UP007
    )
    resolve.__signature__ = inspect.Signature(params, return_annotation=returns)  # type: ignore[attr-defined]
    resolve.__name__ = op.name
    return resolve


async def _capabilities(info: Ctx) -> Any:
    svc: Service = info.context["service"]
    async with info.context["one_at_a_time"]:
        found = await svc.run(capabilities, svc.store, info.context["caller"])
    return _typed(found)


def _query_type() -> Any:
    fields: dict[str, Any] = {}
    for op in OPERATIONS:
        if op.graphql is None:
            continue
        fields[op.name] = strawberry.field(
            resolver=_resolver(op), name=op.graphql, description=op.summary
        )
    fields["capabilities"] = strawberry.field(
        resolver=_capabilities,
        description="The tools this caller sees now",
        graphql_type=output_type(Capabilities),
    )
    return strawberry.type(type("Query", (), fields))


class _Schema(strawberry.Schema):
    def process_errors(
        self, errors: list[GraphQLError], execution_context: ExecutionContext | None = None
    ) -> None:
        """Log only what is not a caller's error (those are answers, not incidents)."""
        unexpected = [e for e in errors if not (e.extensions or {}).get("code")]
        super().process_errors(unexpected, execution_context)


schema = _Schema(
    query=_query_type(),
    extensions=[RequestBounds],
    config=StrawberryConfig(scalar_map=_SCALARS),
)


async def _context(svc: Annotated[Service, Depends(the_service)], who: AnyCaller) -> dict[str, Any]:
    return {"service": svc, "caller": who, "one_at_a_time": asyncio.Lock()}


#: The members of a GraphQL request body a refusal may be about (GraphQL over HTTP).
_REQUEST_MEMBERS = ("query", "variables", "operationName", "extensions")


class _Router(GraphQLRouter[dict[str, Any], None]):
    """strawberry's router, whose refusals of a request before it runs (``variables`` that is
    not an object, a body that is not a request, an unknown operation) leave in the one error
    shape with their status, as every other error of the HTTP surfaces — not as plain text."""

    async def run(self, request: Any, context: Any = UNSET, root_value: Any = UNSET) -> Any:
        try:
            return await super().run(request, context=context, root_value=root_value)
        except HTTPException as exc:
            return _refusal(exc)

    def parse_json(self, data: str | bytes) -> Any:
        parsed = super().parse_json(data)
        if not isinstance(parsed, dict | list):  # a list is a batch, refused as one below
            raise HTTPException(
                400,
                'the body must be a JSON object: {"query": "…", "variables": {…}},'
                f" not {type(parsed).__name__ if parsed is not None else 'null'}",
            )
        return parsed


#: strawberry's refusals, in words that say what to send instead.
_REWORDED = {
    "Unsupported content type": "send the GraphQL request as JSON (Content-Type: application/json)",
    "Batching is not enabled": "one GraphQL request per body: a JSON list (a batch) is not taken",
    "Not Found": "GET /graphql needs a query (?query=…); this server has no GraphQL IDE",
    "No GraphQL query found in the request": 'the request has no query: send {"query": "…"}',
}


def _refusal(exc: HTTPException) -> JSONResponse:
    field = next((name for name in _REQUEST_MEMBERS if f"`{name}`" in exc.reason), None)
    if field is None and exc.reason.startswith("Unknown operation"):
        field = "operationName"
    details = {"field": field} if field else {}
    message = clip(_REWORDED.get(exc.reason, exc.reason))
    error: KnowledgeStoreError = (
        NotFound(message, path="/graphql")
        if exc.status_code == 404
        else InvalidRequest(message, **details)
    )
    return JSONResponse(error.to_dict(), status_code=exc.status_code)


def graphql_router() -> GraphQLRouter[dict[str, Any], None]:
    """The ``/graphql`` route (POST, and GET for queries); no browser IDE (it needs a CDN)."""
    return _Router(schema, path="/graphql", context_getter=_context, graphql_ide=None)
