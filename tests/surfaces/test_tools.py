"""Agent tools by intent: schemas a model can read, one ranking with the API, typed errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from knowledge_store.errors import (
    BoundExceeded,
    InvalidRequest,
    KnowledgeStoreError,
    UnknownField,
    UnknownLabel,
)
from knowledge_store.ingest.embedding import Embedder
from knowledge_store.model import DIMENSIONS, LABELS, METRICS
from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.tools import TOOLS, available_tools, call_tool, tool_schemas
from tests.fields_estate import fields_store, visible_records

__all__ = ["fields_store"]


def test_each_tool_has_a_name_a_description_and_a_json_schema() -> None:
    schemas = tool_schemas()
    assert [s["name"] for s in schemas] == ["search", "graph", "sql"]
    for schema in schemas:
        assert len(schema["description"]) > 150  # written for a model: when, and what it returns
        assert schema["input_schema"]["type"] == "object"
        assert schema["input_schema"]["properties"]
        json.dumps(schema)  # plain JSON
    sql = TOOLS["sql"].input_schema
    text = json.dumps(sql)
    for metric in METRICS:
        assert metric in text
    for dimension in DIMENSIONS:
        assert dimension in text
    graph = json.dumps(TOOLS["graph"].input_schema)
    assert all(label in graph for label in LABELS)
    assert TOOLS["graph"].input_schema["required"] == ["starts"]


def test_search_tool_ranks_like_the_api(fields_store: KnowledgeStore) -> None:
    out = call_tool(fields_store, "everyone", "search", {"query": "vacuum dead tuples", "k": 3})
    api = fields_store.search("vacuum dead tuples", k=3)
    assert out == api.to_dict()
    assert out["results"][0]["uid"] == "doc:vacuum"
    filtered = call_tool(
        fields_store,
        "user:sam",
        "search",
        {"query": "replication", "filters": {"type": ["ticket"]}},
    )
    assert {r["type"] for r in filtered["results"]} == {"ticket"}


def test_sql_tool_filter_and_aggregate_modes(fields_store: KnowledgeStore) -> None:
    listed = call_tool(
        fields_store,
        "user:sam",
        "sql",
        {"filters": {"type": ["ticket"], "status": ["open"]}, "order": "created_at:asc"},
    )
    assert [h["uid"] for h in listed["hits"]] == ["ticket:4", "ticket:1"]
    counted = call_tool(
        fields_store, "user:sam", "sql", {"mode": "aggregate", "dimension": "status"}
    )
    assert counted["metric"] == "count" and counted["dimension"] == "status"
    assert counted == fields_store.aggregate("count", "status", identity="user:sam").to_dict()
    total = call_tool(fields_store, "everyone", "sql", {"mode": "aggregate"})
    assert total["rows"] == [{"key": None, "value": len(visible_records("everyone"))}]


def test_graph_tool(fields_store: KnowledgeStore) -> None:
    out = call_tool(
        fields_store, "everyone", "graph", {"starts": ["doc:vacuum"], "labels": ["partOf"]}
    )
    assert [h["uid"] for h in out["hits"]] == ["doc:admin"]
    assert out["hits"][0]["hops"] == 1


@pytest.mark.parametrize(
    ("name", "arguments", "error"),
    [
        ("sql", {"filters": {"author": ["sam"]}}, UnknownField),
        ("sql", {"mode": "aggregate", "metric": "avg"}, UnknownField),
        ("sql", {"mode": "aggregate", "dimension": "owner"}, UnknownField),
        ("sql", {"order": "body:asc"}, UnknownField),
        (
            "sql",
            {"filters": {"created_from": "2024-05-01", "created_to": "2024-01-01"}},
            InvalidRequest,
        ),
        ("sql", {"k": 0}, InvalidRequest),
        ("search", {"query": "x", "mode": "borda"}, InvalidRequest),
        ("search", {"query": "x", "filters": {"when": "now"}}, UnknownField),
        ("graph", {"starts": ["doc:vacuum"], "labels": ["mentions"]}, UnknownLabel),
        ("graph", {"starts": ["doc:vacuum"], "depth": 0}, BoundExceeded),
        ("graph", {"starts": ["doc:vacuum"], "depth": 5}, BoundExceeded),
        ("graph", {"starts": []}, InvalidRequest),
        ("graph", {}, InvalidRequest),
        ("nope", {}, InvalidRequest),
    ],
)
def test_bad_arguments_give_typed_errors(
    fields_store: KnowledgeStore, name: str, arguments: dict[str, object], error: type[Exception]
) -> None:
    with pytest.raises(error) as info:
        call_tool(fields_store, "everyone", name, arguments)
    assert isinstance(info.value, KnowledgeStoreError)
    shape = info.value.to_dict()
    assert set(shape["error"]) == {"code", "message", "details"}
    assert shape["error"]["message"]


def test_no_tools_on_an_empty_store(tmp_path: Path, embedder: Embedder) -> None:
    with KnowledgeStore.open(tmp_path / "empty", embedder=embedder) as store:
        assert available_tools(store) == []


def test_tools_are_offered_once_the_store_has_chunks(fields_store: KnowledgeStore) -> None:
    assert [t.name for t in available_tools(fields_store)] == ["search", "graph", "sql"]
