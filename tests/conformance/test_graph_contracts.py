"""graph, query_graph and the docs tools: the suite's contract tests, on both engines."""

from __future__ import annotations

from tests.conformance.contracts import contract_tests
from tests.engines import test_graph
from tests.graphquery import test_bounds, test_golden
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
