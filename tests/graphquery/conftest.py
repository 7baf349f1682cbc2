"""The graph estate, built once for the query_graph tests of this folder."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from knowledge_store.ingest.embedding import Embedder
from knowledge_store.store import KnowledgeStore
from tests import graph_estate


@pytest.fixture(scope="package")
def estate(
    tmp_path_factory: pytest.TempPathFactory, embedder: Embedder
) -> Iterator[KnowledgeStore]:
    store = graph_estate.build(tmp_path_factory.mktemp("graph-estate") / "store", embedder)
    yield store
    store.close()
