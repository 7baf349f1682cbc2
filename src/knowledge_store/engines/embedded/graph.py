"""The graph primitive and query_graph on the embedded engine's SQLite catalog.

Both run in one read snapshot and go through the one bounded traversal of
:mod:`knowledge_store.graphquery.traversal` (query_graph's variable-length
patterns compile to its recursive form). The ACL is applied inside every
statement from the caller's principal; nothing here reads around it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from knowledge_store.engines.embedded.catalog import Catalog
from knowledge_store.errors import BoundExceeded, InvalidRequest
from knowledge_store.graphquery.runner import TIME_LIMIT_S, execute, prepare
from knowledge_store.graphquery.traversal import (
    FANOUT_CAP,
    check_direction,
    check_labels,
    traverse,
)
from knowledge_store.model import GraphHit, GraphHits, Identity, QueryAnswer

__all__ = ["GRAPH_MAX_DEPTH", "GRAPH_MAX_K", "graph_hits", "run_query_graph"]

#: The graph primitive's depth bound (query_graph allows one hop more).
GRAPH_MAX_DEPTH = 3
GRAPH_MAX_K = 1000


def _text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in value


def check_graph_request(
    starts: Sequence[str], depth: int, labels: Sequence[str], direction: str, k: int
) -> tuple[list[str], tuple[str, ...]]:
    """Validate a ``graph`` request; the typed error says which bound and what to write."""
    if isinstance(starts, str):
        starts = [starts]
    unique = [s for s in dict.fromkeys(starts)]
    if not unique:
        raise InvalidRequest("graph needs at least one start uid", field="starts")
    if any(not isinstance(s, str) or not s or not _text(s) for s in unique):
        raise InvalidRequest(
            "start uids must be non-empty strings of valid Unicode text", field="starts"
        )
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise BoundExceeded(
            f"`depth` {depth} is below the minimum of 1; use a depth of 1, 2 or 3",
            field="depth",
            minimum=1,
            maximum=GRAPH_MAX_DEPTH,
        )
    if depth > GRAPH_MAX_DEPTH:
        raise BoundExceeded(
            f"`depth` {depth} exceeds the maximum of {GRAPH_MAX_DEPTH} for graph; use 1–3"
            " (query_graph's *1..4 reaches one hop further)",
            field="depth",
            maximum=GRAPH_MAX_DEPTH,
        )
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= GRAPH_MAX_K:
        raise InvalidRequest(f"k must be between 1 and {GRAPH_MAX_K}, not {k}", field="k")
    check_direction(direction)
    return unique, check_labels(labels)


def graph_hits(
    catalog: Catalog,
    identity: Identity,
    starts: Sequence[str],
    *,
    depth: int = 1,
    labels: Sequence[str] = (),
    direction: str = "both",
    k: int = 10,
    fanout: int = FANOUT_CAP,
) -> GraphHits:
    """Entities linked to ``starts``, ranked by hops, paths, recency, uid (top ``k``)."""
    unique, label_set = check_graph_request(starts, depth, labels, direction, k)
    with catalog.read() as conn:
        _, root = catalog.latest_publish(conn)
        walk = traverse(
            conn,
            identity.principal,
            unique,
            depth=depth,
            labels=label_set,
            direction=direction,
            fanout=fanout,
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
        for rank, r in enumerate(walk.reached[:k], start=1)
    ]
    return GraphHits(content_root=root, hits=hits, capped=walk.capped)


def run_query_graph(
    catalog: Catalog,
    identity: Identity,
    text: str,
    params: Mapping[str, Any] | None = None,
    *,
    lenient: bool = False,
    time_limit_s: float = TIME_LIMIT_S,
) -> QueryAnswer:
    """Parse, validate, compile and run one query_graph query under ``identity``."""
    bound = dict(params or {})
    compiled = prepare(text, bound, identity.principal, lenient=lenient)
    with catalog.read() as conn:
        _, root = catalog.latest_publish(conn)
        rows, truncated = execute(conn, compiled, time_limit_s=time_limit_s)
    return QueryAnswer(
        content_root=root,
        columns=[c.name for c in compiled.columns],
        rows=rows,
        truncated=truncated,
    )
