"""What a point-in-time reader does the same way on both SQL engines.

A reader holds one snapshot (a SQLite read transaction, a PostgreSQL
``REPEATABLE READ`` one) and the principals its identity holds, expanded once.
Everything below is the shared statements of :mod:`.statements` run on that
snapshot and shaped the same way: the identity's expansion, hydrating chunks
and entity cards, sql, aggregates, successors, content and the graph walk.
Each engine's reader subclasses :class:`SqlReader` and keeps only its own:
how a statement runs (``_run``), how JSON columns arrive (SQLite hands back
text, psycopg decoded values), the ranking primitives (Tantivy and faiss;
tsvector and pgvector) and query_graph's time bound.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar, Protocol

from knowledge_store.engines.base import ChunkRecord, EntityCard, RankedChunks
from knowledge_store.engines.components import Components, ListQuery
from knowledge_store.engines.shared import ChunkIds, content_answer
from knowledge_store.engines.sql import statements
from knowledge_store.engines.sql.aggregate import aggregate_answer
from knowledge_store.engines.sql.dialect import SqlDialect
from knowledge_store.engines.sql.statements import EDGE_DIRECTIONS, location_value
from knowledge_store.engines.sql.traversal import Traversal, graph_hits, traverse
from knowledge_store.model import (
    AggregateAnswer,
    AggregateSpec,
    ChunkHit,
    Content,
    Filters,
    GraphHits,
    GraphQuery,
    Identity,
    Order,
    SqlHits,
)
from knowledge_store.model.declared import DeclaredFacet

__all__ = ["SqlReader"]


class _Engine(Protocol):
    """What the shared reader needs of its engine: the public chunk ids of answers, and
    its index components by list."""

    @property
    def chunk_ids(self) -> ChunkIds: ...

    @property
    def components(self) -> Components: ...


def ms(seconds: float) -> float:
    """Seconds as milliseconds, to the microsecond (``--explain``'s timings)."""
    return round(seconds * 1000.0, 3)


@functools.lru_cache(maxsize=8192)
def _heading_from_text(stored: str) -> tuple[str, ...]:
    """A heading path from its JSON text (chunks of a page share their headings)."""
    return tuple(json.loads(stored))


class SqlReader:
    """One snapshot for one identity; the engine's subclass says how statements run."""

    #: The engine's SQL.
    dialect: ClassVar[SqlDialect]
    #: ``explain()``'s ``engine``.
    engine_name: ClassVar[str]
    #: Whether JSON columns arrive as text (SQLite) rather than decoded (psycopg).
    json_as_text: ClassVar[bool]

    def __init__(
        self, engine: _Engine, conn: Any, identity: Identity, publish: int, root: str
    ) -> None:
        self._engine = engine
        self._conn = conn
        self._identity = identity
        self._publish = publish
        self._root = root
        self._statements: dict[str, int] = {}
        self._held_once: tuple[str, ...] | None = None
        self._expand_ms = 0.0
        self._declared: dict[str, DeclaredFacet] | None = None

    # -- what the engine's reader says ------------------------------------------------------
    def _run(self, sql: str, params: Mapping[str, Any]) -> list[Any]:
        """The rows of one statement on the snapshot (counted for ``explain``)."""
        raise NotImplementedError

    def _failing(self, action: str) -> AbstractContextManager[None]:
        """A block whose driver errors become a ``StoreError`` naming ``action``."""
        raise NotImplementedError

    def _snapshot(self) -> dict[str, Any]:
        """``explain()``'s ``snapshot`` beyond the publish and content root."""
        return {}

    def rows(self, sql: str, params: Mapping[str, Any]) -> list[Any]:
        """The rows of one statement on this reader's snapshot (for an engine's components)."""
        return self._run(sql, params)

    def declared_facets(self) -> dict[str, DeclaredFacet]:
        """The store's declared facets in this snapshot, by name (read once, when asked)."""
        if self._declared is None:
            rows = self._run("SELECT name, kind, attribute FROM facets ORDER BY name", {})
            self._declared = {
                str(n): DeclaredFacet(str(n), str(k), None if a is None else str(a))  # type: ignore[arg-type]
                for n, k, a in rows
            }
        return self._declared

    def _counted(self, sql: str) -> None:
        self._statements[sql] = self._statements.get(sql, 0) + 1

    def _json(self, value: Any) -> Any:
        return json.loads(value) if self.json_as_text else value

    # -- what the reader is ---------------------------------------------------------------
    @property
    def content_root(self) -> str:
        return self._root

    @property
    def publish(self) -> int:
        return self._publish

    @property
    def identity(self) -> Identity:
        return self._identity

    @property
    def held(self) -> tuple[str, ...]:
        """The principals the identity holds, expanded once (on first use) in this snapshot."""
        if self._held_once is None:
            started = time.perf_counter()
            expand = self.dialect.expand_identity()
            rows = self._run(expand, {"principal": self._identity.principal})
            held = tuple(str(p) for (p,) in rows)
            if self._identity.groups:  # a credential's groups: each expanded the same way
                more = {
                    str(p)
                    for g in self._identity.groups
                    for (p,) in self._run(expand, {"principal": g})
                }
                held = tuple(sorted(set(held) | more))
            self._held_once = held
            self._expand_ms = ms(time.perf_counter() - started)
        return self._held_once

    def explain(self) -> dict[str, Any]:
        return {
            "engine": self.engine_name,
            "snapshot": {"publish": self._publish, "content_root": self._root, **self._snapshot()},
            "identity": self._identity.principal,
            "identity_expansions": 0 if self._held_once is None else 1,
            "held_principals": len(self._held_once or ()),
            "expand_ms": self._expand_ms,
            "statements": [{"sql": sql, "runs": n} for sql, n in self._statements.items()],
        }

    # -- ranking --------------------------------------------------------------------------------
    def rank(self, list_name: str, query: ListQuery) -> RankedChunks:
        """The chunk ids the engine's component for ``list_name`` ranks for ``query``."""
        return self._engine.components(list_name).search(self, query)

    # -- hydrating ---------------------------------------------------------------------------
    def chunks(self, chunk_ids: Sequence[int]) -> dict[int, ChunkRecord]:
        if not chunk_ids:
            return {}
        public = self._engine.chunk_ids
        heading = _heading_from_text if self.json_as_text else tuple
        # A top-100 makes a hundred: the record made as the tuple it is (a named tuple's own
        # constructor is a Python call, and with keywords three times as slow).
        record = tuple.__new__
        return {
            r[0]: record(
                ChunkRecord,
                (
                    r[0],
                    public(r[1], r[9]),
                    r[1],
                    r[2],
                    r[3],
                    r[4],
                    r[5],
                    heading(r[6]),
                    r[7],
                    r[8],
                    location_value(r[10]),
                ),
            )
            for r in self._cards(chunk_ids)
        }

    def chunk_places(self, chunk_ids: Sequence[int]) -> dict[int, tuple[str, int]]:
        """Where each of ``chunk_ids`` that exists is: its entity's uid and its ordinal."""
        if not chunk_ids:
            return {}
        rows = self._run(*statements.chunk_places(self.dialect, chunk_ids))
        return {int(i): (str(uid), int(ordinal)) for i, uid, ordinal in rows}

    def chunks_at(self, places: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The row id of the chunk at each ``(uid, ordinal)`` that has one in this snapshot."""
        if not places:
            return {}
        wanted = set(places)
        rows = self._run(*statements.entity_chunks(self.dialect, list({u for u, _ in places})))
        return {(str(u), int(o)): int(i) for i, u, o in rows if (str(u), int(o)) in wanted}

    def _cards(self, chunk_ids: Sequence[int]) -> list[Any]:
        """The hydration statement's rows for ``chunk_ids``: :data:`statements.CHUNK_COLUMNS`,
        in no order."""
        return self._run(*statements.chunk_cards(self.dialect, chunk_ids))

    def chunk_hits(
        self, chunk_ids: Sequence[int], scores: Sequence[float]
    ) -> tuple[list[int], list[ChunkHit]]:
        """A primitive's hits of ranked ``chunk_ids`` (checked in this snapshot) and their
        ``scores``, ranked 1… in that order, each made straight from its row of the hydration
        statement (no record between: a top-100 makes a hundred); and the ids of those it
        made (an id whose chunk is gone has none). Checked data of the exact types, assigned
        rather than validated again (``Answer.of_checked``)."""
        if not chunk_ids:
            return [], []
        rows = {r[0]: r for r in self._cards(chunk_ids)}
        public = self._engine.chunk_ids.__call__  # bound: no instance-call lookup a hit (-1%)
        heading = _heading_from_text if self.json_as_text else tuple
        hit = ChunkHit.of_checked
        kept: list[int] = []
        hits: list[ChunkHit] = []
        for chunk_id, score in zip(chunk_ids, scores, strict=True):
            r = rows.get(chunk_id)
            if r is None:
                continue
            kept.append(chunk_id)
            hits.append(
                hit(
                    {
                        "uid": r[1],
                        "chunk_id": public(r[1], r[9]),
                        "title": r[2],
                        "type": r[3],
                        "score": score,
                        "rank": len(kept),
                        "text": r[5],
                        "heading": heading(r[6]),
                        "start": r[7],
                        "end": r[8],
                        "location": location_value(r[10]),
                        "href": r[4],
                    }
                )
            )
        return kept, hits

    def entities(
        self, uids: Sequence[str], filters: Filters | None = None
    ) -> dict[str, EntityCard]:
        if not uids:
            return {}
        return {
            str(r[0]): EntityCard(uid=r[0], title=r[1], type=r[2], href=r[3], updated_at=r[4])
            for r in self._run(*statements.entity_cards(self.dialect, self.held, uids, filters))
        }

    # -- entities by field --------------------------------------------------------------------
    def sql(self, filters: Filters, order: Order, k: int) -> SqlHits:
        rows = self._run(*statements.sql_hits(self.dialect, self.held, filters, order, k))
        return statements.sql_answer(rows, self._root)

    def aggregate(self, spec: AggregateSpec, filters: Filters) -> AggregateAnswer:
        rows = self._run(*statements.aggregate(self.dialect, self.held, spec, filters))
        return aggregate_answer(spec, filters, rows, self._root)

    def successors(self, uids: Sequence[str], filters: Filters) -> dict[str, str]:
        if not uids:
            return {}
        out: dict[str, str] = {}
        for src, dst in self._run(*statements.successors(self.dialect, self.held, uids, filters)):
            out.setdefault(str(src), str(dst))
        return out

    def content(self, uid: str) -> Content | None:
        d = self.dialect
        rows = self._run(*statements.content_entity(d, self.held, uid))
        if not rows:
            return None
        row = rows[0]
        chunks = [
            (*c[:3], self._json(c[3]), *c[4:])
            for c in self._run(*statements.content_chunks(d, int(row[0])))
        ]
        edges = {
            direction: self._run(*statements.content_edges(d, self.held, uid, near, far))
            for direction, near, far in EDGE_DIRECTIONS
        }
        entity = (*row[1:-1], self._json(row[-1]))  # ENTITY_FIELDS, attributes last
        return content_answer(self._root, entity, chunks, edges, self._engine.chunk_ids)

    # -- the graph ------------------------------------------------------------------------------
    def walk(self, query: GraphQuery, filters: Filters | None = None) -> Traversal:
        with self._failing("the graph walk"):
            walk = traverse(self._conn, self.dialect, self.held, query, filters)
        for sql in walk.statements:
            self._counted(sql)
        return walk

    def graph(self, query: GraphQuery) -> GraphHits:
        return graph_hits(self.walk(query), query.k, self._root)
