"""FILTERS as a parameterised SQL fragment, composed in one place for every engine.

Values are always bound parameters; only the closed column names ever appear
in the SQL text. The fragment narrows what the ACL already allows: it is
AND-ed with the ACL condition, never OR-ed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from knowledge_store.model import FILTER_FIELDS, Filters

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
    """``(sql, params)`` for FILTERS on the entity table ``alias``; ``"1=1"`` when empty.

    Generic over :data:`~knowledge_store.model.FILTER_FIELDS`: keyword fields
    become ``IN`` / ``NOT IN`` lists, date fields inclusive ranges.
    """
    parts: list[str] = []
    params: dict[str, Any] = {}

    def bind(value: Any) -> str:
        name = f"{prefix}{len(params)}"
        params[name] = value
        return placeholder(name)

    for field in FILTER_FIELDS:
        column = f"{alias}.{field.column}"
        if field.kind == "date":
            low, high = filters.range(field.name)
            if low is not None:
                parts.append(f"{column} >= {bind(low)}")
            if high is not None:
                parts.append(f"{column} <= {bind(high)}")
            continue
        for values, negate in (
            (filters.values(field.name), False),
            (filters.excluded(field.name), True),
        ):
            if values:
                marks = ", ".join(bind(v) for v in values)
                parts.append(f"{column} {'NOT IN' if negate else 'IN'} ({marks})")
    return (" AND ".join(parts) if parts else "1=1"), params
