"""The Engine protocol: storage, the primitives, publishes and ACL administration.

Everything above it (ingest pipeline, fusion, tools, surfaces) is
engine-agnostic. Every read takes an :class:`~knowledge_store.model.Identity`
and applies the ACL inside its query, before ranking.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from knowledge_store.engines.sources import SourceSync, SourceView
from knowledge_store.model import (
    AggregateAnswer,
    Chunk,
    ChunkHits,
    Entity,
    Filters,
    GraphHits,
    Identity,
    QueryAnswer,
    SqlHits,
)

__all__ = [
    "AclExplanation",
    "Engine",
    "PreparedEntity",
    "PrincipalInfo",
    "PublishResult",
    "StoreStats",
]

Vector = npt.NDArray[np.float32]


@dataclass(frozen=True)
class PreparedEntity:
    """An entity ready to publish: its chunks and one embedding per chunk."""

    entity: Entity
    chunks: tuple[Chunk, ...]
    vectors: Vector  # (len(chunks), dimension) float32, L2-normalised


@dataclass(frozen=True)
class PublishResult:
    """What one publish did, counted inside it (under the write lock).

    ``unchanged``: upserts whose stored content hash already matched when the
    publish ran (another writer got there first); they are left as they are.
    ``publish`` is the new publish id, or the previous one when nothing changed.
    ``deleted_uids``: the uids it deleted, sorted.
    """

    publish: int
    root: str
    added: int = 0
    updated: int = 0
    deleted: int = 0
    unchanged: int = 0
    deleted_uids: tuple[str, ...] = ()


@dataclass(frozen=True)
class StoreStats:
    content_root: str
    entities: int
    chunks: int
    edges: Mapping[str, int]
    segments: int
    model: str | None
    dimension: int | None
    is_empty: bool
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "content_root": self.content_root,
            "entities": self.entities,
            "chunks": self.chunks,
            "edges": dict(self.edges),
            "segments": self.segments,
            "model": self.model,
            "dimension": self.dimension,
            "is_empty": self.is_empty,
            **self.extra,
        }


@dataclass(frozen=True)
class PrincipalInfo:
    principal: str
    direct_groups: tuple[str, ...]
    inherited_groups: tuple[str, ...]
    members: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "principal": self.principal,
            "direct_groups": list(self.direct_groups),
            "inherited_groups": list(self.inherited_groups),
            "members": list(self.members),
        }


@dataclass(frozen=True)
class AclExplanation:
    principal: str
    uid: str
    allowed: bool
    chain: tuple[str, ...]  # principal → group → … → the ACL entry that grants
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "principal": self.principal,
            "uid": self.uid,
            "allowed": self.allowed,
            "chain": list(self.chain),
            "reason": self.reason,
        }


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
        source: SourceSync | None = None,
    ) -> PublishResult:
        """One publish; with ``model``, refused (ModelMismatch) unless the store records it.

        With ``source``, the source's catalog row is written in the same transaction
        (even when nothing changed), and a sync also deletes the source's entities
        the batch does not hold (``engines.sources.plan_sync``).
        """
        ...

    def sources(self) -> list[SourceView]:
        """Every source: what it holds now (all entities: an administration view) and its row."""
        ...

    def delete_source(self, name: str) -> PublishResult:
        """Every entity of source ``name``, its row and its crawl state, gone in one publish."""
        ...

    def crawl_pages(self, source: str) -> dict[str, str]:
        """The crawl state remembered for ``source``: url → PageState as JSON."""
        ...

    def save_crawl_pages(self, source: str, pages: Mapping[str, str | None]) -> None:
        """Remember (JSON) or forget (None) each url's crawl state, in one transaction."""
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
    def sql(
        self, identity: Identity, filters: Filters, *, order: str | None = None, k: int = 10
    ) -> SqlHits: ...
    def aggregate(
        self, identity: Identity, metric: str, dimension: str | None, filters: Filters
    ) -> AggregateAnswer: ...
    def successors(
        self, identity: Identity, uids: Sequence[str], filters: Filters
    ) -> dict[str, str]: ...
    def graph(
        self,
        identity: Identity,
        starts: Sequence[str],
        *,
        depth: int = 1,
        labels: Sequence[str] = (),
        direction: str = "both",
        k: int = 10,
    ) -> GraphHits: ...
    def query_graph(
        self,
        identity: Identity,
        text: str,
        params: Mapping[str, Any] | None = None,
        *,
        lenient: bool = False,
    ) -> QueryAnswer: ...
    def content(self, identity: Identity, uid: str) -> dict[str, Any] | None: ...

    # -- ACL administration -----------------------------------------------------
    def grant(self, uid: str, principal: str) -> str: ...
    def revoke(self, uid: str, principal: str) -> str: ...
    def acl_show(self, uid: str) -> tuple[str, ...]: ...
    def acl_explain(self, principal: str, uid: str) -> AclExplanation: ...
    def add_member(self, group: str, member: str) -> None: ...
    def remove_member(self, group: str, member: str) -> None: ...
    def principal_show(self, principal: str) -> PrincipalInfo: ...
    def load_memberships(self, pairs: Sequence[tuple[str, str]]) -> dict[str, int]: ...
