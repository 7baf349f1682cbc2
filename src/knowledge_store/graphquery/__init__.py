"""query_graph: a bounded, read-only openCypher subset for agents (DESIGN §5).

``grammar.lark`` → :mod:`.parser` (typed AST in :mod:`.nodes`) → :mod:`.validator`
(the bounds) → :mod:`.compiler` (one parameterised statement, ACL inside, for a
:mod:`.dialect` protocol). A language only: no connection, no runtime — the
engines run the statement. Variable-length patterns compile the traversal step
of :mod:`.steps`, the one definition of following a visible edge. Reference: docs/query_graph.md.
"""

from __future__ import annotations

from knowledge_store.graphquery.check import checked_query
from knowledge_store.graphquery.compiler import CompiledQuery, compile_query
from knowledge_store.graphquery.nodes import Query
from knowledge_store.graphquery.params import check_params
from knowledge_store.graphquery.parser import parse, parse_lenient
from knowledge_store.graphquery.problems import QueryError
from knowledge_store.graphquery.validator import (
    DEFAULT_LIMIT,
    MAX_DEPTH,
    MAX_LIMIT,
    NODE_PROPERTIES,
    validate,
)

__all__ = [
    "DEFAULT_LIMIT",
    "MAX_DEPTH",
    "MAX_LIMIT",
    "NODE_PROPERTIES",
    "CompiledQuery",
    "Query",
    "QueryError",
    "check_params",
    "checked_query",
    "compile_query",
    "parse",
    "parse_lenient",
    "validate",
]
