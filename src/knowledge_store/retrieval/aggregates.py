"""The closed aggregate catalog (DESIGN §2): metric × dimension — pure functions.

======================  ===============================================
metric                  value of a bucket
======================  ===============================================
``count``               number of visible entities
``count_distinct:source``  number of distinct sources among them
``count_distinct:type``    number of distinct types among them
======================  ===============================================

Dimensions: none (one total row, key ``None``), ``type``, ``source``,
``status``, and trends ``created_at:day|week|month``,
``updated_at:day|week|month``.

The engine computes the grouped values in its database over the ACL-visible,
filtered slice (the bucket key expression is the engine's); this module names
the catalog, validates a request, and shapes the rows:

* bucket keys: day ``2024-05-01``, ISO week ``2024-W05`` (the ISO year, which
  differs from the calendar year around New Year), month ``2024-05``;
* a trend returns **every** bucket in its range, zeros included. The range is
  the FILTERS' range on the trend's own field where given (each end on its
  own), otherwise the first and last bucket of the visible data;
* entities whose trend date is null are counted in one bucket with key
  ``None``, listed last (and only when it is not empty), so the rows of a
  ``count`` always sum to the total. A date range filter on that field
  excludes them, as it excludes any entity outside the range;
* categorical rows come largest value first, ties by key; trend rows in time
  order.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Literal

from knowledge_store.errors import BoundExceeded, UnknownField
from knowledge_store.model import Filters

__all__ = [
    "DIMENSIONS",
    "GRANULARITIES",
    "MAX_BUCKETS",
    "METRICS",
    "AggregateSpec",
    "bucket_key",
    "bucket_keys",
    "check_aggregate",
    "shape_rows",
]

METRICS: tuple[str, ...] = ("count", "count_distinct:source", "count_distinct:type")
GRANULARITIES: tuple[str, ...] = ("day", "week", "month")
_CATEGORIES: tuple[str, ...] = ("type", "source", "status")
_DATE_FIELDS: tuple[str, ...] = ("created_at", "updated_at")
DIMENSIONS: tuple[str, ...] = _CATEGORIES + tuple(
    f"{field}:{g}" for field in _DATE_FIELDS for g in GRANULARITIES
)
#: A trend over more buckets than this is refused (ask for a coarser granularity).
MAX_BUCKETS = 10_000

Granularity = Literal["day", "week", "month"]
Row = tuple[str | None, int]


@dataclass(frozen=True)
class AggregateSpec:
    """A validated catalog entry: the metric, and the dimension split into field/granularity."""

    metric: str
    dimension: str | None
    field: str | None  # type | source | status | created_at | updated_at | None
    granularity: Granularity | None  # set for trends

    @property
    def is_trend(self) -> bool:
        return self.granularity is not None

    @property
    def distinct_of(self) -> str | None:
        """The column a ``count_distinct:…`` metric counts (None for ``count``)."""
        return self.metric.partition(":")[2] or None


def _catalog() -> str:
    return (
        f"metrics: {', '.join(METRICS)}; dimensions: {', '.join(DIMENSIONS)}"
        " (or none, for a single total)"
    )


def check_aggregate(metric: str, dimension: str | None) -> AggregateSpec:
    """Validate ``metric`` × ``dimension`` against the catalog; ``UnknownField`` lists it."""
    if metric not in METRICS:
        raise UnknownField(
            f"unknown metric {metric!r}; {_catalog()}",
            field="metric",
            value=metric,
            metrics=list(METRICS),
            dimensions=list(DIMENSIONS),
        )
    if dimension is None or dimension == "":
        return AggregateSpec(metric, None, None, None)
    if dimension not in DIMENSIONS:
        hint = ""
        if dimension in _DATE_FIELDS:
            hint = f" (a trend needs a granularity: {dimension}:day, :week or :month)"
        raise UnknownField(
            f"unknown dimension {dimension!r}{hint}; {_catalog()}",
            field="dimension",
            value=dimension,
            metrics=list(METRICS),
            dimensions=list(DIMENSIONS),
        )
    field, _, granularity = dimension.partition(":")
    if not granularity:
        return AggregateSpec(metric, dimension, field, None)
    gran: Granularity = (
        "day" if granularity == "day" else "week" if granularity == "week" else "month"
    )
    return AggregateSpec(metric, dimension, field, gran)


def bucket_key(timestamp: str, granularity: Granularity) -> str:
    """The bucket of an ISO timestamp (``YYYY-MM-DD…``): day, ISO week or month key."""
    day = date.fromisoformat(timestamp[:10])
    if granularity == "day":
        return day.isoformat()
    if granularity == "month":
        return f"{day.year:04d}-{day.month:02d}"
    iso = day.isocalendar()
    return f"{iso.year:04d}-W{iso.week:02d}"


def _key_start(key: str, granularity: Granularity) -> date:
    if granularity == "day":
        return date.fromisoformat(key)
    if granularity == "month":
        return date(int(key[:4]), int(key[5:7]), 1)
    return date.fromisocalendar(int(key[:4]), int(key[6:8]), 1)


def bucket_keys(first: str, last: str, granularity: Granularity) -> Iterator[str]:
    """Every bucket key from ``first`` to ``last`` inclusive (both bucket keys)."""
    current = _key_start(first, granularity)
    end = _key_start(last, granularity)
    while current <= end:
        if granularity == "day":
            yield current.isoformat()
            current += timedelta(days=1)
        elif granularity == "week":
            iso = current.isocalendar()
            yield f"{iso.year:04d}-W{iso.week:02d}"
            current += timedelta(days=7)
        else:
            yield f"{current.year:04d}-{current.month:02d}"
            year, month = divmod(current.month, 12)
            current = date(current.year + year, month + 1, 1)


def _bucket_count(first: str, last: str, granularity: Granularity) -> int:
    start, end = _key_start(first, granularity), _key_start(last, granularity)
    if granularity == "day":
        return (end - start).days + 1
    if granularity == "week":
        return (end - start).days // 7 + 1
    return (end.year - start.year) * 12 + end.month - start.month + 1


def _range(filters: Filters, field: str) -> tuple[str | None, str | None]:
    if field == "created_at":
        return filters.created_from, filters.created_to
    return filters.updated_from, filters.updated_to


def shape_rows(
    spec: AggregateSpec, grouped: Mapping[str | None, int], filters: Filters
) -> list[Row]:
    """The answer rows from the engine's grouped values (see the module docstring).

    ``grouped`` maps each non-empty bucket key (None: no dimension, or a null
    date) to its value, as the database computed it.
    """
    if spec.field is None:
        return [(None, int(sum(grouped.values())))]
    if spec.granularity is None:
        return sorted(
            ((key, int(value)) for key, value in grouped.items()),
            key=lambda row: (-row[1], row[0] is None, row[0] or ""),
        )
    gran = spec.granularity
    dated = {key: int(v) for key, v in grouped.items() if key is not None}
    low, high = _range(filters, spec.field)
    first = bucket_key(low, gran) if low is not None else min(dated, default=None)
    last = bucket_key(high, gran) if high is not None else max(dated, default=None)
    rows: list[Row] = []
    if first is not None and last is not None and first <= last:
        count = _bucket_count(first, last, gran)
        if count > MAX_BUCKETS:
            coarser = {"day": "week", "week": "month", "month": "month"}[gran]
            raise BoundExceeded(
                f"the trend {spec.dimension} from {first} to {last} has {count} buckets, over the"
                f" maximum of {MAX_BUCKETS}; narrow the date range or use {spec.field}:{coarser}",
                buckets=count,
                maximum=MAX_BUCKETS,
            )
        rows = [(key, dated.get(key, 0)) for key in bucket_keys(first, last, gran)]
    elif dated:  # defensive: the filters already keep every date inside the range
        rows = sorted(dated.items())
    nulls = int(grouped.get(None, 0))
    if nulls:
        rows.append((None, nulls))
    return rows
