"""sql, aggregates, the fused planner and the agent tools: the suite's contract tests, on both engines."""

from __future__ import annotations

from tests.conformance.contracts import contract_tests
from tests.engines import test_sql
from tests.retrieval import test_aggregates, test_planner
from tests.surfaces import test_tools

globals().update(contract_tests(test_sql))
globals().update(contract_tests(test_aggregates))
globals().update(contract_tests(test_planner))
globals().update(contract_tests(test_tools))
