"""The data model (DESIGN §1) and the shapes every primitive answers with (DESIGN §6).

Frozen dataclasses, no behaviour beyond validation of closed vocabularies and
the ``to_dict()`` that gives each ``--json`` shape.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time
from functools import cached_property
from typing import Any, Literal

from knowledge_store.errors import BoundExceeded, InvalidRequest, UnknownLabel

__all__ = [
    "ENTITY_FIELDS",
    "EVERYONE",
    "JSON_INT_RANGE",
    "LABELS",
    "LIGHT_K",
    "LIGHT_LIST_VALUES",
    "LIGHT_QUERY_CHARS",
    "MAX_ACL_PRINCIPALS",
    "MAX_ATTRIBUTES_BYTES",
    "MAX_ATTRIBUTE_DEPTH",
    "MAX_BODY_CHARS",
    "MAX_CHUNK_CHARS",
    "MAX_DATE_CHARS",
    "MAX_EDGES",
    "MAX_EDGE_POSITION",
    "MAX_FILTER_VALUES",
    "MAX_GRAPHQL_ALIASES",
    "MAX_GRAPHQL_DEPTH",
    "MAX_GRAPHQL_FIELDS",
    "MAX_GRAPHQL_SELECTIONS",
    "MAX_GRAPHQL_TOKENS",
    "MAX_HREF_BYTES",
    "MAX_INGEST_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_K",
    "MAX_NAME_CHARS",
    "MAX_PRINCIPAL_ID_CHARS",
    "MAX_REQUEST_BYTES",
    "MAX_TITLE_CHARS",
    "MAX_UID_CHARS",
    "PRINCIPAL_PATTERN",
    "TIMESTAMP_FORM",
    "AggregateAnswer",
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
    "PathStep",
    "QueryAnswer",
    "Result",
    "SearchAnswer",
    "SqlHit",
    "SqlHits",
    "VectorInfo",
    "check_k",
    "check_label",
    "check_list_bound",
    "check_membership",
    "check_principal",
    "compose_context",
    "format_timestamp",
    "name_problem",
    "normalize_timestamp",
    "stored_timestamp",
    "text_problem",
]

#: The closed edge vocabulary. Anything else is rejected at ingest and in queries.
LABELS: tuple[str, ...] = (
    "partOf",
    "dependsOn",
    "xref",
    "appliesTo",
    "forRole",
    "teachesSkill",
    "supersededBy",
    "implementedBy",
    "derivedFrom",
)
_LABEL_SET = frozenset(LABELS)

EVERYONE = "everyone"

# -- Bounds of what a record may hold (docs/records.md, "Limits and names"). Declared once here;
# -- validation (ingest/records.py), the chunker and the engines read them from here.
# The byte sizes behind some: a PostgreSQL b-tree entry holds at most 2,704 bytes, and a
# UTF-8 character takes up to 4 (an edge's key holds two uids; titles and hrefs are indexed).
#: A uid, or an edge target.
MAX_UID_CHARS = 256
#: ``type``, ``source``, ``status`` and attribute keys: names, not prose.
MAX_NAME_CHARS = 256
MAX_TITLE_CHARS = 500
#: An href, in UTF-8 bytes (a URL is ASCII; percent-encoding makes it longer, not wider).
MAX_HREF_BYTES = 2_000
#: The largest real page of the eval sets is ~260k characters.
MAX_BODY_CHARS = 1_000_000
#: A ``created_at`` / ``updated_at`` string, before it is parsed.
MAX_DATE_CHARS = 64
#: ``attributes`` as canonical JSON, in UTF-8 bytes, and how deep it may nest.
MAX_ATTRIBUTES_BYTES = 65_536
MAX_ATTRIBUTE_DEPTH = 16
MAX_EDGES = 10_000
#: An edge ``position``: 0 … 2³¹−1 (a PostgreSQL ``integer``).
MAX_EDGE_POSITION = 2**31 - 1
#: The id after ``user:`` / ``group:``.
MAX_PRINCIPAL_ID_CHARS = 256
#: How deep one JSON record (a line) may nest, and the integers it may hold (int64).
MAX_JSON_DEPTH = 32
JSON_INT_RANGE = (-(2**63), 2**63 - 1)
#: The longest chunk text: a longer code block is cut at line ends (a PostgreSQL
#: tsvector holds at most 1 MiB; 100k characters of the densest text stay under 300 KiB).
MAX_CHUNK_CHARS = 100_000

#: Characters a name (uid, type, source, status, principal id, attribute key) may not
#: hold: controls, invisible format characters, line/paragraph separators, surrogates.
_NOT_IN_NAMES = frozenset(("Cc", "Cf", "Zl", "Zp", "Cs"))


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def text_problem(value: str, limit: int) -> str | None:
    """Why ``value`` can't be stored as text (too long, NUL, a lone surrogate), or None."""
    if len(value) > limit:
        return f"has {len(value):,} characters; the limit is {limit:,}"
    if "\x00" in value:
        return "must not contain NUL characters"
    if not _encodable(value):
        return "holds a lone surrogate (\\ud800–\\udfff), which is not Unicode text"
    return None


def name_problem(value: str, limit: int) -> str | None:
    """Why ``value`` can't be a name (a uid, a type, a principal id …), or None.

    Names are compared as written, so nothing may make two of them look alike:
    no control or invisible format characters, no leading or trailing
    whitespace, and Unicode NFC form (``é`` as one character, not ``e`` + accent).
    """
    problem = text_problem(value, limit)
    if problem is not None:
        return problem
    if not value.strip():
        return "must not be empty or blank"
    if value != value.strip():
        return "must not start or end with whitespace"
    for char in value:
        if unicodedata.category(char) in _NOT_IN_NAMES:
            return (
                f"must not contain control characters or invisible ones (U+{ord(char):04X}:"
                " newline, tab, NUL, zero-width, bidi …)"
            )
    if not unicodedata.is_normalized("NFC", value):
        return "is not in Unicode NFC form; write accented letters composed (one code point)"
    return None


#: What a principal looks like, as a pattern (the record JSON Schema's). ``check_principal``
#: holds a principal id to the rules of a name, which a pattern can't state (NFC, invisible
#: characters): the pattern is looser, never stricter.
PRINCIPAL_PATTERN = r"^(?:everyone|(?:user|group):\S(?:[^\x00-\x1f\x7f-\x9f]{0,254}\S)?)$"


def check_label(label: str) -> str:
    """Return ``label`` if it is one of the 9, else raise ``UnknownLabel`` listing them."""
    if label not in _LABEL_SET:
        raise UnknownLabel(
            f"unknown edge label {label!r}; use one of: {', '.join(LABELS)}",
            label=label,
            allowed=list(LABELS),
        )
    return label


def check_principal(principal: str) -> str:
    """Return ``principal`` if it is ``everyone``, ``user:<id>`` or ``group:<id>``."""
    if isinstance(principal, str):
        if principal == EVERYONE:
            return principal
        kind, sep, ident = principal.partition(":")
        if (
            sep
            and kind in ("user", "group")
            and name_problem(ident, MAX_PRINCIPAL_ID_CHARS) is None
        ):
            return principal
    shown = principal if isinstance(principal, str) else repr(principal)
    shown = shown.encode("utf-8", "backslashreplace").decode("utf-8")
    raise InvalidRequest(
        f"invalid principal {shown[:80]!r}: write 'everyone', 'user:<id>' or 'group:<id>'"
        f" (an id of 1–{MAX_PRINCIPAL_ID_CHARS} characters: no control or invisible"
        " characters, no surrounding spaces)",
        principal=shown[:256],
    )


#: The most results any primitive returns in one answer.
MAX_K = 1000


def check_k(k: int) -> int:
    """Return ``k`` if it is an int in 1..MAX_K, else raise ``InvalidRequest``."""
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise InvalidRequest(f"k must be between 1 and {MAX_K}, not {k!r}", field="k")
    return k


# -- request bounds: declared once here, read by every surface (docs/serving.md, "Limits") ----------
#: The most values one FILTERS list (type, not_type, source, status, uid) may hold.
MAX_FILTER_VALUES = 1000
#: The most principals an ACL may name: a record's ``acl``, or a default ACL (``--acl``,
#: ``?acl=``, the ingest tool's ``acl``).
MAX_ACL_PRINCIPALS = 100
#: The largest HTTP request body, in bytes, of every route but the admin ingest.
MAX_REQUEST_BYTES = 1024 * 1024
#: The largest body of ``POST /v1/admin/ingest``, in bytes.
MAX_INGEST_BYTES = 64 * 1024 * 1024
#: GraphQL: the deepest selection (introspection fields aside).
MAX_GRAPHQL_DEPTH = 8
#: GraphQL: aliases in one document.
MAX_GRAPHQL_ALIASES = 10
#: GraphQL: fields written in one document, at every level (validation is quadratic in them).
MAX_GRAPHQL_SELECTIONS = 500
#: GraphQL: lexical tokens in one document (parsing stops beyond it); long lists go in variables.
MAX_GRAPHQL_TOKENS = 2000
#: GraphQL: top-level fields of one operation — each is one store call, run one after another.
MAX_GRAPHQL_FIELDS = 10
#: A request within all the LIGHT_* bounds runs in the servers' light lane; one over any of
#: them (or a GraphQL document with several store calls) waits its turn in the heavy lane.
LIGHT_K = 10
#: See LIGHT_K: the longest query text of a light request.
LIGHT_QUERY_CHARS = 256
#: See LIGHT_K: the most values in any list (a FILTERS list, starts, uids) of a light request.
LIGHT_LIST_VALUES = 10


def check_list_bound(
    field: str, values: Sequence[Any], maximum: int, *, name: str | None = None
) -> None:
    """Raise ``BoundExceeded`` when the list ``field`` holds more than ``maximum`` values."""
    if len(values) > maximum:
        raise BoundExceeded(
            f"{name or repr(field)} holds {len(values)} values; the maximum is {maximum}."
            " Split the request, or narrow it with other filters",
            field=field,
            maximum=maximum,
            found=len(values),
        )


def check_membership(group: str, member: str) -> None:
    """A membership ``member ∈ group`` must name a group and may not be trivially cyclic."""
    check_principal(group)
    check_principal(member)
    if not group.startswith("group:"):
        raise InvalidRequest(f"{group!r} is not a group; memberships go into 'group:<id>'")
    if member == EVERYONE:
        raise InvalidRequest("'everyone' is implicit in every identity; it cannot be a member")
    if group == member:
        raise InvalidRequest(f"{group} cannot be a member of itself", cycle=[group, group])


_DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
#: What every stored date looks like (see :func:`normalize_timestamp`).
TIMESTAMP_FORM = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")


def normalize_timestamp(value: str, *, end_of_day: bool = False) -> str:
    """ISO 8601 date or datetime → ``YYYY-MM-DDTHH:MM:SSZ`` in UTC.

    A bare date means the start of that day (or its last second with
    ``end_of_day``, so that a ``--created-to 2024-05-01`` range includes the day).
    A datetime without an offset is taken as UTC. Every year 0001–9999 round-trips:
    the result is four-digit, zero-padded, and sorts as text in time order. Raises
    ``ValueError`` (also for an offset that moves the moment outside those years).
    """
    text = value.strip()
    if not text:
        raise ValueError("empty date")
    if len(text) > MAX_DATE_CHARS or not text.isascii():
        raise ValueError(f"not an ISO 8601 date: {text[:MAX_DATE_CHARS]!r}")
    try:
        if _DAY.fullmatch(text):
            day = date.fromisoformat(text)
            moment = datetime.combine(day, time(23, 59, 59) if end_of_day else time(0, 0, 0), UTC)
        else:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
            moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    except OverflowError:  # an offset that moves 0001-01-01 or 9999-12-31 out of range
        raise ValueError(f"{text!r} is outside the years 0001–9999 in UTC") from None
    return format_timestamp(moment)


_STORED = re.compile(r"(-?[0-9]{1,4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})Z")


def stored_timestamp(stamp: str) -> datetime | None:
    """A stored stamp back as an aware UTC datetime, or None if it isn't one.

    Also reads the unpadded years older versions wrote (``1-01-01T00:00:00Z``), so
    that no stamp a catalog holds can stop a derived index from being rebuilt.
    """
    match = _STORED.fullmatch(stamp.strip()) if isinstance(stamp, str) else None
    if match is None:
        return None
    try:
        year, month, day, hour, minute, second = (int(part) for part in match.groups())
        return datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError:
        return None


def format_timestamp(moment: datetime) -> str:
    """A UTC datetime as ``YYYY-MM-DDTHH:MM:SSZ``, the year always four digits.

    (``strftime("%Y")`` writes year 1 as ``1`` on glibc: such a stamp neither sorts
    as text nor parses back.)
    """
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}"
        f"T{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}Z"
    )


@dataclass(frozen=True)
class Edge:
    """``src --label--> dst`` with an optional sibling ``position``."""

    src: str
    label: str
    dst: str
    position: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"src": self.src, "label": self.label, "dst": self.dst, "position": self.position}


#: An entity's own fields, in record order (without its edges and ACL).
ENTITY_FIELDS: tuple[str, ...] = (
    "uid",
    "type",
    "title",
    "body",
    "source",
    "status",
    "created_at",
    "updated_at",
    "href",
    "attributes",
)


@dataclass(frozen=True)
class Entity:
    """A node of the estate. ``acl`` is the sorted, deduplicated principal set."""

    uid: str
    type: str
    title: str
    body: str
    source: str = ""
    status: str = ""
    created_at: str | None = None
    updated_at: str | None = None
    href: str | None = None
    attributes: Mapping[str, Any] = field(default_factory=dict)
    edges: tuple[Edge, ...] = ()
    acl: tuple[str, ...] = ()

    @cached_property
    def content_hash(self) -> str:
        """sha256 over every field, the edges and the ACL (the publish root is built from it)."""
        canonical = json.dumps(
            {
                "uid": self.uid,
                "type": self.type,
                "title": self.title,
                "body": self.body,
                "source": self.source,
                "status": self.status,
                "created_at": self.created_at,
                "updated_at": self.updated_at,
                "href": self.href,
                "attributes": self.attributes,
                "edges": sorted(
                    (e.label, e.dst, -1 if e.position is None else e.position) for e in self.edges
                ),
                "acl": sorted(self.acl),
            },
            sort_keys=True,
            ensure_ascii=False,
            separators=(",", ":"),
        )
        return hashlib.sha256(canonical.encode()).hexdigest()

    def to_record(self) -> dict[str, Any]:
        """The canonical JSON Lines record of this entity."""
        return {
            "uid": self.uid,
            "type": self.type,
            "title": self.title,
            "body": self.body,
            "source": self.source,
            "status": self.status,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "href": self.href,
            "attributes": dict(self.attributes),
            "edges": [{"label": e.label, "to": e.dst, "position": e.position} for e in self.edges],
            "acl": list(self.acl),
        }


@dataclass(frozen=True)
class Chunk:
    """A slice ``body[start:end]`` of an entity, with the heading path it sits under."""

    ordinal: int
    text: str
    heading: tuple[str, ...]
    start: int
    end: int

    def context_text(self, title: str) -> str:
        """What is embedded and indexed: the entity title, the heading path, the text."""
        return compose_context(title, self.heading, self.text)


def compose_context(title: str, heading: Sequence[str], text: str) -> str:
    path = " > ".join(h for h in heading if h and h != title)
    return f"{title}\n{path}\n{text}" if path else f"{title}\n{text}"


@dataclass(frozen=True)
class Identity:
    """Who is asking. Expanded by the store over memberships; always holds ``everyone``."""

    principal: str = EVERYONE

    def __post_init__(self) -> None:
        check_principal(self.principal)


_FILTER_FIELDS = ("type", "source", "status", "uid", "created_at", "updated_at")


@dataclass(frozen=True)
class Filters:
    """The closed FILTERS of DESIGN §6. Each list means "any of"; ranges are inclusive."""

    types: tuple[str, ...] = ()
    not_types: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    statuses: tuple[str, ...] = ()
    uids: tuple[str, ...] = ()
    created_from: str | None = None
    created_to: str | None = None
    updated_from: str | None = None
    updated_to: str | None = None

    FIELDS = _FILTER_FIELDS

    @classmethod
    def build(
        cls,
        *,
        types: Sequence[str] = (),
        not_types: Sequence[str] = (),
        sources: Sequence[str] = (),
        statuses: Sequence[str] = (),
        uids: Sequence[str] = (),
        created_from: str | None = None,
        created_to: str | None = None,
        updated_from: str | None = None,
        updated_to: str | None = None,
    ) -> Filters:
        """Validate and normalise user-given filter values (dates, inverted ranges, list bounds)."""
        for name, values in (
            ("type", types),
            ("not_type", not_types),
            ("source", sources),
            ("status", statuses),
            ("uid", uids),
        ):
            check_list_bound(name, values, MAX_FILTER_VALUES, name=f"the filter {name!r}")

        def stamp(name: str, value: str | None, end: bool) -> str | None:
            if value is None:
                return None
            try:
                return normalize_timestamp(value, end_of_day=end)
            except ValueError:
                raise InvalidRequest(
                    f"--{name.replace('_', '-')} {value!r} is not an ISO 8601 date"
                    " (write e.g. 2024-05-01 or 2024-05-01T12:00:00Z)",
                    field=name,
                    value=value,
                ) from None

        filters = cls(
            types=tuple(dict.fromkeys(types)),
            not_types=tuple(dict.fromkeys(not_types)),
            sources=tuple(dict.fromkeys(sources)),
            statuses=tuple(dict.fromkeys(statuses)),
            uids=tuple(dict.fromkeys(uids)),
            created_from=stamp("created_from", created_from, False),
            created_to=stamp("created_to", created_to, True),
            updated_from=stamp("updated_from", updated_from, False),
            updated_to=stamp("updated_to", updated_to, True),
        )
        for name, lo, hi in (
            ("created", filters.created_from, filters.created_to),
            ("updated", filters.updated_from, filters.updated_to),
        ):
            if lo is not None and hi is not None and lo > hi:
                raise InvalidRequest(
                    f"--{name}-from {lo} is after --{name}-to {hi}; swap them",
                    field=f"{name}_at",
                )
        for name, values in (
            ("type", filters.types + filters.not_types),
            ("source", filters.sources),
            ("status", filters.statuses),
            ("uid", filters.uids),
        ):
            for v in values:
                if not isinstance(v, str) or text_problem(v, 4096) is not None:
                    raise InvalidRequest(
                        f"--{name} value must be a string of at most 4096 characters"
                        " of Unicode text (no NUL bytes, no lone surrogates)",
                        field=name,
                    )
        return filters

    @property
    def is_empty(self) -> bool:
        return self == Filters()

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v not in ((), None)}


Strategy = Literal["hnsw", "hnsw-filtered", "exact"]


@dataclass(frozen=True)
class VectorInfo:
    """How a vector answer was computed — honest completeness."""

    strategy: Strategy
    scanned: int
    exhaustive: bool

    def to_dict(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "scanned": self.scanned, "exhaustive": self.exhaustive}


@dataclass(frozen=True)
class ChunkHit:
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
    href: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "chunk_id": self.chunk_id,
            "title": self.title,
            "type": self.type,
            "score": self.score,
            "rank": self.rank,
            "text": self.text,
            "heading": list(self.heading),
            "start": self.start,
            "end": self.end,
        }


@dataclass(frozen=True)
class ChunkHits:
    """The answer of ``lexical`` / ``vector``."""

    content_root: str
    hits: list[ChunkHit]
    vector: VectorInfo | None = None
    explain: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "content_root": self.content_root,
            "hits": [h.to_dict() for h in self.hits],
        }
        if self.vector is not None:
            out["vector"] = self.vector.to_dict()
        if self.explain is not None:
            out["explain"] = self.explain
        return out


@dataclass(frozen=True)
class Evidence:
    """A chunk kept with a fused result, for context packing and citation."""

    chunk_id: int
    text: str
    heading: tuple[str, ...]
    start: int
    end: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "chunk_id": self.chunk_id,
            "text": self.text,
            "heading": list(self.heading),
            "start": self.start,
            "end": self.end,
        }


LIST_NAMES: tuple[str, ...] = ("vector", "lexical", "graph", "sql")


@dataclass(frozen=True)
class Result:
    """One fused entity with its rank in every list (null where absent)."""

    uid: str
    title: str
    type: str
    href: str | None
    score: float
    ranks: Mapping[str, int | None]
    superseded_by: str | None = None
    evidence: tuple[Evidence, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "title": self.title,
            "type": self.type,
            "href": self.href,
            "score": self.score,
            # the four lists always (null where absent), then any plug-in retriever's
            "ranks": {**dict.fromkeys(LIST_NAMES), **self.ranks},
            "superseded_by": self.superseded_by,
            "evidence": [e.to_dict() for e in self.evidence],
        }


@dataclass(frozen=True)
class SearchAnswer:
    """The answer of fused ``search``."""

    content_root: str
    mode: str
    results: list[Result]
    vector: VectorInfo | None
    explain: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "content_root": self.content_root,
            "mode": self.mode,
            "results": [r.to_dict() for r in self.results],
            "vector": self.vector.to_dict() if self.vector else None,
        }
        if self.explain is not None:
            out["explain"] = self.explain
        return out


@dataclass(frozen=True)
class IngestReport:
    """What an ingest batch did; ``skipped`` lists the paths a load would not read."""

    content_root: str
    added: int
    updated: int
    unchanged: int
    deleted: int
    rejected: list[Any] = field(default_factory=list)
    skipped: list[Any] = field(default_factory=list)
    #: The uids deleted (a sync's), sorted and capped; ``deleted`` is the exact count.
    deleted_uids: list[str] = field(default_factory=list)
    #: What each crawled site did (``CrawlReport.to_dict()``), for ``--format web``.
    crawls: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = {
            "content_root": self.content_root,
            "added": self.added,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "deleted": self.deleted,
            "deleted_uids": list(self.deleted_uids),
            "rejected": [r.to_dict() for r in self.rejected],
            "skipped": [s.to_dict() for s in self.skipped],
        }
        if self.crawls:
            out["crawls"] = list(self.crawls)
        return out


@dataclass(frozen=True)
class PathStep:
    """One step of a graph path: the entity reached and the label that reached it."""

    uid: str
    label: str | None  # None for the start entity

    def to_dict(self) -> dict[str, Any]:
        return {"uid": self.uid, "label": self.label}


@dataclass(frozen=True)
class GraphHit:
    uid: str
    title: str
    type: str
    rank: int
    hops: int
    paths: int
    path: tuple[PathStep, ...]
    href: str | None = None
    updated_at: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "title": self.title,
            "type": self.type,
            "rank": self.rank,
            "hops": self.hops,
            "paths": self.paths,
            "path": [s.to_dict() for s in self.path],
        }


@dataclass(frozen=True)
class GraphHits:
    content_root: str
    hits: list[GraphHit]
    capped: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "content_root": self.content_root,
            "hits": [h.to_dict() for h in self.hits],
            "capped": self.capped,
        }


@dataclass(frozen=True)
class SqlHit:
    uid: str
    title: str
    type: str
    source: str
    status: str
    created_at: str | None
    updated_at: str | None
    rank: int
    href: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "title": self.title,
            "type": self.type,
            "source": self.source,
            "status": self.status,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "rank": self.rank,
        }


@dataclass(frozen=True)
class SqlHits:
    content_root: str
    hits: list[SqlHit]

    def to_dict(self) -> dict[str, Any]:
        return {"content_root": self.content_root, "hits": [h.to_dict() for h in self.hits]}


@dataclass(frozen=True)
class AggregateAnswer:
    content_root: str
    metric: str
    dimension: str | None
    rows: list[tuple[str | None, int]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "content_root": self.content_root,
            "metric": self.metric,
            "dimension": self.dimension,
            "rows": [{"key": key, "value": value} for key, value in self.rows],
        }


@dataclass(frozen=True)
class QueryAnswer:
    """The answer of ``query_graph``."""

    content_root: str
    columns: list[str]
    rows: list[list[Any]]
    truncated: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "content_root": self.content_root,
            "columns": self.columns,
            "rows": self.rows,
            "truncated": self.truncated,
        }
