"""Agent tools by intent (DESIGN §6): ``search``, ``graph``, ``sql`` — library functions.

Each tool is a name, a description written for a model (when to use it, what
it returns), a JSON input schema (a pydantic model's ``model_json_schema()``)
and a function ``(store, identity, arguments) → JSON-able dict`` that calls
one method of :class:`~knowledge_store.store.KnowledgeStore`, so a tool ranks
exactly like the CLI and the API. The MCP and HTTP servers expose them; when
the store is empty (:func:`available_tools`) the tools are left out.

Bad arguments raise the store's typed errors (``InvalidRequest``,
``UnknownField`` naming the valid fields …), whose ``to_dict()`` is the one
error shape; servers turn them into tool execution errors (``isError``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from knowledge_store.errors import (
    BoundExceeded,
    InputError,
    InvalidRequest,
    UnknownField,
    UnknownLabel,
)
from knowledge_store.model import LABELS, MAX_FILTER_VALUES, Identity
from knowledge_store.retrieval.aggregates import DIMENSIONS, METRICS
from knowledge_store.retrieval.filters import FILTER_NAMES, ORDER_FIELDS

if TYPE_CHECKING:
    from knowledge_store.store import KnowledgeStore

__all__ = [
    "TOOLS",
    "FilterArgs",
    "GraphArgs",
    "SearchArgs",
    "SqlArgs",
    "Tool",
    "argument_error",
    "available_tools",
    "call_tool",
    "tool_schemas",
]

Metric = Literal["count", "count_distinct:source", "count_distinct:type"]
Dimension = Literal[
    "type",
    "source",
    "status",
    "created_at:day",
    "created_at:week",
    "created_at:month",
    "updated_at:day",
    "updated_at:week",
    "updated_at:month",
]
Label = Literal[
    "partOf",
    "dependsOn",
    "xref",
    "appliesTo",
    "forRole",
    "teachesSkill",
    "supersededBy",
    "implementedBy",
    "derivedFrom",
]
OrderSpec = Literal[
    "updated_at:desc",
    "updated_at:asc",
    "created_at:desc",
    "created_at:asc",
    "title:asc",
    "title:desc",
]


#: A FILTERS list: any of at most MAX_FILTER_VALUES values.
FilterList = Annotated[list[str], Field(max_length=MAX_FILTER_VALUES)]


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FilterArgs(_Args):
    """FILTERS: each list means "any of"; date ranges are inclusive ISO 8601 dates."""

    type: FilterList = Field(default_factory=list, description="entity types to keep")
    not_type: FilterList = Field(default_factory=list, description="entity types to leave out")
    source: FilterList = Field(default_factory=list, description="origin systems to keep")
    status: FilterList = Field(default_factory=list, description="statuses to keep")
    uid: FilterList = Field(default_factory=list, description="entity uids to keep")
    created_from: str | None = Field(None, description="created on or after, e.g. 2024-05-01")
    created_to: str | None = Field(None, description="created on or before, e.g. 2024-05-31")
    updated_from: str | None = Field(None, description="updated on or after")
    updated_to: str | None = Field(None, description="updated on or before")

    def as_mapping(self) -> dict[str, Any]:
        return self.model_dump(exclude_defaults=True)


class SearchArgs(_Args):
    query: str = Field(
        "",
        description="what to look for, in words (a question, a phrase, an identifier); empty"
        " for a pure filter request",
        max_length=4096,
    )
    k: int = Field(10, ge=1, le=50, description="how many results")
    filters: FilterArgs = Field(default_factory=FilterArgs)


class GraphArgs(_Args):
    starts: list[str] = Field(
        ..., min_length=1, max_length=100, description="uids of the entities to start from"
    )
    depth: int = Field(1, ge=1, le=3, description="how many hops to follow (1–3)")
    labels: list[Label] = Field(
        default_factory=list, description="follow only these edge labels (default: all 9)"
    )
    direction: Literal["out", "in", "both"] = Field(
        "both", description="out: edges from the starts; in: edges into them; both"
    )
    k: int = Field(10, ge=1, le=100, description="how many entities to return")


class SqlArgs(_Args):
    mode: Literal["filter", "aggregate"] = Field(
        "filter",
        description="filter: list entities by their fields; aggregate: count them",
    )
    filters: FilterArgs = Field(default_factory=FilterArgs)
    order: OrderSpec = Field("updated_at:desc", description="filter mode: the order")
    k: int = Field(10, ge=1, le=100, description="filter mode: how many entities")
    metric: Metric = Field("count", description="aggregate mode: what to compute")
    dimension: Dimension | None = Field(
        None,
        description="aggregate mode: group by this (a date trend lists every day, ISO week"
        " or month in the range, zeros included); omit for one total",
    )


@dataclass(frozen=True)
class Tool:
    """One agent tool: what a model sees (name, description, schema) and what runs."""

    name: str
    description: str
    input_model: type[_Args]
    function: Callable[[KnowledgeStore, Identity, Any], dict[str, Any]]

    @property
    def input_schema(self) -> dict[str, Any]:
        return self.input_model.model_json_schema()

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        }

    def parse(self, arguments: Mapping[str, Any] | None) -> _Args:
        """Validate ``arguments``; errors say which argument and what is expected."""
        try:
            return self.input_model.model_validate(dict(arguments or {}))
        except ValidationError as exc:
            raise argument_error(exc.errors(), prefix=self.name) from None

    def call(
        self, store: KnowledgeStore, identity: Identity | str, arguments: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        who = identity if isinstance(identity, Identity) else Identity(identity)
        return self.function(store, who, self.parse(arguments))


def argument_error(problems: Sequence[Mapping[str, Any]], *, prefix: str = "") -> InputError:
    """Pydantic validation problems → the store's typed error, with a sentence to act on.

    ``problems`` are pydantic's ``errors()`` with ``loc`` relative to the arguments
    (or the request body); ``prefix`` (a tool's name) starts the message. Every
    surface that validates arguments with pydantic (REST, MCP, the tools over
    REST) maps its problems here, so they answer alike.
    """
    lead = f"{prefix}: " if prefix else ""
    for problem in problems:
        loc = [str(p) for p in problem.get("loc", ())]
        kind = problem.get("type")
        if kind == "extra_forbidden" and len(loc) == 2 and loc[0] == "filters":
            return UnknownField(
                f"{lead}unknown filter {loc[1]!r}; filter on one of: {', '.join(FILTER_NAMES)}",
                field=loc[1],
                allowed=list(FILTER_NAMES),
            )
        if kind == "literal_error" and loc[:1] == ["labels"]:
            return UnknownLabel(
                f"{lead}unknown edge label {problem.get('input')!r}; use one of:"
                f" {', '.join(LABELS)}",
                label=str(problem.get("input")),
                allowed=list(LABELS),
            )
        if kind == "literal_error" and loc[:1] in (["metric"], ["dimension"], ["order"]):
            return UnknownField(
                f"{lead}unknown {loc[0]} {problem.get('input')!r}; metrics:"
                f" {', '.join(METRICS)}; dimensions: {', '.join(DIMENSIONS)}; orders:"
                f" {', '.join(f'{f}:asc|desc' for f in ORDER_FIELDS)}",
                field=loc[0],
                value=str(problem.get("input")),
            )
        if kind in ("less_than_equal", "greater_than_equal") and loc == ["depth"]:
            return BoundExceeded(
                f"{lead}depth {problem.get('input')!r} is outside the bound 1–3; use 1, 2 or 3",
                field="depth",
                minimum=1,
                maximum=3,
            )
        if kind == "too_long" and isinstance(problem.get("input"), list | dict):
            maximum = (problem.get("ctx") or {}).get("max_length")
            where = ".".join(loc) or "the request"
            return BoundExceeded(
                f"{lead}{where} holds {len(problem['input'])} values; the maximum is {maximum}."
                " Split the request, or narrow it",
                field=where,
                maximum=maximum,
                found=len(problem["input"]),
            )
    parts = []
    for problem in problems[:5]:
        where = ".".join(str(p) for p in problem.get("loc", ())) or "the arguments"
        parts.append(f"{where}: {problem.get('msg', 'invalid')}")
    return InvalidRequest(
        f"{lead}invalid arguments — " + "; ".join(parts),
        errors=[
            {
                "loc": [str(p) for p in e.get("loc", ())],
                "message": str(e.get("msg", "")),
                "type": str(e.get("type", "")),
            }
            for e in problems
        ],
    )


def _search(store: KnowledgeStore, identity: Identity, args: SearchArgs) -> dict[str, Any]:
    answer = store.search(
        args.query, identity=identity, k=args.k, filters=args.filters.as_mapping()
    )
    return answer.to_dict()


def _graph(store: KnowledgeStore, identity: Identity, args: GraphArgs) -> dict[str, Any]:
    answer = store.graph(
        args.starts,
        identity=identity,
        depth=args.depth,
        labels=list(args.labels),
        direction=args.direction,
        k=args.k,
    )
    return dict(answer.to_dict())


def _sql(store: KnowledgeStore, identity: Identity, args: SqlArgs) -> dict[str, Any]:
    filters = args.filters.as_mapping()
    if args.mode == "aggregate":
        return store.aggregate(
            args.metric, args.dimension, identity=identity, filters=filters
        ).to_dict()
    return store.sql(filters, identity=identity, order=args.order, k=args.k).to_dict()


_FILTERS_HELP = (
    "Filters (optional): type, not_type, source, status, uid (lists: any of), created_from,"
    " created_to, updated_from, updated_to (ISO dates, inclusive)."
)

TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (
        Tool(
            "search",
            "Find the passages and documents that answer a question or mention a term. Use it"
            " first for any information need stated in words — a question, a topic, an error"
            " message, an identifier. It ranks by meaning and by exact words at once and fuses"
            " the two (plus the entities linked to the best hits), returning up to k entities,"
            " best first: uid, title, type, href, score, the rank each retriever gave it,"
            " superseded_by (a newer entity replaces it: prefer that one), and evidence chunks"
            " (text with heading path) to quote. " + _FILTERS_HELP,
            SearchArgs,
            _search,
        ),
        Tool(
            "graph",
            "Follow the links between entities you already know (uids from search or sql):"
            " what a page is part of, what it links to (xref), what supersedes it, its code"
            f" samples (implementedBy), prerequisites (dependsOn). Labels: {', '.join(LABELS)}."
            " Depth 1–3 hops. Returns the linked entities ranked by hop distance, then number of"
            " distinct paths, then recency, each with its hop count and one path (uids and"
            " labels). Use it to explore around a result, not to search by words.",
            GraphArgs,
            _graph,
        ),
        Tool(
            "sql",
            "Select or count entities by their typed fields — never by words. mode 'filter'"
            " lists entities matching the filters, ordered by"
            f" {' / '.join(ORDER_FIELDS)} (e.g. 'the 5 most recently updated open tickets')."
            " mode 'aggregate' computes a metric"
            f" ({', '.join(METRICS)}) in total or by a dimension ({', '.join(DIMENSIONS)}),"
            " e.g. 'how many pages per source', 'tickets created per week'; date trends list"
            " every bucket in the range with zeros. Counts cover only what you may read. "
            + _FILTERS_HELP,
            SqlArgs,
            _sql,
        ),
    )
}


def tool_schemas() -> list[dict[str, Any]]:
    """Every tool as ``{"name", "description", "input_schema"}``."""
    return [tool.to_dict() for tool in TOOLS.values()]


def available_tools(store: KnowledgeStore) -> list[Tool]:
    """The tools to offer: none while the store holds no chunk (``is_empty``)."""
    return [] if store.is_empty else list(TOOLS.values())


def call_tool(
    store: KnowledgeStore,
    identity: Identity | str,
    name: str,
    arguments: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Run tool ``name``; an unknown name is an ``InvalidRequest`` listing the tools."""
    tool = TOOLS.get(name)
    if tool is None:
        raise InvalidRequest(
            f"unknown tool {name!r}; the tools are {', '.join(TOOLS)}",
            tool=name,
            allowed=list(TOOLS),
        )
    return tool.call(store, identity, arguments)
