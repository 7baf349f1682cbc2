"""``ks graph`` and ``ks query``: flags, JSON shapes (DESIGN §6), errors with exit status 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from knowledge_store.ingest.embedding import Embedder
from knowledge_store.surfaces.cli import app
from knowledge_store.surfaces.cli_graph import parse_params
from tests import graph_estate

runner = CliRunner()


def ks(store: Path, *args: str) -> tuple[int, Any]:
    result = runner.invoke(app, ["--store", str(store), *args])
    out = result.stdout.strip()
    try:
        return result.exit_code, json.loads(out) if out else None
    except ValueError:
        return result.exit_code, out


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, embedder: Embedder) -> Path:
    path = tmp_path_factory.mktemp("cli-graph") / "store"
    graph_estate.build(path, embedder).close()
    return path


def test_graph_json(store: Path) -> None:
    code, answer = ks(
        store, "graph", "page:start", "--depth", "2", "--label", "xref", "--direction", "out",
        "--k", "4", "--json",
    )  # fmt: skip
    assert code == 0
    assert set(answer) == {"content_root", "hits", "capped"}
    assert [h["uid"] for h in answer["hits"]] == ["page:m3", "page:m2", "page:m1", "page:target"]
    assert answer["hits"][3]["path"] == [
        {"uid": "page:start", "label": None, "direction": None},
        {"uid": "page:m2", "label": "xref", "direction": "out"},
        {"uid": "page:target", "label": "xref", "direction": "out"},
    ]
    assert set(answer["hits"][0]) == {"uid", "title", "type", "rank", "hops", "paths", "path"}


def test_graph_identity_and_table(store: Path) -> None:
    code, answer = ks(store, "graph", "page:start", "--depth", "2", "--as", "user:alice", "--json")
    assert code == 0 and "page:beyond" in {h["uid"] for h in answer["hits"]}
    code, text = ks(store, "graph", "page:start", "page:blob")
    assert code == 0 and "page:m3" in text and "sample:upload" in text


def test_the_table_draws_each_edge_the_way_it_points(store: Path) -> None:
    """``a -xref-> b`` walked from ``b`` is ``b <-xref- a``, never an arrowless ``-xref-``."""
    code, text = ks(store, "graph", "page:target", "--direction", "in", "--label", "xref")
    assert code == 0
    assert "page:target <-xref- page:m2" in " ".join(text.split())
    code, text = ks(store, "graph", "page:start", "--direction", "out", "--label", "xref")
    assert code == 0 and "page:start -xref-> page:m1" in " ".join(text.split())
    assert " -xref- " not in text


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--depth", "4"], "bound_exceeded"),
        (["--depth", "0"], "bound_exceeded"),
        (["--label", "mentions"], "unknown_label"),
        (["--direction", "up"], "invalid_request"),
    ],
)
def test_graph_errors(store: Path, args: list[str], error: str) -> None:
    code, answer = ks(store, "graph", "page:start", *args, "--json")
    assert code == 2
    assert set(answer) == {"error"} and answer["error"]["code"] == error
    assert set(answer["error"]) == {"code", "message", "details"}


def test_query_json(store: Path) -> None:
    code, answer = ks(
        store, "query",
        "MATCH (s {uid: $uid})-[:xref*1..2]->(m) RETURN m.uid AS uid ORDER BY uid LIMIT $n",
        "--param", "uid=page:start", "--param", "n=3", "--json",
    )  # fmt: skip
    assert code == 0
    assert set(answer) == {"content_root", "columns", "rows", "truncated"}
    assert answer["columns"] == ["uid"]
    assert answer["rows"] == [["page:m1"], ["page:m2"], ["page:m3"]]
    assert answer["truncated"] is True


def test_query_params_are_json_when_valid(store: Path) -> None:
    code, answer = ks(
        store, "query", "MATCH (n) WHERE n.uid IN $uids RETURN n.title ORDER BY n.title",
        "--param", 'uids=["page:m1", "page:private"]', "--json",
    )  # fmt: skip
    assert code == 0 and answer["rows"] == [["Middle one"]]
    code, text = ks(store, "query", "MATCH (n {uid: $u}) RETURN n", "--param", "u=lp:azure")
    assert code == 0 and "Azure Fundamentals" in text


def test_query_errors_exit_2_with_the_one_shape(store: Path) -> None:
    code, answer = ks(store, "query", "MATCH (n)-[*1..9]->(m) RETURN m", "--json")
    assert code == 2
    assert answer["error"]["code"] == "bound_exceeded"
    assert answer["error"]["details"]["line"] == 1 and answer["error"]["details"]["column"] == 12
    code, answer = ks(store, "query", "MATCH (n) DELETE n", "--json")
    assert code == 2 and "read-only" in answer["error"]["message"]
    code, answer = ks(store, "query", "MATCH (n) RETURN n", "--param", "oops", "--json")
    assert code == 2 and answer["error"]["code"] == "invalid_request"


def test_parse_params() -> None:
    assert parse_params(["a=1", "b=x", 'c=["p", 2]', "d=", "$e=true", "f=a=b"]) == {
        "a": 1,
        "b": "x",
        "c": ["p", 2],
        "d": "",
        "e": True,
        "f": "a=b",
    }
