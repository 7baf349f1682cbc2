"""Fixtures of the serving tests: the estate store (built once per module) and the app over it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from knowledge_store.ingest.embedding import Embedder
from knowledge_store.store import KnowledgeStore
from tests.surfaces.serve_estate import TOKENS, build


@pytest.fixture(scope="session")
def served(
    tmp_path_factory: pytest.TempPathFactory, embedder: Embedder
) -> Iterator[KnowledgeStore]:
    """The serving estate, built once; read-only for the tests that share it."""
    with KnowledgeStore.open(tmp_path_factory.mktemp("served") / "store", embedder=embedder) as s:
        yield build(s)


@pytest.fixture(scope="session")
def app(served: KnowledgeStore) -> Any:
    from knowledge_store.surfaces.http import create_app

    return create_app(served, tokens=TOKENS)
