"""FILTERS as a parameterised SQL fragment, composed in one place for every engine.

Values are always bound parameters; only the closed column names ever appear
in the SQL text. The fragment narrows what the ACL already allows: it is
AND-ed with the ACL condition, never OR-ed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from knowledge_store.model import Filters

__all__ = ["Placeholder", "filter_clause", "named", "pyformat"]

#: Turns a parameter name into the engine's placeholder syntax.
Placeholder = Callable[[str], str]


def named(name: str) -> str:
    """SQLite's ``:name``."""
    return f":{name}"


def pyformat(name: str) -> str:
    """psycopg's ``%(name)s``."""
    return f"%({name})s"


def filter_clause(
    filters: Filters, *, alias: str = "e", placeholder: Placeholder = named, prefix: str = "f"
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
        marks = ", ".join(bind(v) for v in values)
        parts.append(f"{alias}.{column} {'NOT IN' if negate else 'IN'} ({marks})")

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
