"""The engine protocols: a point-in-time reader, a writer, ACL administration.

Everything above an engine (ingest pipeline, fusion, tools, surfaces) is
engine-agnostic. An :class:`Engine` opens a :class:`Reader` for an identity:
one snapshot of the catalog, the derived indexes at that snapshot, and the
identity expanded once. Every read of the reader applies the ACL inside its
query, before ranking, and takes typed values only — the store boundary
parsed every string already.

Primitives rank ids (``lexical``, ``vector``); the reader hydrates what an
answer returns (``chunks``, ``entities``), once, late.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

from knowledge_store.engines.cursors import Cursors
from knowledge_store.engines.sql.audit import AuditStorage
from knowledge_store.engines.sql.export import Snapshot
from knowledge_store.engines.sql.history import History
from knowledge_store.engines.sql.publish import PublishPlan
from knowledge_store.engines.sql.traversal import Traversal
from knowledge_store.errors import InvalidRequest
from knowledge_store.graphquery.nodes import Query
from knowledge_store.model import (
    QUERY_GRAPH_TIME_LIMIT_S,
    AclExplanation,
    AggregateAnswer,
    AggregateSpec,
    CheckReport,
    Chunk,
    ChunkHit,
    ChunkLocation,
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
    VectorInfo,
)
from knowledge_store.model.declared import DeclaredFacet
from knowledge_store.model.queries import TextAnalysis

if TYPE_CHECKING:
    from knowledge_store.engines.components import ListQuery
    from knowledge_store.engines.sql.dialect import SqlDialect
    from knowledge_store.engines.sql.write import Batch, ChunkStore, Reembedding
    from knowledge_store.engines.sql.writer import CatalogWriter

__all__ = [
    "AclAdmin",
    "ChunkRecord",
    "Engine",
    "EngineSettings",
    "EntityCard",
    "History",
    "PreparedEntity",
    "Published",
    "RankedChunks",
    "Reader",
    "Replica",
    "Vector",
    "Writer",
]

Vector = npt.NDArray[np.float32]


@dataclass(frozen=True)
class EngineSettings:
    """How an engine opens, beyond its location — given by the caller, never read from
    the environment (``ks`` and the servers map ``KS_PG_LEXICAL`` and
    ``KS_PG_KEEP_RUNNING`` here: :mod:`knowledge_store.surfaces.environment`).

    ``lexical_ranker``: PostgreSQL's BM25 ranker (``bm25``, ``ts_rank_cd``,
    ``pg_search``, ``pg_textsearch``; None: the best the server has);
    ``keep_server``: ``pg:DIR`` leaves its local server running after exit.
    ``graph_time_limit_s``: query_graph's wall-clock bound (both engines; DESIGN §5's
    ~250 ms by default), past which a statement is cancelled with ``timeout``.
    """

    lexical_ranker: str | None = None
    keep_server: bool = False
    graph_time_limit_s: float = QUERY_GRAPH_TIME_LIMIT_S

    def __post_init__(self) -> None:
        if not (math.isfinite(self.graph_time_limit_s) and self.graph_time_limit_s > 0):
            raise InvalidRequest(
                f"the query_graph time limit must be a positive number of seconds,"
                f" not {self.graph_time_limit_s!r}",
                field="graph_time_limit_s",
            )


@dataclass(frozen=True)
class PreparedEntity:
    """An entity ready to publish: its chunks and one embedding per chunk."""

    entity: Entity
    chunks: tuple[Chunk, ...]
    vectors: Vector  # (len(chunks), dimension) float32, L2-normalised


@dataclass(frozen=True)
class Published:
    """What one publish did, counted inside it (under the write lock); a plan that
    changed nothing publishes nothing: the same root.

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

    @classmethod
    def of(cls, plan: PublishPlan) -> Published:
        if plan.empty:
            return cls(plan.publish - 1, plan.parent, unchanged=plan.unchanged)
        return cls(
            plan.publish,
            plan.root,
            plan.added,
            plan.updated,
            plan.deleted,
            plan.unchanged,
            tuple(sorted(plan.deletes)),
        )


@dataclass(frozen=True)
class RankedChunks:
    """Chunk ids ranked by a primitive, best first, each visible to the reader, with
    the uid of each chunk's entity (for folding to entities without hydrating)."""

    ids: list[int]
    uids: list[str]
    scores: list[float]
    vector: VectorInfo | None = None
    details: Mapping[str, Any] = field(default_factory=dict)  # for --explain
    #: The answer's hits, when the primitive was asked to hydrate (``hydrate=True``) and made
    #: them with its final check; None: :meth:`Reader.chunk_hits` makes them.
    hits: list[ChunkHit] | None = None


class ChunkRecord(NamedTuple):
    """A chunk hydrated for an answer: its text and where it sits, with its entity's card.

    ``chunk_id`` is the engine's row id (internal: primitives rank it); ``public_id``
    names the chunk in answers (``engines.shared.ChunkIds``: a keyed hash of uid and
    ordinal, so the ids a caller sees say nothing of the chunks hidden from it). A named
    tuple: a top-100 primitive makes a hundred.
    """

    chunk_id: int
    public_id: int
    uid: str
    title: str
    type: str
    href: str | None
    text: str
    heading: tuple[str, ...]
    start: int
    end: int
    location: ChunkLocation | None


class EntityCard(NamedTuple):
    """What a result shows of an entity (a named tuple: the graph list makes one per hit)."""

    uid: str
    title: str
    type: str
    href: str | None
    updated_at: str | None


class Reader(Protocol):
    """One point-in-time view for one identity. Every method reads that snapshot."""

    @property
    def content_root(self) -> str: ...
    @property
    def publish(self) -> int: ...
    @property
    def identity(self) -> Identity: ...
    @property
    def held(self) -> tuple[str, ...]:
        """The principals the identity holds, expanded once when the reader opened."""
        ...

    def declared_facets(self) -> Mapping[str, DeclaredFacet]:
        """The store's declared facets in this snapshot, by name (``ks facets add``)."""
        ...

    def rank(self, list_name: str, query: ListQuery) -> RankedChunks:
        """The chunk ids the engine's index component for ``list_name`` (``lexical``,
        ``vector``, ``fuzzy``…: ``engines.components``) ranks for ``query``."""
        ...

    def chunks(self, chunk_ids: Sequence[int]) -> dict[int, ChunkRecord]: ...
    def chunk_places(self, chunk_ids: Sequence[int]) -> dict[int, tuple[str, int]]:
        """Where each chunk is: its entity's uid and its ordinal (a place outlives a row id)."""
        ...

    def chunks_at(self, places: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The row id of the chunk now at each ``(uid, ordinal)`` (no ACL check: the caller's)."""
        ...

    def chunk_hits(
        self, chunk_ids: Sequence[int], scores: Sequence[float]
    ) -> tuple[list[int], list[ChunkHit]]:
        """A primitive's hits of ranked ``chunk_ids`` and ``scores`` (rank 1…), and the ids
        of those it made (a chunk gone has none)."""
        ...

    def entities(
        self, uids: Sequence[str], filters: Filters | None = None
    ) -> dict[str, EntityCard]:
        """The cards of the visible ones of ``uids`` (that pass ``filters``, when given)."""
        ...

    def sql(self, filters: Filters, order: Order, k: int) -> SqlHits: ...
    def aggregate(self, spec: AggregateSpec, filters: Filters) -> AggregateAnswer: ...
    def successors(self, uids: Sequence[str], filters: Filters) -> dict[str, str]: ...
    def walk(self, query: GraphQuery, filters: Filters | None = None) -> Traversal:
        """The bounded walk as plain data (fused search ranks it; ``graph`` shapes it); with
        ``filters``, each entity reached says whether it passes them (``Reached.passes``)."""
        ...

    def graph(self, query: GraphQuery) -> GraphHits: ...
    def query_graph(self, query: Query, params: Mapping[str, Any]) -> QueryAnswer: ...
    def content(self, uid: str) -> Content | None: ...
    def explain(self) -> dict[str, Any]:
        """The snapshot (publish, root), the identity's expansion, the statements run."""
        ...


class Writer(Protocol):
    """What an engine gives the write path every engine shares (``engines.sql.writer``,
    ``engines.sql.write``, ``engines.sql.acl``): its catalog's dialect and connections, what
    it keeps of chunks, and what only it can do — a publish with its derived indexes, a
    re-embedding, its figures, rebuild and check."""

    @property
    def dialect(self) -> SqlDialect: ...
    @property
    def chunk_store(self) -> ChunkStore:
        """The engine's part of every publish (``engines.sql.write.ChunkStore``)."""
        ...

    def connection(self) -> AbstractContextManager[Any]:
        """This thread's connection, for single statements (each its own transaction)."""
        ...

    def reading(self) -> AbstractContextManager[Any]:
        """A connection in a read transaction: one snapshot for the block."""
        ...

    def writing(self) -> AbstractContextManager[Any]:
        """A connection in a write transaction, the store's write lock held."""
        ...

    def publish(self, batch: Batch) -> Published:
        """One publish: ``engines.sql.write.publish_batch`` in a write transaction, the
        engine's derived indexes following it."""
        ...

    def replace_embeddings(self, job: Reembedding) -> str:
        """``engines.sql.write.reembed`` in a write transaction, the engine's derived
        indexes following it; the new content root."""
        ...

    def stats(self) -> StoreStats: ...
    def rebuild(self, *, progress: bool = False) -> None: ...
    def check(self) -> CheckReport:
        """The catalog verified (every content hash recomputed, chunks against bodies) and the
        derived indexes against it, on one snapshot: the damage found, by kind, with uids."""
        ...


class AclAdmin(Protocol):
    """ACL and membership administration (no identity: an operation, DESIGN §1)."""

    @property
    def catalog(self) -> Writer:
        """The engine's catalog as administration writes it (its write transactions under
        the store's write lock): declared facets are administered over it too."""
        ...

    def grant(self, uid: str, principal: str) -> str: ...
    def revoke(self, uid: str, principal: str) -> str: ...
    def acl_show(self, uid: str) -> tuple[str, ...]: ...
    def acl_inherited_from(self, uid: str) -> str | None: ...
    def acl_explain(self, principal: str, uid: str) -> AclExplanation: ...
    def add_member(self, group: str, member: str) -> None: ...
    def remove_member(self, group: str, member: str) -> None: ...
    def principal_show(self, principal: str) -> PrincipalInfo: ...
    def load_memberships(self, pairs: Sequence[tuple[str, str]]) -> MembershipsLoaded: ...


class Replica(Protocol):
    """A fresh, private store of the same engine, naming chunks with the same key and
    recording the same model: what a publish is rebuilt in to be read again (``ks audit
    replay``; ``engines.sql.history`` gives its content)."""

    @property
    def engine(self) -> Engine: ...

    def set_memberships(self, pairs: Sequence[tuple[str, str]]) -> None:
        """Every membership replaced by ``pairs``."""
        ...

    def discard(self) -> None:
        """Close it and remove it."""
        ...


class Engine(Protocol):
    """What every engine implements; tested by the conformance suite."""

    name: str
    #: How the engine's lexical index reads text (query terms, highlighting).
    text_analysis: TextAnalysis
    #: The audit log (``engines.sql.audit``: the same tables in each engine's storage).
    audit: AuditStorage
    #: Whether the lexical list's BM25 statistics count only the chunks of the snapshot (else
    #: also chunks deleted but not yet merged away, as Tantivy's do): replay's question of
    #: whether a fresh index of the same content can rank otherwise than the one that read.
    exact_lexical_statistics: bool
    #: Where paged reads keep the rankings their cursors page through.
    cursors: Cursors

    def reader(self, identity: Identity) -> AbstractContextManager[Reader]: ...

    @property
    def writer(self) -> CatalogWriter:
        """The store's writer: the shared one (``engines.sql.writer``) over this engine."""
        ...

    @property
    def admin(self) -> AclAdmin: ...

    def replica(self) -> Replica:
        """A new, empty replica of this store (see :class:`Replica`)."""
        ...

    def history(self) -> AbstractContextManager[History]:
        """The catalog's history, on one read snapshot (``engines.sql.history``)."""
        ...

    def prune_history(
        self, before_publish: int, before: str, *, dry_run: bool = False
    ) -> dict[str, int]:
        """``engines.sql.history.prune`` in one write transaction (``ks gc``)."""
        ...

    def snapshot(self) -> AbstractContextManager[Snapshot]:
        """One catalog read transaction with no identity (an administration view: ``ks
        export``), its publish and content root."""
        ...

    def close(self) -> None: ...
