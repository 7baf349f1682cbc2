"""SQL dialects: what differs between SQLite and PostgreSQL, and nothing else.

Placeholders, list binding (one bound list per list — linear, whatever its
length: a JSON array for SQLite's ``json_each``, a ``text[]`` for
PostgreSQL's ``unnest``), rows binding (a table of rows as one parameter, for
the set-based writes of a publish: :meth:`SqlDialect.rows_from`), string
predicates, bucket expressions, where an entity's body lives, how an ACL set is
keyed — and **the ACL**. This module is the only producer of
the visibility condition in each dialect:

* :meth:`SqlDialect.expand_identity` — the one recursive statement that
  expands an identity over memberships into the principals it holds (a
  reader runs it once and binds the result into every later statement);
* :meth:`SqlDialect.acl_ctes` — ``held(p)`` from that bound list, and
  ``vis(acl_set)``: the ACL sets holding one of them;
* :meth:`SqlDialect.visible` — "the caller may read entity ``alias``".

Nothing else spells the condition (a test greps ``src/`` for it). The
query_graph compiler (``graphquery``) compiles against the same object
through its :class:`~knowledge_store.graphquery.dialect.Dialect` protocol.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "ENTITY_CARD_COLUMNS",
    "ENTITY_CARD_INDEX",
    "HELD_PARAM",
    "POSTGRES",
    "SQLITE",
    "Column",
    "PostgresDialect",
    "SqlDialect",
    "SqlType",
    "SqliteDialect",
]

#: The bound parameter holding the principals a reader's identity holds.
HELD_PARAM = "held"
#: The bound parameter of :meth:`SqlDialect.expand_identity`.
PRINCIPAL_PARAM = "principal"

Visibility = Literal["scan", "probe", "walk"]
ArrayType = Literal["text", "bigint"]
#: The column types of bound rows (:meth:`SqlDialect.rows_from`); ``json``: JSON text.
SqlType = Literal["text", "bigint", "integer", "json"]
Column = tuple[str, SqlType]


#: The embedded catalog's covering index of the columns a lookup by uid reads — the ACL
#: set, type, title, href and update time (and the row id, as every index has): the graph
#: walk, successors and edge cards never touch the entity row.
ENTITY_CARD_INDEX = "entities_card"
ENTITY_CARD_COLUMNS = ("uid", "acl_set", "type", "title", "href", "updated_at")


@dataclass(frozen=True)
class SqlDialect:
    """A database's SQL. Subclasses fill in the syntax; the ACL composition is shared."""

    name: str
    #: A join the compiler may reorder freely ("JOIN" with no ON in SQLite).
    inner_join: str = "JOIN"
    #: Whether a recursive CTE may have several recursive SELECTs (SQLite ≥ 3.34: yes).
    multiple_recursive_selects: bool = True
    #: A join whose left side stays the outer loop (chunks picked by id, then their entity).
    driving_join: str = "JOIN"
    #: A keyword column (a facet): text, compared byte-wise, ``''`` when unset.
    keyword_column: str = "TEXT NOT NULL DEFAULT ''"
    add_column: str = "ADD COLUMN"

    # -- syntax -------------------------------------------------------------------------------
    def param(self, name: str) -> str:
        raise NotImplementedError

    def entities_by_uid(self, alias: str) -> str:
        """``entities`` under ``alias``, in a join that looks entities up by uid and reads
        their cards and ACL set (see :data:`ENTITY_CARD_INDEX`)."""
        return f"entities AS {alias}"

    def bind_list(self, values: Sequence[Any]) -> Any:
        """One parameter value holding a whole list of values of any JSON type."""
        return json.dumps(list(values), ensure_ascii=False, allow_nan=False)

    def list_rows(self, param: str) -> str:
        """A subquery with one column ``value``: the items of a :meth:`bind_list` list."""
        raise NotImplementedError

    def indexed_list_rows(self, param: str) -> str:
        """A subquery with columns ``pos, value``: the items of a bound list, in order."""
        raise NotImplementedError

    # Lists of one SQL type (uids, filter values, principals: text; chunk ids: bigint)
    # may bind natively, as an array.
    def bind_array(self, values: Sequence[Any]) -> Any:
        return self.bind_list(values)

    def array_rows(self, param: str, sql_type: ArrayType = "text") -> str:
        """A subquery with one column ``value``: the items of a :meth:`bind_array` list."""
        return self.list_rows(param)

    def indexed_array_rows(self, param: str, sql_type: ArrayType = "text") -> str:
        return self.indexed_list_rows(param)

    def in_array(
        self, expr: str, param: str, sql_type: ArrayType = "text", *, negate: bool = False
    ) -> str:
        """``expr`` is (not) one of the bound array ``param``."""
        return f"{expr} {'NOT IN' if negate else 'IN'} ({self.array_rows(param, sql_type)})"

    # A table of rows bound as one value (SQLite: a JSON array of arrays; PostgreSQL: one array
    # per column), for writes that are one statement whatever the number of rows.
    def rows_from(self, param: str, columns: Sequence[Column], alias: str) -> str:
        """A FROM item ``alias`` with ``columns``: the rows :meth:`bind_rows` bound as ``param``."""
        raise NotImplementedError

    def bind_rows(
        self, param: str, columns: Sequence[Column], rows: Iterable[Sequence[Any]]
    ) -> dict[str, Any]:
        """The parameters of :meth:`rows_from`: ``rows``, each one value per column (text,
        integers, None; a ``json`` column's value is its JSON text)."""
        raise NotImplementedError

    def acl_set_key(self, principals: Iterable[str]) -> str:
        """The unique key of the ACL set of ``principals``: the sorted principals, one a line."""
        return "\n".join(sorted(set(principals)))

    def starts_with(self, expr: str, needle: str) -> str:
        raise NotImplementedError

    def ends_with(self, expr: str, needle: str) -> str:
        raise NotImplementedError

    def contains(self, expr: str, needle: str) -> str:
        raise NotImplementedError

    def bucket(self, column: str, granularity: str) -> str:
        """The bucket key of ISO timestamp text ``column``: day, ISO week or month (null-safe)."""
        raise NotImplementedError

    def null_text(self) -> str:
        return "NULL"

    def body(self, alias: str) -> tuple[str, str, str]:
        """``(join, body, attributes)``: how to read entity ``alias``'s body and attributes
        (both catalogs keep them in ``entity_bodies``, out of the entity's row)."""
        return f" JOIN entity_bodies AS b ON b.entity = {alias}.id", "b.body", "b.attributes"

    # -- identity and the ACL: the only producer --------------------------------------------------
    def expand_identity(self) -> str:
        """One statement: the principals :data:`PRINCIPAL_PARAM` holds (itself, ``everyone``,
        every group reached over memberships; ``UNION`` stops on revisits), sorted."""
        principal = self.param(PRINCIPAL_PARAM)
        return (
            f"WITH RECURSIVE held(p) AS (VALUES ({self.text(principal)}), ('everyone')"
            " UNION SELECT m.grp FROM memberships AS m JOIN held ON m.member = held.p)"
            " SELECT p FROM held ORDER BY p"
        )

    def text(self, placeholder: str) -> str:
        return placeholder

    def acl_ctes(self) -> list[str]:
        """CTE definitions ``held(p)`` (the bound :data:`HELD_PARAM`) and ``vis(acl_set)``."""
        return [
            f"held(p) AS ({self.array_rows(HELD_PARAM)})",
            "vis(acl_set) AS (SELECT DISTINCT a.acl_set FROM acl_set_principals AS a"
            " WHERE a.principal IN (SELECT p FROM held))",
        ]

    def with_acl(self, *ctes: str) -> str:
        """``WITH RECURSIVE`` and the ACL CTEs, then ``ctes``: the head of a read statement."""
        return "WITH RECURSIVE " + ",\n".join([*self.acl_ctes(), *ctes]) + "\n"

    def visible(self, alias: str, how: Visibility = "scan") -> str:
        """The caller may read entity ``alias`` (needs :meth:`acl_ctes` in the statement).

        ``scan``: the set form, for statements that walk the visible entities
        (sql, aggregates). ``probe``: for rows already picked by key (chunk
        ids, uids, edge ends) — a correlated probe of the entity's own ACL
        set, a few primary-key lookups per row, where the set form would first
        list every visible ACL set (2,218 for a user who reaches a group
        shared by half the estate). ``walk``: the set form for a graph step,
        kept off the ``acl_set`` index (see :class:`SqliteDialect`).
        """
        if how == "probe":
            return (
                "EXISTS (SELECT 1 FROM acl_set_principals AS a"
                f" WHERE a.acl_set = {alias}.acl_set AND a.principal IN (SELECT p FROM held))"
            )
        return f"{alias}.acl_set IN (SELECT acl_set FROM vis)"

    def held_params(self, held: Sequence[str]) -> dict[str, Any]:
        """The parameters :meth:`acl_ctes` needs."""
        return {HELD_PARAM: self.bind_array(list(held))}


@dataclass(frozen=True)
class SqliteDialect(SqlDialect):
    name: str = "sqlite"
    # SQLite never reorders a CROSS JOIN: with a plain JOIN its planner walked every
    # entity of the visible ACL sets instead of the 110 chunks asked for (39 vs 0.9 ms).
    driving_join: str = "CROSS JOIN"

    def param(self, name: str) -> str:
        return f":{name}"

    def entities_by_uid(self, alias: str) -> str:
        # Without the hint SQLite's planner takes the unique uid index and then reads the
        # row: more pages per entity (a graph hop's statement at 1M chunks: 0.39 → 0.26 ms
        # on a warm cache, and less of the cache evicted by the other stages).
        return f"entities AS {alias} INDEXED BY {ENTITY_CARD_INDEX}"

    def list_rows(self, param: str) -> str:
        return f"SELECT value FROM json_each({self.param(param)})"

    def indexed_list_rows(self, param: str) -> str:
        return f"SELECT key AS pos, value FROM json_each({self.param(param)})"

    def rows_from(self, param: str, columns: Sequence[Column], alias: str) -> str:
        picked = ", ".join(f"value ->> {i} AS {name}" for i, (name, _) in enumerate(columns))
        return f"(SELECT {picked} FROM json_each({self.param(param)})) AS {alias}"

    def bind_rows(
        self, param: str, columns: Sequence[Column], rows: Iterable[Sequence[Any]]
    ) -> dict[str, Any]:
        return {param: json.dumps([list(row) for row in rows], ensure_ascii=False)}

    def starts_with(self, expr: str, needle: str) -> str:
        return f"(instr({expr}, {needle}) = 1)"

    def ends_with(self, expr: str, needle: str) -> str:
        return (
            f"({expr} IS NOT NULL AND {needle} IS NOT NULL AND (length({needle}) = 0"
            f" OR substr({expr}, -length({needle})) = {needle}))"
        )

    def contains(self, expr: str, needle: str) -> str:
        return f"(instr({expr}, {needle}) > 0)"

    def bucket(self, column: str, granularity: str) -> str:
        day = f"substr({column}, 1, 10)"
        if granularity == "day":
            return day
        if granularity == "month":
            return f"substr({column}, 1, 7)"
        # ISO week: the week's Thursday decides its year; '-3 days' then the next-or-same
        # Thursday is the Thursday of the Monday-based week that holds the day.
        thursday = f"date({day}, '-3 days', 'weekday 4')"
        return (
            f"strftime('%Y', {thursday}) || '-W' ||"
            f" printf('%02d', (CAST(strftime('%j', {thursday}) AS INTEGER) - 1) / 7 + 1)"
        )

    def visible(self, alias: str, how: Visibility = "scan") -> str:
        # The unary + keeps SQLite's planner off the acl_set index in a graph step:
        # most entities share a handful of ACL sets, so that index never narrows a
        # lookup, and driving a step from it scans every visible entity.
        if how == "walk":
            return f"+{alias}.acl_set IN (SELECT acl_set FROM vis)"
        return super().visible(alias, how)


@dataclass(frozen=True)
class PostgresDialect(SqlDialect):
    """PostgreSQL through psycopg (``%(name)s`` placeholders, server-side binding)."""

    name: str = "postgresql"
    #: PostgreSQL's JOIN needs ON; the compiler puts its conditions in WHERE.
    inner_join: str = "CROSS JOIN"
    #: A recursive CTE may reference itself once: both directions go through one union.
    multiple_recursive_selects: bool = False
    keyword_column: str = "text COLLATE \"C\" NOT NULL DEFAULT ''"
    add_column: str = "ADD COLUMN IF NOT EXISTS"

    def param(self, name: str) -> str:
        return f"%({name})s"

    def text(self, placeholder: str) -> str:
        return f'{placeholder}::text COLLATE "C"'

    def list_rows(self, param: str) -> str:
        return f"SELECT value FROM jsonb_array_elements_text({self.param(param)}::jsonb) AS value"

    def indexed_list_rows(self, param: str) -> str:
        return (
            "SELECT x.ord - 1 AS pos, x.value FROM"
            f" jsonb_array_elements_text({self.param(param)}::jsonb) WITH ORDINALITY AS x(value, ord)"
        )

    def bind_array(self, values: Sequence[Any]) -> Any:
        return list(values)

    def _value(self, sql_type: ArrayType) -> str:
        return 'x.value COLLATE "C"' if sql_type == "text" else "x.value"

    def array_rows(self, param: str, sql_type: ArrayType = "text") -> str:
        return (
            f"SELECT {self._value(sql_type)} AS value"
            f" FROM unnest({self.param(param)}::{sql_type}[]) AS x(value)"
        )

    def indexed_array_rows(self, param: str, sql_type: ArrayType = "text") -> str:
        return (
            f"SELECT x.ord - 1 AS pos, {self._value(sql_type)} AS value"
            f" FROM unnest({self.param(param)}::{sql_type}[]) WITH ORDINALITY AS x(value, ord)"
        )

    def in_array(
        self, expr: str, param: str, sql_type: ArrayType = "text", *, negate: bool = False
    ) -> str:
        test = f"{expr} = ANY({self.param(param)}::{sql_type}[])"
        return f"NOT ({test})" if negate else test

    def rows_from(self, param: str, columns: Sequence[Column], alias: str) -> str:
        arrays = ", ".join(
            f"{self.param(f'{param}_{i}')}::{sql_type}[]" for i, (_, sql_type) in enumerate(columns)
        )
        return f"unnest({arrays}) AS {alias}({', '.join(name for name, _ in columns)})"

    def bind_rows(
        self, param: str, columns: Sequence[Column], rows: Iterable[Sequence[Any]]
    ) -> dict[str, Any]:
        by_column: list[list[Any]] = [[] for _ in columns]
        for row in rows:
            for values, value in zip(by_column, row, strict=True):
                values.append(value)
        return {f"{param}_{i}": values for i, values in enumerate(by_column)}

    def acl_set_key(self, principals: Iterable[str]) -> str:
        """sha256 of the sorted principals, one a line: the text of a long ACL would not fit in
        a b-tree entry (schema version 2 rewrote the older keys the same way)."""
        return hashlib.sha256(super().acl_set_key(principals).encode()).hexdigest()

    def starts_with(self, expr: str, needle: str) -> str:
        return f"starts_with({expr}, ({needle})::text)"

    def ends_with(self, expr: str, needle: str) -> str:
        n = f"({needle})::text"
        return (
            f"({expr} IS NOT NULL AND {n} IS NOT NULL AND (length({n}) = 0"
            f" OR right({expr}, length({n})) = {n}))"
        )

    def contains(self, expr: str, needle: str) -> str:
        return f"(strpos({expr}, ({needle})::text) > 0)"

    def bucket(self, column: str, granularity: str) -> str:
        if granularity == "day":
            inner = f"substr({column}, 1, 10)"
        elif granularity == "month":
            inner = f"substr({column}, 1, 7)"
        else:  # IYYY and IW: the ISO year (decided by the week's Thursday) and the ISO week
            inner = f"""to_char(substr({column}, 1, 10)::date, 'IYYY"-W"IW')"""
        return f"CASE WHEN {column} IS NULL THEN NULL ELSE {inner} END"

    def null_text(self) -> str:
        return "NULL::text"


SQLITE = SqliteDialect()
POSTGRES = PostgresDialect()
