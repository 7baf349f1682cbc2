"""Parse and check a query_graph query with its parameters, once, before it is compiled."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from knowledge_store.graphquery.nodes import Query
from knowledge_store.graphquery.params import check_params
from knowledge_store.graphquery.parser import parse, parse_lenient
from knowledge_store.graphquery.problems import raise_errors

__all__ = ["checked_query"]


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
