"""The Engine protocol: storage, the primitives, publishes and ACL administration.

Everything above it (ingest pipeline, fusion, tools, surfaces) is
engine-agnostic. Every read takes an :class:`~knowledge_store.model.Identity`
and applies the ACL inside its query, before ranking.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from knowledge_store.graphquery.nodes import Query
from knowledge_store.model import (
    AclExplanation,
    AggregateAnswer,
    AggregateSpec,
    Chunk,
    ChunkHits,
    Content,
    Entity,
    Filters,
    GraphHits,
    GraphQuery,
    Identity,
    MembershipsLoaded,
    Order,
    PrincipalInfo,
    QueryAnswer,
    SqlHits,
    StoreStats,
)

__all__ = ["AclExplanation", "Engine", "PreparedEntity", "PrincipalInfo", "StoreStats", "Vector"]

Vector = npt.NDArray[np.float32]


@dataclass(frozen=True)
class PreparedEntity:
    """An entity ready to publish: its chunks and one embedding per chunk."""

    entity: Entity
    chunks: tuple[Chunk, ...]
    vectors: Vector  # (len(chunks), dimension) float32, L2-normalised


class Engine(Protocol):
    """What every engine implements; tested by the conformance suite."""

    name: str

    # -- model and content --------------------------------------------------
    def model(self) -> tuple[str, int] | None: ...
    def model_spec(self) -> str | None: ...
    def set_model(self, model_id: str, dimension: int, spec: str) -> None: ...
    def content_root(self) -> str: ...
    def content_hashes(self, uids: Sequence[str]) -> dict[str, str]: ...
    def cached_embeddings(self, keys: Sequence[str]) -> dict[str, Vector]: ...
    def cache_embeddings(self, items: Mapping[str, Vector]) -> None: ...
    def publish(
        self,
        upserts: Sequence[PreparedEntity],
        deletes: Sequence[str],
        *,
        kind: str,
        model: str | None = None,
    ) -> str:
        """One publish; with ``model``, refused (ModelMismatch) unless the store records it."""
        ...

    def chunk_contexts(self, after: int, limit: int) -> list[tuple[int, str]]:
        """``(chunk id, embedded text)`` of up to ``limit`` chunks with ids above ``after``."""
        ...

    def replace_embeddings(
        self,
        ids: Sequence[int],
        vectors: Vector,
        *,
        model_id: str,
        dimension: int,
        spec: str,
        base_root: str,
    ) -> str:
        """Every chunk's vector and the recorded model, as one publish (kind ``reembed``).

        ``ids`` must be every chunk of the store at ``base_root``; a store that
        has moved on since is refused (StoreError), and nothing changes.
        """
        ...

    def delete(self, uids: Sequence[str]) -> str: ...
    def stats(self) -> StoreStats: ...
    def is_empty(self) -> bool: ...
    def rebuild(self, *, progress: bool = False) -> None: ...
    def close(self) -> None: ...

    # -- primitives -----------------------------------------------------------
    def lexical(self, identity: Identity, text: str, k: int, filters: Filters) -> ChunkHits: ...
    def vector(self, identity: Identity, vector: Vector, k: int, filters: Filters) -> ChunkHits: ...
    def sql(self, identity: Identity, filters: Filters, order: Order, k: int) -> SqlHits: ...
    def aggregate(
        self, identity: Identity, spec: AggregateSpec, filters: Filters
    ) -> AggregateAnswer: ...
    def successors(
        self, identity: Identity, uids: Sequence[str], filters: Filters
    ) -> dict[str, str]: ...
    def graph(self, identity: Identity, query: GraphQuery) -> GraphHits: ...
    def query_graph(
        self, identity: Identity, query: Query, params: Mapping[str, Any]
    ) -> QueryAnswer: ...
    def content(self, identity: Identity, uid: str) -> Content | None: ...

    # -- ACL administration -----------------------------------------------------
    def grant(self, uid: str, principal: str) -> str: ...
    def revoke(self, uid: str, principal: str) -> str: ...
    def acl_show(self, uid: str) -> tuple[str, ...]: ...
    def acl_explain(self, principal: str, uid: str) -> AclExplanation: ...
    def add_member(self, group: str, member: str) -> None: ...
    def remove_member(self, group: str, member: str) -> None: ...
    def principal_show(self, principal: str) -> PrincipalInfo: ...
    def load_memberships(self, pairs: Sequence[tuple[str, str]]) -> MembershipsLoaded: ...
