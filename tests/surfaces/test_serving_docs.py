"""docs/serving.md is tested: its examples parse and the routes it lists exist."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from graphql import parse, validate

from knowledge_store.surfaces.auth import TokenTable
from knowledge_store.surfaces.graphql import schema
from tests.conftest import HASH_SPEC
from tests.surfaces.serve_estate import call

DOC = (Path(__file__).resolve().parents[2] / "docs" / "serving.md").read_text(encoding="utf-8")


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC, re.S)


def test_token_file_examples_load(tmp_path: Path) -> None:
    examples = _blocks("jsonl") + [
        b for b in _blocks("json") if '"identity"' in b and "mcpServers" not in b
    ]
    assert len(examples) == 2
    for n, text in enumerate(examples):
        file = tmp_path / f"tokens-{n}"
        file.write_text(text)
        assert len(TokenTable.load(file)) >= 2


def test_json_examples_parse() -> None:
    for text in _blocks("json"):
        json.loads(text)


def test_graphql_example_is_valid_against_the_schema() -> None:
    for text in _blocks("graphql"):
        assert validate(schema._schema, parse(text)) == []


def test_python_examples_compile() -> None:
    for text in _blocks("python"):
        compile(text, "docs/serving.md", "exec")


def _example(marker: str) -> str:
    found = [b for b in _blocks("python") if marker in b]
    assert len(found) == 1, marker
    return found[0]


def test_the_python_embedding_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It opens a store, makes the ASGI app and the MCP server, as written."""
    from mcp.server.lowlevel import Server
    from starlette.applications import Starlette

    monkeypatch.chdir(tmp_path)
    names: dict[str, Any] = {}
    exec(compile(_example("create_mcp_server"), "docs/serving.md", "exec"), names)
    try:
        assert isinstance(names["app"], Starlette)
        assert isinstance(names["server"], Server)
        assert (tmp_path / ".ks" / "demo").is_dir()
    finally:
        names["store"].close()


def test_the_python_mcp_client_example_runs_against_a_live_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The SDK client example, pointed at a live server with the docs' token: it prints the
    context search_knowledge gives ann (a member of group:sre, who reads the lag ticket)."""
    import anyio

    from knowledge_store.store import KnowledgeStore
    from knowledge_store.surfaces.http import create_app
    from tests.surfaces.serve_estate import MEMBERSHIPS, RECORDS, LiveServer

    code = _example("streamable_http_client")
    token = re.search(r"Bearer (\S+?)\"", code)
    assert token is not None
    with KnowledgeStore.open(tmp_path / "store", embedder=HASH_SPEC) as store:
        store.ingest_records(RECORDS)
        for group, member in MEMBERSHIPS:
            store.add_member(group, member)
        with LiveServer(create_app(store, tokens={token.group(1): "user:ann"})) as server:
            names: dict[str, Any] = {}
            runnable = code.replace("http://127.0.0.1:8000", server.url)
            exec(compile(runnable, "docs/serving.md", "exec"), names)
            anyio.run(names["main"])
    printed = capsys.readouterr().out
    assert "Replica lag alert" in printed, printed


@pytest.fixture(scope="module")
def spec(app: Any) -> dict[str, Any]:
    return dict(call(app, "GET", "/openapi.json").json())


def test_every_listed_route_exists(spec: dict[str, Any]) -> None:
    listed = re.findall(r"^\| `(GET|POST|DELETE) (/v1/[^`]*)`", DOC, re.M)
    assert len(listed) > 20
    for method, routes in listed:
        first = routes.split("`")[0]
        path = first.replace("{uid}", "{uid}")
        base = path.split(", ")[0]
        assert base in spec["paths"], base
        assert method.lower() in spec["paths"][base], (method, base)


def test_the_limits_table_states_the_bounds_of_model_py() -> None:
    """Each bound docs/serving.md names is the value model.py declares (no re-typed numbers);
    the serving bounds (MCP sessions) are declared in surfaces/mcp_sessions.py."""
    from knowledge_store import model
    from knowledge_store.surfaces import mcp_sessions

    stated = re.findall(r"\| ([\d,]+) (MiB |[a-z ]*)\(`(MAX_\w+)`[,)]", DOC)
    assert len(stated) >= 11
    for value, unit, name in stated:
        number = int(value.replace(",", "")) * (1024 * 1024 if unit == "MiB " else 1)
        declared = getattr(model if hasattr(model, name) else mcp_sessions, name)
        assert declared == number, name
    light = re.search(
        r"k ≤ (\d+), a query text of at most (\d+) characters, lists of at most\s+(\d+)", DOC
    )
    assert light is not None
    assert tuple(map(int, light.groups())) == (
        model.LIGHT_K,
        model.LIGHT_QUERY_CHARS,
        model.LIGHT_LIST_VALUES,
    )


def test_the_claims_mapping_example_loads(tmp_path: Path) -> None:
    from knowledge_store.surfaces.oidc import ClaimsMapping

    found = [b for b in _blocks("json") if '"admin_groups"' in b]
    assert len(found) == 1
    file = tmp_path / "claims.json"
    file.write_text(found[0])
    assert ClaimsMapping.load(file).admin_groups == ("ks-admins",)
