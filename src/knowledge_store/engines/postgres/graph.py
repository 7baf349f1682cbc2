"""The graph primitive and query_graph on PostgreSQL.

**graph** is one statement. The traversal's semantics (:mod:`..graphquery.traversal`:
breadth-first, a fan-out cap per hop, hop distance, number of distinct
shortest paths, one path per entity, ranked by hops, paths, recency, uid) need
a per-hop ``ORDER BY … LIMIT`` and per-hop aggregation, which PostgreSQL
refuses inside a recursive CTE's recursive term. Depth is bounded (1–3, 4 for
the docs tools), so the hops are *unrolled*: one pair of CTEs per hop —
``e{h}`` the capped edge rows out of layer ``h-1`` in the traversal's order,
``l{h}`` the new layer with its paths summed and its first path — after
identity expansion (the recursive ``held`` CTE) and the visible ACL sets.
Every step lands only on visible entities; an edge to a missing or unreadable
entity is invisible alike.

**query_graph** compiles the same AST as the embedded engine through the
colleague's compiler with :class:`PostgresDialect`, and runs under
``SET LOCAL statement_timeout`` (the 250 ms bound → ``QueryTimeout``) in a
read-only transaction.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from knowledge_store.engines.postgres.schema import held_principals_cte
from knowledge_store.engines.sql.dialect import POSTGRES
from knowledge_store.graphquery.compiler import CompiledQuery, compile_query
from knowledge_store.graphquery.nodes import Query
from knowledge_store.model import QUERY_GRAPH_TIME_LIMIT_S, GraphHit, PathStep

__all__ = [
    "POSTGRES",
    "graph_hits_from_rows",
    "graph_statement",
    "prepare_query_graph",
    "statement_timeout_ms",
]


_USER_PARAM = re.compile(r"^q\d+$")


def _loose(value: Any) -> Any:
    """A scalar as SQLite compares it with a column: numbers as their text, typed by context.

    psycopg sends a ``str`` with the *unknown* type, so PostgreSQL reads it as
    the column's type (``'2'`` against ``position`` is 2, against ``uid`` is
    the text ``2``) — as SQLite's column affinity does.
    """
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int | float):
        return repr(value) if isinstance(value, float) else str(value)
    return value


def prepare_query_graph(
    query: Query, params: Mapping[str, Any], held: Sequence[str]
) -> CompiledQuery:
    """A checked query and its parameters → the one PostgreSQL statement (ACL inside)."""
    compiled = compile_query(query, params, held, dialect=POSTGRES)
    bound = {k: (_loose(v) if _USER_PARAM.match(k) else v) for k, v in compiled.params.items()}
    return CompiledQuery(compiled.sql, bound, compiled.columns, compiled.limit, compiled.skip)


def statement_timeout_ms(seconds: float = QUERY_GRAPH_TIME_LIMIT_S) -> int:
    return max(1, round(seconds * 1000))


# -- the graph primitive -----------------------------------------------------------------------------


def _edges(direction: str, labels: Sequence[str]) -> str:
    """The edges as ``(a, label, b, o)`` rows oriented away from ``a`` (labels bound).

    ``o`` is the orientation (0 out, 1 in): ties between two edges to the same
    entity break by it, then by label — the order the embedded engine meets them.
    """
    cond = " WHERE label = ANY(%(labels)s::text[])" if labels else ""
    out = f"SELECT src AS a, label, dst AS b, 0 AS o FROM edges{cond}"
    back = f"SELECT dst AS a, label, src AS b, 1 AS o FROM edges{cond}"
    if direction == "out":
        return out
    if direction == "in":
        return back
    return f"{out} UNION ALL {back}"


def graph_statement(
    principal: str,
    starts: Sequence[str],
    *,
    depth: int,
    labels: Sequence[str],
    direction: str,
    k: int,
    fanout: int,
) -> tuple[str, dict[str, Any]]:
    """One statement: the ranked entities within ``depth`` hops of the visible ``starts``."""
    if not 1 <= depth <= 4:
        raise ValueError(f"depth must be 1..4, not {depth}")
    edges = _edges(direction, labels)
    order = "fpos, updated_at DESC NULLS LAST, uid, o, label"
    ctes = [
        held_principals_cte(),
        "starts(pos, uid) AS (SELECT x.ord, x.uid FROM unnest(%(starts)s::text[])"
        " WITH ORDINALITY AS x(uid, ord))",
        "l0 AS MATERIALIZED (SELECT row_number() OVER (ORDER BY s.pos) - 1 AS pos, e.uid,"
        " 1::bigint AS paths, jsonb_build_array(jsonb_build_array(e.uid, NULL)) AS path,"
        " e.title, e.type, e.href, e.updated_at"
        " FROM starts AS s JOIN entities AS e ON e.uid = s.uid"
        " AND e.acl_set IN (SELECT acl_set FROM vis))",
    ]
    for hop in range(1, depth + 1):
        seen = " UNION ALL ".join(f"SELECT uid FROM l{i}" for i in range(hop))
        ctes.append(
            f"e{hop} AS MATERIALIZED (SELECT f.pos AS fpos, f.paths AS fpaths, f.path AS fpath,"
            " g.label, g.o, t.uid, t.title, t.type, t.href, t.updated_at"
            f" FROM l{hop - 1} AS f JOIN ({edges}) AS g ON g.a = f.uid"
            " JOIN entities AS t ON t.uid = g.b AND t.acl_set IN (SELECT acl_set FROM vis)"
            f" WHERE t.uid NOT IN ({seen})"
            " ORDER BY f.pos, t.updated_at DESC NULLS LAST, t.uid, g.o, g.label"
            " LIMIT %(fanout)s + 1)"
        )
        ctes.append(
            f"l{hop} AS MATERIALIZED (SELECT row_number() OVER (ORDER BY x.paths DESC,"
            " x.updated_at DESC NULLS LAST, x.uid) - 1 AS pos, x.uid, x.paths, x.path,"
            " x.title, x.type, x.href, x.updated_at FROM ("
            " SELECT uid, sum(fpaths)::bigint AS paths,"
            " (array_agg(fpath || jsonb_build_array(jsonb_build_array(uid, label))"
            " ORDER BY rn))[1] AS path, title, type, href, updated_at"
            f" FROM (SELECT *, row_number() OVER (ORDER BY {order}) AS rn FROM e{hop}) AS r"
            " WHERE rn <= %(fanout)s GROUP BY uid, title, type, href, updated_at) AS x)"
        )
    layers = " UNION ALL ".join(
        f"SELECT {hop} AS hops, uid, paths, path, title, type, href, updated_at FROM l{hop}"
        for hop in range(1, depth + 1)
    )
    capped = " OR ".join(
        f"(SELECT count(*) > %(fanout)s FROM e{hop})" for hop in range(1, depth + 1)
    )
    sql = (
        "WITH RECURSIVE "
        + ",\n".join(ctes)
        + f"\nSELECT r.uid, r.title, r.type, r.href, r.updated_at, r.hops, r.paths, r.path,"
        f" ({capped}) AS capped"
        f"\nFROM ({layers}) AS r"
        "\nORDER BY r.hops, r.paths DESC, r.updated_at DESC NULLS LAST, r.uid"
        "\nLIMIT %(k)s"
    )
    params: dict[str, Any] = {
        "principal": principal,
        "starts": list(starts),
        "fanout": fanout,
        "k": k,
    }
    if labels:
        params["labels"] = list(labels)
    return sql, params


def graph_hits_from_rows(rows: Sequence[Sequence[Any]]) -> tuple[list[GraphHit], bool]:
    hits = [
        GraphHit(
            uid=str(r[0]),
            title=str(r[1]),
            type=str(r[2]),
            href=r[3],
            updated_at=r[4],
            rank=rank,
            hops=int(r[5]),
            paths=int(r[6]),
            path=tuple(PathStep(uid=str(uid), label=label) for uid, label in r[7]),
        )
        for rank, r in enumerate(rows, start=1)
    ]
    return hits, bool(rows and rows[0][8])
