"""Sync and the sources view over REST, GraphQL and the CLI, on both engines.

``sources`` is an administration view: its counts are of every entity of a source,
whatever its ACL, and its rows name the operator's paths and the sync figures — so
REST and GraphQL answer it only to an admin token. Readers count what they may read
through ``aggregate count --by source``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from knowledge_store.surfaces.http import create_app
from tests.conformance.sync_support import docs, open_at, where
from tests.conftest import HASH_SPEC
from tests.surfaces.serve_estate import BOB, ROOT, TOKENS, call

__all__ = ["docs", "where"]  # fixtures

NDJSON = {**ROOT, "Content-Type": "application/x-ndjson"}


def _lines(*uids: str) -> bytes:
    return "\n".join(
        json.dumps({"uid": uid, "type": "note", "title": uid, "body": f"beavers {uid}"})
        for uid in uids
    ).encode()


def test_rest_sync_sources_and_delete_source(where: str) -> None:
    with open_at(where) as store:
        app = create_app(store, tokens=TOKENS)
        url = "/v1/admin/ingest?acl=everyone&source=notes&sync=true"
        first = call(app, "POST", url, content=_lines("n1", "n2", "n3"), headers=NDJSON).json()
        assert first["added"] == 3
        synced = call(app, "POST", url, content=_lines("n1", "n2"), headers=NDJSON).json()
        assert (synced["deleted"], synced["deleted_uids"]) == (1, ["n3"])
        refused = call(app, "POST", url, content=_lines("n9"), headers=NDJSON)
        assert refused.status_code == 400
        assert refused.json()["error"]["details"]["deleting"] == 2

        listed = call(app, "GET", "/v1/admin/sources", headers=ROOT).json()
        (row,) = listed["sources"]
        assert (row["source"], row["entities"], row["loader"]) == ("notes", 2, "records")
        assert row["last_sync"]["deleted"] == 1 and row["last_sync"]["mode"] == "sync"
        assert listed["content_root"] == synced["content_root"]
        assert call(app, "GET", "/v1/admin/sources", headers=BOB).status_code == 403

        gone = call(app, "DELETE", "/v1/admin/sources/notes", headers=ROOT).json()
        assert (gone["deleted"], gone["deleted_uids"]) == (2, ["n1", "n2"])
        assert call(app, "GET", "/v1/admin/sources", headers=ROOT).json()["sources"] == []
        missing = call(app, "DELETE", "/v1/admin/sources/notes", headers=ROOT)
        assert missing.status_code == 404


def test_graphql_sources_is_for_admins(where: str) -> None:
    with open_at(where) as store:
        store.ingest_records(
            [{"uid": "n1", "type": "note", "title": "n", "body": "x"}],
            acl=["everyone"],
            source="notes",
        )
        app = create_app(store, tokens=TOKENS)
        fields = "contentRoot sources { source entities chunks loader lastSync { mode added } }"
        query = {"query": f"{{ sources {{ {fields} }} }}"}
        admin = call(app, "POST", "/graphql", json=query, headers=ROOT).json()
        (row,) = admin["data"]["sources"]["sources"]
        assert (row["source"], row["entities"], row["lastSync"]["mode"]) == ("notes", 1, "upsert")
        assert (row["loader"], row["lastSync"]["added"]) == ("records", 1)
        reader = call(app, "POST", "/graphql", json=query, headers=BOB).json()
        assert reader["data"] is None
        assert reader["errors"][0]["extensions"]["code"] == "forbidden"


def _ks(store: str, *args: str) -> tuple[int, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "knowledge_store.surfaces.cli", "--store", store, *args, "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "KS_EMBEDDER": HASH_SPEC},
        timeout=300,
    )
    return done.returncode, json.loads(done.stdout)


def test_cli_sync_sources_and_delete_source(where: str, docs: Path) -> None:
    ingest = ["ingest", str(docs), "--source", "docs", "--acl", "everyone", "--sync"]
    assert _ks(where, *ingest)[1]["added"] == 8
    (docs / "a.md").unlink()
    (docs / "b.md").unlink()
    (docs / "c.md").unlink()
    code, refused = _ks(where, *ingest)
    assert code == 2 and refused["error"]["details"]["deleting"] == 6
    code, allowed = _ks(where, *ingest, "--allow-mass-delete")
    assert code == 0 and allowed["deleted"] == 6 and "docs:a#code-1" in allowed["deleted_uids"]
    code, listed = _ks(where, "sources")
    assert code == 0 and [r["entities"] for r in listed["sources"]] == [2]
    code, both = _ks(where, "delete", "docs:d", "--source", "docs")
    assert code == 2 and "not both" in both["error"]["message"]
    code, gone = _ks(where, "delete", "--source", "docs")
    assert (code, gone["deleted"]) == (0, 2)
    code, missing = _ks(where, "delete", "--source", "docs")
    assert code == 2 and missing["error"]["code"] == "not_found"
