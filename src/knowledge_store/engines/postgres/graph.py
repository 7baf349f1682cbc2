"""query_graph on PostgreSQL: the compiled statement with values bound as PostgreSQL reads them.

query_graph compiles the same AST as the embedded engine through the shared
compiler with the PostgreSQL dialect; the reader runs it under
``statement_timeout`` (the 250 ms bound → ``QueryTimeout``) in its read-only
snapshot. The graph primitive is the shared breadth-first walk
(:mod:`knowledge_store.engines.sql.traversal`) — one definition for both engines.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from knowledge_store.engines.sql.dialect import POSTGRES
from knowledge_store.graphquery.compiler import CompiledQuery, compile_query
from knowledge_store.graphquery.nodes import Query
from knowledge_store.model import QUERY_GRAPH_TIME_LIMIT_S

__all__ = [
    "POSTGRES",
    "prepare_query_graph",
    "statement_timeout_ms",
]


_USER_PARAM = re.compile(r"^q\d+$")


def _loose(value: Any) -> Any:
    """A scalar as SQLite compares it with a column: numbers as their text, typed by context.

    psycopg sends a ``str`` with the *unknown* type, so PostgreSQL reads it as
    the column's type (``'2'`` against ``position`` is 2, against ``uid`` is
    the text ``2``) — as SQLite's column affinity does.
    """
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int | float):
        return repr(value) if isinstance(value, float) else str(value)
    return value


def prepare_query_graph(
    query: Query, params: Mapping[str, Any], held: Sequence[str]
) -> CompiledQuery:
    """A checked query and its parameters → the one PostgreSQL statement (ACL inside)."""
    compiled = compile_query(query, params, held, dialect=POSTGRES)
    bound = {k: (_loose(v) if _USER_PARAM.match(k) else v) for k, v in compiled.params.items()}
    return dataclasses.replace(compiled, params=bound)


def statement_timeout_ms(seconds: float = QUERY_GRAPH_TIME_LIMIT_S) -> int:
    return max(1, round(seconds * 1000))
