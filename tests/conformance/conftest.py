"""The engine fixture of the conformance suite: every store fixture, once per engine.

``embedded`` is a store in a temporary directory; ``postgres`` a store in a
fresh schema of a fresh database per test module, on the session's pgserver
instance (PostgreSQL 16 + pgvector 0.6, started by :mod:`tests.postgres_support`).
The fixtures below shadow the suite's own (``store``, ``estate_store``,
``fields_store``, ``estate``), so the contract tests imported into this folder
run unchanged against both engines.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from knowledge_store.ingest.embedding import Embedder
from knowledge_store.store import KnowledgeStore
from tests import graph_estate, postgres_support
from tests.conformance import memo
from tests.conftest import ESTATE
from tests.fields_estate import RECORDS

ENGINES = ("embedded", "postgres")

OpenStore = Callable[[str], KnowledgeStore]


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    """The real model, memoised: both engines embed the same texts."""
    return memo.shared()


@pytest.fixture(scope="session", autouse=True)
def _embedding_cache(request: pytest.FixtureRequest) -> Iterator[None]:
    """Vectors of the fixture texts, kept in pytest's cache directory between runs."""
    cache = getattr(request.config, "cache", None)
    path = None if cache is None else Path(cache.mkdir("ks-embeddings")) / "conformance.npz"
    if path is not None:
        memo.shared().load(path)
    yield
    if path is not None:
        memo.shared().save(path)


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


@pytest.fixture(params=ENGINES)
def engine_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module", params=ENGINES)
def module_engine_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def open_store(engine_kind: str, tmp_path: Path, pg_database: str, embedder: Embedder) -> OpenStore:
    """Opens a new, empty store of this test's engine."""
    return _opener(engine_kind, tmp_path, pg_database, embedder)


@pytest.fixture
def store(open_store: OpenStore) -> Iterator[KnowledgeStore]:
    with open_store("store") as s:
        yield s


@pytest.fixture
def estate_store(store: KnowledgeStore) -> KnowledgeStore:
    store.ingest_records(ESTATE)
    store.add_member("group:sre", "user:sam")
    return store


@pytest.fixture(scope="module")
def fields_store(
    module_engine_kind: str,
    tmp_path_factory: pytest.TempPathFactory,
    pg_database: str,
    embedder: Embedder,
) -> Iterator[KnowledgeStore]:
    root = tmp_path_factory.mktemp("fields")
    with _opener(module_engine_kind, root, pg_database, embedder)("s") as store:
        store.ingest_records(RECORDS, acl=["everyone"])
        store.add_member("group:sre", "user:sam")
        store.add_member("group:finance", "user:fay")
        yield store


@pytest.fixture(scope="module")
def estate(
    module_engine_kind: str,
    tmp_path_factory: pytest.TempPathFactory,
    pg_database: str,
    embedder: Embedder,
) -> Iterator[KnowledgeStore]:
    root = tmp_path_factory.mktemp("graph-estate")
    location: Path | str = root / "store"
    if module_engine_kind == "postgres":
        location = postgres_support.store_url(pg_database)
    store = graph_estate.build(location, embedder)  # type: ignore[arg-type]
    yield store
    store.close()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Imported contract tests already run on the embedded engine in their own modules.

    Here they run on PostgreSQL only (set KS_CONFORMANCE_ALL=1 to run them on both);
    the tests written in this folder — cross-engine agreement, concurrency — run on both.
    """
    if os.environ.get("KS_CONFORMANCE_ALL"):
        return
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        fn = getattr(item, "function", None)
        module = getattr(item, "module", None)
        callspec = getattr(item, "callspec", None)
        imported = (
            fn is not None
            and module is not None
            and module.__name__.startswith("tests.conformance.")
            and getattr(fn, "__module__", module.__name__) != module.__name__
        )
        params = callspec.params if callspec is not None else {}
        on_embedded = "embedded" in (params.get("engine_kind"), params.get("module_engine_kind"))
        (dropped if imported and on_embedded else keep).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
