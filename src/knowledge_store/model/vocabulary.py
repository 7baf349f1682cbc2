"""The closed vocabularies and the bounds, each declared once.

Everything that names a vocabulary item — a filter, a label, a metric, a
dimension, an order, a fusion mode — or states a bound derives it from here:
the request models (``knowledge_store.requests``), the SQL of both engines,
the Tantivy schema, the aggregate catalog, every surface. A Literal type is the
declaration where a static type helps; the tuple beside it is derived from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from knowledge_store.errors import BoundExceeded, InvalidRequest, UnknownLabel

__all__ = [
    "ACL_FROM",
    "DEFAULT_DEPTH",
    "DEFAULT_DIRECTION",
    "DEFAULT_K",
    "DEFAULT_KNOWLEDGE_K",
    "DEFAULT_QUERY_GRAPH_LIMIT",
    "DIMENSIONS",
    "DIRECTIONS",
    "EVERYONE",
    "FACETS",
    "FACET_NAMES",
    "FANOUT_CAP",
    "FILTER_FIELDS",
    "FILTER_NAMES",
    "FUSION_MODES",
    "GRANULARITIES",
    "GRAPH_MAX_DEPTH",
    "JSON_INT_RANGE",
    "LABELS",
    "LIGHT_K",
    "LIGHT_LIST_VALUES",
    "LIGHT_QUERY_CHARS",
    "LIST_NAMES",
    "MAX_ACL_PRINCIPALS",
    "MAX_ATTRIBUTES_BYTES",
    "MAX_ATTRIBUTE_DEPTH",
    "MAX_BODY_CHARS",
    "MAX_BUCKETS",
    "MAX_CHUNK_CHARS",
    "MAX_DATE_CHARS",
    "MAX_EDGES",
    "MAX_EDGE_POSITION",
    "MAX_FILTER_VALUES",
    "MAX_FILTER_VALUE_CHARS",
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
    "MAX_SEARCH_K",
    "MAX_STARTS",
    "MAX_TEXT_LENGTH",
    "MAX_TITLE_CHARS",
    "MAX_UID_CHARS",
    "MAX_UID_LENGTH",
    "MAX_WEIGHT",
    "METRICS",
    "ORDER_FIELDS",
    "ORDER_SPECS",
    "QUERY_GRAPH_MAX_DEPTH",
    "QUERY_GRAPH_MAX_LENGTH",
    "QUERY_GRAPH_MAX_LIMIT",
    "QUERY_GRAPH_MAX_LIST",
    "QUERY_GRAPH_TIME_LIMIT_S",
    "Direction",
    "FilterField",
    "FusionMode",
    "Granularity",
    "Label",
    "ListName",
    "Metric",
    "check_k",
    "check_label",
    "check_labels",
    "check_list_bound",
    "filter_field",
    "list_names",
    "near_misses",
    "register_list",
    "unregister_list",
]

# -- labels, directions ---------------------------------------------------------------------------

#: The closed edge vocabulary. Anything else is rejected at ingest and in queries.
Label = Literal[
    "partOf",
    "dependsOn",
    "xref",
    "appliesTo",
    "forRole",
    "teachesSkill",
    "supersededBy",
    "implementedBy",
    "derivedFrom",
]
LABELS: tuple[str, ...] = get_args(Label)
_LABEL_SET = frozenset(LABELS)

Direction = Literal["out", "in", "both"]
DIRECTIONS: tuple[str, ...] = get_args(Direction)

# -- fusion ------------------------------------------------------------------------------------------

FusionMode = Literal["rrf", "convex", "adaptive"]
FUSION_MODES: tuple[str, ...] = get_args(FusionMode)
#: The four lists of DESIGN §6, in the order ``ranks`` lists them: every search answer's
#: ``ranks`` names these (null where absent), then any other list the search ran.
ListName = Literal["vector", "lexical", "graph", "sql"]
LIST_NAMES: tuple[str, ...] = get_args(ListName)
#: Every list name a request may use (``weights``, the lists a search runs): the four, then
#: each list registered beside them (``retrieval.retrievers.register_retriever`` registers its
#: retriever's name here), in registration order. A list name is a retriever's name.
_LISTS: dict[str, None] = dict.fromkeys(LIST_NAMES)


def register_list(name: str) -> None:
    """Make ``name`` a list name (``list_names``); registering one twice is harmless."""
    _LISTS.setdefault(name, None)


def unregister_list(name: str) -> None:
    """Forget the list ``name`` (the four of DESIGN §6 stay)."""
    if name not in LIST_NAMES:
        _LISTS.pop(name, None)


def list_names() -> tuple[str, ...]:
    """Every registered list name: the four of DESIGN §6 first, then the others."""
    return tuple(_LISTS)


# -- filter fields ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FilterField:
    """One closed filter field: its request name, its column, its kind.

    A keyword field filters by "any of" a list of values (``type``; and
    ``not_type`` where ``negatable``). A date field filters by an inclusive
    range, named ``<stem>_from`` / ``<stem>_to`` (``created_from`` …).

    Where an entity's value comes from: one of its own fields (``type``,
    ``source``, ``created_at`` …), or — ``record`` set — a record key of that
    name beyond them: a *facet*, a name of at most ``MAX_NAME_CHARS`` (absent
    or null: ``""``). A facet needs nothing but this declaration: the record
    model (``Entity.facets``) and its JSON schema, both catalogs' columns (added
    to an older store on open), the Tantivy field, the requests, the answers and
    every surface derive it from here.
    """

    name: str  # the request/JSON name, the entity column, the Tantivy field
    kind: Literal["keyword", "date"]
    negatable: bool = False  # adds not_<name>
    dimension: bool = True  # an aggregate dimension (dates: by day, week, month)
    help: str = ""
    #: A facet: its value is the record key ``name``; this documents it in the record schema.
    record: str | None = None

    def __post_init__(self) -> None:
        if self.record is not None and self.kind != "keyword":
            raise ValueError(f"facet {self.name!r}: a record key of its own must be a keyword")

    @property
    def column(self) -> str:
        return self.name

    @property
    def not_name(self) -> str:
        return f"not_{self.name}"

    @property
    def stem(self) -> str:
        return self.name.removesuffix("_at")

    @property
    def from_name(self) -> str:
        return f"{self.stem}_from"

    @property
    def to_name(self) -> str:
        return f"{self.stem}_to"

    @property
    def request_names(self) -> tuple[str, ...]:
        """The names a request uses for this field, in order."""
        if self.kind == "date":
            return (self.from_name, self.to_name)
        return (self.name, self.not_name) if self.negatable else (self.name,)


FILTER_FIELDS: tuple[FilterField, ...] = (
    FilterField("type", "keyword", negatable=True, help="entity type"),
    FilterField("source", "keyword", help="origin system"),
    FilterField("status", "keyword", help="status"),
    FilterField("uid", "keyword", dimension=False, help="entity uid"),
    FilterField(
        "language",
        "keyword",
        help="a code sample's language",
        record="A code sample's language (python, bash, …); a filter and an aggregate dimension."
        " The code-sample loader sets it from the fence.",
    ),
    FilterField("created_at", "date", help="creation date"),
    FilterField("updated_at", "date", help="last update"),
)
_BY_NAME = {f.name: f for f in FILTER_FIELDS}
#: The facets: filter fields whose value is a record key of their own (see ``FilterField``).
FACETS: tuple[FilterField, ...] = tuple(f for f in FILTER_FIELDS if f.record is not None)
FACET_NAMES: tuple[str, ...] = tuple(f.name for f in FACETS)
#: Every name a request may filter on, in declaration order (``type, not_type, …``).
FILTER_NAMES: tuple[str, ...] = tuple(n for f in FILTER_FIELDS for n in f.request_names)


def filter_field(name: str) -> FilterField:
    """The field called ``name`` (a field name, not a request name like ``created_from``)."""
    return _BY_NAME[name]


# -- aggregates, order -----------------------------------------------------------------------------

Metric = Literal["count", "count_distinct:source", "count_distinct:type"]
METRICS: tuple[str, ...] = get_args(Metric)
Granularity = Literal["day", "week", "month"]
GRANULARITIES: tuple[str, ...] = get_args(Granularity)
#: Aggregate dimensions: every keyword field marked ``dimension``, and each date field
#: by day, week and month (``created_at:week``).
DIMENSIONS: tuple[str, ...] = tuple(
    f.name for f in FILTER_FIELDS if f.kind == "keyword" and f.dimension
) + tuple(f"{f.name}:{g}" for f in FILTER_FIELDS if f.kind == "date" for g in GRANULARITIES)
#: A trend over more buckets than this is refused (ask for a coarser granularity).
MAX_BUCKETS = 10_000

#: The fields ``sql`` can order by; ``FIELD``, ``FIELD:asc`` or ``FIELD:desc``.
ORDER_FIELDS: tuple[str, ...] = ("updated_at", "created_at", "title")
ORDER_SPECS: tuple[str, ...] = tuple(
    spec for f in ORDER_FIELDS for spec in (f, f"{f}:asc", f"{f}:desc")
)

# -- defaults: each declared once; every request model, and so every surface, reads it -------------

#: Results a read returns when the request does not say (search, the primitives, the docs tools).
DEFAULT_K = 10
#: Sources ``search_knowledge`` returns when the request does not say (a chat's context).
DEFAULT_KNOWLEDGE_K = 5
#: Hops of the graph primitive, of ``get_related`` and of fused search's graph stage.
DEFAULT_DEPTH = 1
#: Which way a graph walk follows edges when the request does not say.
DEFAULT_DIRECTION: Direction = "both"

# -- bounds ------------------------------------------------------------------------------------------

#: Results of one primitive (lexical, vector, graph, sql), at most.
MAX_K = 1000
#: Results of fused search and the docs searches, at most (every surface alike).
MAX_SEARCH_K = 100
#: Characters of a query text.
MAX_TEXT_LENGTH = 4096
#: Characters of a uid in a request.
MAX_UID_LENGTH = 4096
#: Values of one list filter, and characters of one value.
MAX_FILTER_VALUES = 1000
MAX_FILTER_VALUE_CHARS = 4096
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
#: A fusion weight, at most.
MAX_WEIGHT = 1000.0
#: The graph primitive's depth bound (query_graph's ``*1..4`` reaches one hop further).
GRAPH_MAX_DEPTH = 3
QUERY_GRAPH_MAX_DEPTH = 4
#: Start uids of one traversal.
MAX_STARTS = 1000
#: Edges followed per hop, at most. When a hop finds more edges to entities not
#: yet reached, the first 1,000 are followed — in the order of the frontier's
#: ranking, then the target's recency, then uid — and the answer says ``capped``.
FANOUT_CAP = 1000
#: query_graph: rows (LIMIT default and cap), wall-clock bound, text length, list parameters.
DEFAULT_QUERY_GRAPH_LIMIT = 100
QUERY_GRAPH_MAX_LIMIT = 1000
QUERY_GRAPH_TIME_LIMIT_S = 0.25
QUERY_GRAPH_MAX_LENGTH = 10_000
QUERY_GRAPH_MAX_LIST = 10_000

# -- records: what one may hold (docs/records.md, "Limits and names") -------------------------------
# Validation (ingest/records.py), the chunker and the engines read them from here. The byte
# sizes behind some: a PostgreSQL b-tree entry holds at most 2,704 bytes, and a UTF-8
# character takes up to 4 (an edge's key holds two uids; titles and hrefs are indexed).
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

EVERYONE = "everyone"

#: The attribute a loader sets on an entity it splits off another (a code sample off its
#: page): the uid whose ACL it shares. A grant or revoke on that entity applies to it in
#: the same publish; a record that sets its own ``acl`` and no ``acl_from`` has its own.
ACL_FROM = "acl_from"


def near_misses(word: str, choices: Sequence[str], n: int = 3) -> list[str]:
    """The choices ``word`` was most likely meant to be: the same letters in another case,
    else click's rule for a mistyped option (``difflib.get_close_matches``, cutoff 0.6)."""
    import difflib

    same = [c for c in choices if c.lower() == word.lower()]
    return same[:n] or difflib.get_close_matches(word, choices, n=n)


def check_label(label: str) -> str:
    """Return ``label`` if it is one of the 9, else raise ``UnknownLabel`` listing them."""
    if label not in _LABEL_SET:
        raise UnknownLabel(
            f"unknown edge label {label!r}; use one of: {', '.join(LABELS)}",
            label=label,
            allowed=list(LABELS),
        )
    return label


def check_labels(labels: object) -> tuple[str, ...]:
    """The labels, deduplicated, each one of the 9 (else ``UnknownLabel`` listing them)."""
    items = [labels] if isinstance(labels, str) else list(labels)  # type: ignore[call-overload]
    return tuple(dict.fromkeys(check_label(label) for label in items))


def check_k(k: int, maximum: int = MAX_K) -> int:
    """Return ``k`` if it is an int in 1..maximum, else raise ``InvalidRequest``."""
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= maximum:
        raise InvalidRequest(f"k must be between 1 and {maximum}, not {k!r}", field="k")
    return k


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
