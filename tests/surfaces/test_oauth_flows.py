"""Signing in through a real IdP (issue 28): the MCP SDK's OAuth client, and the search page.

The ``mcp`` SDK client meets a 401 at ``/mcp``, reads ``resource_metadata``
from the challenge (RFC 9728), finds Canaille's authorization server metadata,
runs the authorization code flow with PKCE (the "browser" step is the test,
signed in at Canaille as the user) and retries with the access token. Two users
through the same endpoint get different answers for the same call; with SCIM
the groups come from the directory, so the IdP removing a user from a group
takes effect on that user's next call. Both protocol eras: 2026-07-28
(stateless) and the 2025 handshake.

The search page runs the same flow as a browser would: ``/login`` → the IdP's
authorization endpoint (the user signed in there) → ``/login/callback`` with
the code → the access token in the page's HttpOnly cookie.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)

from knowledge_store.ingest.embedding import Embedder
from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.http import create_app
from knowledge_store.surfaces.oidc import ClaimsMapping, OidcSettings, OidcValidator
from tests.surfaces.idp import Idp
from tests.surfaces.serve_estate import ROOT, TOKENS, LiveServer, build

PUBLIC_CLIENT = "mcp-public-client"
PAGE_CLIENT = "knowledge-store-page"
REDIRECT = "http://127.0.0.1:1/callback"
PATCH = "urn:ietf:params:scim:api:messages:2.0:PatchOp"


class Memory:
    """The SDK's token storage, in memory, holding the pre-registered public client."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client = OAuthClientInformationFull(
            client_id=PUBLIC_CLIENT,
            redirect_uris=[REDIRECT],
            token_endpoint_auth_method="none",
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            scope="openid profile groups",
        )

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, embedder: Embedder
) -> Iterator[tuple[Idp, LiveServer]]:
    where = tmp_path_factory.mktemp("mcp-oauth")
    live = LiveServer(None)
    with KnowledgeStore.open(where / "store", embedder=embedder) as store, Idp(live.url) as idp:
        build(store)
        idp.user("ann", "sre")
        idp.user("bob")
        idp.public_client(PUBLIC_CLIENT, REDIRECT)
        idp.public_client(PAGE_CLIENT, f"{live.url}/login/callback")
        settings = OidcSettings(idp.issuer, live.url, ClaimsMapping(), page_client=PAGE_CLIENT)
        validator = OidcValidator(settings)
        live.server.config.app = create_app(
            store, tokens=TOKENS, oidc=validator, scim=where / "scim.sqlite"
        )
        with live:
            _provision(live.url)
            yield idp, live


def _provision(url: str) -> None:
    """What the IdP's SCIM client does: the users, and group sre with ann."""
    scim = {"Content-Type": "application/scim+json", **ROOT}
    with httpx.Client(base_url=f"{url}/scim/v2", headers=scim, timeout=30) as http:
        ids = {}
        for name in ("ann", "bob"):
            made = http.post(
                "/Users",
                json={"schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"], "userName": name},
            )
            ids[name] = made.json()["id"]
        made = http.post(
            "/Groups",
            json={
                "schemas": ["urn:ietf:params:scim:schemas:core:2.0:Group"],
                "displayName": "sre",
                "members": [{"value": ids["ann"]}],
            },
        )
        assert made.status_code == 201, made.text


def _signed_in(idp: Idp, user: str, *, mode: str) -> Client:
    """The SDK client for ``user``: its OAuth provider, the browser step done by the test."""
    redirected: dict[str, str] = {}
    account = idp.find_user(user)

    async def browser(authorization_url: str) -> None:
        # the user is signed in at the IdP and has consented: the IdP redirects with a code
        idp.server.login(account)
        idp.consent(account, PUBLIC_CLIENT)
        try:
            answer = await anyio.to_thread.run_sync(
                lambda: httpx.get(authorization_url, follow_redirects=False, timeout=30)
            )
        finally:
            idp.server.logout()
        assert answer.status_code in (302, 303), answer.text[:500]
        redirected["url"] = answer.headers["location"]

    async def callback() -> AuthorizationCodeResult:
        query = parse_qs(urlsplit(redirected["url"]).query)
        return AuthorizationCodeResult(
            code=query["code"][0], state=query["state"][0], iss=(query.get("iss") or [None])[0]
        )

    provider = OAuthClientProvider(
        server_url=f"{idp.resource}/mcp",
        client_metadata=OAuthClientMetadata(
            redirect_uris=[REDIRECT], scope="openid profile groups", client_name="tests"
        ),
        storage=Memory(),
        redirect_handler=browser,
        callback_handler=callback,
    )
    http = httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(30, read=60))
    return Client(
        streamable_http_client(f"{idp.resource}/mcp", http_client=http),
        **({"mode": mode} if mode != "auto" else {}),
    )


async def _ticket(client: Client) -> Any:
    return await client.call_tool("fetch_content", {"uid": "ticket:1042"})


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_two_users_sign_in_through_the_sdk_and_a_removed_group_counts_on_the_next_call(
    stack: tuple[Idp, LiveServer], mode: str
) -> None:
    idp, live = stack
    figures: dict[str, Any] = {"mode": mode}

    async def scenario() -> None:
        with anyio.fail_after(120):
            async with (
                _signed_in(idp, "ann", mode=mode) as ann,
                _signed_in(idp, "bob", mode=mode) as bob,
            ):
                mine, theirs = await _ticket(ann), await _ticket(bob)
                assert not mine.is_error and mine.structured_content["title"] == "Replica lag alert"
                assert theirs.is_error and theirs.structured_content["error"]["code"] == "not_found"
                figures["ann"] = mine.structured_content["title"]
                figures["bob"] = theirs.structured_content["error"]["code"]

                # the IdP takes ann out of group sre (SCIM); her very next call sees it
                started = time.perf_counter()
                await anyio.to_thread.run_sync(_membership, live.url, "remove")
                after = await _ticket(ann)
                figures["revocation_ms"] = round((time.perf_counter() - started) * 1000, 1)
                assert after.is_error and after.structured_content["error"]["code"] == "not_found"
                await anyio.to_thread.run_sync(_membership, live.url, "add")
                assert not (await _ticket(ann)).is_error

    anyio.run(scenario)
    print(json.dumps(figures))


def _membership(url: str, op: str) -> None:
    scim = {"Content-Type": "application/scim+json", **ROOT}
    with httpx.Client(base_url=f"{url}/scim/v2", headers=scim, timeout=30) as http:
        group = http.get("/Groups", params={"filter": 'displayName eq "sre"'}).json()["Resources"][
            0
        ]
        ann = http.get("/Users", params={"filter": 'userName eq "ann"'}).json()["Resources"][0]
        change: dict[str, Any] = (
            {"op": "remove", "path": f'members[value eq "{ann["id"]}"]'}
            if op == "remove"
            else {"op": "add", "path": "members", "value": [{"value": ann["id"]}]}
        )
        done = http.patch(
            f"/Groups/{group['id']}", json={"schemas": [PATCH], "Operations": [change]}
        )
        assert done.status_code in (200, 204), done.text


def test_the_metadata_the_sdk_reads(stack: tuple[Idp, LiveServer]) -> None:
    idp, live = stack
    found = httpx.get(f"{live.url}/.well-known/oauth-protected-resource/mcp").json()
    assert found["authorization_servers"] == [idp.issuer]


def test_the_page_signs_in_with_the_idp(stack: tuple[Idp, LiveServer]) -> None:
    idp, live = stack
    with httpx.Client(base_url=live.url, timeout=30) as browser:
        asked = browser.get("/", params={"q": "replica lag"})
        assert asked.status_code == 401 and "/login?next=" in asked.text
        started = browser.get("/login", params={"next": "/?q=replica lag"})
        assert started.status_code == 303 and "ks_login" in browser.cookies
        where = started.headers["location"]
        assert where.startswith(f"{idp.issuer}/oauth/authorize?")
        assert "code_challenge_method=S256" in where
        # at the IdP: ann is signed in and has consented
        account = idp.find_user("ann")
        idp.server.login(account)
        idp.consent(account, PAGE_CLIENT)
        try:
            back = httpx.get(where, follow_redirects=False, timeout=30)
        finally:
            idp.server.logout()
        callback = back.headers["location"]
        assert callback.startswith(f"{live.url}/login/callback?")
        # a callback this browser did not start is refused
        stranger = httpx.get(callback, timeout=30)
        assert stranger.status_code == 400 and "ks_token" not in stranger.headers.get(
            "set-cookie", ""
        )
        done = browser.get(callback)
        assert done.status_code == 200 and 'http-equiv="refresh"' in done.text, done.text[
            done.text.find("muted") :
        ][:400]
        cookie = next(c for c in done.headers.get_list("set-cookie") if c.startswith("ks_token="))
        assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
        page = browser.get("/", params={"q": "replica lag"})
        assert "as user:ann" in page.text and "Replica lag alert" in page.text
