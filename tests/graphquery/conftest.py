"""The graph estate, built once for the query_graph tests of this folder."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from knowledge_store.ingest.embedding import Embedder
from knowledge_store.store import KnowledgeStore
from tests import graph_estate


@pytest.fixture(scope="package")
def estate(engine: Any, embedder: Embedder) -> Iterator[KnowledgeStore]:
    """The graph estate, once per engine."""
    store = graph_estate.build(engine.location("graph"), embedder)
    yield store
    store.close()
