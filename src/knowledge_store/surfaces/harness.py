"""The tool harness: the one place that decides which tools a surface exposes.

MCP ``tools/list``, the REST ``/v1/capabilities`` listing and the GraphQL
``capabilities`` field all call :func:`visible_tools`; tool calls go through
:func:`resolve_tool`, so a tool that is not listed can't be called either.

The rule (DESIGN §6): while the store holds no chunk at all (``is_empty``, a
global figure, not per identity) the knowledge tools are left out; they
appear with the first accepted chunk — no restart — and disappear again when
the last chunk is deleted. Administration tools (``ingest_records``,
``delete_entities``) are shown to administrators only, empty store or not;
called without the admin scope they answer ``forbidden`` (403) on every surface,
like the administration endpoints.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

from knowledge_store.errors import InvalidRequest
from knowledge_store.surfaces.auth import AuthError
from knowledge_store.surfaces.knowledge_tools import ADMIN_TOOLS, DOCS_TOOLS
from knowledge_store.surfaces.tools import TOOLS, Tool

if TYPE_CHECKING:
    from knowledge_store.store import KnowledgeStore

__all__ = [
    "ADMIN_TOOLS",
    "ALL_TOOLS",
    "KNOWLEDGE_TOOLS",
    "ToolSpec",
    "input_schema",
    "resolve_tool",
    "visible_tools",
]

ToolSpec = Tool
#: The knowledge tools, in the order a model sees them.
KNOWLEDGE_TOOLS: dict[str, Tool] = {**TOOLS, **DOCS_TOOLS}
ALL_TOOLS: dict[str, Tool] = {**KNOWLEDGE_TOOLS, **ADMIN_TOOLS}


def visible_tools(store: KnowledgeStore, *, admin: bool = False) -> list[ToolSpec]:
    """The tools to list now: the knowledge tools unless the store is empty, + admin tools."""
    shown = [] if store.is_empty else list(KNOWLEDGE_TOOLS.values())
    if admin:
        shown.extend(ADMIN_TOOLS.values())
    return shown


def resolve_tool(store: KnowledgeStore, name: str, *, admin: bool = False) -> ToolSpec:
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
        names = ", ".join(t.name for t in visible_tools(store, admin=admin)) or "none yet"
        raise InvalidRequest(
            f"unknown tool {name!r}; the tools are: {names}", tool=name, allowed=names.split(", ")
        )
    return tool


@cache
def input_schema(name: str) -> dict[str, Any] | None:
    """A tool's JSON input schema, computed once (schemas don't change while serving)."""
    tool = ALL_TOOLS.get(name)
    return tool.input_schema if tool is not None else None
