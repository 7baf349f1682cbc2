"""The agent tools: generated from the operation table, ranked like the API, typed errors, gating."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from knowledge_store.errors import (
    BoundExceeded,
    InvalidRequest,
    KnowledgeStoreError,
    UnknownField,
    UnknownLabel,
)
from knowledge_store.ingest.embedding import Embedder
from knowledge_store.model import DIMENSIONS, LABELS, METRICS, Identity
from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.auth import AuthError, Caller
from knowledge_store.surfaces.tools import (
    ADMIN_TOOLS,
    ALL_TOOLS,
    KNOWLEDGE_TOOLS,
    call_tool,
    resolve_tool,
    visible_tools,
)
from tests.fields_estate import fields_store, visible_records

__all__ = ["fields_store"]

DESIGN_TOOLS = [  # DESIGN §6's tools, + fetch_content
    "search",
    "docs_search",
    "code_sample_search",
    "search_knowledge",
    "graph",
    "sql",
    "query_graph",
    "fetch_content",
    "get_related",
    "get_learning_path",
    "resolve_xref",
]


def _as(principal: str, *, admin: bool = False) -> Caller:
    return Caller(Identity(principal), admin=admin)


def _properties(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = []
    for name, prop in schema.get("properties", {}).items():
        out.append((f"{path}{name}", prop))
        out.extend(_properties(prop, f"{path}{name}."))
    return out


def test_the_tools_are_the_designs_and_each_is_written_for_a_model() -> None:
    assert sorted(KNOWLEDGE_TOOLS) == sorted(DESIGN_TOOLS)
    assert list(ADMIN_TOOLS) == ["ingest_records", "delete_entities"]
    for tool in ALL_TOOLS.values():
        info = tool.to_info().to_dict()
        assert len(info["description"]) > 120, tool.name  # when to use it, what it returns
        schema = info["input_schema"]
        assert schema["type"] == "object" and schema["properties"], tool.name
        assert "$ref" not in json.dumps(schema) and "$defs" not in schema
        for path, prop in _properties(schema):
            # one plain type each: clients convert an argument by it (issue 15 item 7)
            assert isinstance(prop.get("type"), str), f"{tool.name}.{path}: {prop}"
        jsonschema.Draft202012Validator.check_schema(schema)
        jsonschema.Draft202012Validator.check_schema(tool.output_schema)
        assert tool.output_schema.get("type") == "object", tool.name
    sql = json.dumps(ALL_TOOLS["sql"].input_schema)
    assert all(metric in sql for metric in METRICS)
    assert all(dimension in sql for dimension in DIMENSIONS)
    graph = ALL_TOOLS["graph"].input_schema
    assert all(label in json.dumps(graph) for label in LABELS)
    assert graph["required"] == ["starts"]
    assert ALL_TOOLS["search"].input_schema["properties"]["filters"]["type"] == "object"
    # the documented bound of docs/query_graph.md, not another number (issue 15 item 7)
    assert ALL_TOOLS["query_graph"].input_schema["properties"]["query"]["maxLength"] == 10_000


def test_search_tool_ranks_like_the_api_and_its_answer_fits_its_output_schema(
    fields_store: KnowledgeStore,
) -> None:
    everyone = _as("everyone")
    out = call_tool(fields_store, everyone, "search", {"query": "vacuum dead tuples", "k": 3})
    assert out == fields_store.search("vacuum dead tuples", k=3).to_dict()
    assert out["results"][0]["uid"] == "doc:vacuum"
    jsonschema.validate(out, ALL_TOOLS["search"].output_schema)
    filtered = call_tool(
        fields_store,
        _as("user:sam"),
        "search",
        {"query": "replication", "filters": {"type": ["ticket"]}},
    )
    assert {r["type"] for r in filtered["results"]} == {"ticket"}


def test_sql_tool_filter_and_aggregate_modes(fields_store: KnowledgeStore) -> None:
    sam = _as("user:sam")
    listed = call_tool(
        fields_store,
        sam,
        "sql",
        {"filters": {"type": ["ticket"], "status": ["open"]}, "order": "created_at:asc"},
    )
    assert [h["uid"] for h in listed["hits"]] == ["ticket:4", "ticket:1"]
    counted = call_tool(fields_store, sam, "sql", {"mode": "aggregate", "dimension": "status"})
    assert counted == fields_store.aggregate("count", "status", identity="user:sam").to_dict()
    total = call_tool(fields_store, _as("everyone"), "sql", {"mode": "aggregate", "k": 3})
    assert total["rows"] == [{"key": None, "value": len(visible_records("everyone"))}]
    for answer in (listed, counted, total):
        jsonschema.validate(answer, ALL_TOOLS["sql"].output_schema)


def test_graph_and_fetch_content_tools(fields_store: KnowledgeStore) -> None:
    everyone = _as("everyone")
    out = call_tool(
        fields_store, everyone, "graph", {"starts": ["doc:vacuum"], "labels": ["partOf"]}
    )
    assert [h["uid"] for h in out["hits"]] == ["doc:admin"] and out["hits"][0]["hops"] == 1
    page = call_tool(
        fields_store, everyone, "fetch_content", {"uid": "doc:vacuum", "max_chars": 100}
    )
    assert page["uid"] == "doc:vacuum" and len(page["body"]) == 100 and page["body_truncated"]
    assert "chunks" not in page and page["code"] is None
    jsonschema.validate(page, ALL_TOOLS["fetch_content"].output_schema)
    chunks = call_tool(
        fields_store, everyone, "fetch_content", {"uid": "doc:vacuum", "include_chunks": True}
    )
    assert chunks["chunks"] and not chunks["body_truncated"]


@pytest.mark.parametrize(
    ("name", "arguments", "error", "field"),
    [
        ("sql", {"filters": {"author": ["sam"]}}, UnknownField, "filters.author"),
        ("sql", {"mode": "aggregate", "metric": "avg"}, UnknownField, "metric"),
        ("sql", {"mode": "aggregate", "dimension": "owner"}, UnknownField, "dimension"),
        ("sql", {"mode": "median"}, InvalidRequest, "mode"),
        ("sql", {"order": "body:asc"}, UnknownField, "order"),
        (
            "sql",
            {"filters": {"created_from": "2024-05-01", "created_to": "2024-01-01"}},
            InvalidRequest,
            "filters.created_from",
        ),
        ("sql", {"k": 0}, InvalidRequest, "k"),
        ("sql", {"colour": "red"}, InvalidRequest, "colour"),
        ("search", {"query": "x", "mode": "borda"}, InvalidRequest, "mode"),
        ("search", {"query": "x", "k": 101}, InvalidRequest, "k"),
        ("search", {"query": "x", "filters": {"when": "now"}}, UnknownField, "filters.when"),
        ("search", {"query": "x", "filters": "type=page"}, InvalidRequest, "filters"),
        ("graph", {"starts": ["doc:vacuum"], "labels": ["mentions"]}, UnknownLabel, "labels"),
        ("graph", {"starts": ["doc:vacuum"], "depth": 0}, BoundExceeded, "depth"),
        ("graph", {"starts": ["doc:vacuum"], "depth": 5}, BoundExceeded, "depth"),
        ("graph", {"starts": []}, InvalidRequest, "starts"),
        ("graph", {}, InvalidRequest, "starts"),
        ("query_graph", {"query": "x" * 10_001}, BoundExceeded, "query"),
        ("nope", {}, InvalidRequest, None),
    ],
)
def test_bad_arguments_give_typed_errors_naming_the_argument(
    fields_store: KnowledgeStore,
    name: str,
    arguments: dict[str, object],
    error: type[Exception],
    field: str | None,
) -> None:
    with pytest.raises(error) as info:
        call_tool(fields_store, _as("everyone"), name, arguments)
    assert isinstance(info.value, KnowledgeStoreError)
    shape = info.value.to_dict()["error"]
    assert set(shape) == {"code", "message", "details"} and shape["message"]
    assert shape["details"].get("field") == field
    assert "--" not in shape["message"]  # a tool's error never names a CLI flag


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
    root = _as("user:root", admin=True)
    report = call_tool(
        store,
        root,
        "ingest_records",
        {
            "records": [{"uid": "a", "type": "page", "title": "A", "body": "alpha"}],
            "acl": ["everyone"],
        },
    )
    assert report["added"] == 1
    jsonschema.validate(report, ALL_TOOLS["ingest_records"].output_schema)
    deleted = call_tool(store, root, "delete_entities", {"uids": ["a"]})
    assert deleted["deleted"] == 1
    with pytest.raises(InvalidRequest, match="unknown tool 'nope'"):
        resolve_tool(store, "nope", admin=True)


def test_no_tools_on_an_empty_store(tmp_path: Path, embedder: Embedder) -> None:
    with KnowledgeStore.open(tmp_path / "empty", embedder=embedder) as store:
        assert visible_tools(store) == []
