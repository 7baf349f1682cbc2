"""The answers: frozen pydantic models whose ``model_dump()`` is the ``--json`` shape (DESIGN §6).

Every surface serialises these — the CLI's ``--json``, REST bodies, GraphQL
types, MCP ``structuredContent`` — so one answer has one shape everywhere, and
its JSON schema (``model_json_schema(mode="serialization")``) describes it.
Fields that the library keeps for its own use but the JSON shape leaves out
(``href`` of a chunk hit, ``updated_at`` of a graph hit) are excluded from
the dump; optional parts (``vector`` of a lexical answer, ``explain``) appear
only when set. ``to_dict()`` is ``model_dump(mode="json")``.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator

from knowledge_store.errors import Rejection
from knowledge_store.model.records import ENTITY_FIELDS
from knowledge_store.model.vocabulary import LIST_NAMES

__all__ = [
    "DELETED_UIDS_SHOWN",
    "AclChange",
    "AclExplanation",
    "AggregateAnswer",
    "AggregateRow",
    "Answer",
    "ChunkHit",
    "ChunkHits",
    "ChunkLocation",
    "Content",
    "ContentChunk",
    "ContentEdge",
    "ContentEdges",
    "ContentEntity",
    "DeleteReport",
    "Evidence",
    "GraphHit",
    "GraphHits",
    "IngestReport",
    "LastSync",
    "MembershipsLoaded",
    "PathStep",
    "PrincipalInfo",
    "QueryAnswer",
    "Result",
    "SearchAnswer",
    "SkippedPath",
    "SourceSummary",
    "SourcesAnswer",
    "SqlHit",
    "SqlHits",
    "StepDirection",
    "StoreStats",
    "Strategy",
    "VectorInfo",
]

Strategy = Literal["hnsw", "hnsw-filtered", "exact"]


#: How many deleted uids an answer lists (``deleted`` is always the exact count).
DELETED_UIDS_SHOWN = 100


def _absent(value: object) -> bool:
    return value is None


def _empty(value: object) -> bool:
    """Left out of the JSON when empty: warnings and deleted uids appear only when there are some
    (DESIGN's shapes otherwise)."""
    return not value


class Answer(BaseModel):
    """Base of every answer: frozen, unknown fields refused, ``to_dict()`` for JSON."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @classmethod
    def of_checked(cls, values: dict[str, Any]) -> Self:
        """The answer of values the store made from its own checked data: every field, each
        of the exact type validation would return unchanged — so it is assigned, not
        validated again (what ``model_construct`` does, without its per-field Python loop:
        half the cost of a top-100 primitive's hits). ``values`` becomes the model's own.
        A test validates what a caller builds this way and compares."""
        answer = _new(cls)
        _set_dict(answer, values)
        _set_fields_set(answer, set(_all_fields(cls)))  # its own: copies add
        _set_extra(answer, None)
        _set_private(answer, None)
        return answer


# The four slots of every pydantic model, set through their own descriptors — past the frozen
# model's ``__setattr__``, as pydantic does, without ``object.__setattr__``'s lookup of the
# name on each call (vector@100 at 100k chunks: 5.31M → 5.03M instructions a call).
_new = object.__new__
_set_dict = BaseModel.__dict__["__dict__"].__set__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__


@functools.cache
def _all_fields(model: type[BaseModel]) -> frozenset[str]:
    return frozenset(model.model_fields)


class VectorInfo(Answer):
    """How a vector answer was computed — honest completeness."""

    strategy: Strategy
    scanned: int
    exhaustive: bool


class ChunkLocation(Answer):
    """Where a chunk of a paged document is: its page, slide or chapter, or its sheet and
    rows (``"2-31"``); only what applies is given."""

    page: int | None = Field(None, exclude_if=_absent)
    slide: int | None = Field(None, exclude_if=_absent)
    chapter: int | None = Field(None, exclude_if=_absent)
    sheet: str | None = Field(None, exclude_if=_absent)
    rows: str | None = Field(None, exclude_if=_absent)


class ChunkHit(Answer):
    """One ranked chunk from ``lexical`` or ``vector``."""

    uid: str
    chunk_id: int
    title: str
    type: str
    score: float
    rank: int
    text: str
    heading: tuple[str, ...]
    start: int
    end: int
    #: Where in a paged document (``{"page": 3}``; DESIGN §6): absent elsewhere.
    location: ChunkLocation | None = Field(None, exclude_if=_absent)
    href: str | None = Field(None, exclude=True)


class ChunkHits(Answer):
    """The answer of ``lexical`` / ``vector`` (``vector`` only for the vector primitive)."""

    content_root: str
    hits: list[ChunkHit]
    vector: VectorInfo | None = Field(None, exclude_if=_absent)
    explain: dict[str, Any] | None = Field(None, exclude_if=_absent)
    #: How the request was read (a type no readable entity has …); absent when there are none.
    warnings: tuple[str, ...] = Field((), exclude_if=_empty)
    #: A paged read's cursor for the next page (``cursor="*"`` asks for one); absent otherwise.
    next: str | None = Field(None, exclude_if=_absent)


class Evidence(Answer):
    """A chunk kept with a fused result, for context packing and citation."""

    chunk_id: int
    text: str
    heading: tuple[str, ...]
    start: int
    end: int
    location: ChunkLocation | None = Field(None, exclude_if=_absent)


class Result(Answer):
    """One fused entity with its rank in every list (null where absent)."""

    uid: str
    title: str
    type: str
    href: str | None
    score: float
    ranks: dict[str, int | None]
    superseded_by: str | None = None
    evidence: tuple[Evidence, ...] = ()
    #: The cosine similarity of its best chunk in the vector list (null where absent): what
    #: tells a weak match by meaning from a strong one. An extension of DESIGN's shape.
    similarity: float | None = None

    @field_validator("ranks", mode="before")
    @classmethod
    def _every_list(cls, ranks: Any) -> Any:
        """The four lists always (null where absent), then any plug-in retriever's."""
        return {**dict.fromkeys(LIST_NAMES), **ranks} if isinstance(ranks, dict) else ranks


class SearchAnswer(Answer):
    """The answer of fused ``search``."""

    content_root: str
    mode: str
    results: list[Result]
    vector: VectorInfo | None
    explain: dict[str, Any] | None = Field(None, exclude_if=_absent)
    #: Whether any chunk matched the words (the lexical list found something); null for a
    #: pure filter request. False: every result was found by meaning only.
    words_matched: bool | None = None
    #: How the request was read (a type no readable entity has …); absent when there are none.
    warnings: tuple[str, ...] = Field((), exclude_if=_empty)
    #: A paged read's cursor for the next page (``cursor="*"`` asks for one); absent otherwise.
    next: str | None = Field(None, exclude_if=_absent)


class SkippedPath(Answer):
    """A path a load did not read, and why (it leads out of the folder, or is no regular file)."""

    path: str
    reason: str


class IngestReport(Answer):
    """What an ingest batch did; ``skipped`` lists the paths a load would not read."""

    content_root: str
    added: int
    updated: int
    unchanged: int
    deleted: int
    #: The uids deleted (a sync's), sorted, the first :data:`DELETED_UIDS_SHOWN`.
    deleted_uids: list[str] = Field(default_factory=list)
    rejected: list[Rejection] = Field(default_factory=list)
    skipped: list[SkippedPath] = Field(default_factory=list)
    #: What each crawled site did (``ingest.crawl.CrawlReport.to_dict()``), for ``--format web``.
    crawls: list[dict[str, Any]] = Field(default_factory=list, exclude_if=_empty)
    #: What the batch did that its author may not have meant (records no one can read).
    warnings: tuple[str, ...] = Field((), exclude_if=_empty)


class DeleteReport(Answer):
    """What a delete did: the publish's root and how many entities it removed.

    ``deleted_uids`` (a whole source's delete, or a delete by uid that took entities split
    off the named ones with them — a page's code samples): the uids, sorted, the first
    :data:`DELETED_UIDS_SHOWN`; absent when the uids deleted are those the caller named.
    """

    content_root: str
    deleted: int
    deleted_uids: list[str] | None = Field(None, exclude_if=_absent)


class LastSync(Answer):
    """A source's last ingest under its name: when, how (``sync`` or ``upsert``), what it did."""

    at: str
    mode: str
    content_root: str
    added: int
    updated: int
    unchanged: int
    deleted: int


class SourceSummary(Answer):
    """One source: what it holds now (every entity: an administration view), its last ingest."""

    source: str
    entities: int
    chunks: int
    loader: str | None
    locations: list[str]
    last_sync: LastSync | None


class SourcesAnswer(Answer):
    """Every source that holds entities or was ingested under its name, by name."""

    content_root: str
    sources: list[SourceSummary]


#: How a path step followed its edge: ``out`` from the edge's source (the previous entity
#: ``-label->`` this one), ``in`` from its target (this one ``-label->`` the previous one).
StepDirection = Literal["out", "in"]


class PathStep(Answer):
    """One step of a graph path: the entity reached, the label of the edge that reached it
    and that edge's direction from the previous entity (both None for the start entity)."""

    uid: str
    label: str | None
    direction: StepDirection | None


class GraphHit(Answer):
    uid: str
    title: str
    type: str
    rank: int
    hops: int
    paths: int
    path: tuple[PathStep, ...]
    href: str | None = Field(None, exclude=True)
    updated_at: str | None = Field(None, exclude=True)


class GraphHits(Answer):
    content_root: str
    hits: list[GraphHit]
    capped: bool
    #: A paged read's cursor for the next page (``cursor="*"`` asks for one); absent otherwise.
    next: str | None = Field(None, exclude_if=_absent)
    #: What a later page of a cursor left out; absent when there is nothing to say.
    warnings: tuple[str, ...] = Field((), exclude_if=_empty)


class SqlHit(Answer):
    uid: str
    title: str
    type: str
    source: str
    status: str
    created_at: str | None
    updated_at: str | None
    rank: int
    href: str | None = Field(None, exclude=True)


class SqlHits(Answer):
    content_root: str
    hits: list[SqlHit]
    #: How the request was read (a type no readable entity has …); absent when there are none.
    warnings: tuple[str, ...] = Field((), exclude_if=_empty)
    #: A paged read's cursor for the next page (``cursor="*"`` asks for one); absent otherwise.
    next: str | None = Field(None, exclude_if=_absent)


class AggregateRow(Answer):
    key: str | None
    value: int


class AggregateAnswer(Answer):
    content_root: str
    metric: str
    dimension: str | None
    rows: list[AggregateRow]
    #: How the request was read (a type no readable entity has …); absent when there are none.
    warnings: tuple[str, ...] = Field((), exclude_if=_empty)

    def pairs(self) -> list[tuple[str | None, int]]:
        """The rows as ``(key, value)`` pairs."""
        return [(row.key, row.value) for row in self.rows]


def _query_cells(schema: dict[str, Any]) -> None:
    """What a query_graph cell may be — a property (text, a number, ``null``), a ``count``,
    or a node or relationship as an object of its properties — written into the rows'
    schema, so that clients don't read ``{}`` ("anything"). Cells stay ``Any`` to pydantic
    (validated and dumped as they are)."""
    schema["items"]["items"] = {
        "anyOf": [
            {"type": "string"},
            {"type": "integer"},
            {"type": "number"},
            {"type": "object", "additionalProperties": True},
            {"type": "null"},
        ]
    }


class QueryAnswer(Answer):
    """The answer of ``query_graph`` (rows are untyped: their columns come from the query)."""

    content_root: str
    columns: list[str]
    rows: list[list[Any]] = Field(json_schema_extra=_query_cells)
    truncated: bool
    #: How the request was read (a LIMIT above the bound, capped); absent when there are none.
    warnings: tuple[str, ...] = Field((), exclude_if=_empty)


#: The type of each of ``ENTITY_FIELDS`` in a content answer that is not ``str``.
_ENTITY_FIELD_TYPES: dict[str, Any] = {
    "created_at": str | None,
    "updated_at": str | None,
    "href": str | None,
    "attributes": dict[str, Any],
}

if TYPE_CHECKING:

    class ContentEntity(Answer):
        """The entity's ``ENTITY_FIELDS`` (the facets too: generated below)."""

        uid: str
        type: str
        title: str
        body: str
        source: str
        status: str
        created_at: str | None
        updated_at: str | None
        href: str | None
        attributes: dict[str, Any]

else:
    ContentEntity = create_model(
        "ContentEntity",
        __base__=Answer,
        __module__=__name__,
        **{name: (_ENTITY_FIELD_TYPES.get(name, str), ...) for name in ENTITY_FIELDS},
    )


class ContentChunk(Answer):
    chunk_id: int
    ordinal: int
    text: str
    heading: tuple[str, ...]
    start: int
    end: int
    location: ChunkLocation | None = Field(None, exclude_if=_absent)


class ContentEdge(Answer):
    """An edge to a visible entity: its label, the entity at the other end, its position."""

    label: str
    uid: str
    position: int | None
    title: str
    type: str
    href: str | None


class ContentEdges(Answer):
    model_config = ConfigDict(
        frozen=True, extra="forbid", validate_by_name=True, serialize_by_alias=True
    )

    out: list[ContentEdge]
    in_: list[ContentEdge] = Field(alias="in")


class Content(Answer):
    """The content API: one entity, its chunks and its edges to entities the caller can read."""

    content_root: str
    entity: ContentEntity
    chunks: list[ContentChunk]
    edges: ContentEdges


class StoreStats(Answer):
    """``stats``: global figures; engines add their own keys (engine, path, features …)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    content_root: str
    entities: int
    chunks: int
    edges: dict[str, int]
    segments: int
    model: str | None
    dimension: int | None
    is_empty: bool

    @property
    def extra(self) -> dict[str, Any]:
        """The engine's own keys (engine, path, indexes …)."""
        return dict(self.model_extra or {})


class PrincipalInfo(Answer):
    principal: str
    direct_groups: tuple[str, ...]
    inherited_groups: tuple[str, ...]
    members: tuple[str, ...]


class AclExplanation(Answer):
    principal: str
    uid: str
    allowed: bool
    chain: tuple[str, ...]  # principal → group → … → the ACL entry that grants
    reason: str
    #: With ``--at``: the content root and the moment whose ACL and memberships were read.
    content_root: str | None = Field(None, exclude_if=_absent)
    at: str | None = Field(None, exclude_if=_absent)


class AclChange(Answer):
    """A grant or revoke: the publish's root and the entity's ACL after it; ``warnings`` when
    it changed nothing, or when the principal still reads the entity through a group."""

    content_root: str
    uid: str
    acl: tuple[str, ...]
    warnings: tuple[str, ...] = Field((), exclude_if=_empty)


class MembershipsLoaded(Answer):
    """``principals load``: the groups whose memberships were replaced, and how many now."""

    groups: int
    memberships: int
