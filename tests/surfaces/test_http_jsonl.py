"""A JSON Lines ingest body is read the way the CLI reads a JSON Lines file.

Before: one line that was not JSON failed the whole request even with ``skip_invalid``
(the CLI refuses that one record), and a rejection's line counted records, not the body's
lines, so a blank line shifted every number after it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from knowledge_store.ingest.embedding import Embedder
from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.http import create_app
from tests.surfaces.serve_estate import ROOT, TOKENS, call

pytestmark = pytest.mark.embedded_only(
    reason="a surface over the store: the engines agree in tests/conformance"
)

NDJSON = {**ROOT, "Content-Type": "application/x-ndjson"}


def _note(uid: str, **extra: Any) -> str:
    return json.dumps({"uid": uid, "type": "note", "title": uid, "body": f"about {uid}", **extra})


#: line 1 good, 2 blank, 3 not JSON, 4 a record without a type, 5 not an object, 6 good,
#: 7 the uid of line 1 again
BODY = "\n".join(
    [
        _note("jl:1"),
        "",
        '{"uid": "jl:broken"',
        json.dumps({"uid": "jl:typeless", "title": "t", "body": "b"}),
        "[1, 2]",
        _note("jl:6"),
        _note("jl:1"),
    ]
)
BAD_LINES = [3, 4, 5, 7]


def _ingest(app: Any, body: str, query: str = "") -> Any:
    return call(
        app, "POST", f"/v1/admin/ingest?acl=group:ops{query}", content=body.encode(), headers=NDJSON
    )


def test_a_bad_line_fails_the_batch_naming_every_bad_line(store: KnowledgeStore) -> None:
    app = create_app(store, tokens=TOKENS)
    response = _ingest(app, BODY)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_record"
    assert [r["line"] for r in error["details"]["rejected"]] == BAD_LINES
    assert {r["file"] for r in error["details"]["rejected"]} == {"<body>"}
    assert error["message"].startswith("<body>:3: malformed JSON")
    assert store.stats().entities == 0  # nothing was published


def test_skip_invalid_publishes_the_good_lines_and_names_the_bad(
    store: KnowledgeStore, embedder: Embedder, tmp_path: Path
) -> None:
    app = create_app(store, tokens=TOKENS)
    response = _ingest(app, BODY, "&skip_invalid=true")
    assert response.status_code == 200, response.text
    report = response.json()
    assert report["added"] == 2
    rejected = report["rejected"]
    assert [r["line"] for r in rejected] == BAD_LINES
    assert rejected[3]["message"] == "duplicate uid in this batch (first at line 1)"
    # the same lines in a file, read by the CLI's loader: the same lines and reasons
    file = tmp_path / "body.jsonl"
    file.write_text(BODY)
    by_file = KnowledgeStore.open(tmp_path / "other", embedder=embedder)
    try:
        from_file = by_file.ingest([file], acl=["group:ops"], skip_invalid=True).to_dict()
    finally:
        by_file.close()
    assert [(r["line"], r["field"]) for r in from_file["rejected"]] == [
        (r["line"], r["field"]) for r in rejected
    ]
    assert [r["message"] for r in from_file["rejected"][:3]] == [r["message"] for r in rejected[:3]]


def test_a_body_of_only_bad_lines_with_skip_invalid_reports_them(store: KnowledgeStore) -> None:
    app = create_app(store, tokens=TOKENS)
    response = _ingest(app, "{nope\n\nnull\n", "&skip_invalid=true")
    assert response.status_code == 200, response.text
    report = response.json()
    assert report["added"] == 0 and [r["line"] for r in report["rejected"]] == [1, 3]
    failed = _ingest(app, "{nope\n")
    assert failed.status_code == 422 and failed.json()["error"]["code"] == "invalid_record"


def test_an_empty_body_is_still_an_invalid_request(store: KnowledgeStore) -> None:
    app = create_app(store, tokens=TOKENS)
    for body in ("", "\n\n  \n"):
        response = _ingest(app, body)
        assert response.status_code == 400, response.text
        assert response.json()["error"]["details"]["field"] == "records"
