"""Fixtures of the tests written for this folder: cross-engine agreement, concurrency, …

The suite's store fixtures (``store``, ``estate_store``, the module estates) run on
both engines everywhere through the root ``engine`` fixture. The tests here also
open stores by name: ``open_store`` (a new store of this test's engine) and the
module-scoped ``module_engine_kind``; ``postgres`` is a fresh schema of a fresh
database per test module, on the session's pgserver instance (PostgreSQL 16 +
pgvector 0.6, started by :mod:`tests.postgres_support`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from knowledge_store.ingest.embedding import Embedder
from knowledge_store.store import KnowledgeStore
from tests import postgres_support

OpenStore = Callable[[str], KnowledgeStore]


@pytest.fixture(scope="module")
def pg_database(request: pytest.FixtureRequest) -> str:
    """A fresh database for this test module."""
    return postgres_support.fresh_database(request.module.__name__.rpartition(".")[2])


def _opener(
    kind: str, root: Path, pg_database: str, embedder: Embedder
) -> Callable[[str], KnowledgeStore]:
    def open_store(name: str) -> KnowledgeStore:
        if kind == "embedded":
            return KnowledgeStore.open(root / name, embedder=embedder)
        return KnowledgeStore.open(postgres_support.store_url(pg_database), embedder=embedder)

    return open_store


@pytest.fixture
def engine_kind(engine: Any) -> str:
    """The kind of this test's engine (the root ``engine`` fixture is the one parameter)."""
    return str(engine.kind)


@pytest.fixture(scope="module")
def module_engine_kind(engine: Any) -> str:
    return str(engine.kind)


@pytest.fixture
def open_store(engine_kind: str, tmp_path: Path, pg_database: str, embedder: Embedder) -> OpenStore:
    """Opens a new, empty store of this test's engine."""
    return _opener(engine_kind, tmp_path, pg_database, embedder)
