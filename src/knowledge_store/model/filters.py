"""FILTERS (DESIGN §6) as one hashable value, generic over :data:`FILTER_FIELDS`.

``Filters.build(type=["page"], created_from="2024-01-01")`` and
``Filters.of({"type": "page", "not-type": ["codeSample"]})`` validate once:
names (an unknown one is an ``UnknownField`` listing the valid ones), values
(strings, no NUL, no lone surrogates, at most :data:`MAX_FILTER_VALUE_CHARS`),
list lengths (:data:`MAX_FILTER_VALUES`), ISO dates and inverted ranges. What
comes out is normalised (dates in UTC ``YYYY-MM-DDTHH:MM:SSZ``, values
deduplicated) and in field order, so two equal requests give equal, equally
hashed values — the engines cache by them.

Nothing here knows a field by name: every engine fragment (SQL, Tantivy)
iterates :data:`FILTER_FIELDS` and reads :meth:`values`, :meth:`excluded`
and :meth:`range`.

**Declared facets** (:mod:`.declared`) are the store's, not the code's: a name that is
no built-in filter but could be a declared facet's (``team``, ``deadline_from``) is kept
as given (``pending``) until a reader, which knows the store's facets, resolves it
(:meth:`Filters.resolve`) into :class:`FacetCondition` values — or refuses it with the
filters the store has. Engines only ever see resolved filters.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from knowledge_store.errors import InvalidRequest, UnknownField
from knowledge_store.model.declared import DeclaredFacet, looks_declared, number_text
from knowledge_store.model.text import normalize_timestamp
from knowledge_store.model.vocabulary import (
    FILTER_FIELDS,
    FILTER_NAMES,
    MAX_FILTER_VALUE_CHARS,
    MAX_FILTER_VALUES,
    FilterField,
    check_list_bound,
)

__all__ = ["FacetCondition", "Filters", "FiltersLike", "check_text"]

Values = tuple[str, ...]
_KIND_OF: dict[str, tuple[FilterField, str]] = {}
for _f in FILTER_FIELDS:
    if _f.kind == "date":
        _KIND_OF[_f.from_name] = (_f, "from")
        _KIND_OF[_f.to_name] = (_f, "to")
    else:
        _KIND_OF[_f.name] = (_f, "any")
        if _f.negatable:
            _KIND_OF[_f.not_name] = (_f, "none")


def check_text(value: object) -> bool:
    """A string that SQLite, PostgreSQL and Tantivy can all bind: no NUL, no lone surrogate."""
    if not isinstance(value, str) or "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _path(name: str) -> str:
    return f"filters.{name}"


def _values(name: str, raw: object) -> Values:
    items: Sequence[Any] = [raw] if isinstance(raw, str) else raw  # type: ignore[assignment]
    if not isinstance(items, Sequence) or isinstance(items, bytes):
        raise InvalidRequest(
            f"{_path(name)} takes a string or a list of strings, not {type(raw).__name__}",
            field=_path(name),
        )
    check_list_bound(_path(name), items, MAX_FILTER_VALUES, name=f"the filter {name!r}")
    for value in items:
        if not check_text(value) or len(value) > MAX_FILTER_VALUE_CHARS:
            raise InvalidRequest(
                f"{_path(name)}: each value must be a string of at most {MAX_FILTER_VALUE_CHARS}"
                " characters of Unicode text (no NUL bytes, no lone surrogates)",
                field=_path(name),
            )
    return tuple(dict.fromkeys(items))


def _stamp(name: str, raw: object, *, end: bool) -> str:
    if not isinstance(raw, str):
        raise InvalidRequest(
            f"{_path(name)} takes an ISO 8601 date string such as 2024-05-01, not {raw!r}",
            field=_path(name),
        )
    try:
        return normalize_timestamp(raw, end_of_day=end)
    except (ValueError, OverflowError):
        raise InvalidRequest(
            f"{_path(name)} {raw[:80]!r} is not an ISO 8601 date"
            " (write e.g. 2024-05-01 or 2024-05-01T12:00:00Z)",
            field=_path(name),
            value=raw[:256],
        ) from None


def _pending(name: str, raw: object) -> object:
    """A declared facet's value as given, hashable: a string, a number, or a tuple of them
    (its facet's kind checks it when the filters are resolved)."""
    if isinstance(raw, str | int | float) and not isinstance(raw, bool):
        return raw
    if isinstance(raw, list | tuple):
        check_list_bound(_path(name), raw, MAX_FILTER_VALUES, name=f"the filter {name!r}")
        if all(isinstance(v, str | int | float) and not isinstance(v, bool) for v in raw):
            return tuple(raw)
    raise InvalidRequest(
        f"{_path(name)} takes a string, a number or a list of them, not {type(raw).__name__}",
        field=_path(name),
    )


def _keyword(name: str, raw: object) -> Values:
    """A declared keyword facet's values: strings, numbers as their text (``1``, ``2.5``)."""
    items = raw if isinstance(raw, tuple) else (raw,)
    texts = [number_text(float(v)) if isinstance(v, int | float) else v for v in items]
    return _values(name, texts)


def _bound(name: str, raw: object, *, end: bool, kind: str) -> str | float:
    if kind == "date":
        return _stamp(name, raw, end=end)
    try:
        number = float(raw) if isinstance(raw, int | float | str) else math.nan
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise InvalidRequest(
            f"{_path(name)} takes a number, not {str(raw)[:80]!r}", field=_path(name)
        )
    return number


@dataclass(frozen=True)
class FacetCondition:
    """What resolved FILTERS ask of one declared facet: values it must have one of
    (``any_of``) and none of (``none_of``), and an inclusive range (``low``, ``high``:
    stored timestamps for a date facet, numbers for a number facet; None: open)."""

    name: str
    kind: str
    any_of: Values = ()
    none_of: Values = ()
    low: str | float | None = None
    high: str | float | None = None


@dataclass(frozen=True)
class Filters:
    """Validated FILTERS: each list means "any of"; ranges are inclusive.

    ``any_of``: ``(field, values)`` that must match one of the values;
    ``none_of``: ``(field, values)`` that must match none; ``ranges``:
    ``(field, lowest, highest)`` timestamps, either end open. Entries come in
    :data:`FILTER_FIELDS` order; an empty ``Filters()`` restricts nothing.
    Build one with :meth:`build` or :meth:`of`.
    """

    any_of: tuple[tuple[str, Values], ...] = ()
    none_of: tuple[tuple[str, Values], ...] = ()
    ranges: tuple[tuple[str, str | None, str | None], ...] = ()
    #: Declared facets' request names and values as given, not resolved yet (:meth:`resolve`).
    pending: tuple[tuple[str, object], ...] = ()
    #: The declared facets' conditions, resolved (by facet name).
    facets: tuple[FacetCondition, ...] = ()

    # -- building -----------------------------------------------------------------------------
    @classmethod
    def build(cls, **given: object) -> Filters:
        """Validate request-named values: ``type=[…]``, ``not_type=…``, ``created_from="…"``.

        None and empty lists mean "no filter". Raises ``UnknownField`` for a name
        outside :data:`FILTER_NAMES` and ``InvalidRequest`` / ``BoundExceeded``
        naming ``filters.<name>`` for a bad value.
        """
        any_of: dict[str, Values] = {}
        none_of: dict[str, Values] = {}
        lows: dict[str, str] = {}
        highs: dict[str, str] = {}
        pending: dict[str, object] = {}
        for name, raw in given.items():
            spec = _KIND_OF.get(name)
            if spec is None and looks_declared(name):
                if raw is not None and raw != [] and raw != ():
                    pending[name] = _pending(name, raw)
                continue
            if spec is None:
                raise UnknownField(
                    f"unknown filter {name!r}; filter on one of: {', '.join(FILTER_NAMES)}",
                    field=_path(name),
                    allowed=list(FILTER_NAMES),
                )
            if raw is None:
                continue
            field, role = spec
            if role == "any":
                if values := _values(name, raw):
                    any_of[field.name] = values
            elif role == "none":
                if values := _values(name, raw):
                    none_of[field.name] = values
            elif role == "from":
                lows[field.name] = _stamp(name, raw, end=False)
            else:
                highs[field.name] = _stamp(name, raw, end=True)
        ranges = []
        for field in FILTER_FIELDS:
            low, high = lows.get(field.name), highs.get(field.name)
            if low is not None and high is not None and low > high:
                raise InvalidRequest(
                    f"{_path(field.from_name)} {low} is after {_path(field.to_name)} {high};"
                    " swap them",
                    field=_path(field.from_name),
                )
            if low is not None or high is not None:
                ranges.append((field.name, low, high))
        return cls(
            any_of=tuple((f.name, any_of[f.name]) for f in FILTER_FIELDS if f.name in any_of),
            none_of=tuple((f.name, none_of[f.name]) for f in FILTER_FIELDS if f.name in none_of),
            ranges=tuple(ranges),
            pending=tuple(sorted(pending.items())),
        )

    def resolve(self, declared: Mapping[str, DeclaredFacet]) -> Filters:
        """These filters with every pending name resolved against the store's ``declared``
        facets — validated by the facet's kind — or ``UnknownField`` naming the filters
        there are (the built-in ones and the declared ones)."""
        if not self.pending:
            return self
        roles = {n: (f, f.role(n)) for f in declared.values() for n in f.request_names}
        found: dict[str, dict[str, Any]] = {}
        for name, raw in self.pending:
            if name not in roles:
                allowed = [*FILTER_NAMES, *roles]
                raise UnknownField(
                    f"unknown filter {name!r}; filter on one of: {', '.join(allowed)}",
                    field=_path(name),
                    allowed=allowed,
                )
            facet, role = roles[name]
            into = found.setdefault(facet.name, {"kind": facet.kind})
            if role == "any":
                into["any_of"] = _keyword(name, raw)
            elif role == "none":
                into["none_of"] = _keyword(name, raw)
            else:
                key = "low" if role == "from" else "high"
                into[key] = _bound(name, raw, end=role == "to", kind=facet.kind)
        conditions = []
        for name in sorted(found):
            low, high = found[name].get("low"), found[name].get("high")
            if low is not None and high is not None and low > high:
                facet = declared[name]
                raise InvalidRequest(
                    f"{_path(facet.request_names[0])} {low} is after"
                    f" {_path(facet.request_names[1])} {high}; swap them",
                    field=_path(facet.request_names[0]),
                )
            conditions.append(FacetCondition(name, **found[name]))
        return dataclasses.replace(self, pending=(), facets=tuple(conditions))

    @classmethod
    def of(cls, value: FiltersLike) -> Filters:
        """A ``Filters``, None, or a mapping of request names (``-`` may stand for ``_``)."""
        if value is None:
            return cls()
        if isinstance(value, Filters):
            return value
        if not isinstance(value, Mapping):
            raise InvalidRequest(
                f"filters must be a mapping of filter names to values, not {type(value).__name__}",
                field="filters",
                allowed=list(FILTER_NAMES),
            )
        return cls.build(**{str(k).replace("-", "_"): v for k, v in value.items()})

    # -- reading ------------------------------------------------------------------------------
    def values(self, name: str) -> Values:
        """The values field ``name`` must match one of (empty: no restriction)."""
        return next((v for n, v in self.any_of if n == name), ())

    def excluded(self, name: str) -> Values:
        """The values field ``name`` must match none of."""
        return next((v for n, v in self.none_of if n == name), ())

    def range(self, name: str) -> tuple[Any, Any]:
        """The inclusive ``(lowest, highest)`` of date field ``name`` — or of a declared date
        or number facet ``name`` (None: open)."""
        for facet in self.facets:
            if facet.name == name:
                return facet.low, facet.high
        return next(((lo, hi) for n, lo, hi in self.ranges if n == name), (None, None))

    def with_values(self, name: str, values: Sequence[str]) -> Filters:
        """These filters with field ``name`` restricted to ``values`` instead (validated)."""
        built = Filters.build(**{**self._built_in(), name: list(values)})
        return dataclasses.replace(built, pending=self.pending, facets=self.facets)

    @property
    def is_empty(self) -> bool:
        return not (self.any_of or self.none_of or self.ranges or self.pending or self.facets)

    def to_dict(self) -> dict[str, Any]:
        """The request-named mapping these filters were built from (normalised)."""
        out = self._built_in()
        for name, raw in self.pending:
            out[name] = list(raw) if isinstance(raw, tuple) else raw
        for facet in self.facets:
            keyword = facet.kind == "keyword"
            if facet.any_of:
                out[facet.name] = list(facet.any_of)
            if facet.none_of:
                out[f"not_{facet.name}"] = list(facet.none_of)
            if facet.low is not None and not keyword:
                out[f"{facet.name}_from"] = facet.low
            if facet.high is not None and not keyword:
                out[f"{facet.name}_to"] = facet.high
        return out

    def _built_in(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for field in FILTER_FIELDS:
            if field.kind == "date":
                low, high = self.range(field.name)
                if low is not None:
                    out[field.from_name] = low
                if high is not None:
                    out[field.to_name] = high
                continue
            if values := self.values(field.name):
                out[field.name] = list(values)
            if excluded := self.excluded(field.name):
                out[field.not_name] = list(excluded)
        return out


FiltersLike = Filters | Mapping[str, Any] | None
