"""End to end over a real socket: uvicorn on 127.0.0.1 (ephemeral port) in a thread.

MCP over streamable HTTP through the SDK's client — both protocol eras: the
2025 handshake (``notifications/tools/list_changed`` on the session's stream)
and 2026 (a ``subscriptions/listen`` stream) — watching the store flip from
empty to non-empty and back; REST over the socket; and the search page in
headless Chromium.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client, types
from mcp.client.streamable_http import streamable_http_client

from knowledge_store.ingest.embedding import Embedder
from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.http import create_app
from knowledge_store.surfaces.tools import ADMIN_TOOLS, KNOWLEDGE_TOOLS
from tests.surfaces.serve_estate import ANN, BOB, MEMBERSHIPS, RECORDS, ROOT, TOKENS, LiveServer

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
CHROMIUM = next(
    (p for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser") if Path(p).exists()),
    shutil.which("chromium") or shutil.which("chromium-browser"),
)


@pytest.fixture(scope="module")
def live(
    tmp_path_factory: pytest.TempPathFactory, embedder: Embedder
) -> Iterator[tuple[LiveServer, KnowledgeStore]]:
    where = tmp_path_factory.mktemp("live") / "store"
    with KnowledgeStore.open(where, embedder=embedder) as store:
        for group, member in MEMBERSHIPS:
            store.add_member(group, member)
        with LiveServer(create_app(store, tokens=TOKENS)) as server:
            yield server, store


@pytest.fixture
def populated(live: tuple[LiveServer, KnowledgeStore]) -> LiveServer:
    server, store = live
    if store.is_empty:
        store.ingest_records(RECORDS)
    return server


def _mcp(url: str, headers: dict[str, str], **kwargs: Any) -> Client:
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=60))
    return Client(streamable_http_client(f"{url}/mcp", http_client=http), **kwargs)


def _ingest_over_rest(url: str) -> dict[str, Any]:
    lines = "\n".join(json.dumps(r) for r in RECORDS).encode()
    response = httpx.post(
        f"{url}/v1/admin/ingest",
        content=lines,
        headers={**ROOT, "Content-Type": "application/x-ndjson"},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_mcp_http_tools_appear_and_disappear_with_the_first_and_last_chunk(
    live: tuple[LiveServer, KnowledgeStore],
) -> None:
    server, store = live
    if not store.is_empty:
        store.delete([r["uid"] for r in RECORDS])

    async def scenario() -> None:
        changed = anyio.Event()

        async def on_message(message: Any) -> None:
            if isinstance(message, types.ToolListChangedNotification):
                changed.set()

        with anyio.fail_after(60):
            async with (
                _mcp(server.url, ANN, mode="legacy", message_handler=on_message) as legacy,
                _mcp(server.url, BOB) as modern,
                _mcp(server.url, ROOT, mode="legacy") as admin,
            ):
                assert legacy.protocol_version != modern.protocol_version  # both eras
                assert (await legacy.list_tools()).tools == []
                assert (await modern.list_tools()).tools == []
                assert [t.name for t in (await admin.list_tools()).tools] == list(ADMIN_TOOLS)
                async with modern.listen(tools_list_changed=True) as events:
                    report = await anyio.to_thread.run_sync(_ingest_over_rest, server.url)
                    assert report["added"] == len(RECORDS)
                    with anyio.fail_after(10):
                        await changed.wait()  # 2025 era: on the session's stream
                        event = await events.__anext__()  # 2026 era: on the listen stream
                    assert type(event).__name__ == "ToolsListChanged"
                # a fresh tools/list: computed afresh, no restart
                assert [t.name for t in (await legacy.list_tools()).tools] == list(KNOWLEDGE_TOOLS)
                assert [t.name for t in (await modern.list_tools()).tools] == list(KNOWLEDGE_TOOLS)

                # each caller reads as its token's identity
                ann = await legacy.call_tool("fetch_content", {"uid": "ticket:1042"})
                bob = await modern.call_tool("fetch_content", {"uid": "ticket:1042"})
                assert not ann.is_error and ann.structured_content["title"] == "Replica lag alert"
                assert bob.is_error and bob.content[0].text == "no entity with uid 'ticket:1042'"
                path = await modern.call_tool("get_learning_path", {"uid": "unit:stats"})
                assert path.structured_content["root"] == "path:admin"

                # the last chunk goes: the knowledge tools go too
                changed = anyio.Event()
                gone = await admin.call_tool(
                    "delete_entities", {"uids": [r["uid"] for r in RECORDS]}
                )
                assert not gone.is_error
                with anyio.fail_after(10):
                    await changed.wait()
                assert (await legacy.list_tools()).tools == []

    anyio.run(scenario)
    assert store.is_empty


def test_mcp_http_needs_a_token_and_binds_sessions_to_it(populated: LiveServer) -> None:
    url = f"{populated.url}/mcp"
    accept = {"Accept": "application/json, text/event-stream"}
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    refused = httpx.post(url, json=listing, headers=accept)
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"

    opened = httpx.post(
        url,
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "0"},
            },
        },
        headers={**accept, **ANN},
    )
    assert opened.status_code == 200, opened.text
    session = {
        "mcp-session-id": opened.headers["mcp-session-id"],
        "mcp-protocol-version": "2025-11-25",
    }
    httpx.post(
        url,
        json={"jsonrpc": "2.0", "method": "notifications/initialized"},
        headers={**accept, **ANN, **session},
    )
    mine = httpx.post(url, json=listing, headers={**accept, **ANN, **session})
    assert mine.status_code == 200 and "fetch_content" in mine.text
    # another credential can't ride ann's session: it answers as if there were none
    theirs = httpx.post(url, json=listing, headers={**accept, **BOB, **session})
    assert theirs.status_code == 404


def test_rest_and_graphql_over_the_socket(populated: LiveServer) -> None:
    url = populated.url
    search = httpx.post(f"{url}/v1/search", json={"query": "vacuum dead tuples"}, headers=BOB)
    assert search.status_code == 200 and search.json()["results"][0]["uid"] == "unit:vacuum"
    assert httpx.post(f"{url}/v1/search", json={"query": "x"}).status_code == 401
    graphql = httpx.post(
        f"{url}/graphql",
        json={
            "query": '{ content(uid: "unit:stats") { entity { title } edges { out { label uid } } } }'
        },
        headers=BOB,
    ).json()
    assert graphql["data"]["content"]["entity"]["title"] == "Monitoring Database Activity"
    assert httpx.get(f"{url}/healthz").json() == {"ok": True}


@pytest.mark.skipif(
    CHROMIUM is None,
    reason="no chromium: install it with `apt-get install -y chromium` (.ci/run does when missing)",
)
def test_search_page_in_headless_chromium(populated: LiveServer) -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(20000)
            external: list[str] = []
            page.on(
                "request",
                lambda r: external.append(r.url) if not r.url.startswith(populated.url) else None,
            )
            page.goto(f"{populated.url}/")
            assert page.locator("h1").inner_text() == "Sign in"  # no token, no anonymous
            page.fill("#token", "tok-ann-0001")
            page.click("button[type=submit]")
            page.wait_for_selector("#q")
            assert "as user:ann" in page.locator(".who").inner_text()

            page.fill("#q", "replica lag during bulk loads")
            page.keyboard.press("Enter")
            page.wait_for_selector("li.result")
            titles = page.locator("li.result h3").all_inner_texts()
            assert "Replica lag alert" in titles  # ann reads group:sre tickets
            first = page.locator("li.result").first
            assert "#" in first.locator(".rank.on").first.inner_text()  # why it is here
            assert page.locator(".facets").count() == 1
            page.screenshot(path=str(ARTIFACTS / "search-page.png"), full_page=True)

            page.fill("#q", "reindex a bloated index")
            page.keyboard.press("Enter")
            page.wait_for_selector(".superseded")
            assert "superseded by" in page.locator(".superseded").first.inner_text()

            page.locator("li.result h3 a", has_text="Reindexing Concurrently").first.click()
            page.wait_for_selector("article.entity")
            assert page.locator("h1").first.inner_text().startswith("Reindexing Concurrently")
            assert (
                page.locator("ol.path li.current").inner_text().strip() == "Reindexing Concurrently"
            )
            assert page.locator("text=Related").count() >= 1
            page.screenshot(path=str(ARTIFACTS / "entity-page.png"), full_page=True)
            assert external == []  # nothing outside the server was fetched
        finally:
            browser.close()
