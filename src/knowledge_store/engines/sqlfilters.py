"""FILTERS as a parameterised SQL fragment, composed in one place for every engine.

Values are always bound parameters; only the closed column names ever appear
in the SQL text. The fragment narrows what the ACL already allows: it is
AND-ed with the ACL condition, never OR-ed.

A list ("any of") is bound as **one** parameter whatever its length — a JSON
array read by ``json_each`` in SQLite, an array compared with ``= ANY`` in
PostgreSQL — so the statement's text, its parse and its plan don't grow with
the list (N placeholders made SQLite's cost quadratic: 40,000 uids took 7 s).
:data:`~knowledge_store.model.MAX_FILTER_VALUES` bounds each list anyway.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from knowledge_store.model import Filters

__all__ = ["ParamStyle", "Placeholder", "filter_clause", "named", "pyformat"]

#: Turns a parameter name into the engine's placeholder syntax.
Placeholder = Callable[[str], str]


@dataclass(frozen=True)
class ParamStyle:
    """How one engine writes a bound value and a bound list of strings."""

    #: ``name`` → the placeholder of a bound value.
    placeholder: Placeholder
    #: ``(column, placeholder)`` → "column is one of the bound list".
    member_of: Callable[[str, str], str]
    #: The list as the one value bound to that placeholder.
    bind_list: Callable[[Sequence[str]], Any]

    def __call__(self, name: str) -> str:
        return self.placeholder(name)


#: SQLite: ``:name``; a list is a JSON array, read by ``json_each``.
named = ParamStyle(
    placeholder=lambda name: f":{name}",
    member_of=lambda column, mark: f"{column} IN (SELECT value FROM json_each({mark}))",
    bind_list=lambda values: json.dumps(list(values), ensure_ascii=False),
)
#: psycopg: ``%(name)s``; a list is a ``text[]``, compared with ``= ANY``.
pyformat = ParamStyle(
    placeholder=lambda name: f"%({name})s",
    member_of=lambda column, mark: f"{column} = ANY({mark}::text[])",
    bind_list=list,
)


def filter_clause(
    filters: Filters, *, alias: str = "e", placeholder: ParamStyle = named, prefix: str = "f"
) -> tuple[str, dict[str, Any]]:
    """``(sql, params)`` for FILTERS on the entity table ``alias``; ``"1=1"`` when empty."""
    parts: list[str] = []
    params: dict[str, Any] = {}

    def bind(value: Any) -> str:
        name = f"{prefix}{len(params)}"
        params[name] = value
        return placeholder(name)

    def any_of(column: str, values: tuple[str, ...], negate: bool = False) -> None:
        if not values:
            return
        condition = placeholder.member_of(f"{alias}.{column}", bind(placeholder.bind_list(values)))
        parts.append(f"NOT ({condition})" if negate else condition)

    any_of("type", filters.types)
    any_of("type", filters.not_types, negate=True)
    any_of("source", filters.sources)
    any_of("status", filters.statuses)
    any_of("uid", filters.uids)
    for column, low, high in (
        ("created_at", filters.created_from, filters.created_to),
        ("updated_at", filters.updated_from, filters.updated_to),
    ):
        if low is not None:
            parts.append(f"{alias}.{column} >= {bind(low)}")
        if high is not None:
            parts.append(f"{alias}.{column} <= {bind(high)}")
    return (" AND ".join(parts) if parts else "1=1"), params
