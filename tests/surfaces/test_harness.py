"""The tool harness: one function decides the tool list; is_empty hides the knowledge tools."""

from __future__ import annotations

import json

import pytest

from knowledge_store.errors import InvalidRequest
from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.auth import AuthError
from knowledge_store.surfaces.harness import (
    ADMIN_TOOLS,
    KNOWLEDGE_TOOLS,
    resolve_tool,
    visible_tools,
)

DESIGN_TOOLS = {
    "search",
    "graph",
    "sql",
    "search_knowledge",
    "docs_search",
    "code_sample_search",
    "get_related",
    "get_learning_path",
    "resolve_xref",
    "query_graph",
    "fetch_content",
}


def test_the_knowledge_tools_are_the_designs_and_each_is_written_for_a_model() -> None:
    assert set(KNOWLEDGE_TOOLS) == DESIGN_TOOLS
    for tool in [*KNOWLEDGE_TOOLS.values(), *ADMIN_TOOLS.values()]:
        schema = tool.input_schema
        assert schema["type"] == "object" and schema["properties"], tool.name
        assert len(tool.description) > 120, tool.name  # when to use it and what it returns
        json.dumps(tool.to_dict())


def test_empty_store_hides_the_tools_and_the_first_chunk_shows_them(
    store: KnowledgeStore,
) -> None:
    assert store.is_empty
    assert visible_tools(store) == []
    assert [t.name for t in visible_tools(store, admin=True)] == list(ADMIN_TOOLS)
    with pytest.raises(InvalidRequest, match="holds no content yet"):
        resolve_tool(store, "search")

    store.ingest_records(
        [{"uid": "a", "type": "page", "title": "A", "body": "alpha", "acl": ["everyone"]}]
    )
    assert [t.name for t in visible_tools(store)] == list(KNOWLEDGE_TOOLS)  # no restart
    assert resolve_tool(store, "search").name == "search"

    store.delete(["a"])
    assert store.is_empty
    assert visible_tools(store) == []


def test_admin_tools_need_the_admin_scope(store: KnowledgeStore) -> None:
    with pytest.raises(AuthError, match="admin scope") as refused:
        resolve_tool(store, "ingest_records")
    assert refused.value.status == 403 and refused.value.code == "forbidden"
    assert resolve_tool(store, "ingest_records", admin=True).name == "ingest_records"
    with pytest.raises(InvalidRequest, match="unknown tool 'nope'"):
        resolve_tool(store, "nope", admin=True)
