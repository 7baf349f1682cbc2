"""``ks serve --workers 2`` end to end: real processes on a real socket.

Which worker takes a new connection is the kernel's choice, so the tests that
need one worker in particular stop the other (SIGSTOP: it accepts nothing while
stopped; SIGCONT resumes it) and open a fresh connection per request. Waits
are bounded and only ever wait for something to happen; no test asserts a time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import psutil
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from typer.testing import CliRunner

from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.cli import app as cli
from tests.surfaces.serve_estate import ANN, BOB, ROOT, TOKENS, build
from tests.surfaces.workers_server import WAIT_S, Workers, until


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("tokens") / "tokens.jsonl"
    lines = []
    for token, value in TOKENS.items():
        who, admin = (value, False) if isinstance(value, str) else value
        lines.append(json.dumps({"token": token, "identity": who, "admin": admin}))
    where.write_text("\n".join(lines) + "\n")
    return where


@pytest.fixture(scope="module")
def estate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The serving estate on the hashing embedder (recorded in the store, so every worker
    opens it with the same one and loads no model)."""
    where = tmp_path_factory.mktemp("workers") / "store"
    with KnowledgeStore.open(where, embedder="hash:64") as store:
        build(store)
    return where


@pytest.fixture(scope="module")
def server(
    estate: Path, tokens: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Workers]:
    running = Workers(estate, tmp_path_factory.mktemp("log") / "serve.log", "--tokens", str(tokens))
    try:
        until("both workers started", lambda: running.started() >= 2)
        yield running
    finally:
        running.stop()


@contextmanager
def only(server: Workers, pid: int) -> Iterator[None]:
    """Every other worker stopped: new connections reach ``pid``."""
    others = [p for p in server.workers() if p != pid]
    for other in others:
        os.kill(other, signal.SIGSTOP)
    try:
        yield
    finally:
        for other in others:
            os.kill(other, signal.SIGCONT)


def _content(url: str, uid: str, who: dict[str, str]) -> httpx.Response:
    return httpx.get(f"{url}/v1/content/{uid}", headers=who, timeout=60)  # a fresh connection


def test_each_worker_answers_rest_and_graphql_as_the_caller(server: Workers) -> None:
    workers = server.workers()
    assert len(workers) == 2
    for pid in workers:
        with only(server, pid):
            found = httpx.post(
                f"{server.url}/v1/lexical", json={"query": "replica lag"}, headers=ANN, timeout=60
            )
            assert found.status_code == 200, found.text
            assert found.json()["hits"][0]["uid"] == "ticket:1042"
            # ann reads the ticket through group:sre; bob cannot, and it looks missing
            assert _content(server.url, "ticket:1042", ANN).status_code == 200
            assert _content(server.url, "ticket:1042", BOB).json()["error"]["code"] == "not_found"
            graphql = httpx.post(
                f"{server.url}/graphql",
                json={"query": '{ content(uid: "unit:stats") { entity { title } } }'},
                headers=BOB,
                timeout=60,
            ).json()
            assert graphql["data"]["content"]["entity"]["title"] == "Monitoring Database Activity"


def test_a_write_through_one_worker_is_read_through_the_other(server: Workers) -> None:
    first, second = server.workers()
    record = {
        "uid": "note:workers",
        "type": "note",
        "title": "Written through one worker",
        "body": "A publish made by one worker process is read by the other one.",
        "acl": ["everyone"],
    }
    with only(server, first):  # the reader has its store open and has answered before
        assert _content(server.url, "note:workers", BOB).status_code == 404
    with only(server, second):
        wrote = httpx.post(
            f"{server.url}/v1/admin/ingest",
            content=json.dumps(record),
            headers={**ROOT, "Content-Type": "application/x-ndjson"},
            timeout=60,
        )
        assert wrote.status_code == 200 and wrote.json()["added"] == 1, wrote.text
    with only(server, first):
        read = _content(server.url, "note:workers", BOB)
        assert read.status_code == 200, read.text
        assert read.json()["entity"]["title"] == "Written through one worker"
        assert read.json()["content_root"] == wrote.json()["content_root"]


def test_mcp_both_eras_over_several_workers(server: Workers) -> None:
    """Sessions are per process, so with workers MCP keeps none: a 2025 client's requests,
    on new connections, may each reach another worker and still work."""

    async def scenario() -> None:
        for mode in ("legacy", None):
            http = httpx2.AsyncClient(
                headers=ANN,
                timeout=httpx2.Timeout(60),
                limits=httpx2.Limits(max_keepalive_connections=0),
            )
            kwargs: dict[str, Any] = {"mode": mode} if mode else {}
            transport = streamable_http_client(f"{server.url}/mcp", http_client=http)
            async with Client(transport, **kwargs) as client:
                names = {t.name for t in (await client.list_tools()).tools}
                assert {"search", "fetch_content"} <= names
                for _ in range(4):
                    got = await client.call_tool("fetch_content", {"uid": "ticket:1042"})
                    assert not got.is_error, got.content
                    assert got.structured_content["title"] == "Replica lag alert"

    anyio.run(scenario)


def test_a_worker_that_dies_is_replaced(server: Workers) -> None:
    before = server.workers()
    os.kill(before[0], signal.SIGKILL)
    after = until(
        "a new worker in place of the killed one",
        lambda: (w := server.workers()) and len(w) == 2 and before[0] not in w and w,
    )
    until("the new worker started", lambda: server.started() >= 3)
    for pid in after:
        with only(server, pid):
            assert _content(server.url, "unit:stats", BOB).status_code == 200
    assert "died" in server.text()


def test_sigterm_stops_every_worker(estate: Path, tokens: Path, tmp_path: Path) -> None:
    running = Workers(estate, tmp_path / "serve.log", "--tokens", str(tokens))
    until("both workers started", lambda: running.started() >= 2)
    workers = running.workers()
    assert running.stop() == 0
    assert not [
        p
        for p in workers
        if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
    ]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_local_postgres_stops_with_the_last_worker(
    tmp_path: Path, tokens: Path, workers: int
) -> None:
    """``pg:DIR``: every worker uses the local server; when ``ks serve`` stops (SIGTERM),
    the server stops too (regression: uvicorn ended each process by its re-raised SIGTERM,
    before the exit handler that tells pgserver the process is gone, and PostgreSQL kept
    running — with one process as with several)."""
    where = tmp_path / "pg"
    built = subprocess.run(  # another process: this one must not hold the server itself
        [
            sys.executable,
            "-c",
            "import sys; from knowledge_store.store import KnowledgeStore;"
            " from tests.surfaces.serve_estate import build;"
            " build(KnowledgeStore.open(sys.argv[1], embedder='hash:64')).close()",
            f"pg:{where}",
        ],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    running = Workers(
        f"pg:{where}", tmp_path / "serve.log", "--tokens", str(tokens), workers=workers
    )
    try:
        until("every worker started", lambda: running.started() >= workers)
        assert _content(running.url, "unit:stats", BOB).status_code == 200
    finally:
        code = running.stop()
    # the supervisor exits 0; a single process ends by the signal uvicorn re-raises
    assert code == (0 if workers > 1 else -signal.SIGTERM)

    def postgres_of_the_store() -> list[int]:
        found = []
        for proc in psutil.process_iter(["name", "cmdline"]):
            line = " ".join(proc.info["cmdline"] or [])
            if proc.info["name"] == "postgres" and str(where / "pgdata") in line:
                found.append(proc.pid)
        return found

    until("PostgreSQL stopped", lambda: not postgres_of_the_store())


def test_a_worker_that_cannot_start_stops_the_server(tmp_path: Path, tokens: Path) -> None:
    """The store opens (in the supervisor, which loads no model) but no worker can load
    the model (a GPU is asked for, and there is none): the server exits 1 saying so,
    instead of restarting workers in a loop."""
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this machine has a GPU: asking for one does not fail here")
    where = tmp_path / "store"  # none yet (--create): the default embedder, ONNX Runtime
    running = Workers(
        where,
        tmp_path / "serve.log",
        "--tokens",
        str(tokens),
        "--create",
        env={"KS_ONNX_DEVICE": "gpu"},
    )
    try:
        code = running.proc.wait(timeout=WAIT_S)
    finally:
        running.stop()
    log = running.text()
    assert code == 1, log
    assert "could not start: StoreError: onnxruntime could not load" in log
    assert "the embedding device is gpu, but this onnxruntime has no CUDAExecutionProvider" in log
    assert "error (store_error): a worker process could not start" in log


def test_workers_must_be_a_number_of_processes(tmp_path: Path) -> None:
    runner = CliRunner()
    where = str(tmp_path / "s")
    zero = runner.invoke(cli, ["--store", where, "serve", "--anonymous", "--workers", "0"])
    assert zero.exit_code == 2 and "--workers 0 is not a number of processes" in zero.output
    stdio = runner.invoke(cli, ["--store", where, "serve", "--mcp-stdio", "--workers", "2"])
    assert stdio.exit_code == 2 and "--workers are for HTTP" in stdio.output
