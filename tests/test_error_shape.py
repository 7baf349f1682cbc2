"""One JSON error shape, one code per class, the right HTTP status and exit code."""

from __future__ import annotations

import inspect

import knowledge_store.errors as errors
from knowledge_store.errors import KnowledgeStoreError, Rejection

DESIGN_CODES = {
    "invalid_record",
    "invalid_request",
    "unknown_field",
    "unknown_label",
    "bound_exceeded",
    "not_found",
    "timeout",
    "model_mismatch",
    "store_error",
}


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
        expected_exit = 1 if cls.code == "store_error" else 2
        assert exc.exit_status == expected_exit
        assert 400 <= exc.http_status < 600


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
