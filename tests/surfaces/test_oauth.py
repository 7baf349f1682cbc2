"""OAuth 2.1 access tokens on every HTTP surface, from a real OIDC provider (issue 28).

Canaille (``pytest-iam``) runs on 127.0.0.1 as the identity provider; the
server takes its JWT access tokens beside the token file. A real token (the
IdP's token endpoint) reads as its user with its groups on REST, GraphQL, MCP
and the search page; every attack of the issue's list is refused on each of
them, with a 401 carrying a ``WWW-Authenticate`` challenge that points to the
protected resource metadata (RFC 9728), and no data.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from joserfc.jwk import RSAKey

from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.http import create_app
from knowledge_store.surfaces.oidc import (
    REFETCH_INTERVAL_S,
    ClaimsMapping,
    IssuerKeys,
    OidcSettings,
    OidcValidator,
)
from tests.surfaces.idp import Idp, new_key
from tests.surfaces.serve_estate import BOB, TOKENS, LiveServer

ACCEPT = {"Accept": "application/json, text/event-stream"}
SEARCH = {"query": "replica lag alert", "k": 5}
MAPPING = ClaimsMapping(admin_groups=("ks-admins",))


class Clock:
    """The key cache's clock, moved by hand (a cache lifetime is an hour)."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def stack(served: KnowledgeStore) -> Iterator[tuple[Idp, LiveServer, OidcValidator, Clock]]:
    live = LiveServer(None)
    idp = Idp(live.url)
    with idp:
        idp.user("ann", "sre")
        idp.user("bob")
        idp.user("root", "ks-admins")
        clock = Clock()
        settings = OidcSettings(idp.issuer, live.url, MAPPING)
        validator = OidcValidator(settings, keys=IssuerKeys(idp.issuer, clock=clock))
        live.server.config.app = create_app(served, tokens=TOKENS, oidc=validator)
        with live:
            yield idp, live, validator, clock


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _surfaces(url: str, token: str) -> dict[str, httpx.Response]:
    """One read on every surface with ``token``."""
    with httpx.Client(base_url=url, headers=_bearer(token), timeout=30) as http:
        return {
            "rest": http.post("/v1/search", json=SEARCH),
            "graphql": http.post(
                "/graphql", json={"query": '{ content(uid: "ticket:1042") { entity { title } } }'}
            ),
            "mcp": http.post(
                "/mcp",
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-11-25",
                        "capabilities": {},
                        "clientInfo": {"name": "t", "version": "0"},
                    },
                },
                headers=ACCEPT,
            ),
            "page": http.get("/", params={"q": "replica lag"}),
        }


def test_a_real_token_reads_as_its_user_and_groups_on_every_surface(
    stack: tuple[Idp, LiveServer, OidcValidator, Clock],
) -> None:
    idp, live, _, _ = stack
    ann, bob = _surfaces(live.url, idp.token("ann")), _surfaces(live.url, idp.token("bob"))
    for name, answer in {**ann, **bob}.items():
        assert answer.status_code == 200, (name, answer.text[:300])
    # ann holds group:sre by her token's groups claim: the ticket is hers, not bob's
    assert "ticket:1042" in {r["uid"] for r in ann["rest"].json()["results"]}
    assert "ticket:1042" not in {r["uid"] for r in bob["rest"].json()["results"]}
    assert ann["graphql"].json()["data"]["content"]["entity"]["title"] == "Replica lag alert"
    assert bob["graphql"].json()["errors"][0]["extensions"]["code"] == "not_found"
    assert "Replica lag alert" in ann["page"].text and "Replica lag alert" not in bob["page"].text
    # the token file still works beside OAuth
    assert httpx.post(f"{live.url}/v1/search", json=SEARCH, headers=BOB).status_code == 200


def test_admin_comes_from_the_mapping_and_a_missing_scope_says_which(
    stack: tuple[Idp, LiveServer, OidcValidator, Clock],
) -> None:
    idp, live, _, _ = stack
    sources = "/v1/admin/sources"
    assert httpx.get(live.url + sources, headers=_bearer(idp.token("root"))).status_code == 200
    refused = httpx.get(live.url + sources, headers=_bearer(idp.token("ann")))
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    challenge = refused.headers["www-authenticate"]
    assert 'error="insufficient_scope"' in challenge and 'scope="knowledge:admin"' in challenge


def test_the_protected_resource_metadata_names_the_issuer(
    stack: tuple[Idp, LiveServer, OidcValidator, Clock],
) -> None:
    idp, live, _, _ = stack
    refused = httpx.post(f"{live.url}/mcp", json={}, headers=ACCEPT)
    assert refused.status_code == 401
    challenge = refused.headers["www-authenticate"]
    assert f'resource_metadata="{live.url}/.well-known/oauth-protected-resource"' in challenge
    for path in ("", "/mcp"):
        found = httpx.get(f"{live.url}/.well-known/oauth-protected-resource{path}").json()
        assert found["resource"] == live.url
        assert found["authorization_servers"] == [idp.issuer]


def _forged(idp: Idp) -> dict[str, str]:
    """The issue's attacks, one token each."""
    now = int(time.time())
    public = idp.key.as_pem(private=False)
    other = new_key()
    import jwt

    return {
        "expired": idp.sign(idp.claims("ann", iat=now - 7200, exp=now - 3600)),
        "not yet valid": idp.sign(idp.claims("ann", nbf=now + 3600)),
        "wrong audience": idp.sign(idp.claims("ann", aud=["https://elsewhere.example"])),
        "wrong issuer": idp.sign(idp.claims("ann", iss="https://evil.example")),
        "unsigned (alg none)": jwt.encode(idp.claims("ann"), None, algorithm="none"),
        "re-signed with another key": idp.sign(idp.claims("ann"), key=other, kid=idp.key.kid),
        "alg confusion (HS256 keyed with the public key)": _hs256(idp.claims("ann"), public),
        "no exp": idp.sign(idp.claims("ann", exp=None)),
        "an unknown key id": idp.sign(idp.claims("ann"), key=other),
        "garbage": "eyJhbGciOiJSUzI1NiJ9.bm90IGpzb24.c2ln",
    }


def _hs256(claims: dict[str, Any], secret: bytes) -> str:
    """What an attacker signs with the IdP's public key as an HMAC secret (PyJWT refuses
    a PEM as an HMAC key, so the JWS is put together by hand: the attacker's tool)."""
    import base64
    import hashlib
    import hmac

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64(json.dumps(claims).encode())
    mac = hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(mac)}"


def test_every_attack_is_refused_on_every_surface(
    stack: tuple[Idp, LiveServer, OidcValidator, Clock],
) -> None:
    idp, live, _, _ = stack
    # the control: the same forging, with good claims, is accepted — each refusal below
    # is its attack's
    honest = _surfaces(live.url, idp.sign(idp.claims("ann", groups=["sre"])))
    assert all(r.status_code == 200 for r in honest.values())
    assert "ticket:1042" in {r["uid"] for r in honest["rest"].json()["results"]}
    table: dict[str, dict[str, int]] = {}
    for attack, token in _forged(idp).items():
        answers = _surfaces(live.url, token)
        table[attack] = {name: r.status_code for name, r in answers.items()}
        for name, answer in answers.items():
            where = f"{attack} on {name}"
            assert "Replica lag" not in answer.text, where
            if name == "page":  # the page answers a refusal with its sign-in form
                assert answer.status_code == 401 and "Sign in" in answer.text, where
                continue
            assert answer.status_code == 401, (where, answer.text[:200])
            error = answer.json()["error"]
            assert error["code"] == "unauthorized", where
            assert WHY[attack] in error["message"], (where, error["message"])
            assert 'error="invalid_token"' in answer.headers["www-authenticate"], where
    print(json.dumps(table))


#: What each refusal says (a fragment of its sentence).
WHY = {
    "expired": "has expired",
    "not yet valid": "not valid yet",
    "wrong audience": "not for this server",
    "wrong issuer": "was not issued by",
    "unsigned (alg none)": "algorithm 'none' is not accepted",
    "re-signed with another key": "signature does not verify",
    "alg confusion (HS256 keyed with the public key)": "algorithm 'HS256' is not accepted",
    "no exp": "is not valid",
    "an unknown key id": "does not publish",
    "garbage": "signature does not verify",
}


def test_a_rotated_key_is_fetched_and_the_old_one_kept_while_published(
    stack: tuple[Idp, LiveServer, OidcValidator, Clock],
) -> None:
    idp, live, validator, clock = stack
    before = idp.token("ann")
    clock.now += REFETCH_INTERVAL_S + 1  # a refetch may happen again
    fetched = validator.keys.fetches
    old = idp.rotate()
    try:
        after = idp.token("ann")
        for token in (after, before):
            assert _surfaces(live.url, token)["rest"].status_code == 200
        assert validator.keys.fetches == fetched + 1  # the new kid, once
    finally:
        restore(idp, old)


def restore(idp: Idp, key: RSAKey) -> None:
    idp.key = key
    oidc = idp.app.config["CANAILLE_OIDC"]
    oidc["ACTIVE_JWKS"], oidc["INACTIVE_JWKS"] = [key.as_dict(private=True)], []


def test_an_idp_that_is_down_fails_closed_after_the_keys_lifetime(
    stack: tuple[Idp, LiveServer, OidcValidator, Clock],
) -> None:
    idp, live, _, clock = stack
    token = idp.token("ann")
    clock.now += REFETCH_INTERVAL_S + 1
    assert _surfaces(live.url, token)["rest"].status_code == 200  # keys cached
    idp.stop()
    try:
        # within the keys' lifetime: still served from the cache
        assert httpx.post(f"{live.url}/v1/search", json=SEARCH, headers=_bearer(token)).is_success
        # a key the cache doesn't hold can't be fetched: refused, saying why
        rotated = idp.sign(idp.claims("ann"), key=new_key())
        refused = httpx.post(f"{live.url}/v1/search", json=SEARCH, headers=_bearer(rotated))
        assert refused.status_code == 401
        assert "did not answer" in refused.json()["error"]["message"]
        # past the lifetime: every token is refused (fail closed), with the reason
        clock.now += 86_400 + REFETCH_INTERVAL_S
        late = httpx.post(f"{live.url}/v1/search", json=SEARCH, headers=_bearer(token))
        assert late.status_code == 401
        message = late.json()["error"]["message"]
        assert idp.issuer in message and "no cached key is valid" in message
    finally:
        idp.start()
    clock.now += REFETCH_INTERVAL_S + 1
    assert _surfaces(live.url, token)["rest"].status_code == 200  # back once it answers


def test_a_token_without_the_read_scope_gets_insufficient_scope_on_mcp(
    stack: tuple[Idp, LiveServer, OidcValidator, Clock], served: KnowledgeStore
) -> None:
    from tests.surfaces.serve_estate import call

    idp, live, validator, _ = stack
    strict = OidcValidator(
        OidcSettings(idp.issuer, live.url, ClaimsMapping(read_scope="knowledge:read")),
        keys=validator.keys,
    )
    app = create_app(served, oidc=strict)
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {**ACCEPT, "MCP-Protocol-Version": "2026-07-28"}
    without = call(
        app, "POST", "/mcp", json=listing, headers={**headers, **_bearer(idp.token("ann"))}
    )
    assert without.status_code == 403 and without.json()["error"]["code"] == "forbidden"
    challenge = without.headers["www-authenticate"]
    assert 'error="insufficient_scope"' in challenge and 'scope="knowledge:read"' in challenge
    scoped = idp.sign(idp.claims("ann", scope="openid knowledge:read"), alg="RS512")
    assert strict.validate(scoped, fetch=True).principal == "user:ann"  # with it: in
