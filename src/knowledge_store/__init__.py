"""knowledge-store: a permission-aware retrieval layer for RAG and AI agents.

Four search primitives over one store — dense vectors, BM25, graph traversal
and SQL filters/aggregates — fused into one ranked list, under the caller's
permissions. ``KnowledgeStore.open(path)`` is where to start.
"""

from knowledge_store.errors import (
    BatchRejected,
    BoundExceeded,
    InputError,
    InvalidRecord,
    InvalidRequest,
    KnowledgeStoreError,
    ModelMismatch,
    NotFound,
    QueryTimeout,
    Rejection,
    StoreError,
    UnknownField,
    UnknownLabel,
)
from knowledge_store.model import (
    EVERYONE,
    LABELS,
    Chunk,
    ChunkHit,
    ChunkHits,
    Edge,
    Entity,
    Evidence,
    Filters,
    Identity,
    IngestReport,
    Result,
    SearchAnswer,
    VectorInfo,
)
from knowledge_store.store import KnowledgeStore

__version__ = "0.1.0"

__all__ = [
    "EVERYONE",
    "LABELS",
    "BatchRejected",
    "BoundExceeded",
    "Chunk",
    "ChunkHit",
    "ChunkHits",
    "Edge",
    "Entity",
    "Evidence",
    "Filters",
    "Identity",
    "IngestReport",
    "InputError",
    "InvalidRecord",
    "InvalidRequest",
    "KnowledgeStore",
    "KnowledgeStoreError",
    "ModelMismatch",
    "NotFound",
    "QueryTimeout",
    "Rejection",
    "Result",
    "SearchAnswer",
    "StoreError",
    "UnknownField",
    "UnknownLabel",
    "VectorInfo",
    "__version__",
]
