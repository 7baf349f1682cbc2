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

from collections.abc import Mapping
from typing import (
    TYPE_CHECKING,
    Annotated,
    Any,
    ClassVar,
    Literal,
    Self,
    TypeAlias,
    get_args,
    get_origin,
)

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from knowledge_store.errors import (
    BoundExceeded,
    InputError,
    InvalidRequest,
    UnknownField,
    UnknownLabel,
)
from knowledge_store.model import (
    DIMENSIONS,
    FILTER_FIELDS,
    FILTER_NAMES,
    GRAPH_MAX_DEPTH,
    LABELS,
    MAX_FILTER_VALUE_CHARS,
    MAX_FILTER_VALUES,
    MAX_K,
    MAX_NAME_CHARS,
    MAX_SEARCH_K,
    MAX_STARTS,
    MAX_TEXT_LENGTH,
    MAX_UID_LENGTH,
    MAX_WEIGHT,
    METRICS,
    ORDER_FIELDS,
    ORDER_SPECS,
    QUERY_GRAPH_MAX_LENGTH,
    AggregateSpec,
    Direction,
    Filters,
    FusionMode,
    GraphQuery,
    Label,
    Order,
    check_principal,
    check_text,
)

__all__ = [
    "AclExplainRequest",
    "AclRequest",
    "AclShowRequest",
    "AggregateRequest",
    "ContentRequest",
    "DeleteRequest",
    "DocsSearchRequest",
    "FacetsRequest",
    "FilterSpec",
    "GraphRequest",
    "IngestRequest",
    "KnowledgeRequest",
    "LearningPathRequest",
    "LexicalRequest",
    "MemberRequest",
    "MembershipsRequest",
    "PrincipalRequest",
    "QueryGraphRequest",
    "RelatedRequest",
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


# -- the JSON schema surfaces publish ------------------------------------------------------------
class _ExplicitTypes(GenerateJsonSchema):
    """Optional scalars as ``{"type": [T, "null"]}`` rather than an ``anyOf`` without a type."""

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        inner = self.generate_inner(schema["schema"])
        kind = inner.get("type")
        if isinstance(kind, str) and "$ref" not in inner:
            out = {**inner, "type": [kind, "null"]}
            if "enum" in out:
                out["enum"] = [*out["enum"], None]
            return out
        return super().nullable_schema(schema)


def _inline(node: Any, defs: Mapping[str, Any]) -> Any:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            rest = {k: v for k, v in node.items() if k != "$ref"}
            return {**_inline(defs[ref.removeprefix("#/$defs/")], defs), **rest}
        return {k: _inline(v, defs) for k, v in node.items() if k != "$defs"}
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    return node


# -- turning validation errors into the error tree -------------------------------------------------
def _path(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc if not isinstance(p, int)) or "request"


def _limits(model: type[BaseModel], name: str) -> tuple[Any, Any]:
    info = model.model_fields.get(name)
    low = high = None
    for meta in info.metadata if info is not None else ():
        low = getattr(meta, "ge", low)
        high = getattr(meta, "le", high)
    return low, high


def _choices(model: type[BaseModel], name: str) -> list[str]:
    """The values of a Literal field (an optional one too)."""
    info = model.model_fields.get(name)
    pending = [info.annotation] if info is not None else []
    out: list[str] = []
    while pending:
        kind = pending.pop()
        if get_origin(kind) is Literal:
            out.extend(str(v) for v in get_args(kind))
        else:
            pending.extend(get_args(kind))
    return out


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _error(model: type[Request], exc: ValidationError) -> InputError:
    problem = exc.errors(include_url=False)[0]
    loc = tuple(problem["loc"])
    kind, field = problem["type"], _path(loc)
    given = problem.get("input")
    ctx = problem.get("ctx") or {}
    top = str(loc[0]) if loc else ""
    if kind == "extra_forbidden":
        if top == "filters" and len(loc) > 1:
            return UnknownField(
                f"unknown filter {loc[1]!r}; filter on one of: {', '.join(FILTER_NAMES)}",
                field=field,
                allowed=list(FILTER_NAMES),
            )
        allowed = [f.alias or n for n, f in model.model_fields.items()]
        return InvalidRequest(
            f"unknown argument {top!r}; the arguments are: {', '.join(allowed)}",
            field=field,
            allowed=allowed,
        )
    if kind in ("literal_error", "enum"):
        if top == "labels":
            return UnknownLabel(
                f"unknown edge label {_shown(given)}; use one of: {', '.join(LABELS)}",
                field=field,
                label=str(given)[:256],
                allowed=list(LABELS),
            )
        choices = _choices(model, top)
        return InvalidRequest(
            f"unknown {field} {_shown(given)}; use one of: {', '.join(choices)}",
            field=field,
            value=str(given)[:256],
            allowed=choices,
        )
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        low, high = _limits(model, top)
        if top in model.bound_fields:
            below = kind.startswith("greater")
            return BoundExceeded(
                f"{field} {_shown(given)} is below the minimum of {low}; use {low}–{high}"
                if below
                else f"{field} {_shown(given)} exceeds the maximum of {high}; use {low}–{high}",
                field=field,
                minimum=low,
                maximum=high,
            )
        return InvalidRequest(
            f"{field} must be between {low} and {high}, not {_shown(given)}", field=field
        )
    if kind in ("string_too_long", "too_long"):
        limit = ctx.get("max_length")
        size = len(given) if isinstance(given, str | list | tuple | dict) else "too many"
        unit = "characters" if kind == "string_too_long" else "items"
        verb = "has" if unit == "characters" else "holds"
        return BoundExceeded(
            f"{field} {verb} {size} {unit}; the maximum is {limit}",
            field=field,
            maximum=limit,
        )
    if kind in ("string_too_short", "too_short"):
        what = model.needs.get(top, f"{field} must not be empty")
        return InvalidRequest(what, field=field)
    if kind == "missing":
        return InvalidRequest(f"{field} is required", field=field)
    if kind == "string_unicode":  # JSON text with a lone surrogate (\ud800–\udfff)
        return InvalidRequest(
            f"{field} holds a lone surrogate (\\ud800–\\udfff), which is not Unicode text;"
            " send it as UTF-8",
            field=field,
        )
    return InvalidRequest(f"{field}: {problem['msg']}", field=field)


class Request(BaseModel):
    """Base of every request: frozen, unknown arguments refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    #: Fields whose range is a bound (BoundExceeded, not InvalidRequest, when outside it).
    bound_fields: ClassVar[frozenset[str]] = frozenset()
    #: What to say when a field that may not be empty is: field → sentence.
    needs: ClassVar[dict[str, str]] = {}

    @classmethod
    def parse(cls, data: Mapping[str, Any] | None = None, /, **given: Any) -> Self:
        """Validate ``data`` (or keyword arguments); errors are the store's typed errors."""
        values = {**(data or {}), **given}
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            raise _error(cls, exc) from None

    @classmethod
    def json_schema(cls) -> dict[str, Any]:
        """The input schema: explicit types everywhere, nested models inlined."""
        return json_schema_of(cls)


def json_schema_of(
    model: type[BaseModel], *, mode: Literal["validation", "serialization"] = "validation"
) -> dict[str, Any]:
    """``model``'s JSON schema as surfaces publish it: explicit types, nested models inlined.

    ``mode="serialization"`` describes an answer (what ``model_dump()`` gives).
    """
    schema = model.model_json_schema(schema_generator=_ExplicitTypes, mode=mode)
    out: dict[str, Any] = _inline(schema, schema.get("$defs", {}))
    return out


# -- shared field types --------------------------------------------------------------------------------
def _text(value: str) -> str:
    if not check_text(value):
        raise InvalidRequest(
            "text must be valid Unicode without NUL bytes or unpaired surrogates", field="text"
        )
    return value


def _listed(value: Any) -> Any:
    """A single string stands for a list of one."""
    return [value] if isinstance(value, str) else value


Text = Annotated[str, AfterValidator(_text)]
Uid = Annotated[str, Field(min_length=1, max_length=MAX_UID_LENGTH), AfterValidator(_text)]
Principal = Annotated[str, AfterValidator(check_principal)]
SourceName = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS), AfterValidator(_text)]
Weight = Annotated[float, Field(ge=0, le=MAX_WEIGHT)]


# -- FILTERS, generated from FILTER_FIELDS ------------------------------------------------------------
class _FilterBase(BaseModel):
    """FILTERS: each list means "any of"; date ranges are inclusive ISO 8601 dates."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    _filters: Filters = PrivateAttr(default_factory=Filters)

    @model_validator(mode="before")
    @classmethod
    def _names(cls, data: Any) -> Any:
        if isinstance(data, Filters):
            return data.to_dict()
        if isinstance(data, Mapping):
            return {str(k).replace("-", "_"): _listed_if_list(str(k), v) for k, v in data.items()}
        return data

    @model_validator(mode="after")
    def _build(self) -> Self:
        self._filters = Filters.build(**self.model_dump(exclude_defaults=True))
        return self

    @property
    def value(self) -> Filters:
        """The validated :class:`~knowledge_store.model.Filters`."""
        return self._filters

    def as_mapping(self) -> dict[str, Any]:
        return self.model_dump(exclude_defaults=True)


_LIST_NAMES = frozenset(
    name for f in FILTER_FIELDS if f.kind == "keyword" for name in f.request_names
)


def _listed_if_list(name: str, value: Any) -> Any:
    return _listed(value) if name.replace("-", "_") in _LIST_NAMES else value


FilterValue = Annotated[str, Field(max_length=MAX_FILTER_VALUE_CHARS)]


def _filter_fields() -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for f in FILTER_FIELDS:
        if f.kind == "keyword":
            # The bound is Filters.build's (one sentence for every caller); the schema states it.
            fields[f.name] = (
                list[FilterValue],
                Field(
                    default_factory=list,
                    json_schema_extra={"maxItems": MAX_FILTER_VALUES},
                    description=f"{f.help}: keep any of these",
                ),
            )
            if f.negatable:
                fields[f.not_name] = (
                    list[FilterValue],
                    Field(
                        default_factory=list,
                        json_schema_extra={"maxItems": MAX_FILTER_VALUES},
                        description=f"{f.help}: leave these out",
                    ),
                )
        else:
            fields[f.from_name] = (
                str | None,
                Field(None, description=f"{f.help} on or after, e.g. 2024-05-01"),
            )
            fields[f.to_name] = (
                str | None,
                Field(None, description=f"{f.help} on or before, e.g. 2024-05-31"),
            )
    return fields


if TYPE_CHECKING:
    FilterSpec = _FilterBase
else:
    FilterSpec = create_model(
        "FilterSpec", __base__=_FilterBase, __module__=__name__, **_filter_fields()
    )


def _filters_default() -> FilterSpec:
    return FilterSpec()


Filtering = Annotated[FilterSpec, Field(default_factory=_filters_default)]


def _closed(values: tuple[str, ...], field: str) -> Any:
    """A string from a closed list computed at runtime: enum in the schema, checked here."""

    def check(value: str) -> str:
        if value not in values:
            raise UnknownField(
                f"{field} {_shown(value)} is not one of: {', '.join(values)}",
                field=field,
                value=str(value)[:256],
                allowed=list(values),
            )
        return value

    return Annotated[str, AfterValidator(check), Field(json_schema_extra={"enum": list(values)})]


if TYPE_CHECKING:
    OrderText: TypeAlias = str
    MetricText: TypeAlias = str
    DimensionText: TypeAlias = str
else:
    OrderText = _closed(ORDER_SPECS, "order")
    MetricText = _closed(METRICS, "metric")
    DimensionText = _closed(DIMENSIONS, "dimension")


# -- reads ----------------------------------------------------------------------------------------------
def _needs_words(operation: str) -> str:
    return f"{operation} needs a non-empty text to look for (a blank one matches nothing)"


def _words(request: Any, operation: str) -> None:
    """Blank text to a read that ranks by it: an error, not an answer with nothing in it."""
    if not request.query.strip():
        raise InvalidRequest(_needs_words(operation), field="query")


class DocsSearchRequest(Request):
    """Fused search by words (an empty query: a pure filter request)."""

    query: Text = Field(
        "",
        max_length=MAX_TEXT_LENGTH,
        description="what to look for, in words (a question, a phrase, an identifier); empty"
        " for a pure filter request",
    )
    k: int = Field(10, ge=1, le=MAX_SEARCH_K, description="how many results")
    filters: Filtering

    @model_validator(mode="after")
    def _words_or_filters(self) -> Self:
        """Blank text is a pure filter request — which needs a filter to request."""
        if not self.query.strip() and not self.filters.as_mapping():
            raise InvalidRequest(
                "search needs a text to look for, or at least one filter for a pure filter"
                " request (a blank text with no filter would only list everything; sql lists"
                " entities by their fields)",
                field="query",
            )
        return self


class SearchRequest(DocsSearchRequest):
    """Fused search with the fusion's knobs."""

    mode: FusionMode | None = Field(None, description="fusion mode (default adaptive)")
    weights: dict[str, Weight] | None = Field(
        None, description="per-list weights; 0 switches a list off"
    )
    explain: bool = Field(False, description="include the lists side by side with timings")


class KnowledgeRequest(Request):
    """``search_knowledge``: fused search as cited passages."""

    needs: ClassVar[dict[str, str]] = {"query": _needs_words("search_knowledge")}

    query: Text = Field(
        ..., min_length=1, max_length=MAX_TEXT_LENGTH, description="the question, in words"
    )
    k: int = Field(5, ge=1, le=MAX_SEARCH_K, description="how many sources to return")
    filters: Filtering

    @model_validator(mode="after")
    def _not_blank(self) -> Self:
        _words(self, "search_knowledge")
        return self


class LexicalRequest(Request):
    """BM25 over chunks."""

    needs: ClassVar[dict[str, str]] = {"query": _needs_words("lexical")}

    query: Text = Field(
        ..., min_length=1, max_length=MAX_TEXT_LENGTH, description="the text to look for"
    )
    k: int = Field(10, ge=1, le=MAX_K, description="how many chunks")
    filters: Filtering
    explain: bool = Field(False, description="include how the answer was computed")

    @model_validator(mode="after")
    def _not_blank(self) -> Self:
        _words(self, "lexical")
        return self


class VectorRequest(Request):
    """Dense nearest chunks by meaning, of a text or of a query vector."""

    query: Text = Field(
        "", max_length=MAX_TEXT_LENGTH, description="the text whose meaning to look for"
    )
    vector: list[float] | None = Field(
        None, description="a query vector instead of a text (the store's dimension)"
    )
    k: int = Field(10, ge=1, le=MAX_K, description="how many chunks")
    filters: Filtering
    explain: bool = Field(False, description="include how the answer was computed")

    @model_validator(mode="after")
    def _one_query(self) -> Self:
        if (self.vector is None) == (not self.query.strip()):
            raise InvalidRequest(
                "vector needs a non-empty text or a query vector (one of them)", field="query"
            )
        return self


class GraphRequest(Request):
    """Entities linked to start uids."""

    bound_fields: ClassVar[frozenset[str]] = frozenset({"depth"})
    needs: ClassVar[dict[str, str]] = {"starts": "graph needs at least one start uid"}

    starts: Annotated[list[Uid], BeforeValidator(_listed)] = Field(
        ..., min_length=1, max_length=MAX_STARTS, description="uids of the entities to start from"
    )
    depth: int = Field(
        1, ge=1, le=GRAPH_MAX_DEPTH, description=f"hops to follow (1–{GRAPH_MAX_DEPTH})"
    )
    labels: Annotated[list[Label], BeforeValidator(_listed)] = Field(
        default_factory=list, description="follow only these edge labels (default: all 9)"
    )
    direction: Direction = Field(
        "both", description="out: edges from the starts; in: edges into them; both"
    )
    k: int = Field(10, ge=1, le=MAX_K, description="how many entities to return")

    @property
    def value(self) -> GraphQuery:
        return GraphQuery(
            starts=tuple(dict.fromkeys(self.starts)),
            depth=self.depth,
            labels=tuple(dict.fromkeys(self.labels)),
            direction=self.direction,
            k=self.k,
        )


class RelatedRequest(Request):
    """``get_related``: the neighbours of one entity."""

    bound_fields: ClassVar[frozenset[str]] = frozenset({"depth"})

    uid: Uid = Field(..., description="the entity's uid")
    labels: Annotated[list[Label], BeforeValidator(_listed)] = Field(
        default_factory=list, description="follow only these edge labels (default: all 9)"
    )
    depth: int = Field(
        1, ge=1, le=GRAPH_MAX_DEPTH, description=f"hops to follow (1–{GRAPH_MAX_DEPTH})"
    )
    direction: Direction = Field("both", description="edge direction")
    k: int = Field(10, ge=1, le=MAX_K, description="how many entities to return")


class SqlRequest(Request):
    """Entities by their typed fields, ordered."""

    filters: Filtering
    order: OrderText = Field(
        "updated_at:desc",
        description=f"the order: {', '.join(ORDER_FIELDS)}, each optionally :asc or :desc",
    )
    k: int = Field(10, ge=1, le=MAX_K, description="how many entities")

    @field_validator("order", mode="before")
    @classmethod
    def _order(cls, value: Any) -> Any:
        if value is None or isinstance(value, Order):
            return str(Order.parse(value))
        if isinstance(value, str):
            return str(Order.parse(value))  # an unknown field or direction says which
        return value

    @property
    def order_value(self) -> Order:
        return Order.parse(self.order)


class AggregateRequest(Request):
    """A catalog metric by a dimension over the visible slice."""

    metric: MetricText = Field("count", description="what to compute")
    dimension: DimensionText | None = Field(
        None,
        description="group by this (a date trend lists every bucket in the range, zeros"
        " included); none for one total",
    )
    filters: Filtering
    _spec: AggregateSpec = PrivateAttr()

    @field_validator("dimension", mode="before")
    @classmethod
    def _blank(cls, value: Any) -> Any:
        return None if value == "" else value

    @model_validator(mode="before")
    @classmethod
    def _catalog(cls, data: Any) -> Any:
        if isinstance(data, Mapping):  # the catalog's own sentences for a bad metric/dimension
            AggregateSpec.of(data.get("metric", "count"), data.get("dimension") or None)
        return data

    @model_validator(mode="after")
    def _typed(self) -> Self:
        self._spec = AggregateSpec.of(self.metric, self.dimension)
        return self

    @property
    def spec(self) -> AggregateSpec:
        return self._spec


class QueryGraphRequest(Request):
    """A bounded, read-only openCypher query."""

    query: Text = Field(
        ...,
        min_length=1,
        max_length=QUERY_GRAPH_MAX_LENGTH,
        description="a read-only openCypher query: MATCH … WHERE … RETURN … ORDER BY … SKIP …"
        " LIMIT …; every value as a $parameter",
    )
    params: dict[str, Any] = Field(
        default_factory=dict, description="the values of the query's $parameters, by name"
    )
    lenient: bool = Field(False, description="report every problem at once, with positions")


class ContentRequest(Request):
    """One entity with its chunks and its edges to visible entities."""

    uid: Uid = Field(..., description="the entity's uid")


class LearningPathRequest(ContentRequest):
    """``get_learning_path``: the ordered path an entity belongs to."""


class XrefRequest(Request):
    """``resolve_xref``: a uid, an href (with or without #anchor) or an exact title."""

    ref: Text = Field(
        ...,
        min_length=1,
        max_length=MAX_UID_LENGTH,
        description="a uid, an href (with or without #anchor) or an exact title",
    )


class FacetsRequest(Request):
    """``graph_facets``: the neighbours of a result set, counted by label and type."""

    needs: ClassVar[dict[str, str]] = {"uids": "graph_facets needs at least one uid"}
    uids: Annotated[list[Uid], BeforeValidator(_listed)] = Field(
        ..., min_length=1, max_length=MAX_STARTS, description="the result set's uids"
    )


# -- administration ---------------------------------------------------------------------------------------
class IngestRequest(Request):
    """Publish canonical records as one atomic batch."""

    records: list[dict[str, Any]] = Field(
        ...,
        min_length=1,
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

    @model_validator(mode="after")
    def _sync_names_source(self) -> Self:
        if self.sync and self.source is None:
            raise InvalidRequest(
                "a sync replaces the content of one source: name it (source)", field="source"
            )
        return self


class DeleteRequest(Request):
    """Entities to delete — by uid, or a whole source — with their chunks and outgoing
    edges (one publish)."""

    needs: ClassVar[dict[str, str]] = {"uids": "delete needs at least one uid"}
    uids: Annotated[list[Uid], BeforeValidator(_listed)] = Field(
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
    """Whether a principal can read an entity, and through which membership chain."""

    principal: Principal = Field(..., description="'everyone', 'user:<id>' or 'group:<id>'")
    uid: Uid = Field(..., description="the entity's uid")


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


def request_models() -> tuple[type[Request], ...]:
    """Every request model (a test checks each schema has explicit types)."""
    return (
        SearchRequest,
        DocsSearchRequest,
        KnowledgeRequest,
        LexicalRequest,
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
    )
