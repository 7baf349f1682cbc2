"""MCP sessions are bounded per caller, in all, and in idle time (issue 25 item 10).

A flood of 2025 ``initialize`` calls with one token used to fill the SDK's
session table (10,000 sessions, idle for 30 minutes each), after which every
new session — anyone's, the admin's too — got 503. Now a caller opening one
session more closes its own session idle longest, the table's bound closes the
session idle longest whoever's, and a session idle past the bound is closed.
Over a real socket (uvicorn on 127.0.0.1), with small bounds.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.http import create_app
from knowledge_store.surfaces.mcp_sessions import BoundedSessions, SessionBounds
from tests.surfaces.serve_estate import ANN, BOB, ROOT, TOKENS, LiveServer
from tests.surfaces.workers_server import until

ACCEPT = {"Accept": "application/json, text/event-stream"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}
LISTING = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}


def _open(url: str, headers: dict[str, str], **client: Any) -> httpx.Response:
    with httpx.Client(timeout=30, **client) as http:
        return http.post(f"{url}/mcp", json=INITIALIZE, headers={**ACCEPT, **headers})


def _session(url: str, headers: dict[str, str], **client: Any) -> str:
    """A new 2025 session (initialize, then initialized), its id."""
    opened = _open(url, headers, **client)
    assert opened.status_code == 200, opened.text
    sid = opened.headers["mcp-session-id"]
    with httpx.Client(timeout=30, **client) as http:
        http.post(
            f"{url}/mcp",
            json={"jsonrpc": "2.0", "method": "notifications/initialized"},
            headers={**ACCEPT, **headers, **_in(sid)},
        )
    return sid


def _in(sid: str) -> dict[str, str]:
    return {"mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}


def _lists(url: str, headers: dict[str, str], sid: str, **client: Any) -> int:
    """The status of a tools/list in session ``sid``: 200, or 404 once it is gone."""
    with httpx.Client(timeout=30, **client) as http:
        return http.post(
            f"{url}/mcp", json=LISTING, headers={**ACCEPT, **headers, **_in(sid)}
        ).status_code


def _manager(app: Any) -> BoundedSessions:
    route = next(r for r in app.router.routes if getattr(r, "path", None) == "/mcp")
    manager = route.app.app.manager  # the auth wrapper's endpoint
    assert isinstance(manager, BoundedSessions)
    return manager


@pytest.fixture
def server(served: KnowledgeStore) -> Iterator[tuple[LiveServer, Any]]:
    app = create_app(
        served,
        tokens=TOKENS,
        anonymous=True,
        mcp_sessions=SessionBounds(per_caller=3, total=5, idle_s=120),
    )
    with LiveServer(app) as live:
        yield live, app


def test_a_caller_opening_one_session_more_closes_its_own_idlest(
    server: tuple[LiveServer, Any],
) -> None:
    live, app = server
    ann = [_session(live.url, ANN) for _ in range(5)]
    # ann holds three; her two oldest answer as if they never were
    assert [_lists(live.url, ANN, sid) for sid in ann] == [404, 404, 200, 200, 200]
    bob = _session(live.url, BOB)
    assert _lists(live.url, BOB, bob) == 200  # a flood by ann costs bob nothing
    # the table is full (3 + 1 + the admin's = 5 would fit; a sixth makes room): the
    # session idle longest, whoever's, is closed — ann's oldest left, used least lately
    _lists(live.url, ANN, ann[2])
    root = [_session(live.url, ROOT), _session(live.url, ROOT)]
    assert all(_lists(live.url, ROOT, sid) == 200 for sid in root)
    assert _lists(live.url, ANN, ann[3]) == 404
    assert _lists(live.url, ANN, ann[2]) == 200 and _lists(live.url, BOB, bob) == 200
    manager = _manager(app)
    assert len(manager._server_instances) == 5
    # the tools watcher keeps no closed session
    watcher = app.state.knowledge_store.mcp.watcher
    tracked = set(watcher._sessions)
    assert {f"http:{sid}" for sid in (ann[0], ann[1], ann[3])}.isdisjoint(tracked)


def test_a_flood_with_one_token_leaves_everyone_else_a_session(
    server: tuple[LiveServer, Any],
) -> None:
    live, app = server
    statuses = [_open(live.url, BOB).status_code for _ in range(40)]
    assert set(statuses) == {200}  # each closes one of bob's own idle ones
    assert _open(live.url, ANN).status_code == 200
    assert _open(live.url, ROOT).status_code == 200
    owners = [o["client_id"] for o in _manager(app)._session_owners.values()]
    assert owners.count("user:bob") <= 3


def test_a_caller_whose_sessions_are_all_in_use_is_refused_and_no_one_else(
    server: tuple[LiveServer, Any],
) -> None:
    live, _ = server
    ann = [_session(live.url, ANN) for _ in range(3)]
    with httpx.Client(timeout=30) as http:
        streams = [
            http.stream("GET", f"{live.url}/mcp", headers={**ACCEPT, **ANN, **_in(sid)})
            for sid in ann
        ]
        opened = [stream.__enter__() for stream in streams]
        try:
            assert all(r.status_code == 200 for r in opened)
            refused = _open(live.url, ANN)
            assert refused.status_code == 503  # every one of ann's sessions holds a stream
            assert _open(live.url, BOB).status_code == 200
        finally:
            for stream in streams:
                stream.__exit__(None, None, None)


def test_anonymous_callers_are_counted_by_address(server: tuple[LiveServer, Any]) -> None:
    live, _ = server
    other = {"transport": httpx.HTTPTransport(local_address="127.0.0.2")}
    theirs = _session(live.url, {}, **other)
    mine = [_session(live.url, {}) for _ in range(6)]
    assert _lists(live.url, {}, theirs, **other) == 200  # another address: untouched
    assert [_lists(live.url, {}, sid) for sid in mine[:3]] == [404, 404, 404]
    # a session is the address's own: another anonymous address gets 404 for it
    assert _lists(live.url, {}, mine[-1], **other) == 404


def test_an_idle_session_expires(served: KnowledgeStore) -> None:
    app = create_app(served, tokens=TOKENS, mcp_sessions=SessionBounds(idle_s=0.5))
    with LiveServer(app) as live:
        sid = _session(live.url, ANN)
        # watched on the server's side: a request in the session would keep it alive
        until("the idle session closed", lambda: sid not in _manager(app)._server_instances)
        assert _lists(live.url, ANN, sid) == 404
        assert _lists(live.url, ANN, _session(live.url, ANN)) == 200


def test_session_bounds_are_checked() -> None:
    with pytest.raises(ValueError, match="per_caller"):
        SessionBounds(per_caller=10, total=5)
    with pytest.raises(ValueError, match="idle_s"):
        SessionBounds(idle_s=0)
