"""The traversal step: what following a visible edge means, as SQL — one definition.

:func:`step_joins` says what following an edge means: from an entity, along an
edge whose label is in the set, in a direction, to an entity **the identity
can read**. An edge to a missing uid (dangling) and an edge to an unreadable
entity are invisible alike, and nothing is ever reached *through* an
unreadable entity, because every step lands only on visible ones.

Two walkers use that fragment:

* the breadth-first walk of ``knowledge_store.engines.sql.traversal`` — one
  statement per hop; the ``graph`` primitive and the docs tools run on it;
* :func:`reach_ctes` — the same step as a recursive CTE, for query_graph's
  variable-length patterns ``*lo..hi`` (pairs at shortest distance lo..hi).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from knowledge_store.graphquery.dialect import Dialect
from knowledge_store.model import LABELS, Direction

__all__ = ["Step", "reach_ctes", "step_joins"]


def _label_condition(edge: str, labels: Sequence[str]) -> str:
    if not labels:
        return ""
    # Labels are the closed vocabulary, checked above: the only values in the SQL text.
    assert all(label in LABELS for label in labels)
    return f" AND {edge}.label IN ({', '.join(repr(label) for label in labels)})"


@dataclass(frozen=True)
class Step:
    """``join`` follows one visible edge from ``source`` to the visible entity ``target``.

    After it, ``{edge}.label`` and ``{edge}.position`` are the edge's, the
    ``target`` alias is a row of ``entities`` the identity may read, and
    ``orientation`` is 0 for an edge followed from its source, 1 from its target.
    """

    join: str
    edge: str
    target: str
    orientation: str


def step_joins(
    direction: Direction,
    labels: Sequence[str],
    *,
    source: str,
    edge: str = "g",
    target: str = "t",
    dialect: Dialect,
) -> list[Step]:
    """The traversal step as SQL joins: one per orientation (or one over both).

    ``source`` is an SQL expression holding the uid to step from. Needs the
    ``vis`` CTE of :meth:`Dialect.acl_ctes` in the statement.
    """
    cond = _label_condition(edge, labels)
    visible = dialect.visible(target, "walk")
    orientations = (
        [("src", "dst")]
        if direction == "out"
        else [("dst", "src")]
        if direction == "in"
        else [("src", "dst"), ("dst", "src")]
    )
    if len(orientations) == 2 and not dialect.multiple_recursive_selects:
        both = (
            "(SELECT src AS a, label, dst AS b, position, 0 AS o FROM edges"
            " UNION ALL SELECT dst, label, src, position, 1 FROM edges)"
        )
        return [
            Step(
                f"JOIN {both} AS {edge} ON {edge}.a = {source}{cond}"
                f" JOIN {dialect.entities_by_uid(target)} ON {target}.uid = {edge}.b AND {visible}",
                edge,
                target,
                f"{edge}.o",
            )
        ]
    return [
        Step(
            f"JOIN edges AS {edge} ON {edge}.{near} = {source}{cond}"
            f" JOIN {dialect.entities_by_uid(target)} ON {target}.uid = {edge}.{far}"
            f" AND {visible}",
            edge,
            target,
            "0" if near == "src" else "1",
        )
        for near, far in orientations
    ]


def reach_ctes(
    name: str,
    *,
    direction: Direction,
    labels: Sequence[str],
    seed: str,
    lo_param: str,
    hi_param: str,
    dialect: Dialect,
) -> list[str]:
    """CTEs ``{name}_walk(anchor, node, depth)`` and ``{name}(anchor, node)``.

    ``seed`` is a SELECT of one column ``uid``: the visible anchors. ``{name}``
    holds each (anchor, node) whose shortest visible distance is within
    ``lo..hi`` (both bound parameters) — one row per pair, not one per path.
    """
    walk = f"{name}_walk"
    recursive = [
        f"SELECT w.anchor, {step.target}.uid, w.depth + 1 FROM {walk} AS w {step.join}"
        f" WHERE w.depth < {dialect.param(hi_param)}"
        for step in step_joins(direction, labels, source="w.node", dialect=dialect)
    ]
    body = " UNION ".join([f"SELECT s.uid, s.uid, 0 FROM ({seed}) AS s", *recursive])
    return [
        f"{walk}(anchor, node, depth) AS ({body})",
        f"{name}(anchor, node) AS (SELECT anchor, node FROM {walk} GROUP BY anchor, node"
        f" HAVING min(depth) >= {dialect.param(lo_param)})",
    ]
