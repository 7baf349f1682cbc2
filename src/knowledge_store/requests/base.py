"""The ground every request model stands on: the base class with its one error tree, the
JSON schema surfaces publish, the shared field types and FILTERS (generated from
``FILTER_FIELDS``).
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
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    create_model,
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
    LABELS,
    MAX_FILTER_VALUE_CHARS,
    MAX_FILTER_VALUES,
    MAX_NAME_CHARS,
    MAX_UID_LENGTH,
    MAX_WEIGHT,
    METRICS,
    ORDER_SPECS,
    Filters,
    check_principal,
    check_text,
)
from knowledge_store.model.declared import looks_declared

__all__ = [
    "DimensionText",
    "FilterSpec",
    "FilterValue",
    "Filtering",
    "MetricText",
    "OrderText",
    "Principal",
    "Request",
    "SourceName",
    "Text",
    "Uid",
    "Weight",
    "json_schema_of",
    "listed",
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


def _where(loc: tuple[int | str, ...]) -> str:
    """The field path with its list positions, for a sentence: ``records[3]``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out or "request"


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
    if kind in ("dict_type", "model_type"):
        return InvalidRequest(
            f"{_where(loc)} must be a JSON object, not {_shown(given)}", field=field
        )
    return InvalidRequest(f"{_where(loc)}: {problem['msg']}", field=field)


class Request(BaseModel):
    """Base of every request: frozen, unknown arguments refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    #: Fields whose range is a bound (BoundExceeded, not InvalidRequest, when outside it).
    bound_fields: ClassVar[frozenset[str]] = frozenset()
    #: What to say when a field that may not be empty is: field → sentence.
    needs: ClassVar[dict[str, str]] = {}
    #: The fields that hold what a caller asked in its own words (a query, a query vector, a
    #: query's parameters): the audit log keeps, hashes or drops them by its setting.
    text_fields: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def parse(
        cls,
        data: Mapping[str, Any] | None = None,
        /,
        *,
        context: Mapping[str, Any] | None = None,
        **given: Any,
    ) -> Self:
        """Validate ``data`` (or keyword arguments); errors are the store's typed errors.

        ``context`` is pydantic's validation context: what a surface read beside the fields
        (an ingest body's lines)."""
        values = {**(data or {}), **given}
        try:
            return cls.model_validate(values, context=dict(context) if context else None)
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

    ``mode="serialization"`` describes an answer (what ``model_dump()`` gives). There a
    nullable value is ``{"anyOf": [{"type": T}, {"type": "null"}]}``, each branch with one
    ``type`` (a ``"type": [T, "null"]`` array is legal JSON Schema, but clients that map
    schemas onto a one-type dialect, such as Gemini's function declarations, drop or refuse
    it: the MCP Inspector's ``--strict`` warns); an input property keeps its one ``type``
    (clients convert a typed-in value by it), and an optional one is left out, not null.
    """
    generator = _ExplicitTypes if mode == "validation" else GenerateJsonSchema
    schema = model.model_json_schema(schema_generator=generator, mode=mode)
    out: dict[str, Any] = _inline(schema, schema.get("$defs", {}))
    return out


# -- shared field types --------------------------------------------------------------------------------
def _text(value: str) -> str:
    if not check_text(value):
        raise InvalidRequest(
            "text must be valid Unicode without NUL bytes or unpaired surrogates", field="text"
        )
    return value


def listed(value: Any) -> Any:
    """A single string stands for a list of one."""
    return [value] if isinstance(value, str) else value


Text = Annotated[str, AfterValidator(_text)]
Uid = Annotated[str, Field(min_length=1, max_length=MAX_UID_LENGTH), AfterValidator(_text)]
Principal = Annotated[str, AfterValidator(check_principal)]
SourceName = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS), AfterValidator(_text)]
Weight = Annotated[float, Field(ge=0, le=MAX_WEIGHT)]


# -- FILTERS, generated from FILTER_FIELDS ------------------------------------------------------------
class _FilterBase(BaseModel):
    """FILTERS: each list means "any of"; date ranges are inclusive ISO 8601 dates. Besides
    the built-in fields, the store's declared facets (``team``, ``not_team``,
    ``deadline_from`` …), which the reader resolves (``Filters.resolve``)."""

    model_config = ConfigDict(frozen=True, extra="allow")
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
    return listed(value) if name.replace("-", "_") in _LIST_NAMES else value


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


_NO_FILTERS = FilterSpec()


def _filters_default() -> FilterSpec:
    """No filters: one instance shared by every request (frozen, so nothing can change it)."""
    return _NO_FILTERS


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


def _dimension() -> Any:
    """A dimension: a built-in one (the schema's enum), or what may be a declared facet's —
    which the reader resolves against the store's facets (``AggregateSpec.resolve``). A
    surface that serves one store adds that store's to the enum (MCP's tool schemas)."""

    def check(value: str) -> str:
        if value not in DIMENSIONS and not looks_declared(value):
            raise UnknownField(
                f"dimension {_shown(value)} is not one of: {', '.join(DIMENSIONS)} (nor a"
                " declared facet's)",
                field="dimension",
                value=str(value)[:256],
                allowed=list(DIMENSIONS),
            )
        return value

    return Annotated[
        str, AfterValidator(check), Field(json_schema_extra={"enum": list(DIMENSIONS)})
    ]


if TYPE_CHECKING:
    OrderText: TypeAlias = str
    MetricText: TypeAlias = str
    DimensionText: TypeAlias = str
else:
    OrderText = _closed(ORDER_SPECS, "order")
    MetricText = _closed(METRICS, "metric")
    DimensionText = _dimension()
