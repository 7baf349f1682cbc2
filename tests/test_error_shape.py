"""One JSON error shape, one code per class, the right HTTP status and exit code."""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import knowledge_store.errors as errors
from knowledge_store.errors import KnowledgeStoreError, Rejection
from tests.conftest import HASH_SPEC

#: Each error class: its code, its HTTP status and its CLI exit status (DESIGN §6: 2 for
#: every error caused by the caller's input, 1 for other failures). Pinned, not a range.
PINNED: dict[str, tuple[str, int, int]] = {
    "KnowledgeStoreError": ("store_error", 500, 1),
    "InputError": ("invalid_request", 400, 2),
    "InvalidRecord": ("invalid_record", 422, 2),
    "BatchRejected": ("invalid_record", 422, 2),
    "InvalidRequest": ("invalid_request", 400, 2),
    "MassDeleteRefused": ("invalid_request", 400, 2),
    "SourceTakeoverRefused": ("invalid_request", 400, 2),
    "UnknownField": ("unknown_field", 400, 2),
    "UnknownLabel": ("unknown_label", 400, 2),
    "BoundExceeded": ("bound_exceeded", 400, 2),
    "NotFound": ("not_found", 404, 2),
    "QueryTimeout": ("timeout", 400, 2),
    "ModelMismatch": ("model_mismatch", 409, 2),
    "StoreError": ("store_error", 500, 1),
}
DESIGN_CODES = {code for code, _, _ in PINNED.values()}


def _classes() -> list[type[KnowledgeStoreError]]:
    return [
        c
        for _, c in inspect.getmembers(errors, inspect.isclass)
        if issubclass(c, KnowledgeStoreError)
    ]


def test_every_code_is_a_design_code_and_every_design_code_exists() -> None:
    assert {c.code for c in _classes()} == DESIGN_CODES


def test_shape_and_exit_status() -> None:
    for cls in _classes():
        if cls is errors.BatchRejected:
            exc: KnowledgeStoreError = cls([Rejection("f.jsonl", 3, "u", "body", "missing")])
        elif cls is errors.InvalidRecord:
            exc = cls(Rejection("f.jsonl", 3, "u", "body", "missing"))
        else:
            exc = cls("something to act on", field="x")
        shape = exc.to_dict()
        assert set(shape) == {"error"}
        assert set(shape["error"]) == {"code", "message", "details"}
        assert shape["error"]["message"]
        assert (cls.code, exc.http_status, exc.exit_status) == PINNED[cls.__name__], cls


def test_every_class_is_pinned() -> None:
    assert {c.__name__ for c in _classes()} == set(PINNED)


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The HTTP app over an empty store (errors need no data; no model is loaded)."""
    from knowledge_store.store import KnowledgeStore
    from knowledge_store.surfaces.http import create_app
    from tests.surfaces.serve_estate import TOKENS

    with KnowledgeStore.open(tmp_path_factory.mktemp("errors") / "s", embedder=HASH_SPEC) as s:
        yield create_app(s, tokens=TOKENS)


#: Real requests that fail with each code over HTTP (status) and the CLI (exit status).
SURFACE_CASES = [
    ("lexical", {"query": "x", "k": 1001}, ["lexical", "x", "--k", "1001"], "invalid_request"),
    ("sql", {"order": "body:asc"}, ["sql", "--order", "body:asc"], "unknown_field"),
    (
        "sql",
        {"filters": {"uid": [f"u{i}" for i in range(1001)]}},
        ["sql", *(a for i in range(1001) for a in ("--uid", f"u{i}"))],
        "bound_exceeded",
    ),
    (
        "graph",
        {"starts": ["a"], "labels": ["mentions"]},
        ["graph", "a", "--label", "mentions"],
        "unknown_label",
    ),
    ("sql", {"filters": {"colour": "red"}}, None, "unknown_field"),
]


@pytest.mark.parametrize(("route", "body", "argv", "code"), SURFACE_CASES)
def test_surfaces_answer_each_code_with_its_pinned_status(
    app: Any,
    tmp_path: Path,
    route: str,
    body: dict[str, object],
    argv: list[str] | None,
    code: str,
) -> None:
    from knowledge_store.surfaces.cli import app as cli_app
    from tests.surfaces.serve_estate import BOB, call

    status = next(h for c, h, _ in PINNED.values() if c == code)
    answer = call(app, "POST", f"/v1/{route}", json=body, headers=BOB)
    assert (answer.status_code, answer.json()["error"]["code"]) == (status, code)
    if argv is None:  # the CLI's typed options cannot spell an unknown filter
        return
    result = CliRunner().invoke(cli_app, ["--store", str(tmp_path / "s"), *argv, "--json"])
    assert result.exit_code == 2, result.output
    assert json.loads(result.stdout)["error"]["code"] == code


def test_unknown_content_is_404_over_http(app: Any) -> None:
    from tests.surfaces.serve_estate import BOB, call

    answer = call(app, "GET", "/v1/content/no-such-uid", headers=BOB)
    assert (answer.status_code, answer.json()["error"]["code"]) == (404, "not_found")


def test_rejection_message_names_file_line_uid_and_field() -> None:
    exc = errors.BatchRejected(
        [
            Rejection("a.jsonl", 7, "doc-1", "edges[0].label", "unknown label 'mentions'"),
            Rejection("a.jsonl", 9, None, None, "not JSON"),
        ]
    )
    assert "a.jsonl:7" in exc.message and "doc-1" in exc.message and "edges[0].label" in exc.message
    assert "1 more" in exc.message and "nothing was published" in exc.message
    assert len(exc.details["rejected"]) == 2
