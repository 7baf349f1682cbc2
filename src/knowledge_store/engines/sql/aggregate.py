"""Aggregate rows shaped for the answer (DESIGN §2) — pure functions, shared by both engines.

The catalog (metrics × dimensions) is declared in :mod:`knowledge_store.model`
and validated into an :class:`~knowledge_store.model.AggregateSpec` at the
store boundary. The engine computes the grouped values in its database over
the ACL-visible, filtered slice (the bucket key expression is the dialect's);
this module shapes those rows:

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

from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import date, timedelta
from typing import Any

from knowledge_store.errors import BoundExceeded
from knowledge_store.model import (
    MAX_BUCKETS,
    AggregateAnswer,
    AggregateRow,
    AggregateSpec,
    Filters,
    Granularity,
)

__all__ = ["aggregate_answer", "answer_rows", "bucket_key", "bucket_keys", "shape_rows"]

Row = tuple[str | None, int]


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


def answer_rows(
    spec: AggregateSpec, grouped: Mapping[str | None, int], filters: Filters
) -> list[AggregateRow]:
    """:func:`shape_rows` as the answer's rows."""
    return [AggregateRow(key=key, value=value) for key, value in shape_rows(spec, grouped, filters)]


def aggregate_answer(
    spec: AggregateSpec, filters: Filters, rows: Iterable[Sequence[Any]], content_root: str
) -> AggregateAnswer:
    """The answer of an aggregate from the ``(bucket, value)`` rows its statement returned
    (the same on every engine)."""
    grouped = {(None if bucket is None else str(bucket)): int(value) for bucket, value in rows}
    if spec.field is None and not grouped:
        grouped = {None: 0}
    return AggregateAnswer(
        content_root=content_root,
        metric=spec.metric,
        dimension=spec.dimension,
        rows=answer_rows(spec, grouped, filters),
    )


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
    low, high = filters.range(spec.field)
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
