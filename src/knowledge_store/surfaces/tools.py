"""The agent tools (DESIGN §6), generated from the operation table, and who sees which.

Every operation with an MCP name (:data:`~.operations.OPERATIONS`) is a tool:
its description is the operation's (written for a model), its input schema
its request model's (every property with an explicit ``"type"``), its output
schema its answer model's. Operations that share a tool name are one tool
with a ``mode`` argument (``sql``: ``filter`` lists, ``aggregate`` counts).
A call validates its arguments with the request model, runs the operation as
the caller and returns the answer's JSON, so a tool ranks exactly like the
CLI and the API; bad arguments raise the store's typed errors, which servers
turn into tool execution errors (``isError``).

Which tools a caller sees is decided here, once, for MCP ``tools/list``,
``/v1/capabilities`` and GraphQL ``capabilities`` (:func:`visible_tools`); a
call goes through :func:`resolve_tool`, so a tool that is not listed can't be
called either. While the store holds no chunk at all (``is_empty``, a global
figure) the knowledge tools are left out; they appear with the first accepted
chunk — no restart — and disappear with the last. Administration tools are
shown to administrators only, empty store or not; called without the admin
scope they answer ``forbidden`` (403) on every surface.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache, cached_property
from typing import TYPE_CHECKING, Any

from knowledge_store.errors import InvalidRequest
from knowledge_store.model.declared import DeclaredFacet
from knowledge_store.requests import json_schema_of
from knowledge_store.surfaces.auth import AuthError, Caller
from knowledge_store.surfaces.operations import OPERATIONS, Operation, perform
from knowledge_store.surfaces.shapes import Capabilities, Endpoints, ErrorEnvelope, ToolInfo
from knowledge_store.surfaces.workers import is_heavy

if TYPE_CHECKING:
    from knowledge_store.store import KnowledgeStore

__all__ = [
    "ADMIN_TOOLS",
    "ALL_TOOLS",
    "KNOWLEDGE_TOOLS",
    "Tool",
    "call_tool",
    "capabilities",
    "heavy_call",
    "input_schema",
    "resolve_tool",
    "visible_tools",
    "with_facets",
]

MODE = "mode"


def _plain_optionals(schema: dict[str, Any]) -> dict[str, Any]:
    """An optional argument is left out rather than sent as null: ``{"type": T}``, not ``[T, null]``.

    Clients convert a command-line or form value by the property's ``type``
    (the MCP Inspector parses ``"object"`` and ``"array"`` as JSON only when
    ``type`` says exactly that), so every property gets one type.
    """
    properties = {}
    for name, prop in schema.get("properties", {}).items():
        kind = prop.get("type")
        if isinstance(kind, list) and "null" in kind and name not in schema.get("required", ()):
            rest = [k for k in kind if k != "null"]
            prop = {**prop, "type": rest[0] if len(rest) == 1 else rest}
            if "enum" in prop:
                prop["enum"] = [v for v in prop["enum"] if v is not None]
            if prop.get("default", 0) is None:
                prop.pop("default")
        properties[name] = _plain_optionals(prop) if "properties" in prop else prop
    return {**schema, "properties": properties}


@dataclass(frozen=True)
class Tool:
    """One agent tool: what a model sees (name, description, schemas) and what runs."""

    name: str
    operations: tuple[Operation, ...]

    @property
    def admin(self) -> bool:
        return self.operations[0].admin

    @property
    def modes(self) -> dict[str, Operation]:
        return {op.mcp_mode: op for op in self.operations if op.mcp_mode is not None}

    @property
    def description(self) -> str:
        if len(self.operations) == 1:
            return self.operations[0].description
        return " ".join(
            f"mode {mode!r}{' (the default)' if i == 0 else ''}: {op.description}"
            for i, (mode, op) in enumerate(self.modes.items())
        )

    @cached_property
    def input_schema(self) -> dict[str, Any]:
        schemas = [_plain_optionals(op.request.json_schema()) for op in self.operations]
        if len(schemas) == 1:
            return schemas[0]
        modes = list(self.modes)
        properties: dict[str, Any] = {
            MODE: {
                "type": "string",
                "enum": modes,
                "default": modes[0],
                "description": " · ".join(f"{m}: {op.summary}" for m, op in self.modes.items()),
            }
        }
        for mode, schema in zip(modes, schemas, strict=True):
            for name, prop in schema["properties"].items():
                shared = all(name in other["properties"] for other in schemas)
                if name not in properties:
                    lead = "" if shared else f"{mode} mode: "
                    properties[name] = {**prop, "description": lead + prop.get("description", "")}
        required = set.intersection(*(set(s.get("required", ())) for s in schemas))
        return {
            "type": "object",
            "properties": properties,
            "required": sorted(required),
            "additionalProperties": False,
        }

    @cached_property
    def output_schema(self) -> dict[str, Any]:
        """The answer's schema — or the error shape's, the structured content of an ``isError``.

        Clients validate structured content against it, error results too (the
        MCP Inspector's SDK does), so it names both.
        """
        schemas = [
            json_schema_of(answer, mode="serialization")
            for op in self.operations
            for answer in op.answers
        ]
        return {"type": "object", "anyOf": [*schemas, json_schema_of(ErrorEnvelope)]}

    def to_info(self) -> ToolInfo:
        return ToolInfo(
            name=self.name, description=self.description, input_schema=self.input_schema
        )

    def operation(self, arguments: Mapping[str, Any] | None) -> Operation:
        """The operation ``arguments`` ask for (their ``mode`` where the tool has modes)."""
        if len(self.operations) == 1:
            return self.operations[0]
        mode = (arguments or {}).get(MODE, next(iter(self.modes)))
        found = self.modes.get(mode) if isinstance(mode, str) else None
        if found is None:
            raise InvalidRequest(
                f"unknown mode {str(mode)[:80]!r}; use one of: {', '.join(self.modes)}",
                field=MODE,
                allowed=list(self.modes),
            )
        return found

    def call(
        self, store: KnowledgeStore, caller: Caller, arguments: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        """Validate ``arguments`` with the request model and run the operation as ``caller``."""
        op = self.operation(arguments)
        given = dict(arguments or {})
        if len(self.operations) > 1:  # the other modes' arguments are not this one's business
            own = set(op.request.model_fields)
            others = {n for o in self.operations for n in o.request.model_fields} - own
            given = {k: v for k, v in given.items() if k != MODE and k not in others}
        return perform(op, store, caller, given, surface="mcp").to_dict()


def _tools() -> dict[str, Tool]:
    grouped: dict[str, list[Operation]] = {}
    for op in OPERATIONS:
        if op.mcp is not None:
            grouped.setdefault(op.mcp, []).append(op)
    return {name: Tool(name, tuple(ops)) for name, ops in grouped.items()}


#: Every tool, knowledge tools first, in the order a model sees them.
ALL_TOOLS: dict[str, Tool] = _tools()
KNOWLEDGE_TOOLS: dict[str, Tool] = {n: t for n, t in ALL_TOOLS.items() if not t.admin}
ADMIN_TOOLS: dict[str, Tool] = {n: t for n, t in ALL_TOOLS.items() if t.admin}


def visible_tools(store: KnowledgeStore, *, admin: bool = False) -> list[Tool]:
    """The tools to list now: the knowledge tools unless the store is empty, + admin tools."""
    shown = [] if store.is_empty else list(KNOWLEDGE_TOOLS.values())
    if admin:
        shown.extend(ADMIN_TOOLS.values())
    return shown


def resolve_tool(store: KnowledgeStore, name: str, *, admin: bool = False) -> Tool:
    """The tool ``name`` if the caller may call it now; else an error a model can act on."""
    if name in ADMIN_TOOLS and not admin:
        raise AuthError(
            403, f"tool {name!r} administers the store; it needs a token with the admin scope"
        )
    if name in KNOWLEDGE_TOOLS and store.is_empty:
        raise InvalidRequest(
            f"tool {name!r} is not available: the knowledge store holds no content yet."
            " Ingest content first; the tools appear in the tool list as soon as it does",
            tool=name,
        )
    tool = ALL_TOOLS.get(name)
    if tool is None:
        names = [t.name for t in visible_tools(store, admin=admin)]
        raise InvalidRequest(
            f"unknown tool {name[:100]!r}; the tools are: {', '.join(names) or 'none yet'}",
            tool=name,
            allowed=names,
        )
    return tool


def call_tool(
    store: KnowledgeStore,
    caller: Caller,
    name: str,
    arguments: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Resolve ``name`` for ``caller`` and run it (blocking)."""
    return resolve_tool(store, name, admin=caller.admin).call(store, caller, arguments)


def heavy_call(name: str, arguments: Mapping[str, Any] | None) -> bool:
    """Whether a call of tool ``name`` runs in the heavy lane (never raises: raw arguments)."""
    tool = ALL_TOOLS.get(name)
    if tool is None:
        return False
    try:
        op = tool.operation(arguments if isinstance(arguments, Mapping) else None)
    except InvalidRequest:
        op = tool.operations[0]
    return is_heavy(op.name, arguments)


@cache
def input_schema(name: str, facets: tuple[DeclaredFacet, ...] = ()) -> dict[str, Any] | None:
    """A tool's JSON input schema with the store's declared ``facets`` (its filters and
    aggregate dimensions), computed once per set of facets."""
    tool = ALL_TOOLS.get(name)
    if tool is None:
        return None
    return with_facets(tool.input_schema, facets) if facets else tool.input_schema


def with_facets(schema: dict[str, Any], facets: Sequence[DeclaredFacet]) -> dict[str, Any]:
    """``schema`` with each declared facet's filters among its FILTERS' properties and its
    dimensions in the ``dimension`` enum (the names a request may use on this store)."""
    properties = dict(schema.get("properties", {}))
    filters = properties.get("filters")
    if isinstance(filters, dict) and "properties" in filters:
        own = dict(filters["properties"])
        for facet in facets:
            for name, role in zip(facet.request_names, _ROLES[facet.kind], strict=True):
                own[name] = _facet_property(facet, role)
        properties["filters"] = {**filters, "properties": own}
    dimension = properties.get("dimension")
    if isinstance(dimension, dict) and "enum" in dimension:
        extra = [d for f in facets for d in f.dimensions]
        enum = [v for v in dimension["enum"] if v is not None]
        tail = [None] if None in dimension["enum"] else []
        properties["dimension"] = {**dimension, "enum": [*enum, *extra, *tail]}
    return {**schema, "properties": properties}


_ROLES = {"keyword": ("any", "none"), "date": ("from", "to"), "number": ("from", "to")}


def _facet_property(facet: DeclaredFacet, role: str) -> dict[str, Any]:
    what = f"the declared {facet.kind} facet {facet.name} (attributes.{facet.name})"
    if role == "any":
        return {
            "type": "array",
            "items": {"type": "string"},
            "description": f"{what}: keep any of these",
        }
    if role == "none":
        return {
            "type": "array",
            "items": {"type": "string"},
            "description": f"{what}: leave these out",
        }
    side = "on or after" if role == "from" else "on or before"
    if facet.kind == "date":
        return {"type": "string", "description": f"{what} {side}, e.g. 2024-05-01"}
    side = "at least" if role == "from" else "at most"
    return {"type": "number", "description": f"{what}: {side} this"}


def capabilities(store: KnowledgeStore, caller: Caller) -> Capabilities:
    """What ``caller`` can do now: the tools it sees (with the store's declared facets in their
    schemas), the endpoints."""
    facets = store.declared_facets()
    return Capabilities(
        content_root=store.content_root(),
        is_empty=store.is_empty,
        identity=caller.principal,
        admin=caller.admin,
        tools=[
            ToolInfo(
                name=tool.name,
                description=tool.description,
                input_schema=input_schema(tool.name, facets) or tool.input_schema,
            )
            for tool in visible_tools(store, admin=caller.admin)
        ],
        endpoints=Endpoints(
            rest="/v1", openapi="/openapi.json", graphql="/graphql", mcp="/mcp", page="/"
        ),
    )
