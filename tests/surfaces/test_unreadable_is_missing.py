"""An entity the caller can't read answers exactly like one that doesn't exist — on every surface.

The same questions are asked as ``user:bob`` twice: while ``sec:1`` exists but
is readable only by ``group:finance``, and after it has been deleted. Error
answers must be byte-identical; other answers equal once the content root
(which a delete changes) is set aside.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from mcp import Client

from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.http import create_app
from knowledge_store.surfaces.mcp import create_mcp_server
from tests.surfaces.serve_estate import BOB, TOKENS, call

pytestmark = pytest.mark.embedded_only(
    reason="a surface over the store: the engines agree in tests/conformance"
)

RECORDS = [
    {
        "uid": "pub:1",
        "type": "page",
        "title": "Quarterly planning",
        "body": "# Quarterly planning\n\nHow the team plans each quarter.",
        "acl": ["everyone"],
        "edges": [{"label": "xref", "to": "sec:1"}],
    },
    {
        "uid": "sec:1",
        "type": "page",
        "title": "Secret merger plan",
        "body": "# Secret merger plan\n\nThe merger closes in May.",
        "href": "https://intranet.example.org/secret",
        "acl": ["group:finance"],
        "edges": [{"label": "partOf", "to": "pub:1", "position": 1}],
    },
]

REST = [
    ("GET", "/v1/content/sec:1", None),
    ("POST", "/v1/related", {"uid": "sec:1"}),
    ("POST", "/v1/learning_path", {"uid": "sec:1"}),
    ("POST", "/v1/resolve_xref", {"ref": "sec:1"}),
    ("POST", "/v1/resolve_xref", {"ref": "Secret merger plan"}),
    ("POST", "/v1/resolve_xref", {"ref": "https://intranet.example.org/secret"}),
    ("POST", "/v1/graph", {"starts": ["sec:1"], "depth": 2}),
    ("POST", "/v1/graph", {"starts": ["pub:1"], "depth": 2}),
    ("POST", "/v1/search", {"query": "secret merger plan"}),
    ("POST", "/v1/sql", {"filters": {"uid": ["sec:1"]}}),
    ("POST", "/v1/aggregate", {"dimension": "type"}),
    ("POST", "/v1/graph_facets", {"uids": ["pub:1"]}),
    ("GET", "/v1/content/pub:1", None),
]
GRAPHQL = [
    '{ content(uid: "sec:1") { uid title } }',
    '{ related(uid: "sec:1") }',
    '{ learningPath(uid: "sec:1") }',
    '{ resolveXref(ref: "Secret merger plan") }',
    '{ content(uid: "pub:1") { outgoing { uid } incoming { uid } } }',
]
MCP = [
    ("fetch_content", {"uid": "sec:1"}),
    ("get_related", {"uid": "sec:1"}),
    ("get_learning_path", {"uid": "sec:1"}),
    ("resolve_xref", {"ref": "sec:1"}),
    ("get_related", {"uid": "pub:1"}),
    ("search_knowledge", {"query": "secret merger plan"}),
]


#: Set aside when comparing: the content root (a delete changes it) and the dense index's
#: diagnostics (see test_vector_diagnostics_reveal_that_unreadable_chunks_exist).
_ASIDE = {"content_root", "vector"}


def _without_root(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_root(v) for k, v in value.items() if k not in _ASIDE}
    if isinstance(value, list):
        return [_without_root(v) for v in value]
    return value


def _answers(store: KnowledgeStore) -> dict[str, Any]:
    app = create_app(store, tokens=TOKENS)
    out: dict[str, Any] = {}
    for method, url, body in REST:
        response = call(app, method, url, json=body, headers=BOB)
        key = f"rest {method} {url} {body}"
        if response.status_code >= 400:
            out[key] = (response.status_code, response.content)  # byte-identical errors
        else:
            out[key] = (response.status_code, _without_root(response.json()))
    for query in GRAPHQL:
        response = call(app, "POST", "/graphql", json={"query": query}, headers=BOB)
        out[f"graphql {query}"] = (response.status_code, _without_root(response.json()))
    page = call(app, "GET", "/entity/sec:1", headers=BOB)
    out["page /entity/sec:1"] = (page.status_code, page.content)

    async def mcp_answers() -> None:
        async with Client(create_mcp_server(store, identity="user:bob")) as client:
            for name, arguments in MCP:
                result = await client.call_tool(name, arguments)
                text = [c.text for c in result.content if c.type == "text"]
                structured = _without_root(result.structured_content)
                out[f"mcp {name} {arguments}"] = (
                    result.is_error,
                    text if result.is_error else structured,
                )

    anyio.run(mcp_answers)
    return out


def test_unreadable_answers_exactly_like_missing_on_every_surface(store: KnowledgeStore) -> None:
    store.ingest_records(RECORDS)
    store.ingest_records(
        [{"uid": "other:1", "type": "note", "title": "n", "body": "n", "acl": ["everyone"]}]
    )
    hidden = _answers(store)
    assert hidden["rest GET /v1/content/sec:1 None"][0] == 404
    assert hidden["page /entity/sec:1"][0] == 404
    assert (
        hidden["mcp fetch_content {'uid': 'sec:1'}"][0] is True
    )  # a tool error, not a protocol one

    store.delete(["sec:1"])
    missing = _answers(store)
    assert hidden.keys() == missing.keys()
    for key in hidden:
        assert hidden[key] == missing[key], key


def test_vector_diagnostics_reveal_only_the_visible_share(store: KnowledgeStore) -> None:
    """docs/security.md, known side channels: the vector block must say honestly how it searched,
    so it reflects how much of the store the caller can see — never what is hidden."""
    store.ingest_records(RECORDS)
    before = store.search("secret merger plan", identity="user:bob").to_dict()
    store.delete(["sec:1"])
    after = store.search("secret merger plan", identity="user:bob").to_dict()
    assert before["results"] == after["results"]
    assert set(before["vector"]) == set(after["vector"]) == {"strategy", "scanned", "exhaustive"}
    assert isinstance(before["vector"]["scanned"], int)
    # with a hidden chunk present bob's visible share is below 100%, so the planner may scan
    # only his visible vectors exactly; the count it reports is of his visible vectors
    if before["vector"]["strategy"] == "exact":
        assert before["vector"]["exhaustive"] is True
