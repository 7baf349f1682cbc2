"""Typed values the engines take: an order, an aggregate catalog entry, a graph walk.

Strings from callers become these once, at the store boundary (the request
models of ``knowledge_store.requests`` call the parsers here); engines never
parse a string that names a vocabulary item.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from knowledge_store.errors import InvalidRequest, UnknownField
from knowledge_store.model.declared import DeclaredFacet, looks_declared
from knowledge_store.model.vocabulary import (
    DEFAULT_DEPTH,
    DEFAULT_DIRECTION,
    DEFAULT_K,
    DIMENSIONS,
    FANOUT_CAP,
    FILTER_FIELDS,
    METRICS,
    ORDER_FIELDS,
    Direction,
    Granularity,
)

__all__ = ["DEFAULT_ORDER", "AggregateSpec", "GraphQuery", "Order"]

_DATE_FIELDS = tuple(f.name for f in FILTER_FIELDS if f.kind == "date")


@dataclass(frozen=True)
class Order:
    """``field direction``; ties (and null dates, always last) are broken by uid."""

    field: str
    direction: Literal["asc", "desc"]

    def __str__(self) -> str:
        return f"{self.field}:{self.direction}"

    @classmethod
    def parse(cls, text: str | Order | None) -> Order:
        """``"title"``, ``"created_at:asc"``, ``"updated_at:desc"`` → :class:`Order`.

        None or empty gives the default, ``updated_at:desc``; a bare field its
        natural direction (title ascending, dates newest first). A field outside
        :data:`ORDER_FIELDS` is an ``UnknownField`` naming them.
        """
        if isinstance(text, Order):
            return text
        if text is None or not text.strip():
            return DEFAULT_ORDER
        field, sep, direction = (part.strip() for part in text.strip().partition(":"))
        if field not in ORDER_FIELDS:
            raise UnknownField(
                f"cannot order by {field!r}; order by one of: {', '.join(ORDER_FIELDS)}"
                " (optionally followed by :asc or :desc)",
                field="order",
                value=text[:256],
                allowed=list(ORDER_FIELDS),
            )
        if not sep:
            direction = "asc" if field == "title" else "desc"
        if direction not in ("asc", "desc"):
            raise InvalidRequest(
                f"order {text[:80]!r}: the direction must be asc or desc, e.g. {field}:desc",
                field="order",
                value=text[:256],
            )
        return cls(field, "asc" if direction == "asc" else "desc")


DEFAULT_ORDER = Order("updated_at", "desc")


@dataclass(frozen=True)
class AggregateSpec:
    """A catalog entry: the metric, and the dimension split into field and granularity."""

    metric: str
    dimension: str | None
    field: str | None  # a dimension field (type, source, …, created_at …) or None
    granularity: Granularity | None  # set for trends
    #: A declared facet's dimension: its kind once resolved (:meth:`resolve`), ``""`` before.
    facet: str | None = None

    @property
    def is_trend(self) -> bool:
        return self.granularity is not None

    @property
    def distinct_of(self) -> str | None:
        """The column a ``count_distinct:…`` metric counts (None for ``count``)."""
        return self.metric.partition(":")[2] or None

    @classmethod
    def of(cls, metric: str, dimension: str | None = None) -> AggregateSpec:
        """Validate ``metric`` × ``dimension`` against the catalog; ``UnknownField`` lists it."""
        if metric not in METRICS:
            raise UnknownField(
                f"unknown metric {str(metric)[:80]!r}; {_catalog()}",
                field="metric",
                value=str(metric)[:256],
                metrics=list(METRICS),
                dimensions=list(DIMENSIONS),
            )
        if dimension is None or dimension == "":
            return cls(metric, None, None, None)
        if dimension not in DIMENSIONS and looks_declared(dimension):
            field, _, granularity = dimension.partition(":")
            return cls(metric, dimension, field, _granularity(granularity), facet="")
        if dimension not in DIMENSIONS:
            hint = ""
            if dimension in _DATE_FIELDS:
                hint = f" (a trend needs a granularity: {dimension}:day, :week or :month)"
            raise UnknownField(
                f"unknown dimension {str(dimension)[:80]!r}{hint}; {_catalog()}",
                field="dimension",
                value=str(dimension)[:256],
                metrics=list(METRICS),
                dimensions=list(DIMENSIONS),
            )
        field, _, granularity = dimension.partition(":")
        return cls(metric, dimension, field, _granularity(granularity))

    def resolve(self, declared: Mapping[str, DeclaredFacet]) -> AggregateSpec:
        """A declared facet's dimension checked against the store's facets (``UnknownField``
        listing every dimension there is when it names none)."""
        if self.facet != "":
            return self
        facet = declared.get(self.field or "")
        if facet is None or self.dimension not in facet.dimensions:
            extra = [d for f in declared.values() for d in f.dimensions]
            hint = ""
            if facet is not None and facet.kind == "date":
                hint = f" (a trend needs a granularity: {facet.name}:day, :week or :month)"
            raise UnknownField(
                f"unknown dimension {str(self.dimension)[:80]!r}{hint}; {_catalog(extra)}",
                field="dimension",
                value=str(self.dimension)[:256],
                metrics=list(METRICS),
                dimensions=[*DIMENSIONS, *extra],
            )
        return dataclasses.replace(self, facet=facet.kind)


def _granularity(text: str) -> Granularity | None:
    if not text:
        return None
    return "day" if text == "day" else "week" if text == "week" else "month"


def _catalog(declared: list[str] | None = None) -> str:
    return (
        f"metrics: {', '.join(METRICS)}; dimensions: {', '.join([*DIMENSIONS, *(declared or [])])}"
        " (or none, for a single total)"
    )


@dataclass(frozen=True)
class GraphQuery:
    """A bounded walk: from ``starts`` over ``labels`` (all when empty) in ``direction``.

    Built from a validated request (``requests.GraphRequest``) or by the
    library itself; the bounds were checked there.
    """

    starts: tuple[str, ...]
    depth: int = DEFAULT_DEPTH
    labels: tuple[str, ...] = ()
    direction: Direction = DEFAULT_DIRECTION
    k: int = DEFAULT_K
    fanout: int = FANOUT_CAP
