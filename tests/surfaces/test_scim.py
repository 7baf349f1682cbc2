"""SCIM 2.0 at /scim/v2 (issue 28): provisioning → principals and memberships, checked by others.

Over a real socket: ``scim2-tester`` (a compliance checker nobody here wrote)
runs its checks against the endpoint; then the mapping — a Group's members are
the store's memberships, a removed member or a deactivated or deleted user
loses the group's entities on the next query — and, with OAuth on, a
deprovisioned user's still-valid access token is refused on its next request.
"""

from __future__ import annotations

import collections
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from scim2_client.engines.httpx2 import SyncSCIMClient
from scim2_tester import Status, check_server

from knowledge_store.ingest.embedding import Embedder
from knowledge_store.model import Identity
from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.http import create_app
from knowledge_store.surfaces.oidc import ClaimsMapping, OidcSettings, OidcValidator
from tests.surfaces.idp import Idp
from tests.surfaces.serve_estate import BOB, ROOT, TOKENS, LiveServer

SCIM = {"Content-Type": "application/scim+json"}
USER = "urn:ietf:params:scim:schemas:core:2.0:User"
GROUP = "urn:ietf:params:scim:schemas:core:2.0:Group"
PATCH = "urn:ietf:params:scim:api:messages:2.0:PatchOp"
RUNBOOK = {
    "uid": "runbook:oncall",
    "type": "page",
    "title": "On-call runbook",
    "body": "Page the secondary when the pager escalates twice.",
    "source": "runbooks",
    "acl": ["group:oncall"],
}


@pytest.fixture
def store(tmp_path: Path, embedder: Embedder) -> Iterator[KnowledgeStore]:
    with KnowledgeStore.open(tmp_path / "store", embedder=embedder) as opened:
        opened.ingest_records([RUNBOOK])
        yield opened


@pytest.fixture
def live(store: KnowledgeStore, tmp_path: Path) -> Iterator[LiveServer]:
    with LiveServer(create_app(store, tokens=TOKENS, scim=tmp_path / "scim.sqlite")) as server:
        yield server


def _scim(url: str) -> httpx.Client:
    return httpx.Client(base_url=f"{url}/scim/v2", headers={**ROOT, **SCIM}, timeout=30)


def _user(http: httpx.Client, name: str) -> dict[str, Any]:
    made = http.post("/Users", json={"schemas": [USER], "userName": name, "active": True})
    assert made.status_code == 201, made.text
    return dict(made.json())


def _reads(store: KnowledgeStore, who: str) -> bool:
    return "runbook:oncall" in {h.uid for h in store.sql(identity=Identity(who)).hits}


def test_scim2_tester_finds_no_error(live: LiveServer) -> None:
    http = httpx2.Client(base_url=f"{live.url}/scim/v2", headers=ROOT, timeout=30)
    results = check_server(SyncSCIMClient(http))
    counts = collections.Counter(r.status.name for r in results)
    failed = [r for r in results if r.status in (Status.ERROR, Status.CRITICAL)]
    print(json.dumps(dict(counts)))
    for r in results:
        if r.status == Status.SKIPPED:
            print("skipped:", r.title, "—", r.reason)
    assert not failed, [(r.title, r.reason) for r in failed]
    assert counts["SUCCESS"] > 20


def test_group_members_are_memberships_and_leave_on_the_next_query(
    live: LiveServer, store: KnowledgeStore
) -> None:
    with _scim(live.url) as http:
        carl, dana = _user(http, "carl"), _user(http, "dana")
        group = http.post(
            "/Groups",
            json={
                "schemas": [GROUP],
                "displayName": "oncall",
                "members": [{"value": carl["id"]}, {"value": dana["id"]}],
            },
        )
        assert group.status_code == 201, group.text
        gid, etag = group.json()["id"], group.headers["etag"]
        assert _reads(store, "user:carl") and _reads(store, "user:dana")
        assert not _reads(store, "user:erin")

        # PATCH remove: gone from the group, and from the runbook, on the next query
        removed = http.patch(
            f"/Groups/{gid}",
            json={
                "schemas": [PATCH],
                "Operations": [{"op": "remove", "path": f'members[value eq "{dana["id"]}"]'}],
            },
            headers={"If-Match": etag},
        )
        assert removed.status_code in (200, 204), removed.text
        assert not _reads(store, "user:dana") and _reads(store, "user:carl")

        # the old ETag no longer matches
        stale = http.put(
            f"/Groups/{gid}",
            json={"schemas": [GROUP], "displayName": "oncall", "members": []},
            headers={"If-Match": etag},
        )
        assert stale.status_code == 412

        # a deactivated user holds no group; active again, it does
        http.patch(
            f"/Users/{carl['id']}",
            json={
                "schemas": [PATCH],
                "Operations": [{"op": "replace", "path": "active", "value": False}],
            },
        )
        assert not _reads(store, "user:carl")
        http.patch(
            f"/Users/{carl['id']}",
            json={
                "schemas": [PATCH],
                "Operations": [{"op": "replace", "path": "active", "value": True}],
            },
        )
        assert _reads(store, "user:carl")

        # a deleted user leaves every group
        assert http.delete(f"/Users/{carl['id']}").status_code == 204
        assert not _reads(store, "user:carl")
        members = http.get(f"/Groups/{gid}").json().get("members", [])
        assert carl["id"] not in {m["value"] for m in members}

        # filtering, as the IdP looks a user up before creating it
        found = http.get("/Users", params={"filter": 'userName eq "dana"'}).json()
        assert [r["userName"] for r in found["Resources"]] == ["dana"]

    # every membership SCIM changed is in the audit log, as the admin token's change
    changes = [r for r in store.audit_list().records if r.surface == "scim"]
    assert {(r.operation, r.request["member"]) for r in changes} >= {
        ("principals_add_member", "user:carl"),
        ("principals_add_member", "user:dana"),
        ("principals_remove_member", "user:dana"),
        ("principals_remove_member", "user:carl"),
    }
    root = hashlib.sha256(ROOT["Authorization"].removeprefix("Bearer ").encode()).hexdigest()
    assert {(r.subject, r.identity) for r in changes} == {(f"token:{root[:12]}", "user:root")}


def test_only_an_admin_provisions(live: LiveServer) -> None:
    assert httpx.get(f"{live.url}/scim/v2/Users").status_code == 401
    assert httpx.get(f"{live.url}/scim/v2/Users", headers=BOB).status_code == 403
    assert httpx.get(f"{live.url}/scim/v2/Users", headers=ROOT).status_code == 200


def test_a_name_that_is_no_principal_is_refused(live: LiveServer) -> None:
    with _scim(live.url) as http:
        bad = http.post("/Users", json={"schemas": [USER], "userName": "ann\u200b"})
        assert bad.status_code == 400 and "principal" in bad.json()["detail"]
        _user(http, "frank")
        http.post("/Groups", json={"schemas": [GROUP], "displayName": "ops"})
        twice = http.post("/Groups", json={"schemas": [GROUP], "displayName": "ops"})
        assert twice.status_code == 409


def test_a_deprovisioned_user_s_token_is_refused_on_its_next_request(
    store: KnowledgeStore, tmp_path: Path
) -> None:
    live = LiveServer(None)
    with Idp(live.url) as idp:
        idp.user("gina", "oncall")
        validator = OidcValidator(OidcSettings(idp.issuer, live.url, ClaimsMapping()))
        live.server.config.app = create_app(
            store, tokens=TOKENS, oidc=validator, scim=tmp_path / "scim.sqlite"
        )
        with live, _scim(live.url) as http:
            token = {"Authorization": f"Bearer {idp.token('gina')}"}

            def search() -> httpx.Response:
                return httpx.post(
                    f"{live.url}/v1/sql", json={"filters": {"source": ["runbooks"]}}, headers=token
                )

            # not provisioned yet: the token alone doesn't let her in
            assert search().status_code == 401
            gina = _user(http, "gina")
            assert search().json()["hits"] == []  # her token's groups claim counts for nothing
            group = http.post(
                "/Groups",
                json={
                    "schemas": [GROUP],
                    "displayName": "oncall",
                    "members": [{"value": gina["id"]}],
                },
            ).json()
            assert [h["uid"] for h in search().json()["hits"]] == ["runbook:oncall"]
            # the IdP removes her from the group: the next request sees it
            http.patch(
                f"/Groups/{group['id']}",
                json={"schemas": [PATCH], "Operations": [{"op": "remove", "path": "members"}]},
            )
            assert search().json()["hits"] == []
            # deprovisioned: her still-valid token is refused on the next request
            assert http.delete(f"/Users/{gina['id']}").status_code == 204
            refused = search()
            assert refused.status_code == 401
            assert "not an active user" in refused.json()["error"]["message"]
