"""query_graph against golden.json: every query's rows and every error's code, sentence and place."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from knowledge_store.errors import KnowledgeStoreError
from knowledge_store.store import KnowledgeStore

GOLDEN = json.loads((Path(__file__).parent / "golden.json").read_text(encoding="utf-8"))


def _key(row: list[Any]) -> str:
    return json.dumps(row, sort_keys=True)


@pytest.mark.parametrize("case", GOLDEN["queries"], ids=[c["name"] for c in GOLDEN["queries"]])
def test_query(estate: KnowledgeStore, case: dict[str, Any]) -> None:
    answer = estate.query_graph(case["query"], case["params"], identity=case["as"])
    assert answer.columns == case["columns"]
    assert answer.truncated == case["truncated"]
    if case["ordered"]:
        assert answer.rows == case["rows"]
    else:
        assert sorted(map(_key, answer.rows)) == sorted(map(_key, case["rows"]))
    assert answer.content_root == estate.content_root()


@pytest.mark.parametrize("case", GOLDEN["errors"], ids=[c["name"] for c in GOLDEN["errors"]])
def test_error(estate: KnowledgeStore, case: dict[str, Any]) -> None:
    with pytest.raises(KnowledgeStoreError) as caught:
        estate.query_graph(case["query"], case["params"])
    error = caught.value
    assert error.code == case["code"]
    assert case["message"] in error.message
    assert error.details.get("line") == case["line"]
    assert error.details.get("column") == case["column"]
    assert error.exit_status == 2 and error.http_status in (400, 404)
