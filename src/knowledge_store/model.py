"""The data model (DESIGN §1) and the shapes every primitive answers with (DESIGN §6).

Frozen dataclasses, no behaviour beyond validation of closed vocabularies and
the ``to_dict()`` that gives each ``--json`` shape.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time
from functools import cached_property
from typing import Any, Literal

from knowledge_store.errors import BoundExceeded, InvalidRequest, UnknownLabel

__all__ = [
    "ENTITY_FIELDS",
    "EVERYONE",
    "LABELS",
    "LIGHT_K",
    "LIGHT_LIST_VALUES",
    "LIGHT_QUERY_CHARS",
    "MAX_ACL_PRINCIPALS",
    "MAX_FILTER_VALUES",
    "MAX_GRAPHQL_ALIASES",
    "MAX_GRAPHQL_DEPTH",
    "MAX_GRAPHQL_FIELDS",
    "MAX_GRAPHQL_SELECTIONS",
    "MAX_GRAPHQL_TOKENS",
    "MAX_INGEST_BYTES",
    "MAX_K",
    "MAX_REQUEST_BYTES",
    "PRINCIPAL_PATTERN",
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
    "normalize_timestamp",
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
#: What a principal looks like (matched whole: a trailing newline is not allowed).
PRINCIPAL_PATTERN = r"^(?:everyone|(?:user|group):[^\x00-\x1f\x7f]{1,256})$"
_PRINCIPAL = re.compile(PRINCIPAL_PATTERN)


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
    if not isinstance(principal, str) or not _PRINCIPAL.fullmatch(principal):
        shown = principal if isinstance(principal, str) else repr(principal)
        raise InvalidRequest(
            f"invalid principal {shown[:80]!r}: write 'everyone', 'user:<id>' or 'group:<id>'"
            " (an id of 1–256 characters, no control characters)",
            principal=shown[:256],
        )
    return principal


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
#: The most principals a default ACL (``--acl``, ``?acl=``, the ingest tool's ``acl``) may name.
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


def normalize_timestamp(value: str, *, end_of_day: bool = False) -> str:
    """ISO 8601 date or datetime → ``YYYY-MM-DDTHH:MM:SSZ`` in UTC.

    A bare date means the start of that day (or its last second with
    ``end_of_day``, so that a ``--created-to 2024-05-01`` range includes the day).
    A datetime without an offset is taken as UTC. Raises ``ValueError``.
    """
    text = value.strip()
    if not text:
        raise ValueError("empty date")
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        day = date.fromisoformat(text)
        moment = datetime.combine(day, time(23, 59, 59) if end_of_day else time(0, 0, 0), UTC)
    else:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


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
                if not isinstance(v, str) or "\x00" in v or len(v) > 4096:
                    raise InvalidRequest(
                        f"--{name} value must be a string of at most 4096 characters"
                        " without NUL bytes",
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

    def to_dict(self) -> dict[str, Any]:
        return {
            "content_root": self.content_root,
            "added": self.added,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "deleted": self.deleted,
            "rejected": [r.to_dict() for r in self.rejected],
            "skipped": [s.to_dict() for s in self.skipped],
        }


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
