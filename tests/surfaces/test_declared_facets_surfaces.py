"""Declared facets on every surface (issue 31 item 4): the CLI (``ks facets``, ``--facet``),
REST (``/v1/admin/facets``, FILTERS by name), GraphQL (``filters.facets``, ``facets``) and
the tools (their schemas name the store's facets; a call filters by them) — each answering
as the library does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from knowledge_store.model import Identity
from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.auth import Caller
from knowledge_store.surfaces.cli import app as cli
from knowledge_store.surfaces.http import create_app
from knowledge_store.surfaces.tools import call_tool
from tests.surfaces.serve_estate import BOB, ROOT, TOKENS, call

pytestmark = pytest.mark.embedded_only(
    reason="a surface over the store: the engines agree in tests/conformance"
)

RECORDS = [
    {
        "uid": f"doc:{i}",
        "type": "page",
        "title": f"Runbook {i}",
        "body": f"# Runbook {i}\n\nfailover steps for service {i}",
        "attributes": {
            "team": ["search", "infra", "payments"][i % 3],
            "due": f"2024-0{i % 9 + 1}-10",
        },
        "acl": ["everyone"],
    }
    for i in range(12)
]


@pytest.fixture
def where(tmp_path: Path, embedder: Any) -> str:
    path = str(tmp_path / "store")
    with KnowledgeStore.open(path, embedder=embedder) as store:
        store.ingest_records(RECORDS)
    return path


def _ks(where: str, *args: str) -> Any:
    done = CliRunner().invoke(cli, ["--store", where, *args, "--json"])
    assert done.exit_code == 0, done.stdout
    return json.loads(done.stdout)


def test_the_cli_declares_filters_and_aggregates(where: str) -> None:
    added = _ks(where, "facets", "add", "team")
    assert added["facets"] == [
        {
            "name": "team",
            "kind": "keyword",
            "attribute": "team",
            "filters": ["team", "not_team"],
            "dimensions": ["team"],
            "entities": 12,
            "values": 12,
        }
    ]
    _ks(where, "facets", "add", "due", "date")
    hits = _ks(where, "sql", "--facet", "team=search", "--facet", "due>=2024-04-01", "--k", "50")
    assert sorted(h["uid"] for h in hits["hits"]) == ["doc:3", "doc:6"]
    rows = _ks(where, "aggregate", "count", "--by", "team")["rows"]
    assert rows == [{"key": k, "value": 4} for k in ("infra", "payments", "search")]
    found = _ks(where, "search", "failover steps", "--facet", "team!=search", "--k", "50")
    assert {r["uid"] for r in found["results"]} == {
        r["uid"] for r in RECORDS if r["attributes"]["team"] != "search"
    }
    bad = CliRunner().invoke(cli, ["--store", where, "sql", "--facet", "teem=x", "--json"])
    assert bad.exit_code == 2
    assert "team, not_team" in json.loads(bad.stdout)["error"]["message"]
    refused = CliRunner().invoke(cli, ["--store", where, "facets", "add", "status", "--json"])
    assert json.loads(refused.stdout)["error"]["code"] == "invalid_request"
    assert _ks(where, "facets", "remove", "due")["facets"][0]["name"] == "team"


def test_rest_graphql_and_the_tools(where: str, embedder: Any) -> None:
    with KnowledgeStore.open(where, embedder=embedder) as store:
        app = create_app(store, tokens=TOKENS)
        denied = call(app, "POST", "/v1/admin/facets", json={"name": "team"}, headers=BOB)
        assert denied.status_code == 403
        added = call(app, "POST", "/v1/admin/facets", json={"name": "team"}, headers=ROOT)
        assert added.status_code == 200, added.text
        assert call(app, "GET", "/v1/facets", headers=BOB).json()["facets"][0]["name"] == "team"
        want = store.sql(filters={"team": ["infra"]}, identity="user:bob", k=50).to_dict()
        rest = call(
            app, "POST", "/v1/sql", json={"filters": {"team": ["infra"]}, "k": 50}, headers=BOB
        )
        assert rest.json() == json.loads(json.dumps(want))
        query = (
            '{ sql(k: 50, filters: {facets: {team: ["infra"]}}) { hits { uid } }'
            ' aggregate(metric: "count", dimension: "team") { rows { key value } } }'
        )
        graphql = call(app, "POST", "/graphql", json={"query": query}, headers=BOB).json()
        assert [h["uid"] for h in graphql["data"]["sql"]["hits"]] == [
            h["uid"] for h in want["hits"]
        ]
        assert {r["key"] for r in graphql["data"]["aggregate"]["rows"]} == {
            "infra",
            "payments",
            "search",
        }
        unknown = call(app, "POST", "/v1/sql", json={"filters": {"teem": ["x"]}}, headers=BOB)
        assert unknown.status_code == 400 and unknown.json()["error"]["code"] == "unknown_field"
        tools = call(app, "GET", "/v1/capabilities", headers=BOB).json()["tools"]
        sql_tool = next(t for t in tools if t["name"] == "sql")
        filters = sql_tool["input_schema"]["properties"]["filters"]["properties"]
        assert filters["team"]["type"] == "array" and "not_team" in filters
        assert "team" in sql_tool["input_schema"]["properties"]["dimension"]["enum"]
        out = call_tool(
            store,
            Caller(Identity("user:bob")),
            "sql",
            {"mode": "filter", "filters": {"team": "infra"}, "k": 50},
        )
        assert [h["uid"] for h in out["hits"]] == [h["uid"] for h in want["hits"]]
