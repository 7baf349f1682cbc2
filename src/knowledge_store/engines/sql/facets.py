"""The entity columns both catalogs spell, generated: the facets and ``ENTITY_FIELDS``.

A facet (:data:`~knowledge_store.model.FACETS`) is a filter field whose value
is a record key of its own. Each is a keyword column of ``entities`` with an
index, created with the table in a new store; opening a store made before a
facet was declared adds its column (:func:`add_facet`, then the default ``''``
for every row: no record ingested before could set it) — no hand-written
migration. Only the closed facet names ever appear in the SQL text.
"""

from __future__ import annotations

from collections.abc import Collection

from knowledge_store.engines.sql.dialect import SqlDialect
from knowledge_store.model import ENTITY_FIELDS, FACET_NAMES

__all__ = ["add_facet", "entity_columns", "facet_column", "facet_index", "missing_facets"]


def facet_column(d: SqlDialect, name: str) -> str:
    """The column declaration of facet ``name`` (``CREATE TABLE`` / ``ADD COLUMN``)."""
    return f"{name} {d.keyword_column}"


def facet_index(name: str) -> str:
    return f"CREATE INDEX IF NOT EXISTS entities_by_{name} ON entities ({name})"


def add_facet(d: SqlDialect, name: str) -> tuple[str, str]:
    """Add facet ``name``'s column (every row gets ``''``) and its index to ``entities``."""
    return (f"ALTER TABLE entities {d.add_column} {facet_column(d, name)}", facet_index(name))


def missing_facets(columns: Collection[str]) -> tuple[str, ...]:
    """The facets an ``entities`` table with ``columns`` lacks (none when it has none:
    a table not created yet gets them with it)."""
    return tuple(name for name in FACET_NAMES if columns and name not in columns)


def entity_columns(alias: str, body: str, attributes: str) -> str:
    """The select list of ``ENTITY_FIELDS`` of entity ``alias``, with the dialect's
    expressions for its ``body`` and ``attributes`` (:meth:`SqlDialect.body`)."""
    special = {"body": body, "attributes": attributes}
    return ", ".join(special.get(name, f"{alias}.{name}") for name in ENTITY_FIELDS)
