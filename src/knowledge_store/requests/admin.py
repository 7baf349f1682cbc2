"""The request models of administration: ingest, delete, sources, ACLs, memberships, stats."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Self

from pydantic import AfterValidator, BeforeValidator, Field, PrivateAttr, model_validator

from knowledge_store.errors import InvalidRequest, Rejection
from knowledge_store.model import MAX_NAME_CHARS
from knowledge_store.model.audit import moment
from knowledge_store.model.declared import MAX_FACET_NAME, FacetKind
from knowledge_store.requests.base import Principal, Request, SourceName, Uid, listed

__all__ = [
    "AclExplainRequest",
    "AclRequest",
    "AclShowRequest",
    "CheckRequest",
    "DeclareFacetRequest",
    "DeclaredFacetsRequest",
    "DeleteRequest",
    "IngestRequest",
    "MemberRequest",
    "MembershipsRequest",
    "PrincipalRequest",
    "RecordLines",
    "RemoveFacetRequest",
    "SourcesRequest",
    "StatsRequest",
]


def _root_or_moment(value: str) -> str:
    """A content root as given (64 hex digits), else a moment normalised to UTC."""
    text = value.strip().lower()
    if len(text) == 64 and all(c in "0123456789abcdef" for c in text):
        return text
    return moment(value)


# -- administration ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RecordLines:
    """Where the records of a JSON Lines body stood, read the way the CLI reads a file: the
    line of each record (``records[i]`` was on ``lines[i]``) and the lines that were not
    records (not UTF-8, not JSON), each refused as its own bad record."""

    file: str
    lines: tuple[int, ...]
    refused: tuple[Rejection, ...] = ()

    #: The validation context's key that hands a body's lines to :class:`IngestRequest`.
    CONTEXT_KEY: ClassVar[str] = "record_lines"


class IngestRequest(Request):
    """Publish canonical records as one atomic batch."""

    records: list[dict[str, Any]] = Field(
        ...,
        json_schema_extra={"minItems": 1},
        description="canonical records: {uid, type, title, body, source, status, created_at,"
        " updated_at, href, attributes, edges: [{label, to, position}], acl: [...]}",
    )
    acl: list[Principal] = Field(
        default_factory=list, description="default ACL for records without an acl key"
    )
    skip_invalid: bool = Field(False, description="publish the good records, report the bad")
    source: SourceName | None = Field(
        None, description="the source of every record; the source's row records this ingest"
    )
    sync: bool = Field(
        False, description="the records are the whole source: delete what it no longer holds"
    )
    allow_mass_delete: bool = Field(
        False, description="let a sync delete more than half its source"
    )
    allow_move: bool = Field(
        False,
        description="let records take over uids another source holds (moving them to this"
        " batch's source); without it such a batch is refused",
    )

    _lines: RecordLines | None = PrivateAttr(default=None)

    def model_post_init(self, context: Any) -> None:
        lines = context.get(RecordLines.CONTEXT_KEY) if isinstance(context, dict) else None
        if isinstance(lines, RecordLines):
            if len(lines.lines) != len(self.records):
                raise ValueError("a body's record lines must match its records one to one")
            self._lines = lines

    @property
    def record_lines(self) -> RecordLines | None:
        """The lines of a JSON Lines body (``None`` when the records came as a JSON list)."""
        return self._lines

    @model_validator(mode="after")
    def _whole(self) -> Self:
        if not self.records and not (self._lines and self._lines.refused):
            # a body whose every line was refused is still a batch: its report lists them
            raise InvalidRequest("records must not be empty", field="records")
        if self.sync and self.source is None:
            raise InvalidRequest(
                "a sync replaces the content of one source: name it (source)", field="source"
            )
        return self


class DeleteRequest(Request):
    """Entities to delete — by uid, or a whole source — with their chunks and outgoing
    edges (one publish)."""

    needs: ClassVar[dict[str, str]] = {"uids": "delete needs at least one uid"}
    uids: Annotated[list[Uid], BeforeValidator(listed)] = Field(
        default_factory=list, description="uids to delete"
    )
    source: SourceName | None = Field(
        None, description="delete every entity of this source (its row and crawl state too)"
    )

    @model_validator(mode="after")
    def _uids_or_source(self) -> Self:
        if self.source is not None and self.uids:
            raise InvalidRequest("delete takes uids or a source, not both", field="source")
        if self.source is None and not self.uids:
            raise InvalidRequest("delete needs at least one uid", field="uids")
        return self


class SourcesRequest(Request):
    """Every source: what it holds, its last ingest or sync (takes no arguments)."""


class AclRequest(Request):
    """A principal and an entity: grant or revoke the principal's read access."""

    uid: Uid = Field(..., description="the entity's uid")
    principal: Principal = Field(..., description="'everyone', 'user:<id>' or 'group:<id>'")


class MemberRequest(Request):
    """A group membership: ``member`` is (or stops being) a member of ``group``."""

    group: Principal = Field(..., description="the group: 'group:<id>'")
    member: Principal = Field(..., description="the member: 'user:<id>' or 'group:<id>'")


class PrincipalRequest(Request):
    """One principal: its direct and inherited groups, and a group's members."""

    principal: Principal = Field(..., description="'everyone', 'user:<id>' or 'group:<id>'")


class AclShowRequest(Request):
    """The principals in one entity's ACL."""

    uid: Uid = Field(..., description="the entity's uid")


class AclExplainRequest(Request):
    """Whether a principal can read an entity, and through which membership chain — now, or
    at a content root or a moment (from the history)."""

    principal: Principal = Field(..., description="'everyone', 'user:<id>' or 'group:<id>'")
    uid: Uid = Field(..., description="the entity's uid")
    at: Annotated[str, AfterValidator(_root_or_moment)] | None = Field(
        None,
        description="as of a content root (64 hex digits), or a moment: an ISO date or time,"
        " or a time ago (30d)",
    )


class MembershipsRequest(Request):
    """Group memberships to load: each named group's memberships are replaced by these."""

    needs: ClassVar[dict[str, str]] = {"memberships": "memberships needs at least one pair"}
    memberships: list[MemberRequest] = Field(
        ..., min_length=1, description="the memberships: [{group, member}, ...]"
    )

    @property
    def pairs(self) -> list[tuple[str, str]]:
        return [(m.group, m.member) for m in self.memberships]


class StatsRequest(Request):
    """Store figures (takes no arguments)."""


class CheckRequest(Request):
    """Verify the catalog and the derived indexes against it (takes no arguments)."""


class DeclaredFacetsRequest(Request):
    """``facets list``: the store's declared facets."""


class RemoveFacetRequest(Request):
    """``facets remove``: forget a declared facet and its values."""

    name: str = Field(..., min_length=1, max_length=MAX_FACET_NAME, description="the facet")


class DeclareFacetRequest(RemoveFacetRequest):
    """``facets add``: declare a facet read from every entity's ``attributes[name]``."""

    name: str = Field(
        ...,
        min_length=1,
        max_length=MAX_FACET_NAME,
        description="the facet's name, its filters' and dimension's (lowercase letters, digits"
        " and _); the attributes key it is read from unless attribute names another",
    )
    kind: FacetKind = Field(
        "keyword",
        description="keyword (any of / none of), date (a range; trends by day, week, month)"
        " or number (a range)",
    )
    attribute: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_NAME_CHARS,
        description="the attributes key to read, when it is not the name (docbookClass for a"
        " facet docbook_class)",
    )
