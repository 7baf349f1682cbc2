"""The requests and answers only the surfaces have, next to the store's own.

- ``fetch_content``: the content API read for a model — the entity's fields,
  its body cut at ``max_chars``, a code sample's code and language, its edges,
  its chunks on request;
- :class:`ReaderStats`: what ``stats`` tells a caller without the admin scope
  (global counts would tell a reader how much it can't see);
- :class:`AclShown`: an entity's ACL, as ``acl show`` prints it;
- :class:`Capabilities`: the tools a caller sees now;
- :class:`ErrorEnvelope`: the one error shape, as a schema (OpenAPI, MCP output schemas).

Every one is a pydantic model like the store's (:mod:`knowledge_store.requests`,
:mod:`knowledge_store.model.answers`), so that every surface derives its schema
from it. Below them, the operations of the table that are more than one store
method called with the request (``(store, caller, request) → answer``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from knowledge_store.model import FACET_NAMES, Answer, ContentChunk, ContentEdges, SourcesAnswer
from knowledge_store.requests import (
    AclExplainRequest,
    AclShowRequest,
    ContentRequest,
    IngestRequest,
    MembershipsRequest,
    SourcesRequest,
    StatsRequest,
)
from knowledge_store.retrieval.knowledge import CODE_SAMPLE_TYPE, code_of
from knowledge_store.surfaces.auth import Caller

if TYPE_CHECKING:
    from knowledge_store.store import KnowledgeStore

__all__ = [
    "NOTHING_MATCHES",
    "AclShown",
    "Capabilities",
    "ErrorEnvelope",
    "FetchContentRequest",
    "FetchedContent",
    "ReaderStats",
    "ToolInfo",
    "acl_explain",
    "acl_show",
    "fetch_content",
    "ingest",
    "load_memberships",
    "sources",
    "stats",
]


def _absent(value: object) -> bool:
    return value is None


#: What an empty search answer says, on the search page and in the CLI: it is not silence.
NOTHING_MATCHES = "Nothing you can read matches. Try other words or fewer filters."


class FetchContentRequest(ContentRequest):
    """One entity in full, for a model: its body cut at ``max_chars``."""

    max_chars: int = Field(
        20000, ge=100, le=500000, description="cut the body after this many characters"
    )
    include_chunks: bool = Field(
        False, description="also return the chunks (heading path and offsets of each slice)"
    )


class FetchedContent(Answer):
    """An entity's fields, its body (cut at ``max_chars``), its edges; a code sample's code."""

    content_root: str
    uid: str
    type: str
    title: str
    body: str
    body_truncated: bool
    body_chars: int
    source: str
    status: str
    created_at: str | None
    updated_at: str | None
    href: str | None
    attributes: dict[str, Any]
    code: str | None = Field(None, description="a code sample's code")
    language: str | None = Field(None, description="a code sample's language, if known")
    edges: ContentEdges
    chunks: list[ContentChunk] | None = Field(None, exclude_if=_absent)


class ReaderStats(Answer):
    """``stats`` for a caller without the admin scope: the slice it can read."""

    content_root: str
    entities: int = Field(description="entities this caller can read")
    model: str | None
    dimension: int | None
    is_empty: bool
    identity: str


class AclShown(Answer):
    """The principals in an entity's ACL, and where it comes from."""

    uid: str
    acl: tuple[str, ...]
    #: The entity whose ACL this one shares (a code sample's page); null: its own.
    inherited_from: str | None = None


class ToolInfo(Answer):
    """One tool as a model sees it: its name, description and input schema."""

    name: str
    description: str
    input_schema: dict[str, Any]


class Endpoints(Answer):
    rest: str
    openapi: str
    graphql: str
    mcp: str
    page: str


class Capabilities(Answer):
    """What a caller can do now: the tools it sees (none while the store is empty)."""

    content_root: str
    is_empty: bool
    identity: str
    admin: bool
    tools: list[ToolInfo]
    endpoints: Endpoints


class ErrorBody(Answer):
    code: str
    message: str
    details: dict[str, Any]


class ErrorEnvelope(Answer):
    """The one error shape: ``{"error": {"code", "message", "details"}}``."""

    error: ErrorBody


# -- operations that are more than one store call ---------------------------------------------------
def fetch_content(
    store: KnowledgeStore, caller: Caller, request: FetchContentRequest
) -> FetchedContent:
    """``store.content`` shaped for a model (see :class:`FetchedContent`)."""
    content = store.content(request, identity=caller.identity)
    entity = content.entity
    code, language = (
        code_of(entity.body, entity.attributes) if entity.type == CODE_SAMPLE_TYPE else (None, None)
    )
    return FetchedContent(
        content_root=content.content_root,
        **entity.model_dump(exclude={"body", *FACET_NAMES}),
        body=entity.body[: request.max_chars],
        body_truncated=len(entity.body) > request.max_chars,
        body_chars=len(entity.body),
        code=code,
        language=language,
        edges=content.edges,
        chunks=content.chunks if request.include_chunks else None,
    )


def stats(store: KnowledgeStore, caller: Caller, request: StatsRequest) -> Answer:
    """The store's figures for an admin; the slice it can read for anyone else."""
    figures = store.stats()
    if caller.admin:
        return figures
    # Global counts would tell a reader how much it can't see: give it its own slice.
    visible = store.aggregate("count", None, identity=caller.identity)
    return ReaderStats(
        content_root=figures.content_root,
        entities=visible.rows[0].value if visible.rows else 0,
        model=figures.model,
        dimension=figures.dimension,
        is_empty=figures.is_empty,
        identity=caller.principal,
    )


def ingest(store: KnowledgeStore, caller: Caller, request: IngestRequest) -> Answer:
    return store.ingest_records(
        request.records,
        acl=request.acl or None,
        skip_invalid=request.skip_invalid,
        source=request.source,
        sync=request.sync,
        allow_mass_delete=request.allow_mass_delete,
        lines=request.record_lines,
        allow_move=request.allow_move,
    )


def sources(store: KnowledgeStore, caller: Caller, request: SourcesRequest) -> Answer:
    """The sources view, with the store's content root."""
    root = store.content_root()
    return SourcesAnswer(content_root=root, sources=store.sources())


def acl_show(store: KnowledgeStore, caller: Caller, request: AclShowRequest) -> Answer:
    return AclShown(
        uid=request.uid,
        acl=store.acl_show(request.uid),
        inherited_from=store.acl_inherited_from(request.uid),
    )


def acl_explain(store: KnowledgeStore, caller: Caller, request: AclExplainRequest) -> Answer:
    return store.acl_explain(request.principal, request.uid, request.at)


def load_memberships(store: KnowledgeStore, caller: Caller, request: MembershipsRequest) -> Answer:
    return store.load_memberships(request.pairs)
