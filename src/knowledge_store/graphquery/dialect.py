"""SQL dialects for the graph traversal and the query_graph compiler.

Everything above this module writes SQL through a ``Dialect``: placeholders,
list parameters, string predicates, join quirks and the ACL fragment. The
SQLite dialect serves the embedded engine; a PostgreSQL dialect (``%(name)s``
placeholders, ``= ANY(array)`` lists, ``statement_timeout``, one recursive
reference per CTE) plugs in from the same AST without touching the compiler.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from knowledge_store.engines.embedded.schema import HELD_PRINCIPALS, VISIBLE_ACL_SETS

__all__ = ["SQLITE", "Dialect", "SqliteDialect"]

#: The bound parameter holding the caller's principal in every statement.
PRINCIPAL_PARAM = "principal"


@dataclass(frozen=True)
class Dialect:
    """What differs between SQL engines, and nothing else."""

    name: str
    #: Joins inside a statement that may be reordered freely ("JOIN" with no ON in SQLite).
    inner_join: str = "JOIN"
    #: Whether a recursive CTE may have several recursive SELECTs (SQLite ≥ 3.34: yes).
    multiple_recursive_selects: bool = True

    def param(self, name: str) -> str:
        raise NotImplementedError

    def acl_ctes(self) -> list[str]:
        """CTE definitions ``held(p)`` and ``vis(acl_set)`` for the bound principal."""
        raise NotImplementedError

    def list_rows(self, param: str) -> str:
        """A subquery with one column ``value``: the items of a bound list."""
        raise NotImplementedError

    def indexed_list_rows(self, param: str) -> str:
        """A subquery with columns ``pos, value``: the items of a bound list, in order."""
        raise NotImplementedError

    def bind_list(self, values: Sequence[Any]) -> Any:
        raise NotImplementedError

    def starts_with(self, expr: str, needle: str) -> str:
        raise NotImplementedError

    def ends_with(self, expr: str, needle: str) -> str:
        raise NotImplementedError

    def contains(self, expr: str, needle: str) -> str:
        raise NotImplementedError

    def visible(self, alias: str) -> str:
        """The ACL condition on an ``entities`` alias (needs the ``vis`` CTE).

        The unary ``+`` keeps the planner off the ``acl_set`` index: most entities
        share a handful of ACL sets, so that index never narrows a lookup, and
        driving a traversal step from it scans every visible entity.
        """
        return f"+{alias}.acl_set IN (SELECT acl_set FROM vis)"


@dataclass(frozen=True)
class SqliteDialect(Dialect):
    name: str = "sqlite"

    def param(self, name: str) -> str:
        return f":{name}"

    def acl_ctes(self) -> list[str]:
        # The one definition of identity expansion lives in the schema module.
        held = HELD_PRINCIPALS.strip().removeprefix("WITH RECURSIVE").strip()
        visible = VISIBLE_ACL_SETS[len(HELD_PRINCIPALS) :].strip()
        assert ":principal" in held
        return [held, f"vis(acl_set) AS ({visible})"]

    def list_rows(self, param: str) -> str:
        return f"SELECT value FROM json_each({self.param(param)})"

    def indexed_list_rows(self, param: str) -> str:
        return f"SELECT key AS pos, value FROM json_each({self.param(param)})"

    def bind_list(self, values: Sequence[Any]) -> Any:
        return json.dumps(list(values), ensure_ascii=False, allow_nan=False)

    def starts_with(self, expr: str, needle: str) -> str:
        return f"(instr({expr}, {needle}) = 1)"

    def ends_with(self, expr: str, needle: str) -> str:
        return (
            f"({expr} IS NOT NULL AND {needle} IS NOT NULL AND (length({needle}) = 0"
            f" OR substr({expr}, -length({needle})) = {needle}))"
        )

    def contains(self, expr: str, needle: str) -> str:
        return f"(instr({expr}, {needle}) > 0)"


SQLITE = SqliteDialect()
