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
    AggregateAnswer,
    Chunk,
    ChunkHit,
    ChunkHits,
    Edge,
    Entity,
    Evidence,
    Filters,
    GraphHit,
    GraphHits,
    Identity,
    IngestReport,
    PathStep,
    QueryAnswer,
    Result,
    SearchAnswer,
    SqlHit,
    SqlHits,
    VectorInfo,
)
from knowledge_store.retrieval.docs_tools import (
    get_learning_path,
    get_related,
    graph_facets,
    resolve_xref,
)
from knowledge_store.retrieval.retrievers import Retriever, register_retriever
from knowledge_store.store import KnowledgeStore

__version__ = "0.1.0"

__all__ = [
    "EVERYONE",
    "LABELS",
    "AggregateAnswer",
    "BatchRejected",
    "BoundExceeded",
    "Chunk",
    "ChunkHit",
    "ChunkHits",
    "Edge",
    "Entity",
    "Evidence",
    "Filters",
    "GraphHit",
    "GraphHits",
    "Identity",
    "IngestReport",
    "InputError",
    "InvalidRecord",
    "InvalidRequest",
    "KnowledgeStore",
    "KnowledgeStoreError",
    "ModelMismatch",
    "NotFound",
    "PathStep",
    "QueryAnswer",
    "QueryTimeout",
    "Rejection",
    "Result",
    "Retriever",
    "SearchAnswer",
    "SqlHit",
    "SqlHits",
    "StoreError",
    "UnknownField",
    "UnknownLabel",
    "VectorInfo",
    "__version__",
    "get_learning_path",
    "get_related",
    "graph_facets",
    "register_retriever",
    "resolve_xref",
]
