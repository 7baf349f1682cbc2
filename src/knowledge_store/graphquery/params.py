"""Parameters of query_graph: bound by name, each of the kind its place takes.

``check_params(query, params)`` returns every problem: a ``$name`` with no
value, a value no ``$name`` uses, a value of the wrong kind for its place
(a list for ``IN``, a string for ``STARTS WITH``, a whole number for LIMIT
and SKIP, a scalar elsewhere), a LIMIT over the maximum.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from knowledge_store.graphquery import nodes as n
from knowledge_store.graphquery.problems import QueryError
from knowledge_store.graphquery.validator import error_at
from knowledge_store.model import QUERY_GRAPH_MAX_LIST

__all__ = ["MAX_LIST_PARAM", "ParamUse", "check_params", "param_uses"]

#: Items in one list parameter (``IN $uids``).
MAX_LIST_PARAM = QUERY_GRAPH_MAX_LIST
_INT64 = (-(2**63), 2**63 - 1)

UseKind = Literal["scalar", "list", "string", "count"]


@dataclass(frozen=True)
class ParamUse:
    name: str
    kind: UseKind
    pos: n.Pos
    where: str  # for messages: "LIMIT", "STARTS WITH", "{uid: …}", …


def _predicates(expr: n.Expr) -> Iterator[n.Expr]:
    """The predicates of a WHERE expression (comparisons, IS NULL, bare operands)."""
    if isinstance(expr, n.And | n.Or):
        for item in expr.items:
            yield from _predicates(item)
    elif isinstance(expr, n.Not):
        yield from _predicates(expr.expr)
    else:
        yield expr


def param_uses(query: n.Query) -> list[ParamUse]:
    """Where each parameter is used, and what kind of value that place takes."""
    uses: list[ParamUse] = []
    for clause in query.clauses:
        for path in clause.patterns:
            for node in path.nodes:
                for name, value, _ in node.props:
                    if isinstance(value, n.Param):
                        uses.append(ParamUse(value.name, "scalar", value.pos, f"{{{name}: …}}"))
            for rel in path.rels:
                for name, value, _ in rel.props:
                    if isinstance(value, n.Param):
                        uses.append(ParamUse(value.name, "scalar", value.pos, f"{{{name}: …}}"))
        if clause.where is not None:
            for e in _predicates(clause.where):
                if isinstance(e, n.Compare):
                    for side in (e.left, e.right):
                        if isinstance(side, n.Param):
                            kind: UseKind = "scalar"
                            if e.op == "IN" and side is e.right:
                                kind = "list"
                            elif e.op in {"STARTS WITH", "ENDS WITH", "CONTAINS"}:
                                kind = "string"
                            uses.append(ParamUse(side.name, kind, side.pos, e.op))
                elif isinstance(e, n.IsNull) and isinstance(e.operand, n.Param):
                    uses.append(ParamUse(e.operand.name, "scalar", e.operand.pos, "IS NULL"))
                elif isinstance(e, n.Param):
                    uses.append(ParamUse(e.name, "scalar", e.pos, "WHERE"))
    for clause_name, count in (("SKIP", query.skip), ("LIMIT", query.limit)):
        if isinstance(count, n.Param):
            uses.append(ParamUse(count.name, "count", count.pos, clause_name))
    for item in query.items:
        if isinstance(item.expr, n.Param):
            uses.append(ParamUse(item.expr.name, "scalar", item.expr.pos, "RETURN"))
    return uses


def _text_problem(value: str) -> str | None:
    """What keeps a string out of a query (NUL, a lone surrogate), said for the message."""
    if "\x00" in value:
        return "holds a NUL character, which no stored value contains; remove it"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "holds a lone surrogate (\\ud800–\\udfff), which is not Unicode text"
    return None


def _is_scalar(value: Any) -> bool:
    if isinstance(value, bool) or value is None:
        return True
    if isinstance(value, str):
        return _text_problem(value) is None
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, int) and _INT64[0] <= value <= _INT64[1]


def _scalar_problem(value: Any, place: str) -> str:
    """Why ``value`` can't be bound at ``place`` (it is not ``_is_scalar``)."""
    if isinstance(value, str):
        return str(_text_problem(value))
    if isinstance(value, float):
        return f"is used in {place} and must be a finite number, not {value!r}"
    if isinstance(value, int):
        return f"is used in {place} and must fit in 64 bits"
    return (
        f"is used in {place} and must be a string, a number, a boolean or null"
        f" (lists go with IN), not {type(value).__name__}"
    )


def check_params(query: n.Query, params: Mapping[str, Any]) -> list[QueryError]:
    """Missing, unused and ill-typed parameters."""
    errors: list[QueryError] = []
    if not isinstance(params, Mapping):
        return [error_at("invalid_request", "parameters must be a mapping of name → value", None)]
    uses = param_uses(query)
    used = {u.name for u in uses}
    reported: set[str] = set()
    for use in uses:
        if use.name in params or use.name in reported:
            continue
        reported.add(use.name)
        errors.append(
            error_at(
                "invalid_request",
                f"parameter ${use.name} is not bound; pass a value for it by name in the parameters",
                use.pos,
                parameter=use.name,
            )
        )
    for name in params:
        if name not in used:
            errors.append(
                error_at(
                    "invalid_request",
                    f"parameter {name!r} is not used by the query; remove it or use ${name}",
                    None,
                    parameter=str(name),
                )
            )
    for use in uses:
        if use.name not in params:
            continue
        value = params[use.name]
        problem: str | None = None
        if use.kind == "list":
            if not isinstance(value, list | tuple):
                problem = f"is used with IN and must be a list, not {type(value).__name__}"
            elif len(value) > MAX_LIST_PARAM:
                errors.append(
                    error_at(
                        "bound_exceeded",
                        f"parameter ${use.name} holds {len(value)} items; the maximum is"
                        f" {MAX_LIST_PARAM}",
                        use.pos,
                        parameter=use.name,
                        maximum=MAX_LIST_PARAM,
                    )
                )
            else:
                bad = [v for v in value if not _is_scalar(v)]
                if bad and isinstance(bad[0], str):
                    problem = f"has an item that {_text_problem(bad[0])}"
                elif bad:
                    problem = "must be a list of strings, numbers, booleans or nulls"
        elif use.kind == "string":
            if not isinstance(value, str):
                problem = f"is used with {use.where} and must be a string"
            elif not _is_scalar(value):
                problem = _scalar_problem(value, use.where)
        elif use.kind == "count":
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                problem = f"is used as {use.where} and must be a whole number ≥ 0"
            elif value > _INT64[1]:
                problem = "is too large"
        elif not _is_scalar(value):
            problem = _scalar_problem(value, use.where)
        if problem is not None:
            errors.append(
                error_at(
                    "invalid_request",
                    f"parameter ${use.name} {problem}",
                    use.pos,
                    parameter=use.name,
                )
            )
    return errors
