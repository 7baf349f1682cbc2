"""The bounds of query_graph (DESIGN §5), checked on the AST before anything runs.

``validate(query)`` returns every problem of the text alone (labels, depth,
properties, literals, variables, LIMIT); :func:`.params.check_params` every
problem of the parameters. Both return lists so that the lenient mode can
report all problems at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from knowledge_store.graphquery import nodes as n
from knowledge_store.graphquery.problems import QueryError
from knowledge_store.model import (
    DEFAULT_QUERY_GRAPH_LIMIT,
    LABELS,
    QUERY_GRAPH_MAX_DEPTH,
    QUERY_GRAPH_MAX_LIMIT,
    near_misses,
)

__all__ = [
    "DEFAULT_LIMIT",
    "MAX_DEPTH",
    "MAX_LIMIT",
    "MAX_PATTERN_ELEMENTS",
    "NODE_PROPERTIES",
    "REL_PROPERTIES",
    "Analysis",
    "analyse",
    "error_at",
    "limit_warning",
    "same_operand",
    "validate",
]

#: Node properties a query may name (the entity's typed fields).
NODE_PROPERTIES: tuple[str, ...] = (
    "uid",
    "type",
    "title",
    "source",
    "status",
    "href",
    "created_at",
    "updated_at",
)
#: Relationship properties (the label is ``type(r)``).
REL_PROPERTIES: tuple[str, ...] = ("position",)
MAX_DEPTH = QUERY_GRAPH_MAX_DEPTH
DEFAULT_LIMIT = DEFAULT_QUERY_GRAPH_LIMIT
MAX_LIMIT = QUERY_GRAPH_MAX_LIMIT
#: Node and relationship patterns in one query, all clauses together.
MAX_PATTERN_ELEMENTS = 32
_FUNCTIONS = ("count", "type")

VarKind = Literal["node", "rel", "path"]


@dataclass
class Analysis:
    """Variables of a query: name → kind and the clause that binds it first."""

    kinds: dict[str, VarKind] = field(default_factory=dict)
    first_clause: dict[str, int] = field(default_factory=dict)
    errors: list[QueryError] = field(default_factory=list)


def error_at(code: str, message: str, pos: n.Pos | None, **details: Any) -> QueryError:
    """A :class:`QueryError` at ``pos`` (None: the query as a whole)."""
    return QueryError(
        code,
        message,
        pos.line if pos else None,
        pos.column if pos else None,
        {k: v for k, v in details.items() if v is not None},
    )


def _literal_error(lit: n.Literal, suggestion: str) -> QueryError:
    shown = lit.text if len(lit.text) <= 40 else lit.text[:37] + "…"
    return error_at(
        "invalid_request",
        f"{shown} is a literal value; values enter only as parameters: write ${suggestion}"
        f" and pass it by name (parameter {suggestion!r})",
        lit.pos,
        hint=f"${suggestion}",
    )


def _label_error(label: str, pos: n.Pos) -> QueryError:
    close = near_misses(label, LABELS, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return error_at(
        "unknown_label",
        f"unknown relationship type {label!r}{hint}; use one of: {', '.join(LABELS)}",
        pos,
        label=label,
        allowed=list(LABELS),
    )


def _field_error(var: str, name: str, pos: n.Pos, kind: VarKind) -> QueryError:
    allowed = NODE_PROPERTIES if kind == "node" else REL_PROPERTIES
    what = "node" if kind == "node" else "relationship"
    extra = (
        "; a relationship's label is type(r)" if kind == "rel" and name in {"label", "type"} else ""
    )
    return error_at(
        "unknown_field",
        f"unknown {what} property {var}.{name}; use one of: {', '.join(allowed)}{extra}",
        pos,
        field=name,
        allowed=list(allowed),
    )


def _depth_errors(length: n.VarLength) -> list[QueryError]:
    lo, hi = length.lo, length.hi
    if hi is None:
        written = "*" if lo is None else f"*{lo}.."
        return [
            error_at(
                "bound_exceeded",
                f"`{written}` has no upper bound; write `*1..d` with d at most {MAX_DEPTH}"
                f" (e.g. `*1..{MAX_DEPTH}`)",
                length.pos,
                maximum=MAX_DEPTH,
            )
        ]
    errors: list[QueryError] = []
    if hi > MAX_DEPTH:
        low = lo if lo is not None and lo <= MAX_DEPTH else 1
        errors.append(
            error_at(
                "bound_exceeded",
                f"`depth` {hi} exceeds the maximum of {MAX_DEPTH}; write `*{low}..{MAX_DEPTH}`",
                length.pos,
                depth=hi,
                maximum=MAX_DEPTH,
            )
        )
    if lo is not None and lo < 1:
        errors.append(
            error_at(
                "invalid_request",
                f"a variable-length relationship starts at 1 hop, not {lo}; write `*1..{min(hi, MAX_DEPTH)}`",
                length.pos,
            )
        )
    elif lo is not None and lo > hi:
        errors.append(
            error_at(
                "invalid_request",
                f"`*{lo}..{hi}`: the lower bound is above the upper bound; write `*{hi}..{lo}`",
                length.pos,
            )
        )
    return errors


def analyse(query: n.Query) -> Analysis:
    """Bind the variables of every pattern, in order, and check the patterns."""
    a = Analysis()
    elements = 0
    for index, clause in enumerate(query.clauses):
        for path in clause.patterns:
            elements += len(path.nodes) + len(path.rels)
            for node in path.nodes:
                _bind(a, node.var, "node", index, node.pos)
                if len(node.labels) > 1:
                    a.errors.append(
                        error_at(
                            "invalid_request",
                            f"a node takes one type, not {len(node.labels)}"
                            f" (:{':'.join(node.labels)}); for any of several types write"
                            " WHERE n.type IN $types",
                            node.pos,
                        )
                    )
                for name, value, pos in node.props:
                    if name not in NODE_PROPERTIES:
                        a.errors.append(_field_error(node.var or "node", name, pos, "node"))
                    a.errors.extend(_map_value_errors(name, value))
            for rel in path.rels:
                kind: VarKind = "path" if rel.length is not None else "rel"
                _bind(a, rel.var, kind, index, rel.pos)
                if rel.var is not None and rel.length is not None:
                    a.errors.append(
                        error_at(
                            "invalid_request",
                            f"a variable-length relationship cannot be bound to a variable;"
                            f" drop `{rel.var}` (return the nodes at its ends instead)",
                            rel.pos,
                        )
                    )
                for label in rel.labels:
                    if label not in LABELS:
                        a.errors.append(_label_error(label, rel.pos))
                if rel.length is not None:
                    a.errors.extend(_depth_errors(rel.length))
                    if rel.props:
                        a.errors.append(
                            error_at(
                                "invalid_request",
                                "a variable-length relationship takes no properties",
                                rel.pos,
                            )
                        )
                for name, value, pos in rel.props if rel.length is None else ():
                    if name not in REL_PROPERTIES:
                        a.errors.append(_field_error(rel.var or "relationship", name, pos, "rel"))
                    a.errors.extend(_map_value_errors(name, value))
        if clause.where is not None:
            a.errors.extend(_where_errors(a, clause.where, index))
    if elements > MAX_PATTERN_ELEMENTS:
        a.errors.append(
            error_at(
                "bound_exceeded",
                f"the query has {elements} node and relationship patterns; the maximum is"
                f" {MAX_PATTERN_ELEMENTS}",
                query.pos,
                maximum=MAX_PATTERN_ELEMENTS,
            )
        )
    return a


def _bind(a: Analysis, var: str | None, kind: VarKind, clause: int, pos: n.Pos) -> None:
    if var is None:
        return
    known = a.kinds.get(var)
    if known is None:
        a.kinds[var] = kind
        a.first_clause[var] = clause
        return
    if known != kind or kind != "node":
        what = {"node": "a node", "rel": "a relationship", "path": "a variable-length relationship"}
        again = "twice" if known == kind else f"as {what[kind]} after {what[known]}"
        a.errors.append(
            error_at(
                "invalid_request",
                f"variable `{var}` is bound {again}; give each relationship its own variable",
                pos,
                variable=var,
            )
        )


def _map_value_errors(name: str, value: n.Operand) -> list[QueryError]:
    if isinstance(value, n.Param):
        return []
    if isinstance(value, n.Literal):
        return [_literal_error(value, name)]
    return [
        error_at(
            "invalid_request",
            f"a property map takes parameters: write {{{name}: ${name}}}",
            _operand_pos(value),
        )
    ]


def _operand_pos(op: n.Operand) -> n.Pos:
    return op.pos


def _where_errors(a: Analysis, expr: n.Expr, clause: int) -> list[QueryError]:
    errors: list[QueryError] = []
    if isinstance(expr, n.And | n.Or):
        for item in expr.items:
            errors.extend(_where_errors(a, item, clause))
        return errors
    if isinstance(expr, n.Not):
        return _where_errors(a, expr.expr, clause)
    if isinstance(expr, n.IsNull):
        return _operand_errors(a, expr.operand, clause, where=True, hint="value")
    if isinstance(expr, n.Compare):
        hint = _hint(expr.left) or _hint(expr.right) or "value"
        errors.extend(_operand_errors(a, expr.left, clause, where=True, hint=hint))
        errors.extend(
            _operand_errors(
                a, expr.right, clause, where=True, hint=hint + "s" if expr.op == "IN" else hint
            )
        )
        if expr.op == "IN" and not isinstance(expr.right, n.Param | n.Literal):
            errors.append(
                error_at(
                    "invalid_request",
                    "the right side of IN must be a parameter holding a list, e.g. n.uid IN $uids",
                    expr.pos,
                )
            )
        nodes = [op for op in (expr.left, expr.right) if _is_node_ref(a, op)]
        if nodes and (expr.op not in {"=", "<>"} or len(nodes) != 2):
            errors.append(
                error_at(
                    "invalid_request",
                    "a node compares only with another node, with = or <>;"
                    " compare its properties instead (e.g. n.uid = $uid)",
                    expr.pos,
                )
            )
        return errors
    # a bare operand where a condition should be
    errors.extend(_operand_errors(a, expr, clause, where=True, hint="value"))
    if not errors:
        errors.append(
            error_at(
                "invalid_request",
                "a WHERE condition compares something: write e.g. n.status = $status,"
                " n.uid IN $uids or n.href IS NULL",
                _operand_pos(expr),
            )
        )
    return errors


def _is_node_ref(a: Analysis, op: n.Operand) -> bool:
    return isinstance(op, n.VarRef) and a.kinds.get(op.name) == "node"


def _hint(op: n.Operand) -> str | None:
    if isinstance(op, n.Property):
        return op.name
    if isinstance(op, n.FuncCall) and op.name == "type":
        return "label"
    return None


def _operand_errors(
    a: Analysis,
    op: n.Operand,
    clause: int | None,
    *,
    where: bool,
    hint: str,
) -> list[QueryError]:
    """Problems of one operand; ``clause`` None means RETURN/ORDER BY (every clause bound)."""

    def unbound(var: str, pos: n.Pos) -> QueryError | None:
        if var not in a.kinds:
            return error_at(
                "invalid_request",
                f"unknown variable `{var}`; bind it in a MATCH pattern first",
                pos,
                variable=var,
            )
        if clause is not None and a.first_clause[var] > clause:
            return error_at(
                "invalid_request",
                f"variable `{var}` is used before the MATCH that binds it",
                pos,
                variable=var,
            )
        return None

    if isinstance(op, n.Literal):
        return [_literal_error(op, hint)]
    if isinstance(op, n.Param):
        if not where:
            return [
                error_at(
                    "invalid_request",
                    f"RETURN and ORDER BY take variables, properties and count(), not ${op.name}",
                    op.pos,
                )
            ]
        return []
    if isinstance(op, n.Star):
        return [error_at("invalid_request", "`*` is only allowed as count(*)", op.pos)]
    if isinstance(op, n.VarRef):
        problem = unbound(op.name, op.pos)
        if problem is None and a.kinds[op.name] == "path":
            problem = error_at(
                "invalid_request",
                f"`{op.name}` is a variable-length relationship and cannot be used",
                op.pos,
            )
        return [problem] if problem else []
    if isinstance(op, n.Property):
        problem = unbound(op.var, op.pos)
        if problem is not None:
            return [problem]
        kind = a.kinds[op.var]
        if kind == "path":
            return [
                error_at(
                    "invalid_request",
                    f"`{op.var}` is a variable-length relationship and has no properties",
                    op.pos,
                )
            ]
        allowed = NODE_PROPERTIES if kind == "node" else REL_PROPERTIES
        return [] if op.name in allowed else [_field_error(op.var, op.name, op.pos, kind)]
    # a function call
    if op.name not in _FUNCTIONS:
        return [
            error_at(
                "invalid_request",
                f"unknown function {op.name}(); query_graph has count(*), count(x),"
                " count(DISTINCT x) and type(r)",
                op.pos,
                function=op.name,
            )
        ]
    if op.name == "count":
        if where:
            return [error_at("invalid_request", "count() belongs in RETURN, not in WHERE", op.pos)]
        if len(op.args) != 1:
            return [
                error_at(
                    "invalid_request", "count takes one argument: count(*) or count(x)", op.pos
                )
            ]
        arg = op.args[0]
        if isinstance(arg, n.Star):
            if op.distinct:
                return [error_at("invalid_request", "write count(*) or count(DISTINCT x)", op.pos)]
            return []
        if isinstance(arg, n.VarRef | n.Property):
            return _operand_errors(a, arg, clause, where=False, hint=hint)
        return [error_at("invalid_request", "count takes *, a variable or a property", op.pos)]
    # type(r)
    if op.distinct or len(op.args) != 1 or not isinstance(op.args[0], n.VarRef):
        return [error_at("invalid_request", "write type(r) with r a relationship variable", op.pos)]
    arg = op.args[0]
    problem = unbound(arg.name, arg.pos)
    if problem is None and a.kinds[arg.name] != "rel":
        problem = error_at(
            "invalid_request",
            f"type() takes a relationship variable; `{arg.name}` is not one",
            arg.pos,
        )
    return [problem] if problem else []


def _is_count(op: n.Operand) -> bool:
    return isinstance(op, n.FuncCall) and op.name == "count"


def validate(query: n.Query) -> list[QueryError]:
    """Every problem of the query text (parameters are checked by :func:`check_params`)."""
    a = analyse(query)
    errors = list(a.errors)
    columns: dict[str, n.Pos] = {}
    for item in query.items:
        errors.extend(_operand_errors(a, item.expr, None, where=False, hint="value"))
        if item.column in columns:
            errors.append(
                error_at(
                    "invalid_request",
                    f"two columns are named {item.column!r}; give one of them an alias with AS",
                    item.pos,
                )
            )
        columns[item.column] = item.pos
    aggregating = any(_is_count(i.expr) for i in query.items)
    for sort in query.order:
        errors.extend(_sort_errors(a, query, sort, aggregating))
    for name, value in (("SKIP", query.skip), ("LIMIT", query.limit)):
        if isinstance(value, n.Literal):
            errors.append(
                error_at(
                    "invalid_request",
                    f"{name} takes a whole number or a $parameter, not {value.text}",
                    value.pos,
                )
            )
    return errors


def limit_warning(value: int) -> str:
    """The note of an answer whose LIMIT was capped (DESIGN §5: capped, not refused)."""
    return f"LIMIT {value} was capped at {MAX_LIMIT}: at most {MAX_LIMIT} rows; page with SKIP"


def _sort_errors(
    a: Analysis, query: n.Query, sort: n.SortItem, aggregating: bool
) -> list[QueryError]:
    expr = sort.expr
    if isinstance(expr, n.VarRef) and any(i.alias == expr.name for i in query.items):
        return []
    if any(same_operand(i.expr, expr) for i in query.items):
        return []
    if aggregating or query.distinct:
        return [
            error_at(
                "invalid_request",
                "with DISTINCT or count(), ORDER BY can only use the returned columns;"
                " order by a column alias or add the expression to RETURN",
                sort.pos,
            )
        ]
    if _is_count(expr):
        return [error_at("invalid_request", "ORDER BY count(…) needs count(…) in RETURN", sort.pos)]
    return _operand_errors(a, expr, None, where=False, hint="value")


def same_operand(x: n.Operand, y: n.Operand) -> bool:
    """Structural equality, ignoring positions."""
    if type(x) is not type(y):
        return False
    if isinstance(x, n.Property) and isinstance(y, n.Property):
        return (x.var, x.name) == (y.var, y.name)
    if isinstance(x, n.VarRef) and isinstance(y, n.VarRef):
        return x.name == y.name
    if isinstance(x, n.FuncCall) and isinstance(y, n.FuncCall):
        return (
            x.name == y.name
            and x.distinct == y.distinct
            and len(x.args) == len(y.args)
            and all(same_operand(p, q) for p, q in zip(x.args, y.args, strict=True))
        )
    return isinstance(x, n.Star) and isinstance(y, n.Star)
