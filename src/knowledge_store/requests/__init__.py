"""One pydantic request model per operation, its bounds from :mod:`knowledge_store.model`.

Every surface — Python, CLI, REST, GraphQL, MCP — validates a request through
the same model, once, at the store boundary, so every surface has the same
bounds and the same error wording. :meth:`Request.parse` turns pydantic's
validation errors into the one error tree (``InvalidRequest``,
``BoundExceeded``, ``UnknownField``, ``UnknownLabel``) with
``details.field`` a dotted, surface-neutral path (``filters.created_from``);
each surface translates that name to its own spelling (a flag, a JSON
field, a tool argument). No message here names a CLI flag.

:meth:`Request.json_schema` is the schema surfaces publish (MCP
``inputSchema``): every property carries an explicit ``"type"`` and nested
models (FILTERS) are inlined, not ``$ref``-ed.
"""

from __future__ import annotations

from knowledge_store.requests.admin import (
    AclExplainRequest,
    AclRequest,
    AclShowRequest,
    CheckRequest,
    DeclaredFacetsRequest,
    DeclareFacetRequest,
    DeleteRequest,
    IngestRequest,
    MemberRequest,
    MembershipsRequest,
    PrincipalRequest,
    RecordLines,
    RemoveFacetRequest,
    SourcesRequest,
    StatsRequest,
)
from knowledge_store.requests.audit import (
    AuditExportRequest,
    AuditListRequest,
    AuditReplayRequest,
    AuditSettingsRequest,
    AuditShowRequest,
    AuditVerifyRequest,
    GcRequest,
)
from knowledge_store.requests.base import (
    FilterSpec,
    Request,
    json_schema_of,
)
from knowledge_store.requests.reads import (
    AggregateRequest,
    ContentRequest,
    DocsSearchRequest,
    FacetsRequest,
    FuzzyRequest,
    GraphRequest,
    KnowledgeRequest,
    LearningPathRequest,
    LexicalRequest,
    QueryGraphRequest,
    RelatedRequest,
    SearchRequest,
    SqlRequest,
    VectorRequest,
    XrefRequest,
)

__all__ = [
    "AclExplainRequest",
    "AclRequest",
    "AclShowRequest",
    "AggregateRequest",
    "AuditExportRequest",
    "AuditListRequest",
    "AuditReplayRequest",
    "AuditSettingsRequest",
    "AuditShowRequest",
    "AuditVerifyRequest",
    "CheckRequest",
    "ContentRequest",
    "DeclareFacetRequest",
    "DeclaredFacetsRequest",
    "DeleteRequest",
    "DocsSearchRequest",
    "FacetsRequest",
    "FilterSpec",
    "FuzzyRequest",
    "GcRequest",
    "GraphRequest",
    "IngestRequest",
    "KnowledgeRequest",
    "LearningPathRequest",
    "LexicalRequest",
    "MemberRequest",
    "MembershipsRequest",
    "PrincipalRequest",
    "QueryGraphRequest",
    "RecordLines",
    "RelatedRequest",
    "RemoveFacetRequest",
    "Request",
    "SearchRequest",
    "SourcesRequest",
    "SqlRequest",
    "StatsRequest",
    "VectorRequest",
    "XrefRequest",
    "json_schema_of",
    "request_models",
]


def request_models() -> tuple[type[Request], ...]:
    """Every request model (a test checks each schema has explicit types)."""
    return (
        SearchRequest,
        DocsSearchRequest,
        KnowledgeRequest,
        LexicalRequest,
        FuzzyRequest,
        VectorRequest,
        GraphRequest,
        RelatedRequest,
        SqlRequest,
        AggregateRequest,
        QueryGraphRequest,
        ContentRequest,
        LearningPathRequest,
        XrefRequest,
        FacetsRequest,
        IngestRequest,
        DeleteRequest,
        AclRequest,
        MemberRequest,
        PrincipalRequest,
        AclShowRequest,
        AclExplainRequest,
        MembershipsRequest,
        StatsRequest,
        SourcesRequest,
        CheckRequest,
    )
