"""graph, query_graph and the docs tools: the suite's contract tests, on both engines."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from knowledge_store.store import KnowledgeStore
from tests.conformance.contracts import contract_tests
from tests.engines import test_graph
from tests.graphquery import test_bounds, test_fuzz, test_golden
from tests.retrieval import test_docs_tools

globals().update(
    contract_tests(
        test_graph,
        # they drive the embedded engine's catalog directly; see test_graph_engines.py
        skip=["test_fan_out_cap_is_reported", "test_fan_out_cap_default_on_a_hub"],
    )
)
globals().update(contract_tests(test_golden))
globals().update(
    contract_tests(
        test_bounds,
        skip=["test_the_time_guard_is_removed_after_each_query"],  # SQLite's authorizer
    )
)
globals().update(contract_tests(test_docs_tools))


# query_graph fuzzing: the suite's hypothesis tests, with an engine-neutral guard
# (their own reads SQLite's data_version); PostgreSQL runs every query read-only.
@pytest.fixture(scope="module")
def guard(estate: KnowledgeStore) -> Iterator[KnowledgeStore]:
    def state() -> tuple[Any, ...]:
        stats = estate.stats()
        return estate.content_root(), stats.entities, stats.chunks, dict(stats.edges)

    before = state()
    yield estate
    assert state() == before, "a query changed the store"


globals().update(contract_tests(test_fuzz, fixtures=["guard"], skip=["guard"]))
