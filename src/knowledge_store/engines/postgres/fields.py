"""SQL over the entities' typed fields on PostgreSQL: ``sql``, aggregates, successors.

The same statements as the embedded engine's (:mod:`..embedded.fields`), in
PostgreSQL's dialect: identity expansion and the visible ACL sets first, then
the primitive over visible entities only; FILTERS from
:func:`~knowledge_store.engines.sqlfilters.filter_clause`. Only closed-list
identifiers (order field, metric, bucket expression) are formatted into the
text; every value is bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from knowledge_store.engines.postgres.db import Connection
from knowledge_store.engines.postgres.schema import held_principals_cte
from knowledge_store.engines.shared import EDGE_DIRECTIONS, ChunkIds, content_answer
from knowledge_store.engines.sqlfilters import filter_clause, pyformat
from knowledge_store.errors import InvalidRequest
from knowledge_store.model import Filters
from knowledge_store.retrieval.aggregates import AggregateSpec
from knowledge_store.retrieval.filters import ORDER_FIELDS, Order

__all__ = ["aggregate_statement", "content", "sql_statement", "successors_statement"]

_VISIBLE = "e.acl_set IN (SELECT acl_set FROM vis)"

_METRIC_SQL = {
    "count": "count(*)",
    "count_distinct:source": "count(DISTINCT e.source)",
    "count_distinct:type": "count(DISTINCT e.type)",
}


def _head() -> str:
    return "WITH RECURSIVE " + held_principals_cte() + "\n"


def bucket_sql(column: str, granularity: str) -> str:
    """The bucket key of ``e.column`` (an ISO timestamp text): day, ISO week or month."""
    if granularity == "day":
        return f"substr(e.{column}, 1, 10)"
    if granularity == "month":
        return f"substr(e.{column}, 1, 7)"
    # IYYY and IW: the ISO year (decided by the week's Thursday) and the ISO week.
    return f"""to_char(substr(e.{column}, 1, 10)::date, 'IYYY"-W"IW')"""


def sql_statement(
    principal: str, filters: Filters, order: Order, k: int
) -> tuple[str, dict[str, Any]]:
    if order.field not in ORDER_FIELDS:  # Order is built by parse_order; belt and braces
        raise InvalidRequest(f"cannot order by {order.field!r}")
    where, params = filter_clause(filters, alias="e", placeholder=pyformat)
    direction = "ASC" if order.direction == "asc" else "DESC"
    sql = (
        _head()
        + "SELECT e.uid, e.title, e.type, e.source, e.status, e.created_at, e.updated_at, e.href"
        f" FROM entities AS e WHERE {_VISIBLE} AND {where}"
        f" ORDER BY e.{order.field} IS NULL, e.{order.field} {direction}, e.uid"
        " LIMIT %(k)s"
    )
    return sql, {**params, "principal": principal, "k": k}


def aggregate_statement(
    principal: str, spec: AggregateSpec, filters: Filters
) -> tuple[str, dict[str, Any]]:
    where, params = filter_clause(filters, alias="e", placeholder=pyformat)
    metric = _METRIC_SQL[spec.metric]
    if spec.field is None:
        key = "NULL::text"
    elif spec.granularity is None:
        key = f"e.{spec.field}"
    else:
        key = f"CASE WHEN e.{spec.field} IS NULL THEN NULL ELSE {bucket_sql(spec.field, spec.granularity)} END"
    sql = (
        _head() + f"SELECT {key} AS bucket, {metric} FROM entities AS e"
        f" WHERE {_VISIBLE} AND {where} GROUP BY 1"
    )
    return sql, {**params, "principal": principal}


def successors_statement(
    principal: str, uids: Sequence[str], filters: Filters
) -> tuple[str, dict[str, Any]]:
    """``old --supersededBy--> new`` pairs with both ends visible and ``new`` passing FILTERS."""
    where, params = filter_clause(filters, alias="e", placeholder=pyformat)
    sql = (
        _head() + "SELECT ed.src, e.uid FROM edges AS ed"
        " JOIN entities AS e ON e.uid = ed.dst"
        " JOIN entities AS o ON o.uid = ed.src"
        " WHERE ed.label = 'supersededBy' AND ed.src = ANY(%(starts)s::text[]) AND ed.src <> ed.dst"
        f" AND {_VISIBLE} AND {_VISIBLE.replace('e.acl_set', 'o.acl_set')} AND {where}"
        " ORDER BY ed.src, e.updated_at IS NULL, e.updated_at DESC, e.uid"
    )
    return sql, {**params, "principal": principal, "starts": list(uids)}


def content(
    conn: Connection, principal: str, uid: str, chunk_ids: ChunkIds
) -> dict[str, Any] | None:
    """The entity, its chunks and its edges to visible entities (the ACL join in each)."""
    head = _head()
    who = {"principal": principal, "uid": uid}
    row = conn.execute(
        head + "SELECT e.id, e.uid, e.type, e.title, b.body, e.source, e.status,"
        " e.created_at, e.updated_at, e.href, b.attributes FROM entities AS e"
        " JOIN entity_bodies AS b ON b.entity = e.id"
        f" WHERE e.uid = %(uid)s AND {_VISIBLE}",
        who,
    ).fetchone()
    if row is None:
        return None
    chunks = conn.execute(
        'SELECT id, ordinal, text, heading, start, "end" FROM chunks'
        " WHERE entity = %s ORDER BY ordinal",
        (row[0],),
    ).fetchall()
    edges = {
        direction: conn.execute(
            head + f"SELECT g.label, g.{far}, g.position, o.title, o.type, o.href"
            f" FROM edges AS g JOIN entities AS o ON o.uid = g.{far}"
            f" WHERE g.{near} = %(uid)s AND o.acl_set IN (SELECT acl_set FROM vis)"
            f" ORDER BY g.label, g.position IS NULL, g.position, g.{far}",
            who,
        ).fetchall()
        for direction, near, far in EDGE_DIRECTIONS
    }
    return content_answer(row[1:], chunks, edges, chunk_ids)
