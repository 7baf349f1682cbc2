"""A reader over the PostgreSQL engine's per-call primitives — a bridge, for one milestone.

The embedded engine reads through one point-in-time reader on the shared SQL
layer (``engines/sql``); this adapter gives the PostgreSQL engine the same
:class:`~knowledge_store.engines.base.Reader` surface over its existing
statements (each its own ``REPEATABLE READ`` snapshot) until it moves onto
that layer too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from knowledge_store.engines.base import ChunkRecord, EntityCard, RankedChunks, Vector
from knowledge_store.engines.postgres import acl
from knowledge_store.engines.postgres.db import translate
from knowledge_store.graphquery.nodes import Query
from knowledge_store.model import (
    DEFAULT_ORDER,
    AggregateAnswer,
    AggregateSpec,
    ChunkHits,
    Content,
    Filters,
    GraphHits,
    GraphQuery,
    Identity,
    Order,
    QueryAnswer,
    SqlHits,
)

if TYPE_CHECKING:
    from knowledge_store.engines.postgres.engine import PostgresEngine

__all__ = ["LegacyReader"]


class LegacyReader:
    def __init__(self, engine: PostgresEngine, identity: Identity) -> None:
        self._engine = engine
        self._identity = identity
        with engine.db.read() as conn, translate("opening a reader"):
            self._publish, self._root, _ = engine._snapshot(conn)
            self._held = tuple(acl.held_principals(conn, identity.principal))
        self._records: dict[int, ChunkRecord] = {}

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
        return self._held

    def explain(self) -> dict[str, Any]:
        return {
            "engine": "postgres",
            "snapshot": {"publish": self._publish, "content_root": self._root},
            "identity": self._identity.principal,
            "held_principals": len(self._held),
        }

    def _ranked(self, answer: ChunkHits) -> RankedChunks:
        for h in answer.hits:
            self._records[h.chunk_id] = ChunkRecord(
                h.chunk_id, h.uid, h.title, h.type, h.href, h.text, h.heading, h.start, h.end
            )
        return RankedChunks(
            [h.chunk_id for h in answer.hits],
            [h.uid for h in answer.hits],
            [h.score for h in answer.hits],
            answer.vector,
            answer.explain or {},
        )

    def lexical(self, text: str, k: int, filters: Filters) -> RankedChunks:
        return self._ranked(self._engine.lexical(self._identity, text, k, filters))

    def vector(self, vector: Vector, k: int, filters: Filters) -> RankedChunks:
        return self._ranked(self._engine.vector(self._identity, vector, k, filters))

    def chunks(self, chunk_ids: Sequence[int]) -> dict[int, ChunkRecord]:
        missing = [c for c in chunk_ids if c not in self._records]
        if missing:
            with self._engine.db.read() as conn, translate("reading chunks"):
                for r in conn.execute(
                    'SELECT c.id, e.uid, e.title, e.type, e.href, c.text, c.heading, c.start, c."end"'
                    " FROM chunks AS c JOIN entities AS e ON e.id = c.entity"
                    " WHERE c.id = ANY(%s::bigint[])",
                    ([int(c) for c in missing],),
                ):
                    self._records[int(r[0])] = ChunkRecord(
                        int(r[0]), r[1], r[2], r[3], r[4], r[5], tuple(r[6]), int(r[7]), int(r[8])
                    )
        return {c: self._records[c] for c in chunk_ids if c in self._records}

    def entities(self, uids: Sequence[str]) -> dict[str, EntityCard]:
        if not uids:
            return {}
        found = self._engine.sql(
            self._identity, Filters.build(uid=list(uids)), DEFAULT_ORDER, len(uids)
        )
        return {h.uid: EntityCard(h.uid, h.title, h.type, h.href, h.updated_at) for h in found.hits}

    def sql(self, filters: Filters, order: Order, k: int) -> SqlHits:
        return self._engine.sql(self._identity, filters, order, k)

    def aggregate(self, spec: AggregateSpec, filters: Filters) -> AggregateAnswer:
        return self._engine.aggregate(self._identity, spec, filters)

    def successors(self, uids: Sequence[str], filters: Filters) -> dict[str, str]:
        return self._engine.successors(self._identity, uids, filters)

    def graph(self, query: GraphQuery) -> GraphHits:
        return self._engine.graph(self._identity, query)

    def query_graph(self, query: Query, params: Mapping[str, Any]) -> QueryAnswer:
        return self._engine.query_graph(self._identity, query, params)

    def content(self, uid: str) -> Content | None:
        return self._engine.content(self._identity, uid)
