"""Run query_graph on a SQLite catalog: parse → validate → bind → compile → execute.

The statement runs inside the caller's read snapshot under two guards, both
removed afterwards: a progress handler that cancels it past the time bound
(``QueryTimeout``), and an authorizer that lets it read and nothing else.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Mapping
from typing import Any

from knowledge_store.errors import InvalidRequest, QueryTimeout, StoreError
from knowledge_store.graphquery.compiler import CompiledQuery, compile_query
from knowledge_store.graphquery.dialect import SQLITE
from knowledge_store.graphquery.nodes import Query
from knowledge_store.graphquery.params import check_params
from knowledge_store.graphquery.parser import parse, parse_lenient
from knowledge_store.graphquery.problems import raise_errors
from knowledge_store.model import QUERY_GRAPH_TIME_LIMIT_S

__all__ = ["TIME_LIMIT_S", "checked_query", "execute", "prepare"]

#: The wall-clock bound of one query_graph statement.
TIME_LIMIT_S = QUERY_GRAPH_TIME_LIMIT_S
_PROGRESS_EVERY = 1000  # SQLite VM instructions between two clock checks

_READ_ACTIONS = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
)


def checked_query(text: str, params: Mapping[str, Any], *, lenient: bool = False) -> Query:
    """The parsed, validated query with its parameters checked; raises on any problem.

    Strict mode raises the first problem; lenient mode raises one error whose
    ``details.errors`` lists every problem found, each with line and column.
    """
    if lenient:
        query, errors = parse_lenient(text)
        if query is not None:
            errors = [*errors, *check_params(query, params)]
        raise_errors(errors, all_of_them=True)
        assert query is not None
        return query
    query = parse(text)
    raise_errors(check_params(query, params), all_of_them=False)
    return query


def prepare(query: Query, params: Mapping[str, Any], principal: str) -> CompiledQuery:
    """A checked query and its parameters → the one statement to run (SQLite)."""
    return compile_query(query, params, principal, dialect=SQLITE)


def _read_only(action: int, table: str | None, *_: Any) -> int:
    """Let the statement read, and nothing else.

    The one exception is the check SQLite makes when a table-valued function
    (``json_each``) declares its columns, reported as an UPDATE of sqlite_master;
    that table cannot be written anyway (``writable_schema`` is off).
    """
    if action in _READ_ACTIONS:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_UPDATE and table == "sqlite_master":
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def execute(
    conn: sqlite3.Connection, compiled: CompiledQuery, *, time_limit_s: float = TIME_LIMIT_S
) -> tuple[list[list[Any]], bool]:
    """Rows (at most ``compiled.limit``) and whether more matched; cancelled past the bound."""
    started = time.perf_counter()
    deadline = started + time_limit_s

    def past_deadline() -> int:
        return 1 if time.perf_counter() > deadline else 0

    conn.set_progress_handler(past_deadline, _PROGRESS_EVERY)
    conn.set_authorizer(_read_only)
    cursor: sqlite3.Cursor | None = None
    try:
        cursor = conn.execute(compiled.sql, compiled.params)
        raw = cursor.fetchmany(compiled.limit + 1)
    except sqlite3.OperationalError as exc:
        if "interrupt" in str(exc).lower():
            elapsed_ms = round((time.perf_counter() - started) * 1000)
            raise QueryTimeout(
                f"the query ran past the {round(time_limit_s * 1000)} ms bound and was"
                " cancelled; anchor a node with a parameter (e.g. (a {uid: $uid})), lower the"
                " depth of *1..d, name fewer labels, or add WHERE conditions",
                limit_ms=round(time_limit_s * 1000),
                elapsed_ms=elapsed_ms,
            ) from exc
        raise StoreError(f"query_graph failed in the catalog: {exc}") from exc
    except sqlite3.Error as exc:
        raise StoreError(f"query_graph failed in the catalog: {exc}") from exc
    except (UnicodeEncodeError, OverflowError) as exc:  # a value SQLite cannot bind
        raise InvalidRequest(f"a parameter value cannot be used: {exc}") from exc
    finally:
        if cursor is not None:
            cursor.close()
        conn.set_progress_handler(None, 0)
        conn.set_authorizer(None)
    truncated = len(raw) > compiled.limit
    return [compiled.shape(tuple(r)) for r in raw[: compiled.limit]], truncated
