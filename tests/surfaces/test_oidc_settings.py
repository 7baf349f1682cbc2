"""``ks serve --oidc …`` and ``--scim`` refuse what can't work, before anything listens."""

from __future__ import annotations

from pathlib import Path

import httpx
import portpicker
import pytest

from knowledge_store.errors import InvalidRequest
from knowledge_store.ingest.embedding import open_embedder
from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.oidc import ClaimsMapping, OidcSettings
from knowledge_store.surfaces.serve import serve
from tests.conftest import HASH_SPEC
from tests.surfaces.idp import Idp
from tests.surfaces.serve_estate import build
from tests.surfaces.workers_server import Workers


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"oidc_audience": "http://x"}, "go with --oidc ISSUER"),
        ({"tokens": None}, "needs --tokens FILE"),
        ({"oidc": "http://idp", "scim": Path("d.sqlite"), "workers": 2}, "--workers 1"),
        ({"mcp_stdio": True, "oidc": "http://idp"}, "are for HTTP"),
    ],
)
def test_serve_refuses(tmp_path: Path, kwargs: dict[str, object], says: str) -> None:
    with pytest.raises(InvalidRequest, match=says):
        serve(tmp_path / "store", port=0, **kwargs)  # type: ignore[arg-type]


def test_settings_and_the_mapping_are_checked(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest, match="not an http"):
        OidcSettings("idp.example.org", "http://ks")
    with pytest.raises(InvalidRequest, match="leeway"):
        OidcSettings("http://idp", "http://ks", leeway_s=3600)
    with pytest.raises(InvalidRequest, match="not allowed"):
        OidcSettings("http://idp", "http://ks", algorithms=("HS256",))
    for text, says in (
        ('{"usr": "sub"}', "unknown key 'usr'"),
        ('{"admin_groups": "ops"}', "wrong type"),
        ('{"user": "sub", "user": "email"}', "appears twice"),
        ("[1]", "expected a JSON object"),
    ):
        file = tmp_path / "claims.json"
        file.write_text(text)
        with pytest.raises(InvalidRequest, match=says):
            ClaimsMapping.load(file)


def test_ks_serve_with_oidc_end_to_end(tmp_path: Path) -> None:
    """``ks serve --oidc ISSUER --oidc-audience URL --oidc-claims FILE`` as a process."""
    port = portpicker.pick_unused_port()
    resource = f"http://127.0.0.1:{port}"
    where = tmp_path / "store"
    with KnowledgeStore.open(where, embedder=open_embedder(HASH_SPEC)) as store:
        build(store)
    claims = tmp_path / "claims.json"
    claims.write_text('{"admin_groups": ["ks-admins"]}')
    with Idp(resource) as idp:
        idp.user("ann", "sre")
        server = Workers(
            where,
            tmp_path / "serve.log",
            *("--port", str(port), "--oidc", idp.issuer, "--oidc-audience", resource),
            *("--oidc-claims", str(claims)),
            env={"KS_EMBEDDER": HASH_SPEC, "HF_HUB_OFFLINE": "1"},
            workers=1,
        )
        try:
            token = {"Authorization": f"Bearer {idp.token('ann')}"}
            found = httpx.post(
                f"{resource}/v1/search", json={"query": "replica lag"}, headers=token
            )
            assert found.status_code == 200, found.text
            assert "ticket:1042" in {r["uid"] for r in found.json()["results"]}
            meta = httpx.get(f"{resource}/.well-known/oauth-protected-resource").json()
            assert meta == {**meta, "resource": resource, "authorization_servers": [idp.issuer]}
        finally:
            assert server.stop() in (0, -15, 143)
