"""The one bounded graph traversal: every way into the graph goes through here.

One SQL fragment, :func:`step_joins`, says what following an edge means: from
an entity, along an edge whose label is in the set, in a direction, to an
entity **the identity can read**. An edge to a missing uid (dangling) and an
edge to an unreadable entity are invisible alike, and nothing is ever reached
*through* an unreadable entity, because every step lands only on visible ones.

Two walkers use that fragment:

* :func:`traverse` — breadth-first, one statement per hop, with a fan-out cap,
  hop distance, number of distinct shortest paths and one path per entity.
  The ``graph`` primitive, ``get_related`` and the docs tools run on it.
* :func:`reach_ctes` — the same step as a recursive CTE, for query_graph's
  variable-length patterns ``*lo..hi`` (pairs at shortest distance lo..hi).

Ranking of :func:`traverse`: hop distance, then number of distinct shortest
paths (more first), then recency (``updated_at`` newest first), then uid.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from knowledge_store.errors import BoundExceeded, InvalidRequest
from knowledge_store.graphquery.dialect import PRINCIPAL_PARAM, SQLITE, Dialect
from knowledge_store.model import (
    DIRECTIONS,
    FANOUT_CAP,
    LABELS,
    MAX_STARTS,
    QUERY_GRAPH_MAX_DEPTH,
    Direction,
    PathStep,
    check_labels,
)

MAX_TRAVERSAL_DEPTH = QUERY_GRAPH_MAX_DEPTH

__all__ = [
    "FANOUT_CAP",
    "MAX_STARTS",
    "MAX_TRAVERSAL_DEPTH",
    "Reached",
    "Step",
    "Traversal",
    "reach_ctes",
    "step_joins",
    "traverse",
]


def _label_condition(edge: str, labels: Sequence[str]) -> str:
    if not labels:
        return ""
    # Labels are the closed vocabulary, checked above: the only values in the SQL text.
    assert all(label in LABELS for label in labels)
    return f" AND {edge}.label IN ({', '.join(repr(label) for label in labels)})"


@dataclass(frozen=True)
class Step:
    """``join`` follows one visible edge from ``source`` to the visible entity ``target``.

    After it, ``{edge}.label`` and ``{edge}.position`` are the edge's, and the
    ``target`` alias is a row of ``entities`` the identity may read.
    """

    join: str
    edge: str
    target: str


def step_joins(
    direction: Direction,
    labels: Sequence[str],
    *,
    source: str,
    edge: str = "g",
    target: str = "t",
    dialect: Dialect = SQLITE,
) -> list[Step]:
    """The traversal step as SQL joins: one per orientation (or one over both).

    ``source`` is an SQL expression holding the uid to step from. Needs the
    ``vis`` CTE of :meth:`Dialect.acl_ctes` in the statement.
    """
    cond = _label_condition(edge, labels)
    visible = dialect.visible(target)
    orientations = (
        [("src", "dst")]
        if direction == "out"
        else [("dst", "src")]
        if direction == "in"
        else [("src", "dst"), ("dst", "src")]
    )
    if len(orientations) == 2 and not dialect.multiple_recursive_selects:
        both = (
            "(SELECT src AS a, label, dst AS b, position FROM edges"
            " UNION ALL SELECT dst, label, src, position FROM edges)"
        )
        return [
            Step(
                f"JOIN {both} AS {edge} ON {edge}.a = {source}{cond}"
                f" JOIN entities AS {target} ON {target}.uid = {edge}.b AND {visible}",
                edge,
                target,
            )
        ]
    return [
        Step(
            f"JOIN edges AS {edge} ON {edge}.{near} = {source}{cond}"
            f" JOIN entities AS {target} ON {target}.uid = {edge}.{far} AND {visible}",
            edge,
            target,
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
    dialect: Dialect = SQLITE,
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


# -- breadth-first ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reached:
    """An entity the traversal reached: how far, by how many shortest paths, and one path."""

    uid: str
    title: str
    type: str
    href: str | None
    updated_at: str | None
    hops: int
    paths: int
    path: tuple[PathStep, ...]
    position: int | None  # the ``position`` of the last edge of ``path``


@dataclass(frozen=True)
class Traversal:
    reached: list[Reached]  # ranked; starts excluded
    capped: bool
    starts: tuple[str, ...]  # the start uids the identity can read, in the order given


def _rank(items: list[Reached]) -> list[Reached]:
    out = sorted(items, key=lambda r: r.uid)
    out.sort(key=lambda r: (r.updated_at is not None, r.updated_at or ""), reverse=True)
    out.sort(key=lambda r: (r.hops, -r.paths))
    return out


def _statement(dialect: Dialect, ctes: list[str], body: str) -> str:
    return "WITH RECURSIVE " + ",\n".join([*dialect.acl_ctes(), *ctes]) + "\n" + body


def traverse(
    conn: Any,
    principal: str,
    starts: Sequence[str],
    *,
    depth: int,
    labels: Sequence[str] = (),
    direction: str = "both",
    fanout: int = FANOUT_CAP,
    dialect: Dialect = SQLITE,
) -> Traversal:
    """Breadth-first from ``starts`` up to ``depth`` hops, through visible entities only.

    ``conn`` is a DB-API connection inside one read snapshot. Starts that are
    missing or unreadable contribute nothing. Raises on an empty start list,
    an unknown label or direction, and a depth outside 1..4.
    """
    if direction not in DIRECTIONS:
        raise InvalidRequest(
            f"unknown direction {direction!r}; use out, in or both",
            field="direction",
            allowed=list(DIRECTIONS),
        )
    way: Direction = direction  # type: ignore[assignment]
    label_set = check_labels(labels)
    unique = list(dict.fromkeys(starts))
    if not unique:
        raise InvalidRequest("the traversal needs at least one start uid", field="starts")
    if len(unique) > MAX_STARTS:
        raise BoundExceeded(
            f"{len(unique)} start uids exceed the maximum of {MAX_STARTS}",
            field="starts",
            maximum=MAX_STARTS,
        )
    if not 1 <= depth <= MAX_TRAVERSAL_DEPTH:
        raise BoundExceeded(
            f"`depth` {depth} is outside 1..{MAX_TRAVERSAL_DEPTH}",
            field="depth",
            maximum=MAX_TRAVERSAL_DEPTH,
        )
    if fanout < 1:
        raise InvalidRequest("the fan-out cap must be at least 1", field="fanout")

    p = dialect.param
    seeds_sql = _statement(
        dialect,
        [f"starts(pos, uid) AS ({dialect.indexed_list_rows('starts')})"],
        f"SELECT e.uid FROM starts AS s JOIN entities AS e ON e.uid = s.uid"
        f" AND {dialect.visible('e')} ORDER BY s.pos",
    )
    visible_starts = [
        str(r[0])
        for r in conn.execute(
            seeds_sql, {PRINCIPAL_PARAM: principal, "starts": dialect.bind_list(unique)}
        ).fetchall()
    ]
    steps = step_joins(way, label_set, source="f.value", dialect=dialect)
    selects = [
        f"SELECT f.pos, f.value, g.label, g.position, t.uid, t.title, t.type, t.href,"
        f" t.updated_at FROM frontier AS f {s.join}"
        f" WHERE t.uid NOT IN (SELECT value FROM seen)"
        for s in steps
    ]
    step_sql = _statement(
        dialect,
        [
            f"frontier(pos, value) AS ({dialect.indexed_list_rows('frontier')})",
            f"seen(value) AS ({dialect.list_rows('seen')})",
        ],
        " UNION ALL ".join(selects) + f" ORDER BY 1, 9 DESC NULLS LAST, 5 LIMIT {p('cap')}",
    )

    paths: dict[str, int] = {uid: 1 for uid in visible_starts}
    path_of: dict[str, tuple[PathStep, ...]] = {
        uid: (PathStep(uid=uid, label=None),) for uid in visible_starts
    }
    reached: list[Reached] = []
    frontier = list(visible_starts)
    capped = False
    for hop in range(1, depth + 1):
        if not frontier:
            break
        rows = conn.execute(
            step_sql,
            {
                PRINCIPAL_PARAM: principal,
                "frontier": dialect.bind_list(frontier),
                "seen": dialect.bind_list(list(paths)),
                "cap": fanout + 1,
            },
        ).fetchall()
        if len(rows) > fanout:
            capped = True
            rows = rows[:fanout]
        layer: dict[str, dict[str, Any]] = {}
        for _pos, src, label, position, uid, title, typ, href, updated in rows:
            found = layer.get(uid)
            if found is None:
                layer[uid] = {
                    "paths": paths[src],
                    "path": (*path_of[src], PathStep(uid=uid, label=label)),
                    "position": position,
                    "title": title,
                    "type": typ,
                    "href": href,
                    "updated_at": updated,
                }
            else:
                found["paths"] += paths[src]
        ranked = _rank(
            [
                Reached(
                    uid=uid,
                    title=str(v["title"]),
                    type=str(v["type"]),
                    href=v["href"],
                    updated_at=v["updated_at"],
                    hops=hop,
                    paths=int(v["paths"]),
                    path=v["path"],
                    position=v["position"],
                )
                for uid, v in layer.items()
            ]
        )
        for r in ranked:
            paths[r.uid] = r.paths
            path_of[r.uid] = r.path
        reached.extend(ranked)
        frontier = [r.uid for r in ranked]
    return Traversal(_rank(reached), capped, tuple(visible_starts))
