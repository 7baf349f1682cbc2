"""Every ```cypher block of docs/query_graph.md parses and passes the validator."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from knowledge_store.graphquery import parse

DOC = Path(__file__).resolve().parents[2] / "docs" / "query_graph.md"
BLOCKS = re.findall(r"```cypher\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)


def test_the_reference_has_examples() -> None:
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("text", BLOCKS)
def test_example_parses(text: str) -> None:
    parse(text)
