"""The graph primitive and query_graph on the embedded engine's SQLite catalog.

Both run in one read snapshot and go through the one bounded traversal of
:mod:`knowledge_store.graphquery.traversal` (query_graph's variable-length
patterns compile to its recursive form). The ACL is applied inside every
statement from the caller's principal; nothing here reads around it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from knowledge_store.engines.embedded.catalog import Catalog
from knowledge_store.graphquery.nodes import Query
from knowledge_store.graphquery.runner import TIME_LIMIT_S, execute, prepare
from knowledge_store.graphquery.traversal import traverse
from knowledge_store.model import GraphHit, GraphHits, GraphQuery, Identity, QueryAnswer

__all__ = ["graph_hits", "run_query_graph"]


def graph_hits(catalog: Catalog, identity: Identity, query: GraphQuery) -> GraphHits:
    """Entities linked to the starts, ranked by hops, paths, recency, uid (top ``k``)."""
    with catalog.read() as conn:
        _, root = catalog.latest_publish(conn)
        walk = traverse(
            conn,
            identity.principal,
            query.starts,
            depth=query.depth,
            labels=query.labels,
            direction=query.direction,
            fanout=query.fanout,
        )
    hits = [
        GraphHit(
            uid=r.uid,
            title=r.title,
            type=r.type,
            rank=rank,
            hops=r.hops,
            paths=r.paths,
            path=r.path,
            href=r.href,
            updated_at=r.updated_at,
        )
        for rank, r in enumerate(walk.reached[: query.k], start=1)
    ]
    return GraphHits(content_root=root, hits=hits, capped=walk.capped)


def run_query_graph(
    catalog: Catalog,
    identity: Identity,
    query: Query,
    params: Mapping[str, Any],
    *,
    time_limit_s: float = TIME_LIMIT_S,
) -> QueryAnswer:
    """Compile and run one checked query_graph query under ``identity``."""
    compiled = prepare(query, params, identity.principal)
    with catalog.read() as conn:
        _, root = catalog.latest_publish(conn)
        rows, truncated = execute(conn, compiled, time_limit_s=time_limit_s)
    return QueryAnswer(
        content_root=root,
        columns=[c.name for c in compiled.columns],
        rows=rows,
        truncated=truncated,
    )
