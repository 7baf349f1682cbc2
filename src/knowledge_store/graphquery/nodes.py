"""The typed AST of query_graph: frozen dataclasses, each with its source position.

The parser builds these from the lark tree; the validator checks them against
the bounds of DESIGN §5; the compiler turns a valid tree into one statement.
Literal values are kept in the tree only so that the validator can reject them
with a position — the compiler never reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal as TypingLiteral

__all__ = [
    "And",
    "Compare",
    "Expr",
    "FuncCall",
    "IsNull",
    "Literal",
    "MatchClause",
    "NodePattern",
    "Not",
    "Operand",
    "Or",
    "Param",
    "PathPattern",
    "Pos",
    "Property",
    "Query",
    "RelPattern",
    "ReturnItem",
    "SortItem",
    "Star",
    "VarLength",
    "VarRef",
]

Direction = TypingLiteral["out", "in", "both"]
CompareOp = TypingLiteral[
    "=", "<>", "<", ">", "<=", ">=", "IN", "STARTS WITH", "ENDS WITH", "CONTAINS"
]


@dataclass(frozen=True)
class Pos:
    """1-based line and column of the first character of a node."""

    line: int
    column: int


# -- operands ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    """``$name``: a value bound by name (the only way a value enters a query)."""

    name: str
    pos: Pos


@dataclass(frozen=True)
class Literal:
    """A literal value written in the query text — always rejected by the validator."""

    text: str
    pos: Pos


@dataclass(frozen=True)
class Property:
    """``var.name``."""

    var: str
    name: str
    pos: Pos


@dataclass(frozen=True)
class VarRef:
    """A bare variable: a node or a relationship."""

    name: str
    pos: Pos


@dataclass(frozen=True)
class Star:
    """The ``*`` of ``count(*)``."""

    pos: Pos


@dataclass(frozen=True)
class FuncCall:
    """``count(*)``, ``count(x)``, ``count(DISTINCT x)``, ``type(r)``."""

    name: str
    args: tuple[Operand, ...]
    distinct: bool
    pos: Pos


Operand = Param | Literal | Property | VarRef | Star | FuncCall


# -- boolean expressions -------------------------------------------------------------------


@dataclass(frozen=True)
class Compare:
    op: CompareOp
    left: Operand
    right: Operand
    pos: Pos


@dataclass(frozen=True)
class IsNull:
    operand: Operand
    negated: bool
    pos: Pos


@dataclass(frozen=True)
class Not:
    expr: Expr
    pos: Pos


@dataclass(frozen=True)
class And:
    items: tuple[Expr, ...]
    pos: Pos


@dataclass(frozen=True)
class Or:
    items: tuple[Expr, ...]
    pos: Pos


Expr = Compare | IsNull | Not | And | Or | Operand  # a bare operand is rejected in WHERE


# -- patterns ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodePattern:
    """``(var:type {prop: $param, …})``; the label is the entity type."""

    var: str | None
    labels: tuple[str, ...]
    props: tuple[tuple[str, Operand, Pos], ...]
    pos: Pos


@dataclass(frozen=True)
class VarLength:
    """``*``, ``*d``, ``*lo..hi``, ``*..hi``, ``*lo..`` as written (the validator bounds it)."""

    lo: int | None
    hi: int | None
    exact: bool
    pos: Pos


@dataclass(frozen=True)
class RelPattern:
    """``-[var:l1|l2 *lo..hi]->`` and its mirror images; direction from the left node."""

    var: str | None
    labels: tuple[str, ...]
    direction: Direction
    length: VarLength | None
    props: tuple[tuple[str, Operand, Pos], ...]
    pos: Pos


@dataclass(frozen=True)
class PathPattern:
    nodes: tuple[NodePattern, ...]
    rels: tuple[RelPattern, ...]  # rels[i] joins nodes[i] and nodes[i + 1]
    pos: Pos


@dataclass(frozen=True)
class MatchClause:
    optional: bool
    patterns: tuple[PathPattern, ...]
    where: Expr | None
    pos: Pos


# -- projection ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReturnItem:
    expr: Operand
    alias: str | None
    text: str  # the expression as written, normalised: the column name without an alias
    pos: Pos

    @property
    def column(self) -> str:
        return self.alias if self.alias is not None else self.text


@dataclass(frozen=True)
class SortItem:
    expr: Operand
    descending: bool
    pos: Pos


@dataclass(frozen=True)
class Query:
    clauses: tuple[MatchClause, ...]
    distinct: bool
    items: tuple[ReturnItem, ...]
    order: tuple[SortItem, ...]
    skip: Param | int | Literal | None
    limit: Param | int | Literal | None
    pos: Pos
    skip_pos: Pos | None = None
    limit_pos: Pos | None = None
