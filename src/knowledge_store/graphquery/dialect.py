"""The dialect the query_graph compiler writes SQL through — a protocol, no database here.

Everything the compiler emits that differs between SQL engines goes through
these methods: placeholders, list parameters, string predicates, join quirks
and the ACL (``acl_ctes`` and ``visible``). The concrete dialects — SQLite and
PostgreSQL — live with the engines (``knowledge_store.engines.sql.dialect``),
which are the only producers of the ACL condition.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol

__all__ = ["Dialect"]


class Dialect(Protocol):
    """What the compiler needs from a SQL dialect."""

    @property
    def name(self) -> str: ...

    #: Joins inside a statement that may be reordered freely.
    @property
    def inner_join(self) -> str: ...

    #: Whether a recursive CTE may have several recursive SELECTs.
    @property
    def multiple_recursive_selects(self) -> bool: ...

    def param(self, name: str) -> str: ...

    def entities_by_uid(self, alias: str) -> str:
        """``entities`` under ``alias``, for a join that looks entities up by uid."""
        ...

    def bind_list(self, values: Sequence[Any]) -> Any: ...

    def list_rows(self, param: str) -> str: ...

    def starts_with(self, expr: str, needle: str) -> str: ...

    def ends_with(self, expr: str, needle: str) -> str: ...

    def contains(self, expr: str, needle: str) -> str: ...

    def acl_ctes(self) -> list[str]:
        """CTE definitions ``held(p)`` and ``vis(acl_set)`` for the reader's identity."""
        ...

    def held_params(self, held: Sequence[str]) -> dict[str, Any]:
        """The parameters :meth:`acl_ctes` needs."""
        ...

    def visible(self, alias: str, how: Literal["scan", "probe", "walk"] = "scan") -> str:
        """The caller may read ``entities`` row ``alias`` (needs :meth:`acl_ctes`)."""
        ...
