"""Every surface records through the operation table: REST, GraphQL, MCP, the page, the CLI.

One store per module (the serving estate), each test asking something no other test asks,
then reading the log back: the surface, who authenticated, the identity acted as, what the
answer named. Reading the log is an administration view (REST: the admin scope).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from knowledge_store.ingest.embedding import Embedder
from knowledge_store.model import Identity
from knowledge_store.model.audit import AuditRecord
from knowledge_store.requests import AuditListRequest
from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.auth import Caller
from knowledge_store.surfaces.cli import app as cli_app
from knowledge_store.surfaces.http import create_app
from knowledge_store.surfaces.tools import call_tool
from tests.surfaces.serve_estate import ANN, BOB, ROOT, TOKENS, build, call

pytestmark = pytest.mark.embedded_only(
    reason="the surfaces over the store: the log's storage is tested on both engines in"
    " tests/conformance/test_audit.py"
)


def _subject(header: dict[str, str]) -> str:
    token = header["Authorization"].removeprefix("Bearer ")
    return f"token:{hashlib.sha256(token.encode()).hexdigest()[:12]}"


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, embedder: Embedder
) -> Iterator[KnowledgeStore]:
    with KnowledgeStore.open(tmp_path_factory.mktemp("audit") / "store", embedder=embedder) as s:
        yield build(s)


@pytest.fixture(scope="module")
def app(served: KnowledgeStore) -> Any:
    return create_app(served, tokens=TOKENS)


def _last(store: KnowledgeStore, **where: Any) -> AuditRecord:
    found = store.audit_list(AuditListRequest(k=1, **where)).records
    assert found, where
    return found[0]


def test_rest_records_the_token_the_identity_and_what_it_named(
    app: Any, served: KnowledgeStore
) -> None:
    got = call(app, "POST", "/v1/search", json={"query": "autovacuum daemon", "k": 3}, headers=ANN)
    answer = got.json()
    record = _last(served, identity="user:ann", operation="search")
    assert (record.surface, record.subject) == ("rest", _subject(ANN))
    assert record.request == {"query": "autovacuum daemon", "k": 3}
    assert [n.uid for n in record.returned] == [r["uid"] for r in answer["results"]]
    assert record.content_root == answer["content_root"]


def test_rest_records_a_request_that_does_not_parse(app: Any, served: KnowledgeStore) -> None:
    got = call(app, "POST", "/v1/lexical", json={"query": "pg_stat", "k": 100000}, headers=BOB)
    assert got.status_code == 400
    record = _last(served, identity="user:bob", operation="lexical")
    assert record.outcome == "error" and record.error is not None
    assert record.error["code"] == got.json()["error"]["code"] and record.request["k"] == 100000


def test_graphql_records_its_fields(app: Any, served: KnowledgeStore) -> None:
    query = '{ sql(filters: {type: ["ticket"]}, k: 7) { hits { uid } } }'
    got = call(app, "POST", "/graphql", json={"query": query}, headers=ANN).json()
    record = _last(served, identity="user:ann", operation="sql")
    assert record.surface == "graphql" and record.request["k"] == 7
    assert [n.uid for n in record.returned] == [h["uid"] for h in got["data"]["sql"]["hits"]]


def test_mcp_tools_record_their_calls(served: KnowledgeStore) -> None:
    caller = Caller(Identity("user:bob"), subject="oidc:https://idp.example#bob")
    out = call_tool(served, caller, "get_related", {"uid": "unit:vacuum", "k": 4})
    record = _last(served, identity="user:bob", operation="get_related")
    assert (record.surface, record.subject) == ("mcp", "oidc:https://idp.example#bob")
    assert {n.uid for n in record.returned} >= {r["uid"] for r in out["related"]}


def test_the_page_records_each_read_it_makes(app: Any, served: KnowledgeStore) -> None:
    before = served.engine.audit.head().seq
    got = call(app, "GET", "/", params={"q": "monitoring sessions"}, headers=BOB)
    assert got.status_code == 200
    records = served.audit_list(AuditListRequest(k=20)).records
    page = [r for r in records if r.seq > before and r.surface == "page"]
    operations = sorted(r.operation for r in page)
    assert operations[:3] == ["aggregate", "aggregate", "graph_facets"] and "search" in operations
    assert {r.identity for r in page} == {"user:bob"}
    assert len({r.content_root for r in page}) == 1  # one reader, one snapshot
    search = next(r for r in page if r.operation == "search")
    assert search.request["query"] == "monitoring sessions" and search.returned


def test_the_cli_records_the_operating_system_user(served: KnowledgeStore) -> None:
    store = str(served.engine.path)  # type: ignore[attr-defined]
    args = ["--store", store, "lexical", "code samples of vacuum", "--as", "user:ann", "--k", "2"]
    answered = CliRunner().invoke(cli_app, [*args, "--json"])
    assert answered.exit_code == 0, answered.stdout
    record = _last(served, identity="user:ann", operation="lexical")
    assert record.surface == "cli" and record.subject and record.subject.startswith("os:")
    hits = json.loads(answered.stdout)["hits"]
    assert [c for n in record.returned for c in n.chunks] == [h["chunk_id"] for h in hits]


def test_reading_the_log_over_rest_is_administration(app: Any, served: KnowledgeStore) -> None:
    assert call(app, "POST", "/v1/admin/audit", json={}, headers=ANN).status_code == 403
    listed = call(
        app, "POST", "/v1/admin/audit", json={"identity": "user:ann", "k": 5}, headers=ROOT
    )
    assert listed.status_code == 200, listed.text
    records = listed.json()["records"]
    assert records and {r["identity"] for r in records} == {"user:ann"}
    shown = call(app, "GET", f"/v1/admin/audit/{records[0]['seq']}", headers=ROOT).json()
    assert shown == records[0]
    verdict = call(app, "POST", "/v1/admin/audit/verify", json={}, headers=ROOT).json()
    assert verdict["ok"] is True and verdict["head"]["seq"] >= records[0]["seq"]
    # the reads of the log are records too, and name nothing
    listing = _last(served, operation="audit_list")
    assert listing.surface == "rest" and listing.identity == "user:root" and listing.returned == []


def test_an_export_over_the_cli_is_json_lines(served: KnowledgeStore, tmp_path: Path) -> None:
    store = str(served.engine.path)  # type: ignore[attr-defined]
    answered = CliRunner().invoke(cli_app, ["--store", store, "audit", "export", "--since", "1d"])
    assert answered.exit_code == 0, answered.stdout
    lines = [json.loads(line) for line in answered.stdout.splitlines()]
    assert lines and all(set(line) >= {"seq", "digest", "prev", "operation"} for line in lines)
    assert [line["seq"] for line in lines] == sorted(line["seq"] for line in lines)
    bad = CliRunner().invoke(cli_app, ["--store", store, "audit", "export", "--since", "soon"])
    assert bad.exit_code == 2 and "--since" in bad.stderr


def test_a_replay_over_rest(app: Any, served: KnowledgeStore) -> None:
    call(app, "POST", "/v1/sql", json={"filters": {"type": ["ticket"]}}, headers=ANN)
    seq = _last(served, identity="user:ann", operation="sql").seq
    assert (
        call(app, "POST", "/v1/admin/audit/replay", json={"seq": seq}, headers=ANN).status_code
        == 403
    )
    got = call(app, "POST", "/v1/admin/audit/replay", json={"seq": seq}, headers=ROOT).json()
    assert got["replayed"] and got["explained"] and got["then"]["identical"]
    assert got["principals_match"] is True
    assert all(a["readable"] for a in got["access"])
