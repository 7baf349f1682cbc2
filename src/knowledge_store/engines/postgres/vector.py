"""The vector primitive on PostgreSQL: a plan by the visible share, then one statement.

The planner needs two numbers read in the query's own snapshot: how many
chunks the identity may see under FILTERS (a sum over ``entities.chunk_count``
with the ACL join) and how many there are. Then:

* nothing hidden (FILTERS included) → ``hnsw``: the HNSW index (``hnsw.ef_search``
  = :data:`EF_SEARCH`), ACL join still in the statement;
* few visible rows (≤ :data:`EXACT_FLOOR`) or a small share (< :data:`EXACT_SHARE`)
  → ``exact``: a scan over only the visible rows, ordered by exact cosine
  distance (the ``+ 0`` keeps the planner off the HNSW index) —
  ``exhaustive: true``;
* otherwise → ``hnsw-filtered``. With pgvector ≥ 0.8, an iterative index scan
  (``hnsw.iterative_scan = strict_order``) that keeps walking the graph until
  enough rows pass the ACL and FILTERS. With older pgvector (pgserver ships
  0.6) the index returns at most ``ef_search`` candidates, so the statement
  takes ``ef`` ≈ 2·(k+10)/share of them (capped at :data:`EF_MAX`) and
  post-filters them in the same statement; fewer than ``k`` may survive —
  reported honestly as ``exhaustive: false``.

``scanned`` is the number of candidates the statement ranked: the visible rows
for ``exact``, the index candidates otherwise.

The plan reads the visible share *rounded down* to a step of :data:`SHARE_STEP`
(:func:`rough_share`): the strategy, ``ef_search`` and the ``--explain`` plan
depend on that rough share only, never on the exact count of hidden chunks — what
a caller learns from them is roughly how much of the store it can see
(docs/security.md, "Vector diagnostics"), and the plan shows its own visible count,
not the store's total.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from knowledge_store.engines.postgres.schema import Features
from knowledge_store.engines.sql.dialect import POSTGRES
from knowledge_store.engines.sql.filters import filter_clause
from knowledge_store.model import Filters

__all__ = [
    "EF_MAX",
    "EF_SEARCH",
    "EXACT_FLOOR",
    "EXACT_SHARE",
    "SHARE_STEP",
    "VectorPlan",
    "plan_vector",
    "rough_share",
    "vector_count_statement",
    "vector_statement",
]

#: Unfiltered HNSW search expansion (pgvector's default is 40).
EF_SEARCH = 64
#: pgvector's ceiling for ``hnsw.ef_search``.
EF_MAX = 1000
#: At most this many visible chunks are always scanned exactly. Measured at 100k chunks
#: (bench/bench_engines.py, pgvector 0.6): an exact scan costs ≈ 4.4 ms per 1,000 visible
#: chunks (1 % visible: 5.6 ms p50, recall 1.0); at 10 % visible it is 44 ms against
#: 9.8 ms for post-filtered HNSW at recall@10 0.97 — so ≤ 5,000 rows (≈ 22 ms) stay exact.
EXACT_FLOOR = 5_000
#: Below this visible share a post-filtered HNSW candidate list (≤ 1,000) holds too few
#: visible rows: exact instead.
EXACT_SHARE = 0.05
#: Post-filter oversampling: candidates ≈ OVERSAMPLE · (k + 10) / share.
OVERSAMPLE = 2.0
#: The plan reads (and shows) the visible share in steps of 5 %, rounded down. Rounding down
#: only raises ``ef`` (recall never falls): at most 2× between 5 and 10 % visible (0.0999 is
#: read as 0.05), 1.5× between 10 and 15 %, under 1.1× above 50 %; with pgvector ≥ 0.8
#: (iterative scans) ``ef`` does not depend on the share at all.
SHARE_STEP = 0.05
_STEPS = round(1 / SHARE_STEP)

Strategy = Literal["hnsw", "hnsw-filtered", "exact"]
_ROW = "c.id, e.uid"


@dataclass(frozen=True)
class VectorPlan:
    strategy: Strategy
    visible: int
    total: int
    ef: int  # hnsw.ef_search (0 for exact)
    iterative: bool  # pgvector ≥ 0.8 iterative index scan

    @property
    def exhaustive(self) -> bool:
        return self.strategy == "exact"

    def to_dict(self) -> dict[str, Any]:
        """What ``--explain`` shows: the caller's own visible count and the rough share, never
        the store's total (with the visible count, that would be the hidden count)."""
        return {
            "strategy": self.strategy,
            "visible": self.visible,
            "share": rough_share(self.visible, self.total),
            "ef_search": self.ef,
            "iterative_scan": self.iterative,
        }


def rough_share(visible: int, total: int) -> float:
    """``visible / total`` rounded down to a step of :data:`SHARE_STEP` (0.0 for an empty store)."""
    if total <= 0:
        return 0.0
    return min(visible * _STEPS // total, _STEPS) / _STEPS


def plan_vector(visible: int, total: int, k: int, features: Features) -> VectorPlan:
    """Pick the strategy for ``k`` hits over ``visible`` of ``total`` chunks (pure), from the
    rough share (:func:`rough_share`)."""
    wanted = k + 10
    if total == 0 or visible == 0:
        return VectorPlan("exact", visible, total, 0, False)
    if visible >= total:  # nothing hidden, FILTERS or not
        return VectorPlan("hnsw", visible, total, min(EF_MAX, max(EF_SEARCH, wanted)), False)
    share = rough_share(visible, total)
    if visible <= EXACT_FLOOR or share < EXACT_SHARE:
        return VectorPlan("exact", visible, total, 0, False)
    if features.iterative_scan:
        return VectorPlan(
            "hnsw-filtered", visible, total, min(EF_MAX, max(EF_SEARCH, wanted)), True
        )
    ef = min(EF_MAX, max(EF_SEARCH, math.ceil(OVERSAMPLE * wanted / share)))
    return VectorPlan("hnsw-filtered", visible, total, ef, False)


def vector_count_statement(held: Sequence[str], filters: Filters) -> tuple[str, dict[str, Any]]:
    """``(visible chunks, total chunks)`` for the planner, the ACL inside."""
    where, params = filter_clause(filters, POSTGRES, alias="e")
    params.update(POSTGRES.held_params(held))
    sql = (
        POSTGRES.with_acl() + "SELECT"
        " (SELECT coalesce(sum(e.chunk_count), 0) FROM entities AS e"
        f"  WHERE {POSTGRES.visible('e')} AND {where}),"
        " (SELECT docs FROM lexical_fields WHERE field = 0)"
    )
    return sql, params


def settings(plan: VectorPlan) -> list[str]:
    """``SET LOCAL`` statements for the plan (integers from the plan, never caller text)."""
    if plan.strategy == "exact":
        return []
    out = [f"SET LOCAL hnsw.ef_search = {int(plan.ef)}"]
    if plan.iterative:
        out.append("SET LOCAL hnsw.iterative_scan = strict_order")
    return out


def vector_statement(
    plan: VectorPlan, held: Sequence[str], query: np.ndarray, k: int, filters: Filters
) -> tuple[str, dict[str, Any]]:
    """The one statement of a vector query under ``plan``: chunk id, uid, score, scanned."""
    where, params = filter_clause(filters, POSTGRES, alias="e")
    params.update(POSTGRES.held_params(held))
    params.update(q=np.asarray(query, dtype=np.float32), k=k)
    head = POSTGRES.with_acl().rstrip("\n")
    visible = f"{POSTGRES.visible('e')} AND {where}"
    if plan.strategy == "exact":
        # Drive from the visible entities (few, by the plan) into their chunks: the
        # LATERAL subquery with OFFSET 0 keeps the planner from flattening it into a
        # scan of every chunk, and "+ 0" keeps the HNSW index out — the scan is exact.
        sql = (
            f"{head},\nvisible AS MATERIALIZED ("
            "\n  SELECT e.id, e.uid FROM entities AS e"
            f"\n  WHERE {visible})"
            "\nSELECT c.id, e.uid, 1.0 - c.distance AS score, %(scanned)s AS scanned"
            "\nFROM visible AS e CROSS JOIN LATERAL ("
            "\n  SELECT c.id, (c.embedding <=> %(q)s) + 0 AS distance"
            "\n  FROM chunks AS c WHERE c.entity = e.id OFFSET 0) AS c"
            "\nORDER BY c.distance, c.id\nLIMIT %(k)s"
        )
        params["scanned"] = plan.visible
        return sql, params
    if plan.iterative:
        sql = (
            f"{head}\nSELECT {_ROW}, 1.0 - (c.embedding <=> %(q)s) AS score, %(ef)s AS scanned"
            "\nFROM chunks AS c JOIN entities AS e ON e.id = c.entity"
            f"\nWHERE {visible}"
            "\nORDER BY c.embedding <=> %(q)s\nLIMIT %(k)s"
        )
        params["ef"] = plan.ef
        return sql, params
    sql = (
        f"{head},\nnearest AS MATERIALIZED ("
        "\n  SELECT c.id, c.embedding <=> %(q)s AS distance FROM chunks AS c"
        "\n  ORDER BY c.embedding <=> %(q)s LIMIT %(ef)s)"
        f"\nSELECT {_ROW}, 1.0 - n.distance AS score, (SELECT count(*) FROM nearest) AS scanned"
        "\nFROM nearest AS n JOIN chunks AS c ON c.id = n.id JOIN entities AS e ON e.id = c.entity"
        f"\nWHERE {visible}"
        "\nORDER BY n.distance, c.id\nLIMIT %(k)s"
    )
    params["ef"] = plan.ef
    return sql, params
