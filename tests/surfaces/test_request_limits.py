"""One request must not starve the others (issue 11 §4): every bound, on every surface.

The corpus (``limits_corpus``) holds the hostile requests — bodies over the
bound (honest, chunked, with a lying Content-Length, without a token), GraphQL
documents with hundreds of aliases, too many top-level fields, deep nesting,
9,000 merged fields, 10,001 tokens and a fragment bomb, FILTERS lists one over
the bound on every route and in GraphQL — and the requests just within the
bounds, which must answer. The requests run in process through raw ASGI, so
that a body can lie about its length.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from knowledge_store.engines.sql.dialect import POSTGRES, SQLITE
from knowledge_store.engines.sql.filters import filter_clause
from knowledge_store.model import MAX_FILTER_VALUES, Filters
from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.http import create_app
from tests.surfaces import limits_corpus
from tests.surfaces.limits_corpus import Case, encoded, target, verdict
from tests.surfaces.serve_estate import BOB, ROOT, TOKENS, call

pytestmark = pytest.mark.embedded_only(
    reason="a surface over the store: the engines agree in tests/conformance"
)

CHUNK = 64 * 1024


def send(app: Any, case: Case) -> tuple[int, bytes]:
    """``case`` through the ASGI app, its body in chunks; ``(status, body)``."""
    body, headers = encoded(case)
    path, _, query = target(case).partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": case.method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers]
        + [(b"host", b"testserver")],
        "client": ("127.0.0.1", 1234),
        "server": ("testserver", 80),
    }
    parts = [body[i : i + CHUNK] for i in range(0, len(body), CHUNK)] or [b""]
    sent = 0
    answer: dict[str, Any] = {"status": None, "body": b""}

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent < len(parts):
            sent += 1
            return {"type": "http.request", "body": parts[sent - 1], "more_body": sent < len(parts)}
        await anyio.sleep(3600)  # the app waits for a disconnect that never comes
        return {"type": "http.disconnect"}

    async def respond(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            answer["status"] = message["status"]
        elif message["type"] == "http.response.body":
            answer["body"] += message.get("body", b"")

    async def go() -> None:
        await app(scope, receive, respond)

    anyio.run(go)
    return int(answer["status"]), bytes(answer["body"])


CASES = limits_corpus.cases()


@pytest.mark.timeout(120)  # a fragment bomb or a quadratic check would hang here
@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_the_limits_corpus(app: Any, case: Case) -> None:
    status, body = send(app, case)
    assert verdict(case, status, body) is None, body[:500]


# -- lists: one bound parameter, whatever the length -------------------------------------------------
@pytest.mark.parametrize("dialect", [SQLITE, POSTGRES], ids=["sqlite", "postgres"])
def test_a_filter_list_is_one_parameter_and_the_statement_does_not_grow(dialect: Any) -> None:
    one, _ = filter_clause(Filters.build(uid=["a"], not_type=["x"]), dialect)
    many, params = filter_clause(
        Filters.build(uid=[f"u{i}" for i in range(MAX_FILTER_VALUES)], not_type=["x", "y"]),
        dialect,
    )
    assert many == one  # the same text, so the same parse and plan
    assert len(params) == 2


def test_the_python_api_bounds_filter_lists_too(store: KnowledgeStore) -> None:
    from knowledge_store.errors import BoundExceeded

    with pytest.raises(BoundExceeded, match="the filter 'uid' holds 1001 values"):
        store.sql({"uid": [f"u{i}" for i in range(MAX_FILTER_VALUES + 1)]})
    with pytest.raises(BoundExceeded, match="default ACL"):
        store.ingest_records([], acl=[f"user:{i}" for i in range(101)])


# -- GraphQL: one store call at a time per request ---------------------------------------------------
class _Counting(KnowledgeStore):
    """The real store, counting how many of its calls run at once."""

    def __init__(self, inner: KnowledgeStore) -> None:
        super().__init__(inner.engine, embedder=inner.embedder)
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0

    def _counted(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            return fn(*args, **kwargs)
        finally:
            with self.lock:
                self.running -= 1

    def lexical(self, *args: Any, **kwargs: Any) -> Any:
        return self._counted(super().lexical, *args, **kwargs)


def test_a_graphql_request_runs_its_store_calls_one_after_another(
    served: KnowledgeStore,
) -> None:
    counting = _Counting(served)
    app = create_app(counting, tokens=TOKENS)
    fields = " ".join(
        f'a{i}: lexical(query: "vacuum", k: 5) {{ hits {{ uid }} }}' for i in range(8)
    )
    answer = call(app, "POST", "/graphql", json={"query": f"{{{fields}}}"}, headers=BOB).json()
    assert "errors" not in answer and len(answer["data"]) == 8
    assert counting.most == 1


# -- blocking work stays off the event loop ----------------------------------------------------------
class _Threads(KnowledgeStore):
    """The real store, noting the thread of every ACL call."""

    def __init__(self, inner: KnowledgeStore) -> None:
        super().__init__(inner.engine, embedder=inner.embedder)
        self.threads: list[int] = []

    def acl_show(self, uid: str) -> tuple[str, ...]:
        self.threads.append(threading.get_ident())
        return super().acl_show(uid)


def test_acl_administration_runs_in_the_worker_pool(store: KnowledgeStore) -> None:
    store.ingest_records(
        [{"uid": "doc:a", "type": "page", "title": "A", "body": "alpha", "acl": ["everyone"]}]
    )
    watched = _Threads(store)
    app = create_app(watched, tokens=TOKENS)
    loop_thread = threading.get_ident()  # anyio.run drives the app on this thread
    for path in ("/v1/admin/acl/grant", "/v1/admin/acl/revoke"):
        answer = call(app, "POST", path, json={"uid": "doc:a", "principal": "user:x"}, headers=ROOT)
        assert answer.status_code == 200, answer.text
    assert call(app, "GET", "/v1/admin/acl/doc:a", headers=ROOT).json()["acl"] == ["everyone"]
    assert len(watched.threads) >= 3 and loop_thread not in watched.threads  # each request reads it


# -- two lanes: a flood of heavy requests leaves the light lane free ---------------------------------
@pytest.mark.parametrize(
    ("operation", "arguments", "heavy"),
    [
        ("search", {"query": "replica lag", "k": 10}, False),
        ("search", {"query": "replica lag", "k": 11}, True),
        ("search", {"query": "x" * 257}, True),
        ("search", {"query": "x", "filters": {"uid": ["a"] * 10}}, False),
        ("search", {"query": "x", "filters": {"uid": ["a"] * 11}}, True),
        ("graph", {"starts": ["a"], "depth": 1}, False),
        ("graph", {"starts": ["a"], "depth": 2}, True),
        ("graph_facets", {"uids": ["a"] * 11}, True),
        ("query_graph", {"query": "MATCH (n) RETURN n LIMIT 1"}, True),
        ("ingest", {"records": []}, True),
        ("delete", {"uids": ["a"]}, True),
        ("content", None, False),
        ("search", {"k": "50", "filters": "not a mapping"}, False),  # raw input: never fails
    ],
)
def test_is_heavy_reads_only_sizes(
    operation: str, arguments: dict[str, Any] | None, heavy: bool
) -> None:
    from knowledge_store.surfaces.workers import is_heavy

    assert is_heavy(operation, arguments) is heavy


class _Blocking(KnowledgeStore):
    """The real store whose query_graph (a heavy operation) waits until released."""

    def __init__(self, inner: KnowledgeStore) -> None:
        super().__init__(inner.engine, embedder=inner.embedder)
        self.release = threading.Event()
        self.waiting = 0

    def query_graph(self, *args: Any, **kwargs: Any) -> Any:
        self.waiting += 1
        assert self.release.wait(60), "never released"
        return super().query_graph(*args, **kwargs)


def test_light_requests_pass_while_the_heavy_lane_is_full(served: KnowledgeStore) -> None:
    import httpx

    from knowledge_store.surfaces.workers import HEAVY_THREADS, THREADS

    blocking = _Blocking(served)
    app = create_app(blocking, tokens=TOKENS)
    flood = THREADS + HEAVY_THREADS  # more than every thread of both lanes

    async def scenario() -> tuple[list[int], int, int]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t", timeout=60) as c:
            query = {"query": "MATCH (n {uid: $u}) RETURN n.title", "params": {"u": "unit:vacuum"}}
            heavy = [
                asyncio.ensure_future(c.post("/v1/query_graph", json=query, headers=BOB))
                for _ in range(flood)
            ]
            while blocking.waiting < HEAVY_THREADS:
                await asyncio.sleep(0.01)
            light = await c.post("/v1/search", json={"query": "vacuum", "k": 3}, headers=BOB)
            content = await c.get("/v1/content/unit:vacuum", headers=BOB)
            pending = sum(not task.done() for task in heavy)
            blocking.release.set()
            done = await asyncio.gather(*heavy)
            return [r.status_code for r in done], light.status_code, pending + content.status_code

    statuses, light_status, pending_plus_200 = asyncio.run(scenario())
    assert light_status == 200
    assert pending_plus_200 == flood + 200  # every heavy request still waiting, content answered
    assert statuses == [200] * flood


def test_no_surface_reads_a_server_side_path(app: Any) -> None:
    """Records arrive in the request body only: a path given by an HTTP caller is never read."""
    for path, body in (
        ("/v1/admin/ingest", {"path": "/etc/passwd"}),
        ("/v1/tools/ingest_records", {"records": [], "path": "/etc/passwd"}),
        ("/v1/tools/ingest_records", {"paths": ["/etc/passwd"], "records": [{}]}),
    ):
        answer = call(app, "POST", path, json=body, headers=ROOT)
        assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid_request"
        assert "root:" not in answer.text
