"""One reader per request, on PostgreSQL too: a publish from another process between the
stages of a search changes nothing in its answer; explain shows one snapshot and one
identity expansion; every list of a reader shares its content root."""

from __future__ import annotations

from tests.conformance.contracts import contract_tests
from tests.retrieval import test_reader

globals().update(contract_tests(test_reader))
