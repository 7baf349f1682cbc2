"""A valid query_graph AST → ONE parameterised SQL statement over the catalog.

What may appear in the SQL text: SQL keywords, table and column names of the
catalog, aliases the compiler makes up (``n0``, ``r1``, ``reach0`` …), the
closed vocabularies (the 9 edge labels, the 8 node properties) and generated
parameter names. Every value — each ``$param``, every node type written as
``(n:type)``, depth bounds, LIMIT and SKIP, the caller's principal — is a bound
parameter. The user's own variable and parameter names never reach the SQL.

The ACL is inside the statement: the dialect's ``held``/``vis`` CTEs turn the
bound principals the reader holds into the ACL sets it may read, every node
alias carries the dialect's visibility condition, and variable-length patterns walk
the shared traversal step (:mod:`.steps`), which only lands on visible
entities — so a path through an unreadable entity does not match.

Semantics worth knowing (docs/query_graph.md): a variable-length pattern
``*lo..hi`` matches each pair of entities whose shortest visible distance is
within lo..hi once (not once per path); the relationships of one MATCH clause
are distinct (openCypher's relationship uniqueness); OPTIONAL MATCH is all or
nothing per clause.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from knowledge_store.graphquery import nodes as n
from knowledge_store.graphquery.dialect import Dialect
from knowledge_store.graphquery.params import param_uses
from knowledge_store.graphquery.steps import reach_ctes
from knowledge_store.graphquery.validator import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    NODE_PROPERTIES,
    REL_PROPERTIES,
    analyse,
    limit_warning,
    same_operand,
)
from knowledge_store.model import LABELS

__all__ = ["Column", "CompiledQuery", "compile_query"]

ColumnKind = Literal["node", "rel", "value"]
_REL_COLUMNS = ("src", "label", "dst", "position")


@dataclass(frozen=True)
class Column:
    """One result column: its name and how many SQL columns make it."""

    name: str
    kind: ColumnKind

    @property
    def width(self) -> int:
        return len(NODE_PROPERTIES) if self.kind == "node" else 4 if self.kind == "rel" else 1


@dataclass(frozen=True)
class CompiledQuery:
    sql: str
    params: dict[str, Any]
    columns: tuple[Column, ...]
    limit: int
    skip: int
    #: Notes for the answer: a LIMIT above the bound, capped.
    warnings: tuple[str, ...] = ()

    def shape(self, row: tuple[Any, ...]) -> list[Any]:
        """One SQL row → the result row: nodes and relationships as objects."""
        out: list[Any] = []
        i = 0
        for col in self.columns:
            part = row[i : i + col.width]
            i += col.width
            if col.kind == "node":
                out.append(
                    None if part[0] is None else dict(zip(NODE_PROPERTIES, part, strict=True))
                )
            elif col.kind == "rel":
                out.append(None if part[0] is None else dict(zip(_REL_COLUMNS, part, strict=True)))
            else:
                out.append(part[0])
        return out


@dataclass(frozen=True)
class _Cond:
    """A join or filter condition and the SQL aliases it references."""

    sql: str
    aliases: frozenset[str]

    def __init__(self, sql: str, aliases: set[str] | frozenset[str]) -> None:
        object.__setattr__(self, "sql", sql)
        object.__setattr__(self, "aliases", frozenset(aliases))


_KEY_COLUMN = {"entities": "id", "edges": "src"}


def _optional_joins(new: list[tuple[str, str]], conds: list[_Cond]) -> list[str]:
    """OPTIONAL MATCH as a chain of LEFT JOINs that binds all of the clause or none of it.

    Each alias joins with the conditions it completes and an EXISTS check that
    the rest of the clause can still be matched; every later alias also needs
    the first one bound. (A parenthesised join group would say the same, but
    SQLite materialises such a group in full before joining it.)
    """
    group = {alias for _, alias in new}
    table_of = {alias: table for table, alias in new}
    order: list[str] = []
    bound = {a for c in conds for a in c.aliases} - group
    remaining = [alias for _, alias in new]
    while remaining:

        def linked(alias: str) -> bool:
            return any(
                alias in c.aliases and c.aliases <= bound | {alias} and c.aliases & bound
                for c in conds
            )

        pick = next((a for a in remaining if linked(a) and table_of[a] != "entities"), None)
        pick = pick or next((a for a in remaining if linked(a)), None)
        pick = pick or next((a for a in remaining if table_of[a] != "entities"), remaining[0])
        order.append(pick)
        remaining.remove(pick)
        bound.add(pick)
    joins: list[str] = []
    placed: set[str] = set()
    done: set[_Cond] = set()
    first = order[0]
    for i, alias in enumerate(order):
        placed.add(alias)
        on = [c for c in conds if c not in done and (c.aliases & group) <= placed]
        done.update(on)
        parts = [c.sql for c in on]
        if i:
            parts.append(f"{first}.{_KEY_COLUMN.get(table_of[first], 'anchor')} IS NOT NULL")
        rest = order[i + 1 :]
        if rest:
            tables = ", ".join(f"{table_of[a]} AS {a}" for a in rest)
            inner = [c.sql for c in conds if c.aliases & set(rest)]
            parts.append(f"EXISTS (SELECT 1 FROM {tables} WHERE {' AND '.join(inner) or '1 = 1'})")
        joins.append(f"LEFT JOIN {table_of[alias]} AS {alias} ON {' AND '.join(parts) or '1 = 1'}")
    return joins


@dataclass
class _Alias:
    name: str
    kind: Literal["node", "rel"]


@dataclass
class _State:
    dialect: Dialect
    params: dict[str, Any] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)  # user param name → generated
    aliases: dict[str, _Alias] = field(default_factory=dict)  # user variable → SQL alias
    ctes: list[str] = field(default_factory=list)
    counter: int = 0

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def value(self, prefix: str, value: Any) -> str:
        """Bind an internal value (node type, depth, limit) under a generated name."""
        name = self.fresh(prefix)
        self.params[name] = value
        return self.dialect.param(name)


def compile_query(
    query: n.Query,
    params: Mapping[str, Any],
    held: Sequence[str],
    *,
    dialect: Dialect,
) -> CompiledQuery:
    """Compile a validated query with checked parameters (see :mod:`.validator`).

    ``held``: the principals the reader's identity holds (bound, never in the text).
    """
    st = _State(dialect)
    st.params.update(dialect.held_params(held))
    list_params = {u.name for u in param_uses(query) if u.kind == "list"}
    for i, name in enumerate(sorted({u.name for u in param_uses(query)})):
        generated = f"q{i}"
        st.names[name] = generated
        value = params[name]
        st.params[generated] = dialect.bind_list(value) if name in list_params else value
    kinds = analyse(query).kinds

    from_parts = ["(SELECT 1 AS one) AS unit"]
    where: list[str] = []
    for index, clause in enumerate(query.clauses):
        new: list[tuple[str, str]] = []
        conds: list[_Cond] = []
        fixed_rels: list[tuple[str, tuple[str, ...]]] = []
        for path in clause.patterns:
            ends: list[str] = []
            for node in path.nodes:
                alias = _node_alias(st, node, new, conds)
                conds.extend(_Cond(c, {alias}) for c in _node_conditions(st, node, alias))
                ends.append(alias)
            for i, rel in enumerate(path.rels):
                left, right = ends[i], ends[i + 1]
                if rel.length is None:
                    alias = _rel_alias(st, rel, new)
                    conds.extend(_rel_conditions(st, rel, alias, left, right))
                    fixed_rels.append((alias, rel.labels))
                else:
                    table, alias, from_left = _var_length(st, query, index, path, i, rel)
                    new.append((table, alias))
                    anchor, other = (left, right) if from_left else (right, left)
                    conds.append(_Cond(f"{alias}.anchor = {anchor}.uid", {alias, anchor}))
                    conds.append(_Cond(f"{alias}.node = {other}.uid", {alias, other}))
        # openCypher: the relationships of one MATCH clause are distinct
        for j, (a, la) in enumerate(fixed_rels):
            for b, lb in fixed_rels[j + 1 :]:
                if not la or not lb or set(la) & set(lb):
                    conds.append(
                        _Cond(
                            f"NOT ({a}.src = {b}.src AND {a}.label = {b}.label AND {a}.dst = {b}.dst)",
                            {a, b},
                        )
                    )
        if clause.where is not None:
            used = {st.aliases[v].name for v in _vars(clause.where) if v in st.aliases}
            conds.append(_Cond(_expr(st, clause.where, kinds), used))
        if not clause.optional:
            from_parts.extend(f"{dialect.inner_join} {table} AS {alias}" for table, alias in new)
            where.extend(c.sql for c in conds)
        elif new:
            from_parts.extend(_optional_joins(new, conds))

    columns: list[Column] = []
    select: list[str] = []
    outputs: dict[int, list[str]] = {}  # return item index → its SQL output columns
    group_by: list[str] = []
    aggregating = any(_is_count(item.expr) for item in query.items)
    for k, item in enumerate(query.items):
        exprs, kind = _projection(st, item.expr, kinds)
        names = []
        for e in exprs:
            out = f"c{len(select)}"
            select.append(f"{e} AS {out}")
            names.append(out)
        outputs[k] = names
        columns.append(Column(item.column, kind))
        if aggregating and not _is_count(item.expr):
            group_by.append(_group_key(st, item.expr, exprs))

    order: list[str] = []
    for sort in query.order:
        targets = _sort_targets(st, query, sort.expr, outputs, kinds)
        suffix = " DESC NULLS FIRST" if sort.descending else " NULLS LAST"
        order.extend(f"{t}{suffix}" for t in targets)

    requested = _count(query.limit, params, DEFAULT_LIMIT)
    limit = min(requested, MAX_LIMIT)
    warnings = (limit_warning(requested),) if requested > MAX_LIMIT else ()
    skip = _count(query.skip, params, 0)
    sql = "WITH RECURSIVE " + ",\n".join([*dialect.acl_ctes(), *st.ctes])
    sql += f"\nSELECT {'DISTINCT ' if query.distinct else ''}{', '.join(select)}"
    sql += "\nFROM " + "\n".join(from_parts)
    if where:
        sql += "\nWHERE " + "\nAND ".join(f"({w})" for w in where)
    if group_by:
        sql += "\nGROUP BY " + ", ".join(group_by)
    if order:
        sql += "\nORDER BY " + ", ".join(order)
    sql += f"\nLIMIT {st.value('lim', limit + 1)} OFFSET {st.value('off', skip)}"
    return CompiledQuery(sql, st.params, tuple(columns), limit, skip, warnings)


# -- patterns -------------------------------------------------------------------------------------------


def _node_alias(
    st: _State, node: n.NodePattern, new: list[tuple[str, str]], conds: list[_Cond]
) -> str:
    if node.var is not None and node.var in st.aliases:
        return st.aliases[node.var].name
    alias = st.fresh("n")
    if node.var is not None:
        st.aliases[node.var] = _Alias(alias, "node")
    new.append(("entities", alias))
    conds.append(_Cond(st.dialect.visible(alias, "walk"), {alias}))
    return alias


def _node_conditions(st: _State, node: n.NodePattern, alias: str) -> list[str]:
    conds: list[str] = []
    if node.labels:
        conds.append(f"{alias}.type = {st.value('t', node.labels[0])}")
    for name, value, _ in node.props:
        assert name in NODE_PROPERTIES and isinstance(value, n.Param)
        conds.append(f"{alias}.{name} = {_param(st, value)}")
    return conds


def _rel_alias(st: _State, rel: n.RelPattern, new: list[tuple[str, str]]) -> str:
    alias = st.fresh("r")
    if rel.var is not None:
        st.aliases[rel.var] = _Alias(alias, "rel")
    new.append(("edges", alias))
    return alias


def _labels_in(column: str, labels: tuple[str, ...]) -> str:
    assert all(label in LABELS for label in labels)
    return f"{column} IN ({', '.join(repr(label) for label in labels)})"


def _rel_conditions(
    st: _State, rel: n.RelPattern, alias: str, left: str, right: str
) -> list[_Cond]:
    if rel.direction == "both":
        out = f"{alias}.src = {left}.uid AND {alias}.dst = {right}.uid"
        back = f"{alias}.src = {right}.uid AND {alias}.dst = {left}.uid"
        conds = [
            # implied by the pair below; each links the edge to one end (an index lookup)
            _Cond(f"({alias}.src = {left}.uid OR {alias}.dst = {left}.uid)", {alias, left}),
            _Cond(f"({alias}.src = {right}.uid OR {alias}.dst = {right}.uid)", {alias, right}),
            _Cond(f"(({out}) OR ({back}))", {alias, left, right}),
        ]
    else:
        src, dst = (left, right) if rel.direction == "out" else (right, left)
        conds = [
            _Cond(f"{alias}.src = {src}.uid", {alias, src}),
            _Cond(f"{alias}.dst = {dst}.uid", {alias, dst}),
        ]
    if rel.labels:
        conds.append(_Cond(_labels_in(f"{alias}.label", rel.labels), {alias}))
    for name, value, _ in rel.props:
        assert name in REL_PROPERTIES and isinstance(value, n.Param)
        conds.append(_Cond(f"{alias}.{name} = {_param(st, value)}", {alias}))
    return conds


def _constraint_score(query: n.Query, index: int, node: n.NodePattern) -> int:
    """How selective the known constraints on a node are (a uid is best)."""
    score = 0
    for pattern in _eligible_patterns(query, index, node):
        score += 2 if pattern.labels else 0
        score += sum(10 if name == "uid" else 2 for name, _, _ in pattern.props)
    if node.var is not None:
        for conj in _eligible_conjuncts(query, index, node.var):
            score += 10 if _mentions_uid(conj) else 2
    return score


def _mentions_uid(expr: n.Expr) -> bool:
    return (
        isinstance(expr, n.Compare)
        and expr.op in {"=", "IN"}
        and any(
            isinstance(side, n.Property) and side.name == "uid" for side in (expr.left, expr.right)
        )
    )


def _eligible_patterns(query: n.Query, index: int, node: n.NodePattern) -> list[n.NodePattern]:
    """Node patterns whose constraints hold wherever ``node``'s variable is bound."""
    if node.var is None:
        return [node]
    out: list[n.NodePattern] = []
    for ci, clause in enumerate(query.clauses):
        if clause.optional and ci != index:
            continue
        for path in clause.patterns:
            out.extend(p for p in path.nodes if p.var == node.var)
    return out


def _conjuncts(expr: n.Expr) -> list[n.Expr]:
    if isinstance(expr, n.And):
        return [c for item in expr.items for c in _conjuncts(item)]
    return [expr]


def _vars(expr: n.Expr | n.Operand) -> set[str]:
    if isinstance(expr, n.And | n.Or):
        return set().union(*(_vars(i) for i in expr.items))
    if isinstance(expr, n.Not):
        return _vars(expr.expr)
    if isinstance(expr, n.Compare):
        return _vars(expr.left) | _vars(expr.right)
    if isinstance(expr, n.IsNull):
        return _vars(expr.operand)
    if isinstance(expr, n.Property):
        return {expr.var}
    if isinstance(expr, n.VarRef):
        return {expr.name}
    if isinstance(expr, n.FuncCall):
        return set().union(*(_vars(a) for a in expr.args)) if expr.args else set()
    return set()


def _eligible_conjuncts(query: n.Query, index: int, var: str) -> list[n.Expr]:
    """WHERE conjuncts on ``var`` alone that hold wherever it is bound in clause ``index``."""
    out: list[n.Expr] = []
    for ci, clause in enumerate(query.clauses):
        if clause.where is None or (clause.optional and ci != index):
            continue
        out.extend(c for c in _conjuncts(clause.where) if _vars(c) == {var})
    return out


def _anchor_index(query: n.Query, index: int, path: n.PathPattern, i: int) -> int:
    """Which end of ``path.rels[i]`` seeds the walk: the one with the stronger constraints."""
    left, right = path.nodes[i], path.nodes[i + 1]
    if _constraint_score(query, index, right) > _constraint_score(query, index, left):
        return i + 1
    return i


def _var_length(
    st: _State, query: n.Query, index: int, path: n.PathPattern, i: int, rel: n.RelPattern
) -> tuple[str, str, bool]:
    """Add the walk CTEs of a ``*lo..hi`` pattern: (CTE name, alias, walks from the left)."""
    assert rel.length is not None and rel.length.hi is not None
    anchor_index = _anchor_index(query, index, path, i)
    anchor = path.nodes[anchor_index]
    direction = rel.direction
    if anchor_index != i:  # walking from the right end: the arrows turn round
        direction = "in" if direction == "out" else "out" if direction == "in" else "both"
    seed_conds = [st.dialect.visible("s", "walk")]
    for pattern in _eligible_patterns(query, index, anchor):
        seed_conds.extend(_node_conditions(st, pattern, "s"))
    if anchor.var is not None:
        kinds = {anchor.var: "node"}
        for conj in _eligible_conjuncts(query, index, anchor.var):
            seed_conds.append(_expr(st, conj, kinds, rename={anchor.var: "s"}))
    seed = f"SELECT s.uid AS uid FROM entities AS s WHERE {' AND '.join(seed_conds)}"
    name = st.fresh("reach")
    lo = rel.length.lo if rel.length.lo is not None else 1
    lo_name, hi_name = st.fresh("lo"), st.fresh("hi")
    st.params[lo_name] = lo
    st.params[hi_name] = rel.length.hi
    st.ctes.extend(
        reach_ctes(
            name,
            direction=direction,
            labels=rel.labels,
            seed=seed,
            lo_param=lo_name,
            hi_param=hi_name,
            dialect=st.dialect,
        )
    )
    return name, st.fresh("v"), anchor_index == i


# -- expressions ------------------------------------------------------------------------------------------


def _param(st: _State, p: n.Param) -> str:
    return st.dialect.param(st.names[p.name])


def _operand(
    st: _State, op: n.Operand, kinds: Mapping[str, str], rename: Mapping[str, str] | None = None
) -> str:
    def alias(var: str) -> str:
        if rename and var in rename:
            return rename[var]
        return st.aliases[var].name

    if isinstance(op, n.Param):
        return _param(st, op)
    if isinstance(op, n.Property):
        allowed = NODE_PROPERTIES if kinds.get(op.var) == "node" else REL_PROPERTIES
        assert op.name in allowed
        return f"{alias(op.var)}.{op.name}"
    if isinstance(op, n.VarRef):
        return f"{alias(op.name)}.{'id' if kinds.get(op.name) == 'node' else 'src'}"
    if isinstance(op, n.FuncCall) and op.name == "type":
        arg = op.args[0]
        assert isinstance(arg, n.VarRef)
        return f"{alias(arg.name)}.label"
    raise AssertionError(f"not an operand here: {op!r}")  # the validator rejects it


def _expr(
    st: _State, expr: n.Expr, kinds: Mapping[str, str], rename: Mapping[str, str] | None = None
) -> str:
    d = st.dialect
    if isinstance(expr, n.And):
        return "(" + " AND ".join(_expr(st, e, kinds, rename) for e in expr.items) + ")"
    if isinstance(expr, n.Or):
        return "(" + " OR ".join(_expr(st, e, kinds, rename) for e in expr.items) + ")"
    if isinstance(expr, n.Not):
        return f"(NOT {_expr(st, expr.expr, kinds, rename)})"
    if isinstance(expr, n.IsNull):
        return (
            f"({_operand(st, expr.operand, kinds, rename)} IS {'NOT ' if expr.negated else ''}NULL)"
        )
    assert isinstance(expr, n.Compare)
    left = _operand(st, expr.left, kinds, rename)
    if expr.op == "IN":
        assert isinstance(expr.right, n.Param)
        return f"({left} IN ({d.list_rows(st.names[expr.right.name])}))"
    right = _operand(st, expr.right, kinds, rename)
    if expr.op == "STARTS WITH":
        return d.starts_with(left, right)
    if expr.op == "ENDS WITH":
        return d.ends_with(left, right)
    if expr.op == "CONTAINS":
        return d.contains(left, right)
    return f"({left} {expr.op} {right})"


# -- projection ---------------------------------------------------------------------------------------------


def _is_count(op: n.Operand) -> bool:
    return isinstance(op, n.FuncCall) and op.name == "count"


def _node_columns(alias: str) -> list[str]:
    return [f"{alias}.{p}" for p in NODE_PROPERTIES]


def _projection(
    st: _State, op: n.Operand, kinds: Mapping[str, str]
) -> tuple[list[str], ColumnKind]:
    if isinstance(op, n.VarRef):
        alias = st.aliases[op.name].name
        if kinds[op.name] == "node":
            return _node_columns(alias), "node"
        return [f"{alias}.{c}" for c in _REL_COLUMNS], "rel"
    if isinstance(op, n.FuncCall) and op.name == "count":
        arg = op.args[0]
        if isinstance(arg, n.Star):
            return ["count(*)"], "value"
        inner = _operand(st, arg, kinds)
        return [f"count({'DISTINCT ' if op.distinct else ''}{inner})"], "value"
    return [_operand(st, op, kinds)], "value"


def _group_key(st: _State, op: n.Operand, exprs: list[str]) -> str:
    if isinstance(op, n.VarRef) and st.aliases[op.name].kind == "node":
        return f"{st.aliases[op.name].name}.id"
    return ", ".join(exprs)


def _sort_targets(
    st: _State,
    query: n.Query,
    expr: n.Operand,
    outputs: Mapping[int, list[str]],
    kinds: Mapping[str, str],
) -> list[str]:
    for k, item in enumerate(query.items):
        by_alias = isinstance(expr, n.VarRef) and item.alias == expr.name
        if by_alias or same_operand(item.expr, expr):
            cols = outputs[k]
            if isinstance(item.expr, n.VarRef) and kinds.get(item.expr.name) == "node":
                return cols[:1]  # a node sorts by its uid
            return cols[:3] if len(cols) == 4 else cols
    if isinstance(expr, n.VarRef) and kinds.get(expr.name) == "node":
        return [f"{st.aliases[expr.name].name}.uid"]
    return [_operand(st, expr, kinds)]


def _count(value: n.Param | int | n.Literal | None, params: Mapping[str, Any], default: int) -> int:
    if value is None:
        return default
    if isinstance(value, n.Param):
        return int(params[value.name])
    assert isinstance(value, int)
    return value
