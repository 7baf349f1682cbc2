"""FILTERS as a parameterised SQL fragment, composed in one place for both engines.

Generic over :data:`~knowledge_store.model.FILTER_FIELDS`: a keyword field is
"any of" / "none of" a list bound as **one** parameter (linear, whatever its
length: no statement text grows with the list), a date field an inclusive
range. Values are always bound; only the closed column names ever appear in
the SQL text. The fragment narrows what the ACL already allows: it is AND-ed
with the visibility condition, never OR-ed.

A declared facet's condition (``Filters.facets``, resolved by the reader) is an
``id IN`` over ``facet_values`` (``engines/sql/declared.py``): the facet's name is
bound like its values, so nothing a caller or an operator names enters the SQL text.
"""

from __future__ import annotations

from typing import Any

from knowledge_store.engines.sql.dialect import SqlDialect
from knowledge_store.errors import StoreError
from knowledge_store.model import FILTER_FIELDS, Filters

__all__ = ["filter_clause"]


def filter_clause(
    filters: Filters, dialect: SqlDialect, *, alias: str = "e", prefix: str = "f"
) -> tuple[str, dict[str, Any]]:
    """``(sql, params)`` for FILTERS on the entity table ``alias``; ``"1=1"`` when empty."""
    parts: list[str] = []
    params: dict[str, Any] = {}

    def bind(value: Any) -> str:
        name = f"{prefix}{len(params)}"
        params[name] = value
        return name

    for field in FILTER_FIELDS:
        column = f"{alias}.{field.column}"
        if field.kind == "date":
            low, high = filters.range(field.name)
            if low is not None:
                parts.append(f"{column} >= {dialect.param(bind(low))}")
            if high is not None:
                parts.append(f"{column} <= {dialect.param(bind(high))}")
            continue
        if values := filters.values(field.name):
            parts.append(dialect.in_array(column, bind(dialect.bind_array(values))))
        if excluded := filters.excluded(field.name):
            parts.append(dialect.in_array(column, bind(dialect.bind_array(excluded)), negate=True))
    if filters.pending:  # the reader resolves them: an engine is never given a name to parse
        raise StoreError(f"unresolved filters reached the engine: {dict(filters.pending)}")
    for facet in filters.facets:
        # The entities with a matching value, read through facet_values' key (facet, value)
        # or its (facet, number) index: 3 ms for a value held by 5,234 of 29,101 entities,
        # where an EXISTS checked per visible entity took 15 ms (bench/bench_facets.py).
        having = (
            f"SELECT fv.entity FROM facet_values AS fv"
            f" WHERE fv.facet = {dialect.param(bind(facet.name))}"
        )
        if facet.any_of:
            any_of = dialect.in_array("fv.value", bind(dialect.bind_array(facet.any_of)))
            parts.append(f"{alias}.id IN ({having} AND {any_of})")
        if facet.none_of:
            none_of = dialect.in_array("fv.value", bind(dialect.bind_array(facet.none_of)))
            parts.append(f"{alias}.id NOT IN ({having} AND {none_of})")  # entity is NOT NULL
        column = "fv.value" if facet.kind == "date" else "fv.number"
        bounds = [
            f"{column} {op} {dialect.param(bind(value))}"
            for op, value in ((">=", facet.low), ("<=", facet.high))
            if value is not None
        ]
        if bounds:
            parts.append(f"{alias}.id IN ({having} AND {' AND '.join(bounds)})")
    return (" AND ".join(parts) if parts else "1=1"), params
