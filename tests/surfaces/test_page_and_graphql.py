"""The search page (server-rendered, in-process) and GraphQL over the same service layer."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.cli import app as cli
from knowledge_store.surfaces.http import create_app
from tests.surfaces.serve_estate import ANN, BOB, CSRF, CSRF_COOKIE, call

pytestmark = pytest.mark.embedded_only(
    reason="a surface over the store: the engines agree in tests/conformance"
)


# -- the page -----------------------------------------------------------------------------------------
def test_search_page_shows_why_each_result_is_there(app: Any) -> None:
    page = call(app, "GET", "/", params={"q": "reindex a bloated index"}, headers=BOB)
    assert page.status_code == 200
    html = page.text
    assert "Reindexing Concurrently" in html and 'class="rank on"' in html
    assert "superseded by" in html and "/entity/unit%3Areindex" in html
    assert "Neighbours" in html and "by link" in html
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert "http://" not in html.split("<main>")[0]  # nothing external in the head


def test_search_page_filters_and_escapes(app: Any) -> None:
    page = call(
        app,
        "GET",
        "/",
        params={"q": "<script>alert(1)</script> vacuum", "type": "codeSample"},
        headers=BOB,
    )
    assert "<script>alert(1)</script>" not in page.text
    assert "&lt;script&gt;" in page.text
    results = page.text.split('<ol class="results">')[1].split("</ol>")[0]
    assert results.count('class="result"') >= 1 and "codeSample" in results
    assert '<span class="type">page</span>' not in results


def test_search_page_shows_the_stores_notes(app: Any) -> None:
    # a type nobody can read (from a link or a typed URL) said only "Nothing … matches";
    # the CLI and the API say which types there are and the near miss
    page = call(app, "GET", "/", params={"q": "vacuum", "type": "pgae"}, headers=BOB)
    assert page.status_code == 200
    assert '<p class="notice">no entity you can read has type &#x27;pgae&#x27;; did you mean' in (
        page.text
    )


def test_entity_page_has_related_and_the_learning_path(app: Any) -> None:
    page = call(app, "GET", "/entity/unit:analyze", headers=BOB)
    assert page.status_code == 200
    assert "Learning path" in page.text and "step 5 of 13" in page.text
    assert 'class="depth-2 current" aria-current="page"' in page.text
    assert "Related" in page.text and "Routine Vacuuming" in page.text


def test_page_identity_token_cookie_and_sign_in(app: Any) -> None:
    signin = call(app, "GET", "/", params={"q": "lag"})
    assert signin.status_code == 401 and "Sign in" in signin.text
    assert '<form method="post" action="/signin"' in signin.text  # the token goes in a body
    assert 'name="next" value="/?q=lag"' in signin.text
    assert 'name="csrf" value="' in signin.text and "ks_csrf=" in signin.headers["set-cookie"]
    form = {"token": "tok-ann-0001", "next": "/?q=lag", "csrf": CSRF}
    redirect = call(app, "POST", "/signin", data=form, headers=CSRF_COOKIE)
    assert redirect.status_code == 303 and redirect.headers["location"] == "/?q=lag"
    cookie = redirect.headers["set-cookie"].lower()
    assert "ks_token=tok-ann-0001" in cookie and "httponly" in cookie
    assert "samesite=strict" in cookie
    page = call(app, "GET", "/?q=replica+lag", headers={"Cookie": "ks_token=tok-ann-0001"})
    assert "as user:ann" in page.text and "Replica lag alert" in page.text
    # the cookie is for pages only: the API still wants the bearer header
    assert (
        call(app, "GET", "/v1/stats", headers={"Cookie": "ks_token=tok-ann-0001"}).status_code
        == 401
    )
    wrong = call(
        app,
        "POST",
        "/signin",
        data={"token": "nope-nope", "next": "/", "csrf": CSRF},
        headers=CSRF_COOKIE,
    )
    assert wrong.status_code == 401 and "unknown token" in wrong.text


def test_every_state_changing_form_needs_its_csrf_token(app: Any) -> None:
    sign_in = {"token": "tok-ann-0001", "next": "/"}
    for data, headers in (
        (sign_in, {}),  # no token at all
        ({**sign_in, "csrf": CSRF}, {}),  # the field without the cookie
        ({**sign_in, "csrf": "x" * 43}, CSRF_COOKIE),  # another browser's
        (sign_in, CSRF_COOKIE),  # the cookie without the field
    ):
        refused = call(app, "POST", "/signin", data=data, headers=headers)
        assert refused.status_code == 403
        assert "ks_token" not in refused.headers.get("set-cookie", "")
    signed_in = {"Cookie": f"ks_token=tok-ann-0001; ks_csrf={CSRF}"}
    # signing out is a POST with the token; GET only shows the form
    shown = call(app, "GET", "/signout", headers=signed_in)
    assert shown.status_code == 200 and 'action="/signout"' in shown.text
    assert "ks_token" not in shown.headers.get("set-cookie", "")
    refused = call(app, "POST", "/signout", data={}, headers=signed_in)
    assert refused.status_code == 403 and "ks_token" not in refused.headers.get("set-cookie", "")
    out = call(app, "POST", "/signout", data={"csrf": CSRF}, headers=signed_in)
    assert out.status_code == 303 and 'ks_token=""' in out.headers["set-cookie"]


def test_a_token_in_the_url_is_refused_not_used(app: Any) -> None:
    for path in ("/", "/entity/unit:vacuum"):
        refused = call(app, "GET", path, params={"token": "tok-ann-0001", "q": "lag"})
        assert refused.status_code == 400 and "not accepted" in refused.text
        assert "ks_token" not in refused.headers.get("set-cookie", "")
        assert "tok-ann-0001" not in refused.text
        assert f'name="next" value="{path}?q=lag"' in refused.text  # back, without the token


def test_sign_in_goes_back_only_to_this_server(app: Any) -> None:
    for target in ("//evil.example/x", "https://evil.example/", "\\\\evil.example"):
        answer = call(
            app,
            "POST",
            "/signin",
            data={"token": "tok-ann-0001", "next": target, "csrf": CSRF},
            headers=CSRF_COOKIE,
        )
        assert answer.status_code == 303 and answer.headers["location"] == "/"
    cross = call(
        app,
        "POST",
        "/signin",
        data={"token": "tok-ann-0001", "next": "/", "csrf": CSRF},
        headers={"Origin": "https://evil.example", **CSRF_COOKIE},
    )
    assert cross.status_code == 403 and "ks_token" not in cross.headers.get("set-cookie", "")


def test_page_on_an_empty_store_says_so(store: KnowledgeStore) -> None:
    page = call(create_app(store, anonymous=True), "GET", "/", params={"q": "x"})
    assert page.status_code == 200 and "The store is empty" in page.text


# -- GraphQL ------------------------------------------------------------------------------------------
def _gql(app: Any, query: str, headers: dict[str, str], **variables: Any) -> dict[str, Any]:
    response = call(
        app, "POST", "/graphql", json={"query": query, "variables": variables}, headers=headers
    )
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_graphql_answers_like_rest(app: Any, served: KnowledgeStore) -> None:
    query = """query ($q: String!) { search(query: $q, k: 3, filters: {notType: ["ticket"]}) {
        contentRoot results { uid score ranks { list rank } supersededBy
        evidence { heading start end } } } }"""
    got = _gql(app, query, BOB, q="dead tuples")["data"]["search"]
    want = served.search("dead tuples", identity="user:bob", k=3, filters={"not_type": ["ticket"]})
    assert [r["uid"] for r in got["results"]] == [r.uid for r in want.results]
    # ranks: a list of {list, rank}, the four lists first (a new list changes no type)
    assert got["results"][0]["ranks"] == [
        {"list": name, "rank": rank} for name, rank in want.results[0].to_dict()["ranks"].items()
    ]
    content = _gql(
        app,
        '{ content(uid: "unit:vacuum") { entity { title } chunks { heading } edges { in { uid } } } }',
        ANN,
    )["data"]["content"]
    rest = call(app, "GET", "/v1/content/unit:vacuum", headers=ANN).json()
    assert content == {  # the same shape as REST's content API
        "entity": {"title": rest["entity"]["title"]},
        "chunks": [{"heading": c["heading"]} for c in rest["chunks"]],
        "edges": {"in": [{"uid": e["uid"]} for e in rest["edges"]["in"]]},
    }
    assert "ticket:1043" in {e["uid"] for e in content["edges"]["in"]}
    caps = _gql(app, "{ capabilities { isEmpty identity tools { name } } }", BOB)
    assert caps["data"]["capabilities"]["identity"] == "user:bob"
    rows = _gql(
        app,
        'query ($p: JSON) { queryGraph(query: "MATCH (n {uid: $u}) RETURN n.title", params: $p) { rows truncated } }',
        BOB,
        p={"u": "doc:roles"},
    )
    assert rows["data"]["queryGraph"]["rows"] == [["Database Roles"]]


def test_graphql_chunk_ids_are_the_53_bit_ids_rest_gives(app: Any) -> None:
    """GraphQL's Int is 32-bit; a chunk id (up to 2^53) has its own scalar, the same number."""
    query = """query ($q: String!) { search(query: $q, k: 3) { results { uid evidence { chunkId } } }
        lexical(query: $q, k: 3) { hits { chunkId } }
        content(uid: "unit:vacuum") { chunks { chunkId } } }"""
    got = _gql(app, query, ANN, q="dead tuples")
    assert "errors" not in got, got
    rest = call(app, "POST", "/v1/search", json={"query": "dead tuples", "k": 3}, headers=ANN)
    rest_ids = [[e["chunk_id"] for e in r["evidence"]] for r in rest.json()["results"]]
    ids = [[e["chunkId"] for e in r["evidence"]] for r in got["data"]["search"]["results"]]
    assert ids == rest_ids and any(i >= 2**31 for row in ids for i in row)
    lexical = call(app, "POST", "/v1/lexical", json={"query": "dead tuples", "k": 3}, headers=ANN)
    assert [h["chunkId"] for h in got["data"]["lexical"]["hits"]] == [
        h["chunk_id"] for h in lexical.json()["hits"]
    ]
    content = call(app, "GET", "/v1/content/unit:vacuum", headers=ANN).json()
    assert [c["chunkId"] for c in got["data"]["content"]["chunks"]] == [
        c["chunk_id"] for c in content["chunks"]
    ]


def test_graphql_errors_carry_the_error_shape(app: Any) -> None:
    bad = _gql(app, '{ graph(starts: ["unit:vacuum"], depth: 5) { capped } }', BOB)
    extensions = bad["errors"][0]["extensions"]
    assert extensions["code"] == "bound_exceeded" and set(extensions) == {
        "code",
        "message",
        "details",
    }
    hidden = _gql(app, '{ content(uid: "ticket:2001") { entity { uid } } }', BOB)
    assert hidden["errors"][0]["extensions"]["code"] == "not_found"


# -- ks serve ------------------------------------------------------------------------------------------
def test_ks_serve_refuses_a_server_nobody_could_call(tmp_path: Any) -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["--store", str(tmp_path / "s"), "serve"])
    assert result.exit_code == 2 and "--tokens FILE" in result.output + str(result.stderr_bytes)
    result = runner.invoke(
        cli, ["--store", str(tmp_path / "s"), "serve", "--anonymous", "--as", "user:a"]
    )
    assert result.exit_code == 2


def test_graphql_answers_are_typed_like_the_answer_models(app: Any) -> None:
    """Only what has no shape is the JSON scalar: attributes, rows, explain, counts by key."""
    from graphql import GraphQLList, GraphQLNonNull, GraphQLObjectType, GraphQLScalarType
    from pydantic import BaseModel

    from knowledge_store.surfaces.graphql import output_type, schema
    from knowledge_store.surfaces.operations import OPERATIONS
    from knowledge_store.surfaces.spelling import camel

    untyped = {"attributes", "rows", "explain", "edges", "by_label", "by_type", "input_schema"}
    seen: set[str] = set()

    def walk(model: type[BaseModel]) -> None:
        kind = schema._schema.type_map[model.__name__]
        assert isinstance(kind, GraphQLObjectType)
        if model.__name__ in seen:
            return
        seen.add(model.__name__)
        for name, info in model.model_fields.items():
            field = kind.fields[camel(name)]
            inner = field.type
            while isinstance(inner, GraphQLNonNull | GraphQLList):
                inner = inner.of_type
            if isinstance(inner, GraphQLScalarType) and inner.name == "JSON":
                assert name in untyped, f"{model.__name__}.{name} is untyped JSON"
            for arg in getattr(info.annotation, "__args__", ()) or (info.annotation,):
                for sub in getattr(arg, "__args__", ()) or (arg,):
                    if isinstance(sub, type) and issubclass(sub, BaseModel):
                        walk(sub)

    for op in OPERATIONS:
        if op.graphql:
            for answer in op.answers:
                output_type(answer)
                walk(answer)
    assert {"SearchAnswer", "Content", "CodeSamples", "Knowledge", "StoreStats"} <= seen


def test_graphql_stats_is_the_store_for_admins_and_the_visible_slice_for_readers(
    app: Any,
) -> None:
    from tests.surfaces.serve_estate import ROOT

    query = """{ stats { __typename ... on StoreStats { entities chunks }
        ... on ReaderStats { entities identity } } }"""
    admin = _gql(app, query, ROOT)["data"]["stats"]
    reader = _gql(app, query, BOB)["data"]["stats"]
    assert admin["__typename"] == "StoreStats" and admin["chunks"] > 0
    assert reader == {
        "__typename": "ReaderStats",
        "entities": reader["entities"],
        "identity": "user:bob",
    }
    assert reader["entities"] < admin["entities"]


def test_graphql_query_graph_carries_the_limit_warning(app: Any) -> None:
    got = _gql(
        app,
        '{ queryGraph(query: "MATCH (n) RETURN n.uid LIMIT 2000") { truncated warnings } }',
        BOB,
    )["data"]["queryGraph"]
    assert got["truncated"] is False
    assert got["warnings"] == ["LIMIT 2000 was capped at 1000: at most 1000 rows; page with SKIP"]
