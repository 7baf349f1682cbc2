"""Text the store can't hold, over HTTP: always the caller's error, with its place (issue 11, item 5).

``/v1/sql`` with the uid ``"\\ud800"`` (a lone surrogate, valid as a JSON escape)
answered 500; a query_graph parameter with NUL said "must be a string, not str";
a duplicate key in an admin ingest line silently took the last value.
"""

from __future__ import annotations

from typing import Any

import pytest

from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.http import create_app
from tests.surfaces.serve_estate import BOB, ROOT, TOKENS, call

pytestmark = pytest.mark.embedded_only(
    reason="a surface over the store: the engines agree in tests/conformance"
)


def _error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code, error
    return dict(error)


def test_a_lone_surrogate_in_a_filter_is_a_400(app: Any) -> None:
    for body in (
        b'{"filters": {"uid": ["\\ud800"]}}',
        b'{"filters": {"type": ["page\\udfff"]}}',
        b'{"filters": {"uid": ["a\\u0000b"]}}',
    ):
        response = call(
            app,
            "POST",
            "/v1/sql",
            content=body,
            headers={**BOB, "Content-Type": "application/json"},
        )
        assert "Unicode" in _error(response, 400, "invalid_request")["message"]


def test_a_nul_in_a_query_graph_parameter_says_so(app: Any) -> None:
    response = call(
        app,
        "POST",
        "/v1/query_graph",
        json={"query": "MATCH (n {uid: $u}) RETURN n.uid", "params": {"u": "a\x00b"}},
        headers=BOB,
    )
    message = _error(response, 400, "invalid_request")["message"]
    assert "NUL" in message and "not str" not in message


def test_a_duplicate_key_in_an_admin_ingest_line_publishes_nothing(store: KnowledgeStore) -> None:
    app = create_app(store, tokens=TOKENS)
    line = (
        b'{"uid":"n:1","type":"note","title":"t","body":"b","acl":["user:root"],"acl":["everyone"]}'
    )
    response = call(
        app,
        "POST",
        "/v1/admin/ingest",
        content=line + b"\n",
        headers={**ROOT, "Content-Type": "application/x-ndjson"},
    )
    # refused as the CLI refuses the line in a file: a bad record, named by its line
    error = _error(response, 422, "invalid_record")
    assert "appears twice" in error["message"] and error["message"].startswith("<body>:1 ")
    assert [r["line"] for r in error["details"]["rejected"]] == [1]
    assert store.stats().entities == 0
