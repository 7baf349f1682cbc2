"""The request-bounds corpus: hostile and edge requests, and how each must be answered.

Every case is one HTTP request against the serving estate (``serve_estate``)
and the status and error code it must get; within-bound cases must answer
normally. ``tests/surfaces/test_request_limits.py`` runs every case in
process; ``bench/bench_abuse.py`` runs them against a live server and counts
them as tried / failed safely / misbehaved. A response must also never echo
the request: it stays under :data:`MAX_ANSWER_BYTES` for a refused case and
never holds :data:`MARKER`.

Bounds come from :mod:`knowledge_store.model`, never re-typed here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from knowledge_store.model import (
    MAX_ACL_PRINCIPALS,
    MAX_FILTER_VALUES,
    MAX_GRAPHQL_ALIASES,
    MAX_GRAPHQL_DEPTH,
    MAX_GRAPHQL_FIELDS,
    MAX_GRAPHQL_SELECTIONS,
    MAX_GRAPHQL_TOKENS,
    MAX_INGEST_BYTES,
    MAX_REQUEST_BYTES,
    MAX_STARTS,
)

#: A string that stands for a secret inside a request (a token pasted in a body): never echoed.
MARKER = "tok-SECRET-0000-do-not-echo"
#: A refused request is answered in fewer bytes than this.
MAX_ANSWER_BYTES = 4096
READER = {"Authorization": "Bearer tok-bob-0002"}
ADMIN = {"Authorization": "Bearer tok-root-0003"}


@dataclass(frozen=True)
class Case:
    """One request and what it must get: ``status`` and, for errors, ``code`` (and ``bound``)."""

    id: str
    method: str
    path: str
    status: int
    code: str | None = None
    #: GraphQL answers errors with 200 and ``errors[].extensions``; this names the bound.
    bound: str | None = None
    json: Any = None
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=lambda: dict(READER))
    params: dict[str, Any] | None = None
    #: send the body in chunks without a Content-Length
    chunked: bool = False
    #: declare this Content-Length whatever the body's size (a lie)
    declared_length: int | None = None

    @property
    def refused(self) -> bool:
        return self.code is not None


def _values(n: int, prefix: str = "v") -> list[str]:
    return [f"{prefix}:{i}" for i in range(n)]


def _gql(query: str, **variables: Any) -> dict[str, Any]:
    return {"query": query, "variables": variables}


def _fragment_bomb(levels: int) -> str:
    """``levels`` fragments, each spreading the next twice: 2**levels spreads if expanded."""
    lines = ["query { ...F0 }"]
    lines += [f"fragment F{i} on Query {{ ...F{i + 1} ...F{i + 1} }}" for i in range(levels)]
    lines.append(f"fragment F{levels} on Query {{ capabilities {{ admin }} }}")
    return "\n".join(lines)


#: Eleven distinct top-level fields, no alias (each a store call).
_ROOT_FIELDS = [
    "stats { __typename }",
    "capabilities { admin }",
    'search(query: "vacuum") { mode }',
    'docsSearch(query: "vacuum") { mode }',
    'lexical(query: "vacuum") { contentRoot }',
    'vector(query: "vacuum") { contentRoot }',
    "sql { contentRoot }",
    "aggregate { metric }",
    'content(uid: "unit:vacuum") { entity { uid } }',
    'related(uid: "unit:vacuum") { uid }',
    'learningPath(uid: "unit:vacuum") { root }',
]


def body_cases() -> Iterator[Case]:
    over = b"{" + b" " * MAX_REQUEST_BYTES + b"}"
    yield Case("body-rest-over", "POST", "/v1/search", 413, "bound_exceeded", content=over)
    yield Case(
        "body-rest-over-no-token",  # refused before any authentication work
        "POST",
        "/v1/search",
        413,
        "bound_exceeded",
        content=over,
        headers={},
    )
    yield Case(
        "body-rest-chunked", "POST", "/v1/sql", 413, "bound_exceeded", content=over, chunked=True
    )
    yield Case(
        "body-rest-lying-length",
        "POST",
        "/v1/sql",
        413,
        "bound_exceeded",
        content=over,
        declared_length=100,
    )
    yield Case("body-graphql-over", "POST", "/graphql", 413, "bound_exceeded", content=over)
    yield Case("body-mcp-over", "POST", "/mcp", 413, "bound_exceeded", content=over)
    yield Case("body-signin-over", "POST", "/signin", 413, "bound_exceeded", content=over)
    yield Case(
        "body-ingest-declared-over",
        "POST",
        "/v1/admin/ingest",
        413,
        "bound_exceeded",
        content=b"{}",
        headers=ADMIN,
        declared_length=MAX_INGEST_BYTES + 1,
    )
    # the admin ingest has its own, larger bound: 2 MiB is read (and its one line found to be
    # no JSON: a bad record, as a bad line of a file is)
    yield Case(
        "body-ingest-within",
        "POST",
        "/v1/admin/ingest",
        422,
        "invalid_record",
        content=b"x" * (2 * MAX_REQUEST_BYTES),
        headers={**ADMIN, "Content-Type": "application/x-ndjson"},
    )
    echo = "X" * (MAX_REQUEST_BYTES // 2) + MARKER
    yield Case(
        "echo-graphql-field", "POST", "/graphql", 200, "invalid_request", json=_gql(f"{{ {echo} }}")
    )
    yield Case(
        "echo-rest-filter-key",
        "POST",
        "/v1/sql",
        400,
        "unknown_field",
        json={"filters": {echo: ["x"]}},
    )
    yield Case(
        "echo-rest-bad-json",
        "POST",
        "/v1/sql",
        400,
        "invalid_request",
        content=b'{"filters": ' + echo.encode() + b"}",
        headers={**READER, "Content-Type": "application/json"},
    )
    yield Case(
        "echo-query-graph",
        "POST",
        "/v1/query_graph",
        400,
        "invalid_request",
        json={"query": f"MATCH (n) WHERE n.{'Y' * 2000}{MARKER} = 1 RETURN n"},
    )


def graphql_cases() -> Iterator[Case]:
    aliases = " ".join(f'a{i}: lexical(query: "vacuum") {{ hits {{ uid }} }}' for i in range(500))
    yield Case(  # the 14.6 s request: refused while parsing (tokens)
        "gql-500-aliases",
        "POST",
        "/graphql",
        200,
        "bound_exceeded",
        "tokens",
        _gql(f"{{{aliases}}}"),
    )
    few = " ".join(f"a{i}: stats" for i in range(MAX_GRAPHQL_ALIASES + 1))
    yield Case(
        "gql-aliases-over", "POST", "/graphql", 200, "bound_exceeded", "aliases", _gql(f"{{{few}}}")
    )
    within = " ".join(
        f'a{i}: lexical(query: "vacuum", k: 3) {{ hits {{ uid }} }}'
        for i in range(MAX_GRAPHQL_ALIASES)
    )
    yield Case("gql-aliases-at-bound", "POST", "/graphql", 200, json=_gql(f"{{{within}}}"))
    assert len(_ROOT_FIELDS) == MAX_GRAPHQL_FIELDS + 1
    yield Case(
        "gql-root-fields-over",
        "POST",
        "/graphql",
        200,
        "bound_exceeded",
        "fields",
        _gql("{" + " ".join(_ROOT_FIELDS) + "}"),
    )
    yield Case(
        "gql-root-fields-at-bound",
        "POST",
        "/graphql",
        200,
        json=_gql("{" + " ".join(_ROOT_FIELDS[:MAX_GRAPHQL_FIELDS]) + "}"),
    )
    deep = "{ search { results { evidence " + "{ a " * MAX_GRAPHQL_DEPTH + "}" * MAX_GRAPHQL_DEPTH
    yield Case(
        "gql-depth-over", "POST", "/graphql", 200, "bound_exceeded", "depth", _gql(deep + " } } }")
    )
    yield Case(
        "gql-selections-over",
        "POST",
        "/graphql",
        200,
        "bound_exceeded",
        "selections",
        _gql("{" + "stats " * (MAX_GRAPHQL_SELECTIONS + 1) + "}"),
    )
    yield Case(
        "gql-same-field-9000",  # refused while parsing, before the quadratic field-merging check
        "POST",
        "/graphql",
        200,
        "bound_exceeded",
        "tokens",
        _gql("{" + "stats " * 9000 + "}"),
    )
    yield Case(
        "gql-tokens-over",
        "POST",
        "/graphql",
        200,
        "bound_exceeded",
        "tokens",
        _gql("{" + "stats " * (MAX_GRAPHQL_TOKENS + 1) + "}"),
    )
    yield Case(
        "gql-fragment-bomb",  # 2**60 spreads if a check expands fragments
        "POST",
        "/graphql",
        200,
        json=_gql(_fragment_bomb(60)),
    )
    yield Case("gql-syntax-error", "POST", "/graphql", 200, "invalid_request", json=_gql("{ stats"))
    # a body that is no GraphQL request is refused before it runs, in the one error shape
    # (issue 25, item 11: strawberry answered these in plain text)
    stats = "{ stats { __typename } }"
    for name, body in (
        ("gql-variables-list", {"query": stats, "variables": [1]}),
        ("gql-variables-string", {"query": stats, "variables": "{}"}),
        ("gql-query-number", {"query": 5}),
        ("gql-extensions-number", {"query": stats, "extensions": 5}),
        ("gql-unknown-operation", {"query": stats, "operationName": "nope"}),
        ("gql-batch", [{"query": stats}, {"query": stats}]),
        ("gql-body-string", "{ stats }"),
        ("gql-body-number", 5),
        ("gql-body-null", None),
    ):
        yield Case(
            name,
            "POST",
            "/graphql",
            400,
            "invalid_request",
            content=json.dumps(body).encode(),
            headers={**READER, "Content-Type": "application/json"},
        )
    yield Case(
        "gql-body-not-json",
        "POST",
        "/graphql",
        400,
        "invalid_request",
        content=b"{ stats }",
        headers={**READER, "Content-Type": "application/json"},
    )
    yield Case(
        "gql-content-type",
        "POST",
        "/graphql",
        400,
        "invalid_request",
        content=b"{ stats }",
        headers={**READER, "Content-Type": "text/plain"},
    )


def _filters_request(path: str, name: str, n: int) -> dict[str, Any]:
    body: dict[str, Any] = {"filters": {name: _values(n)}}
    if path in ("/v1/search", "/v1/lexical", "/v1/vector", "/v1/docs_search"):
        body["query"] = "vacuum"
    return body


def list_cases() -> Iterator[Case]:
    over, at = MAX_FILTER_VALUES + 1, MAX_FILTER_VALUES
    for path, name in (
        ("/v1/sql", "uid"),
        ("/v1/sql", "type"),
        ("/v1/search", "not_type"),
        ("/v1/lexical", "source"),
        ("/v1/vector", "status"),
        ("/v1/docs_search", "uid"),
        ("/v1/aggregate", "type"),
    ):
        yield Case(
            f"list-{path[4:]}-{name}-over",
            "POST",
            path,
            400,
            "bound_exceeded",
            json=_filters_request(path, name, over),
        )
        yield Case(
            f"list-{path[4:]}-{name}-at-bound",
            "POST",
            path,
            200,
            json=_filters_request(path, name, at),
        )
    yield Case(
        "list-tool-sql-uid-over",
        "POST",
        "/v1/tools/sql",
        400,
        "bound_exceeded",
        json={"filters": {"uid": _values(over)}},
    )
    yield Case(
        "list-graphql-sql-uid-over",
        "POST",
        "/graphql",
        200,
        "bound_exceeded",
        json=_gql(
            "query ($u: [String!]) { sql(filters: {uid: $u}) { hits { uid } } }", u=_values(over)
        ),
    )
    yield Case(
        "list-graphql-lexical-type-over",
        "POST",
        "/graphql",
        200,
        "bound_exceeded",
        json=_gql(
            'query ($t: [String!]) { lexical(query: "x", filters: {type: $t}) { contentRoot } }',
            t=_values(over),
        ),
    )
    yield Case(
        "list-graphql-sql-uid-at-bound",
        "POST",
        "/graphql",
        200,
        json=_gql(
            "query ($u: [String!]) { sql(filters: {uid: $u}) { hits { uid } } }", u=_values(at)
        ),
    )
    yield Case(
        "list-ingest-default-acl-over",
        "POST",
        "/v1/admin/ingest",
        400,
        "bound_exceeded",
        content=b'{"uid": "x"}',
        headers=ADMIN,
        params={"acl": _values(MAX_ACL_PRINCIPALS + 1, "user")},
    )
    yield Case(
        "list-ingest-tool-acl-over",
        "POST",
        "/v1/tools/ingest_records",
        400,
        "bound_exceeded",
        json={"records": [{"uid": "x"}], "acl": _values(MAX_ACL_PRINCIPALS + 1, "user")},
        headers=ADMIN,
    )
    yield Case(
        "list-graph-starts-over",
        "POST",
        "/v1/graph",
        400,
        "bound_exceeded",
        json={"starts": _values(MAX_STARTS + 1)},
    )
    yield Case(
        "list-graph-facets-over",
        "POST",
        "/v1/graph_facets",
        400,
        "bound_exceeded",
        json={"uids": _values(MAX_STARTS + 1)},
    )
    yield Case(
        "list-query-graph-param-over",
        "POST",
        "/v1/query_graph",
        400,
        "bound_exceeded",
        json={
            "query": "MATCH (n) WHERE n.uid IN $uids RETURN n.uid",
            "params": {"uids": _values(10_001)},
        },
    )


def _record(uid: str, **more: Any) -> dict[str, Any]:
    return {"uid": uid, "type": "page", "title": "T", "body": "b", "acl": ["everyone"], **more}


def ownership_cases() -> Iterator[Case]:
    """Issue 25: a batch that would take over another source's entity (the estate's
    ``unit:vacuum`` is source ``docs``), and derived records that could keep an ACL their
    parent does not have — refused on every ingest route, nothing published."""
    takeover = _record("unit:vacuum", source="elsewhere", title="Taken over")
    yield Case(
        "owner-rest-ingest-takeover",
        "POST",
        "/v1/admin/ingest",
        400,
        "invalid_request",
        content=json.dumps(takeover).encode() + b"\n",
        headers=ADMIN,
    )
    yield Case(
        "owner-tool-ingest-takeover",
        "POST",
        "/v1/tools/ingest_records",
        400,
        "invalid_request",
        json={"records": [_record("unit:vacuum", title="Taken over")], "source": "elsewhere"},
        headers=ADMIN,
    )
    orphan = _record(
        "nowhere#code-1",
        attributes={"acl_from": "nowhere"},
        edges=[{"label": "partOf", "to": "nowhere"}],
    )
    yield Case(
        "owner-tool-derived-without-parent",
        "POST",
        "/v1/tools/ingest_records",
        400,
        "invalid_request",
        json={"records": [orphan]},
        headers=ADMIN,
    )
    yield Case(
        "owner-tool-derived-without-edge",
        "POST",
        "/v1/tools/ingest_records",
        422,
        "invalid_record",
        json={"records": [_record("unit:vacuum#code-9", attributes={"acl_from": "unit:vacuum"})]},
        headers=ADMIN,
    )


def encoded(case: Case) -> tuple[bytes, list[tuple[str, str]]]:
    """The body and headers the case sends (Content-Length as the case says: true, a lie, none)."""
    body = case.content if case.content is not None else b""
    headers = dict(case.headers)
    if case.json is not None:
        body = json.dumps(case.json).encode()
        headers.setdefault("Content-Type", "application/json")
    if not case.chunked:
        length = case.declared_length if case.declared_length is not None else len(body)
        headers["Content-Length"] = str(length)
    return body, list(headers.items())


def target(case: Case) -> str:
    """The case's path with its query string."""
    if not case.params:
        return case.path
    from urllib.parse import urlencode

    return f"{case.path}?{urlencode(case.params, doseq=True)}"


def cases() -> list[Case]:
    """Every case of the corpus, ids unique."""
    found = [*body_cases(), *graphql_cases(), *list_cases(), *ownership_cases()]
    ids = [case.id for case in found]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    return found


def verdict(case: Case, status: int, body: bytes) -> str | None:
    """None when the answer is what the case must get; else what went wrong."""
    if status != case.status:
        return f"status {status}, expected {case.status}"
    if MARKER.encode() in body:
        return "the answer echoes the request"
    if not case.refused:
        if case.path == "/graphql" and json.loads(body).get("errors"):
            return f"GraphQL errors within the bounds: {body[:300]!r}"
        return None
    if len(body) > MAX_ANSWER_BYTES:
        return f"a refusal of {len(body)} bytes (echoes the request?)"
    answer = json.loads(body)
    if case.path == "/graphql" and status == 200:
        errors = answer.get("errors") or []
        codes = {(e.get("extensions") or {}).get("code") for e in errors}
        bounds = {((e.get("extensions") or {}).get("details") or {}).get("bound") for e in errors}
        if case.code not in codes:
            return f"GraphQL error codes {codes}, expected {case.code}"
        if case.bound is not None and case.bound not in bounds:
            return f"GraphQL bounds {bounds}, expected {case.bound}"
        return None
    error = answer.get("error") or {}
    if set(error) != {"code", "message", "details"} or error["code"] != case.code:
        return f"error {error}, expected code {case.code}"
    return None
