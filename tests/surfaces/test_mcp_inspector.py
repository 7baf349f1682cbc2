"""Every tool through the official MCP Inspector CLI (npm ``@modelcontextprotocol/inspector``).

The Inspector is a client written by others: it reads our tool list, converts
each ``--tool-arg key=value`` by the property's ``"type"`` in the input schema
(an object or an array is parsed as JSON only when the type says exactly
that), calls the tool and checks the structured content against the tool's
output schema — error results too. Every tool is called over stdio
(``ks serve --mcp-stdio``) and over streamable HTTP (``/mcp``) — of one process,
and of ``ks serve --workers 2`` (MCP without sessions) — once with
realistic arguments and once with wrong ones, which must come back as a tool
execution error (``isError``) carrying the one error shape. ``tools/list`` runs
with ``--strict`` (the Inspector's tool-schema portability check, from 2.4.0 on):
no warning and no error on either transport — nullable values as ``anyOf``
branches of one ``type`` each, never ``"type": [T, "null"]``, and no bare ``{}``.

The Inspector comes from the npm registry (``npx -y``, the version pinned below;
``.ci/run`` fetches it beforehand); the test skips, saying why, only when npx can't
fetch it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from knowledge_store.ingest.embedding import open_embedder
from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.http import create_app
from knowledge_store.surfaces.tools import KNOWLEDGE_TOOLS
from tests.surfaces.serve_estate import LiveServer, build
from tests.surfaces.workers_server import Workers, until

pytestmark = pytest.mark.slow(seconds=80)  # see tests/conftest.py

#: The Inspector release the test drives (``--strict`` exists from 2.4.0 on).
INSPECTOR_PACKAGE = "@modelcontextprotocol/inspector@2.12.0"
INSPECTOR = ["npx", "-y", INSPECTOR_PACKAGE, "--cli"]
KS = str(Path(sys.executable).with_name("ks"))
#: The store is embedded by feature hashing: the test is about the protocol, not about meaning.
EMBEDDER = "hash:64"

#: tool → (realistic arguments, a check of the answer); every value as the Inspector sends it.
GOOD: dict[str, tuple[dict[str, str], Any]] = {
    "search": (
        {"query": "vacuum dead tuples", "k": "3", "filters": '{"not_type": ["ticket"]}'},
        lambda a: a["results"] and all(r["type"] != "ticket" for r in a["results"]),
    ),
    "docs_search": (
        {"query": "vacuum", "filters": '{"source": ["docs"]}'},
        lambda a: all(r["type"] != "codeSample" for r in a["results"]),
    ),
    "code_sample_search": (
        {"query": "REINDEX INDEX CONCURRENTLY", "k": "2"},
        lambda a: a["results"][0]["language"] == "sql" and "REINDEX" in a["results"][0]["code"],
    ),
    "search_knowledge": (
        {"query": "autovacuum daemon", "k": "2"},
        lambda a: a["results"][0]["n"] == 1 and a["context"].startswith("[1] "),
    ),
    "graph": (
        {"starts": '["unit:vacuum"]', "labels": '["partOf"]', "depth": "2", "direction": "out"},
        lambda a: [h["uid"] for h in a["hits"]] == ["mod:maintenance", "path:admin"],
    ),
    "sql": (
        {"mode": "aggregate", "dimension": "type", "filters": '{"type": ["module", "path"]}'},
        lambda a: {r["key"]: r["value"] for r in a["rows"]} == {"module": 2, "path": 1},
    ),
    "query_graph": (
        {
            "query": "MATCH (c)-[:partOf]->(m {uid: $m}) RETURN c.uid ORDER BY c.uid",
            "params": '{"m": "mod:monitoring"}',
        },
        lambda a: a["rows"] == [["unit:logs"], ["unit:stats"]],
    ),
    "fetch_content": (
        {"uid": "unit:vacuum#code-1", "max_chars": "100"},
        lambda a: a["language"] == "sql" and a["code"].startswith("VACUUM"),
    ),
    "get_related": (
        {"uid": "unit:vacuum", "direction": "out"},
        lambda a: "mod:maintenance" in {r["uid"] for r in a["related"]},
    ),
    "get_learning_path": (
        {"uid": "unit:analyze"},
        lambda a: a["root"] == "path:admin" and a["units"][a["index"]]["uid"] == "unit:analyze",
    ),
    "resolve_xref": (
        {"ref": "https://docs.example.org/stats#locks"},
        lambda a: a["entity"]["uid"] == "unit:stats" and a["anchor"] == "locks",
    ),
}

#: tool → (wrong arguments, the error code, the argument the error names)
BAD: dict[str, tuple[dict[str, str], str, str | None]] = {
    "search": ({"query": "x", "k": "500"}, "invalid_request", "k"),
    "docs_search": ({"filters": '{"colour": ["red"]}'}, "unknown_field", "filters.colour"),
    "code_sample_search": ({"filters": '{"type": ["page"]}'}, "invalid_request", "filters.type"),
    "search_knowledge": (
        {"query": "x", "filters": '{"created_from": "May"}'},
        "invalid_request",
        "filters.created_from",
    ),
    "graph": ({"starts": '["unit:vacuum"]', "depth": "9"}, "bound_exceeded", "depth"),
    "sql": ({"mode": "median"}, "invalid_request", "mode"),
    "query_graph": ({"query": "MATCH (n {uid: 'x'}) RETURN n"}, "invalid_request", None),
    "fetch_content": ({"uid": "ticket:2001"}, "not_found", None),
    "get_related": ({"uid": "unit:vacuum", "labels": '["mentions"]'}, "unknown_label", "labels"),
    "get_learning_path": ({"uid": "unit:nowhere"}, "not_found", None),
    "resolve_xref": ({"ref": "x" * 5000}, "bound_exceeded", "ref"),
}


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=240, env=env)


@pytest.fixture(scope="module")
def inspector() -> list[str]:
    """The Inspector's CLI program, as ``npx -y @modelcontextprotocol/inspector --cli`` runs it.

    npx fetches the package once; the calls then skip npx (it would resolve the package
    again for each of the ~70 calls) and the ``mcp-inspector`` launcher
    (``clients/launcher/build/index.js``), whose ``--cli`` only imports the CLI client
    (``clients/cli/build/index.js``) and runs it with the same arguments: the calls start
    that program themselves. Where the package is laid out otherwise, the calls go
    through the launcher.
    """
    if shutil.which("npx") is None:
        pytest.skip("npx is not installed (Node.js): the MCP Inspector CLI runs on it")
    probe = _run([*INSPECTOR, "--help"], dict(os.environ))
    if probe.returncode != 0:
        pytest.skip(
            f"npx could not fetch {INSPECTOR_PACKAGE}:"
            f" {(probe.stderr or probe.stdout).strip()[-300:]}"
        )
    found = _run(
        ["npx", "-y", "-p", INSPECTOR_PACKAGE, "-c", "command -v mcp-inspector"],
        dict(os.environ),
    )
    launcher = found.stdout.strip()
    if found.returncode != 0 or not launcher:
        return INSPECTOR
    program = Path(launcher).resolve().parents[2] / "cli" / "build" / "index.js"
    node = shutil.which("node")
    return [node, str(program)] if node and program.is_file() else [launcher, "--cli"]


@pytest.fixture(scope="module")
def estate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, KnowledgeStore]]:
    where = tmp_path_factory.mktemp("inspector") / "store"
    with KnowledgeStore.open(where, embedder=open_embedder(EMBEDDER)) as store:
        yield where, build(store)


def _env() -> dict[str, str]:
    return {**os.environ, "KS_EMBEDDER": EMBEDDER, "HF_HUB_OFFLINE": "1"}


def _targets(where: Path, url: str, workers_url: str) -> dict[str, list[str]]:
    # the Inspector starts a stdio server with a few variables of its own environment
    # (HOME, PATH, …), not all of them: this checkout's PYTHONPATH goes with -e
    passed = [f"PYTHONPATH={os.environ['PYTHONPATH']}"] if os.environ.get("PYTHONPATH") else []
    return {
        "stdio": [
            *(a for v in passed for a in ("-e", v)),
            KS,
            "--store",
            str(where),
            "serve",
            "--mcp-stdio",
        ],
        "http": [f"{url}/mcp", "--transport", "http"],
        # ks serve --workers 2: MCP without sessions, each request on either worker
        "http-workers": [f"{workers_url}/mcp", "--transport", "http"],
    }


@contextmanager
def _stopping(workers: Workers) -> Iterator[Workers]:
    try:
        yield workers
    finally:
        workers.stop()


#: The Inspector CLI's exit status for a tool result with ``isError: true`` (printed all the same).
TOOL_IS_ERROR = 5


def _call(command: list[str], target: list[str], tool: str, kind: str, args: dict[str, str]) -> Any:
    line = [*command, *target, "--method", "tools/call", "--tool-name", tool]
    for key, value in args.items():
        line += ["--tool-arg", f"{key}={value}"]
    done = _run(line, _env())
    expected = 0 if kind == "good" else TOOL_IS_ERROR
    assert done.returncode == expected, f"{tool} {args}: {done.stderr[-800:]}"
    return json.loads(done.stdout)


@pytest.mark.timeout(600)  # ~70 Inspector runs (a node process each); slow on a busy machine
def test_every_tool_through_the_inspector_over_stdio_and_http(
    inspector: list[str], estate: tuple[Path, KnowledgeStore], tmp_path: Path
) -> None:
    where, store = estate
    assert set(GOOD) == set(BAD) == set(KNOWLEDGE_TOOLS)
    workers = Workers(where, tmp_path / "serve.log", "--anonymous", env=_env())
    with LiveServer(create_app(store, anonymous=True)) as server, _stopping(workers):
        until("both workers started", lambda: workers.started() >= 2)
        targets = _targets(where, server.url, workers.url)
        for name, target in targets.items():
            listed = _run([*inspector, *target, "--method", "tools/list", "--strict"], _env())
            assert listed.returncode == 0, listed.stderr[-800:]
            problems = [
                line for line in listed.stderr.splitlines() if line.startswith(("Warning", "Error"))
            ]
            assert not problems, f"{name}: --strict found {problems}\n{listed.stderr[-2000:]}"
            tools = {t["name"]: t for t in json.loads(listed.stdout)["tools"]}
            assert set(tools) == set(KNOWLEDGE_TOOLS), name
            for tool in tools.values():
                assert tool["outputSchema"]["type"] == "object"
                for prop in tool["inputSchema"]["properties"].values():
                    assert isinstance(prop["type"], str), (tool["name"], prop)
        jobs = [
            (transport, tool, kind, args)
            for transport in targets
            for tool in KNOWLEDGE_TOOLS
            for kind, args in (("good", GOOD[tool][0]), ("bad", BAD[tool][0]))
            if transport != "http-workers" or kind == "good"  # the transport is what differs
        ]
        with ThreadPoolExecutor(max_workers=4) as pool:
            answers = list(pool.map(lambda job: _call(inspector, targets[job[0]], *job[1:]), jobs))
    for (transport, tool, kind, _), answer in zip(jobs, answers, strict=True):
        where_ = f"{transport} {tool} ({kind})"
        structured = answer["structuredContent"]
        if kind == "good":
            assert not answer.get("isError"), f"{where_}: {answer}"
            assert json.loads(answer["content"][0]["text"]) == structured
            assert GOOD[tool][1](structured), f"{where_}: {structured}"
        else:
            _, code, field = BAD[tool]
            assert answer.get("isError") is True, f"{where_}: {answer}"
            error = structured["error"]
            assert error["code"] == code and error["details"].get("field") == field, where_
            assert answer["content"][0]["text"] == error["message"]
