"""The HTTP app in-process (httpx.ASGITransport): REST ranks like the API, identity, one error shape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from knowledge_store.errors import InvalidRequest
from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.auth import TokenTable
from knowledge_store.surfaces.http import create_app
from tests.surfaces.serve_estate import ANN, BOB, ROOT, TOKENS, call

pytestmark = pytest.mark.embedded_only(
    reason="a surface over the store: the engines agree in tests/conformance"
)

ERROR_KEYS = {"code", "message", "details"}


def _error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == ERROR_KEYS, body
    assert body["error"]["code"] == code and body["error"]["message"]
    return dict(body["error"])


# -- the service layer, read as the caller ------------------------------------------------------------
def test_rest_search_ranks_exactly_like_the_api(app: Any, served: KnowledgeStore) -> None:
    body = {"query": "reclaim space from dead tuples", "k": 5, "filters": {"not_type": ["ticket"]}}
    got = call(app, "POST", "/v1/search", json=body, headers=ANN).json()
    want = served.search(
        body["query"], identity="user:ann", k=5, filters={"not_type": ["ticket"]}
    ).to_dict()
    assert got == json.loads(json.dumps(want))
    # The page about it is found; under hash vectors the stats code sample, first in the
    # vector list and the second of the lexical list's two matches (floor 0), may lead it.
    assert "unit:vacuum" in [r["uid"] for r in got["results"][:2]]
    assert got["results"][0]["ranks"]["lexical"] is not None
    assert set(got["results"][0]["ranks"]) == {"vector", "lexical", "graph", "sql"}


@pytest.mark.parametrize(
    ("path", "body", "method"),
    [
        ("/v1/lexical", {"query": "pg_stat_activity", "k": 3}, "lexical"),
        ("/v1/vector", {"query": "which sessions are running", "k": 3}, "vector"),
    ],
)
def test_chunk_primitives(
    app: Any, served: KnowledgeStore, path: str, body: dict[str, Any], method: str
) -> None:
    got = call(app, "POST", path, json=body, headers=BOB).json()
    want = getattr(served, method)(body["query"], identity="user:bob", k=3).to_dict()
    want.pop("explain", None)
    assert got == json.loads(json.dumps(want))


def test_graph_sql_aggregate_query_graph(app: Any, served: KnowledgeStore) -> None:
    graph = call(
        app, "POST", "/v1/graph", json={"starts": ["unit:vacuum"], "depth": 2}, headers=BOB
    ).json()
    assert graph == served.graph(["unit:vacuum"], identity="user:bob", depth=2).to_dict()
    assert "ticket:1043" not in {h["uid"] for h in graph["hits"]}  # bob can't read it
    sql = call(
        app,
        "POST",
        "/v1/sql",
        json={"filters": {"type": ["ticket"]}, "order": "updated_at:desc"},
        headers=ANN,
    ).json()
    assert {h["uid"] for h in sql["hits"]} == {"ticket:1042", "ticket:1043"}
    counts = call(
        app, "POST", "/v1/aggregate", json={"metric": "count", "dimension": "type"}, headers=BOB
    ).json()
    assert "ticket" not in {r["key"] for r in counts["rows"]}
    rows = call(
        app,
        "POST",
        "/v1/query_graph",
        json={
            "query": "MATCH (c)-[:partOf]->(m {uid: $m}) RETURN c.uid ORDER BY c.uid",
            "params": {"m": "mod:monitoring"},
        },
        headers=BOB,
    ).json()
    assert rows["rows"] == [["unit:logs"], ["unit:stats"]]


def test_content_api_gives_entity_chunks_and_visible_edges(app: Any) -> None:
    got = call(app, "GET", "/v1/content/unit:vacuum", headers=BOB).json()
    assert got["entity"]["uid"] == "unit:vacuum" and got["entity"]["title"] == "Routine Vacuuming"
    body = got["entity"]["body"]
    assert got["chunks"] and all(body[c["start"] : c["end"]] == c["text"] for c in got["chunks"])
    assert got["chunks"][0]["heading"][0] == "Routine Vacuuming"
    assert {(e["label"], e["uid"]) for e in got["edges"]["out"]} == {
        ("partOf", "mod:maintenance"),
        ("implementedBy", "unit:vacuum#code-1"),
        ("xref", "unit:stats"),
    }
    incoming = {(e["label"], e["uid"]) for e in got["edges"]["in"]}
    assert ("dependsOn", "unit:analyze") in incoming
    assert ("xref", "ticket:1043") not in incoming  # bob can't read the ticket's end
    ann = call(app, "GET", "/v1/content/unit:vacuum", headers=ANN).json()
    assert ("xref", "ticket:1043") in {(e["label"], e["uid"]) for e in ann["edges"]["in"]}
    sample = call(app, "GET", "/v1/content/unit:vacuum%23code-1", headers=BOB)
    assert sample.json()["entity"]["type"] == "codeSample"


def test_docs_search_and_code_sample_search(app: Any) -> None:
    docs = call(app, "POST", "/v1/docs_search", json={"query": "vacuum", "k": 10}, headers=BOB)
    assert docs.status_code == 200
    assert "codeSample" not in {r["type"] for r in docs.json()["results"]}
    code = call(
        app,
        "POST",
        "/v1/code_sample_search",
        json={"query": "rebuild an index without blocking writes", "k": 3},
        headers=BOB,
    ).json()
    top = code["results"][0]
    assert top["uid"] == "unit:reindex#code-1"
    assert top["language"] == "sql" and top["code"] == "REINDEX INDEX CONCURRENTLY orders_pkey;"
    assert top["page"] == {
        "uid": "unit:reindex",
        "title": "Reindexing Concurrently",
        "href": "https://docs.example.org/reindex",
    }
    chat = call(
        app, "POST", "/v1/search_knowledge", json={"query": "what does autovacuum do"}, headers=BOB
    ).json()
    first = chat["results"][0]
    assert first["n"] == 1 and first["uid"] == "unit:vacuum" and first["href"]
    assert first["passages"][0]["citation"].startswith("Routine Vacuuming")
    assert chat["context"].startswith("[1] Routine Vacuuming")


def test_superseded_pages_are_marked(app: Any) -> None:
    got = call(app, "POST", "/v1/search", json={"query": "reindex bloated index"}, headers=BOB)
    results = {r["uid"]: r for r in got.json()["results"]}
    assert results["unit:reindex-old"]["superseded_by"] == "unit:reindex"
    order = [r["uid"] for r in got.json()["results"]]
    assert order.index("unit:reindex") < order.index("unit:reindex-old")


def test_docs_tools_endpoints(app: Any) -> None:
    related = call(app, "POST", "/v1/related", json={"uid": "unit:vacuum"}, headers=BOB).json()
    assert "mod:maintenance" in {r["uid"] for r in related["related"]}
    path = call(app, "POST", "/v1/learning_path", json={"uid": "unit:analyze"}, headers=BOB).json()
    assert path["root"] == "path:admin"
    assert path["units"][path["index"]]["uid"] == "unit:analyze"
    xref = call(
        app,
        "POST",
        "/v1/resolve_xref",
        json={"ref": "https://docs.example.org/stats#locks"},
        headers=BOB,
    ).json()
    assert xref["entity"]["uid"] == "unit:stats" and xref["anchor"] == "locks"
    facets = call(
        app, "POST", "/v1/graph_facets", json={"uids": ["unit:vacuum"]}, headers=ANN
    ).json()
    assert facets["by_label"]["xref"] == 2  # unit:stats and (ann only) ticket:1043


def test_capabilities_list_the_harness_tools(app: Any) -> None:
    reader = call(app, "GET", "/v1/capabilities", headers=BOB).json()
    assert reader["identity"] == "user:bob" and reader["admin"] is False
    assert "ingest_records" not in {t["name"] for t in reader["tools"]}
    assert {"search", "fetch_content"} <= {t["name"] for t in reader["tools"]}
    admin = call(app, "GET", "/v1/capabilities", headers=ROOT).json()
    assert "ingest_records" in {t["name"] for t in admin["tools"]}


def test_tools_route_calls_a_listed_tool(app: Any) -> None:
    out = call(
        app, "POST", "/v1/tools/fetch_content", json={"uid": "unit:stats"}, headers=BOB
    ).json()
    assert out["uid"] == "unit:stats" and out["body_truncated"] is False
    # an admin tool called without the admin scope: 403 forbidden, as docs/serving.md says
    for name, arguments in (("ingest_records", {"records": []}), ("delete_entities", {})):
        error = _error(
            call(app, "POST", f"/v1/tools/{name}", json=arguments, headers=BOB), 403, "forbidden"
        )
        assert "admin scope" in error["message"]


def test_stats_global_for_admins_visible_slice_for_readers(
    app: Any, served: KnowledgeStore
) -> None:
    admin = call(app, "GET", "/v1/stats", headers=ROOT).json()
    assert admin["entities"] == served.stats().entities
    reader = call(app, "GET", "/v1/stats", headers=BOB).json()
    assert reader["entities"] < admin["entities"] and "path" not in reader


# -- identity: 401 / 403 / anonymous ----------------------------------------------------------------
def test_no_token_or_unknown_token_is_401(app: Any) -> None:
    error = _error(call(app, "POST", "/v1/search", json={"query": "x"}), 401, "unauthorized")
    assert "Bearer" in error["message"]
    bad = call(app, "GET", "/v1/capabilities", headers={"Authorization": "Bearer nope-nope"})
    _error(bad, 401, "unauthorized")
    assert bad.headers["www-authenticate"].startswith("Bearer")
    _error(call(app, "POST", "/graphql", json={"query": "{ stats }"}), 401, "unauthorized")


def test_anonymous_callers_read_as_everyone_but_bad_tokens_stay_401(
    served: KnowledgeStore,
) -> None:
    anon = create_app(served, tokens=TOKENS, anonymous=True)
    caps = call(anon, "GET", "/v1/capabilities").json()
    assert caps["identity"] == "everyone"
    _error(call(anon, "GET", "/v1/content/ticket:1042"), 404, "not_found")
    bad = call(anon, "GET", "/v1/capabilities", headers={"Authorization": "Bearer nope-nope"})
    _error(bad, 401, "unauthorized")


def test_admin_endpoints_need_the_admin_scope_and_admins_read_as_themselves(app: Any) -> None:
    for method, url, kw in [
        ("POST", "/v1/admin/ingest", {"content": b"{}"}),
        ("DELETE", "/v1/admin/entities/doc:roles", {}),
        ("POST", "/v1/admin/acl/grant", {"json": {"uid": "doc:roles", "principal": "user:bob"}}),
        ("POST", "/v1/admin/acl/revoke", {"json": {"uid": "doc:roles", "principal": "user:bob"}}),
        ("GET", "/v1/admin/acl/doc:roles", {}),
        ("GET", "/v1/admin/principals/user:ann", {}),
        ("GET", "/v1/admin/check", {}),
    ]:
        _error(call(app, method, url, headers=ANN, **kw), 403, "forbidden")
    check = call(app, "GET", "/v1/admin/check", headers=ROOT).json()
    assert check["ok"] is True and check["damage"] == [] and check["checked"]["entities"] > 0
    acl = call(app, "GET", "/v1/admin/acl/ticket:2001", headers=ROOT).json()
    assert acl["acl"] == ["group:finance"]
    # the admin scope administers; it does not read past the ACL
    _error(call(app, "GET", "/v1/content/ticket:2001", headers=ROOT), 404, "not_found")


def test_admin_ingest_acl_and_delete(store: KnowledgeStore) -> None:
    app = create_app(store, tokens=TOKENS)
    lines = "\n".join(
        json.dumps({"uid": f"n:{i}", "type": "note", "title": f"Note {i}", "body": f"note {i}"})
        for i in range(2)
    )
    report = call(
        app,
        "POST",
        "/v1/admin/ingest?acl=group:ops",
        content=lines.encode(),
        headers={**ROOT, "Content-Type": "application/x-ndjson"},
    ).json()
    assert report["added"] == 2 and report["rejected"] == []
    _error(call(app, "GET", "/v1/content/n:0", headers=BOB), 404, "not_found")
    grant = call(
        app,
        "POST",
        "/v1/admin/acl/grant",
        json={"uid": "n:0", "principal": "user:bob"},
        headers=ROOT,
    )
    assert grant.json()["acl"] == ["group:ops", "user:bob"]
    assert call(app, "GET", "/v1/content/n:0", headers=BOB).status_code == 200
    bad = call(
        app,
        "POST",
        "/v1/admin/ingest",
        json=[
            {
                "uid": "n:9",
                "type": "note",
                "title": "x",
                "body": "y",
                "edges": [{"label": "mentions", "to": "n:0"}],
            }
        ],
        headers=ROOT,
    )
    assert _error(bad, 422, "invalid_record")["details"]["rejected"][0]["uid"] == "n:9"
    deleted = call(app, "DELETE", "/v1/admin/entities/n:1", headers=ROOT)
    assert deleted.status_code == 200 and deleted.json()["deleted"] == 1
    _error(call(app, "DELETE", "/v1/admin/entities/n:1", headers=ROOT), 404, "not_found")


# -- one error shape ---------------------------------------------------------------------------------
def test_one_error_shape_for_validation_routes_methods_and_store_errors(app: Any) -> None:
    _error(call(app, "POST", "/v1/search", json={"k": 0}, headers=BOB), 400, "invalid_request")
    bad_filter = call(
        app, "POST", "/v1/search", json={"query": "x", "filters": {"colour": ["red"]}}, headers=BOB
    )
    assert "type, not_type" in _error(bad_filter, 400, "unknown_field")["message"]
    depth = call(app, "POST", "/v1/graph", json={"starts": ["a"], "depth": 4}, headers=BOB)
    assert "1–3" in _error(depth, 400, "bound_exceeded")["message"]
    label = call(
        app, "POST", "/v1/graph", json={"starts": ["a"], "labels": ["mentions"]}, headers=BOB
    )
    _error(label, 400, "unknown_label")
    literal = call(
        app,
        "POST",
        "/v1/query_graph",
        json={"query": "MATCH (n {uid: 'x'}) RETURN n"},
        headers=BOB,
    )
    assert "values enter only as parameters" in _error(literal, 400, "invalid_request")["message"]
    dates = call(
        app,
        "POST",
        "/v1/sql",
        json={"filters": {"created_from": "2024-05-02", "created_to": "2024-05-01"}},
        headers=BOB,
    )
    assert "swap" in _error(dates, 400, "invalid_request")["message"]
    not_json = call(
        app,
        "POST",
        "/v1/search",
        content=b"{nope",
        headers={**BOB, "Content-Type": "application/json"},
    )
    _error(not_json, 400, "invalid_request")
    _error(call(app, "GET", "/v1/no-such-thing", headers=BOB), 404, "not_found")
    _error(call(app, "GET", "/v1/search", headers=BOB), 405, "invalid_request")


def test_openapi_describes_every_route_and_the_error_shape(app: Any) -> None:
    spec = call(app, "GET", "/openapi.json").json()
    paths = set(spec["paths"])
    for route in (
        "/v1/search",
        "/v1/docs_search",
        "/v1/code_sample_search",
        "/v1/lexical",
        "/v1/vector",
        "/v1/graph",
        "/v1/sql",
        "/v1/aggregate",
        "/v1/query_graph",
        "/v1/content/{uid}",
        "/v1/capabilities",
        "/v1/stats",
        "/v1/admin/ingest",
    ):
        assert route in paths, route
    assert "ErrorEnvelope" in spec["components"]["schemas"]
    assert spec["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"


# -- the token file -----------------------------------------------------------------------------------
def test_token_file_formats(tmp_path: Path) -> None:
    jsonl = tmp_path / "tokens.jsonl"
    jsonl.write_text(
        '{"token": "aaaaaaaa1", "identity": "user:ann"}\n\n'
        '{"token": "bbbbbbbb2", "identity": "user:root", "admin": true}\n'
    )
    table = TokenTable.load(jsonl)
    assert table.resolve("aaaaaaaa1").principal == "user:ann"
    assert table.resolve("bbbbbbbb2").admin is True
    mapping = tmp_path / "tokens.json"
    mapping.write_text(
        json.dumps({"cccccccc3": "group:sre", "dddddddd4": {"identity": "user:x", "admin": True}})
    )
    assert TokenTable.load(mapping).resolve("dddddddd4").admin is True
    listed = tmp_path / "list.json"
    listed.write_text(json.dumps([{"token": "eeeeeeee5", "identity": "everyone"}]))
    assert TokenTable.load(listed).resolve("eeeeeeee5").principal == "everyone"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"token": "short", "identity": "user:a"}', "at least 8"),
        ('{"token": "aaaaaaaa1", "identity": "bob"}', "invalid principal"),
        ('{"token": "aaaaaaaa1", "identity": "user:a", "admin": "yes"}', "true or false"),
        (
            '{"token": "aaaaaaaa1", "identity": "user:a"}\n{"token": "aaaaaaaa1", "identity": "user:b"}',
            "twice",
        ),
        ('{"token": "aaaaaaaa1"\n', "tokens.jsonl:1: not JSON"),
        # strict JSON, as ingest reads it: the last of two keys would silently win
        (
            '{"token":"aaaaaaaa1","identity":"user:joe","admin":false,"admin":true}',
            'tokens.jsonl:1: the key "admin" appears twice',
        ),
        (
            '{"token": "bbbbbbbb2", "identity": "user:a"}\n\n'
            '{"token": "aaaaaaaa1", "identity": "user:joe", "identity": "user:root"}',
            'tokens.jsonl:3: the key "identity" appears twice',
        ),
        (
            '[{"token": "aaaaaaaa1", "identity": "user:a", "admin": 1e999}]',
            "tokens.jsonl:1: .*infinity",
        ),
        ('{"token": "aaaaaaaa1", "identity": "user:a", "admin": NaN}', "tokens.jsonl:1: NaN"),
    ],
)
def test_token_file_errors_say_where_and_what(tmp_path: Path, text: str, message: str) -> None:
    file = tmp_path / "tokens.jsonl"
    file.write_text(text)
    with pytest.raises(InvalidRequest, match=message):
        TokenTable.load(file)


def test_a_token_twice_in_a_token_object_is_refused_without_showing_it(tmp_path: Path) -> None:
    file = tmp_path / "tokens.json"
    file.write_text(
        '{\n  "cccccccc3": "user:ann",\n  "s3cret-tok-1": "user:joe",\n'
        '  "s3cret-tok-1": {"identity": "user:root", "admin": true}\n}\n'
    )
    with pytest.raises(InvalidRequest, match=r"tokens\.json:1: a token appears twice") as raised:
        TokenTable.load(file)
    assert "s3cret" not in raised.value.message and "s3cret" not in str(raised.value.details)
    nested = tmp_path / "nested.json"
    nested.write_text(
        '{\n  "cccccccc3": "user:ann",\n  "dddddddd4": {"identity": "user:x",\n'
        '    "admin": false, "admin": true}\n}\n'
    )
    with pytest.raises(
        InvalidRequest, match=r'nested\.json:3: the key "admin" appears twice'
    ) as bad:
        TokenTable.load(nested)
    assert bad.value.details == {"file": str(nested), "line": 3, "key": "admin"}


def test_loopback_servers_answer_only_to_loopback_names(served: KnowledgeStore) -> None:
    app = create_app(served, tokens=TOKENS, allowed_hosts=["127.0.0.1", "localhost", "::1"])
    for host in ("localhost:8000", "127.0.0.1:8000", "[::1]:8000"):
        assert call(app, "GET", "/healthz", headers={"Host": host}).status_code == 200, host
    rebound = call(app, "GET", "/v1/stats", headers={**BOB, "Host": "attacker.example:8000"})
    assert "does not answer to host" in _error(rebound, 400, "invalid_request")["message"]
