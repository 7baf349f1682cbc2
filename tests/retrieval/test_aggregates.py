"""Aggregates: the closed catalog, ISO buckets, zero-filled trends, and an oracle over the
visible records (hypothesis over random filters and identities)."""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from datetime import date, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from knowledge_store.engines.sql.aggregate import bucket_key, bucket_keys, shape_rows
from knowledge_store.engines.sql.dialect import SQLITE
from knowledge_store.errors import BoundExceeded, InvalidRequest, UnknownField
from knowledge_store.model import DIMENSIONS, METRICS, AggregateSpec, Filters
from knowledge_store.store import KnowledgeStore
from tests.fields_estate import RECORDS, fields_store, visible_records

__all__ = ["fields_store"]


# -- the catalog --------------------------------------------------------------------------------
def test_unknown_metric_or_dimension_lists_the_catalog() -> None:
    with pytest.raises(UnknownField) as info:
        AggregateSpec.of("sum", None)
    assert info.value.details["metrics"] == list(METRICS)
    assert all(m in info.value.message for m in METRICS)
    with pytest.raises(UnknownField) as info:  # a declared facet's name, on a store with none
        AggregateSpec.of("count", "author").resolve({})
    assert info.value.details["dimensions"] == list(DIMENSIONS)
    with pytest.raises(UnknownField) as info:  # a name no facet can have
        AggregateSpec.of("count", "Author")
    assert info.value.details["dimensions"] == list(DIMENSIONS)
    with pytest.raises(UnknownField, match="created_at:day"):
        AggregateSpec.of("count", "created_at")  # a trend needs a granularity
    with pytest.raises(UnknownField):
        AggregateSpec.of("count", "created_at:year")


def test_every_catalog_entry_is_accepted() -> None:
    for metric in METRICS:
        for dimension in (None, *DIMENSIONS):
            spec = AggregateSpec.of(metric, dimension)
            assert spec.metric == metric and spec.dimension == dimension


# -- buckets ------------------------------------------------------------------------------------
def test_iso_week_keys_around_new_year() -> None:
    assert bucket_key("2023-01-01T00:00:00Z", "week") == "2022-W52"  # a Sunday
    assert bucket_key("2024-12-30T10:00:00Z", "week") == "2025-W01"  # a Monday
    assert bucket_key("2020-12-31T00:00:00Z", "week") == "2020-W53"
    assert bucket_key("2024-05-01T00:00:00Z", "month") == "2024-05"
    assert bucket_key("2024-05-01T23:59:59Z", "day") == "2024-05-01"


_days = st.dates(min_value=date(1990, 1, 1), max_value=date(2060, 12, 31))


@given(day=_days)
@settings(max_examples=300, deadline=None)
def test_sql_bucket_expression_matches_python(day: date) -> None:
    """The SQLite week expression (no %V in SQLite < 3.46) equals date.isocalendar()."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE e (created_at TEXT)")
    stamp = f"{day.isoformat()}T12:34:56Z"
    conn.execute("INSERT INTO e VALUES (?)", (stamp,))
    for gran in ("day", "week", "month"):
        sql = SQLITE.bucket("e.created_at", gran)
        (got,) = conn.execute(f"SELECT {sql} FROM e AS e").fetchone()
        assert got == bucket_key(stamp, gran)
    iso = day.isocalendar()
    assert bucket_key(stamp, "week") == f"{iso.year:04d}-W{iso.week:02d}"


@given(first=_days, span=st.integers(min_value=0, max_value=800))
@settings(max_examples=150, deadline=None)
def test_bucket_keys_are_every_bucket_once_in_order(first: date, span: int) -> None:
    last = first + timedelta(days=span)
    for gran in ("day", "week", "month"):
        lo = bucket_key(first.isoformat(), gran)
        hi = bucket_key(last.isoformat(), gran)
        keys = list(bucket_keys(lo, hi, gran))
        # independent: walk day by day and keep each new key
        walked: list[str] = []
        d = first
        while d <= last:
            key = bucket_key(d.isoformat(), gran)
            if not walked or walked[-1] != key:
                walked.append(key)
            d += timedelta(days=1)
        assert keys == walked


def test_shape_rows_zero_fills_and_puts_nulls_last() -> None:
    spec = AggregateSpec.of("count", "created_at:month")
    rows = shape_rows(spec, {"2024-01": 2, "2024-04": 1, None: 3}, Filters())
    assert rows == [("2024-01", 2), ("2024-02", 0), ("2024-03", 0), ("2024-04", 1), (None, 3)]
    ranged = Filters.build(created_from="2023-12-15", created_to="2024-02-01")
    assert shape_rows(spec, {"2024-01": 2}, ranged) == [
        ("2023-12", 0),
        ("2024-01", 2),
        ("2024-02", 0),
    ]
    assert shape_rows(spec, {}, Filters()) == []
    by_type = AggregateSpec.of("count", "type")
    assert shape_rows(by_type, {"page": 2, "ticket": 5, "chapter": 2}, Filters()) == [
        ("ticket", 5),
        ("chapter", 2),
        ("page", 2),
    ]
    with pytest.raises(BoundExceeded, match="created_at:week"):
        shape_rows(
            AggregateSpec.of("count", "created_at:day"),
            {},
            Filters.build(created_from="1900-01-01", created_to="2024-01-01"),
        )


# -- the engine against an oracle ---------------------------------------------------------------
_TYPES = sorted({r["type"] for r in RECORDS})
_SOURCES = sorted({r["source"] for r in RECORDS})
_STATUSES = sorted({r["status"] for r in RECORDS})
_BOUNDS = [None, "2023-01-01", "2023-06-02", "2023-12-31", "2024-01-07", "2024-03-04", "2024-06-01"]


def _stamp(value: str | None) -> str | None:
    return None if value is None else f"{value}T00:00:00Z"


def _passes(record: dict[str, Any], f: Filters) -> bool:
    if f.values("type") and record["type"] not in f.values("type"):
        return False
    if record["type"] in f.excluded("type"):
        return False
    if f.values("source") and record["source"] not in f.values("source"):
        return False
    if f.values("status") and record["status"] not in f.values("status"):
        return False
    if f.values("uid") and record["uid"] not in f.values("uid"):
        return False
    for field, lo, hi in (
        ("created_at", *f.range("created_at")),
        ("updated_at", *f.range("updated_at")),
    ):
        value = _stamp(record[field])
        if (lo is not None or hi is not None) and value is None:
            return False
        if lo is not None and value is not None and value < lo:
            return False
        if hi is not None and value is not None and value > hi:
            return False
    return True


def _oracle(
    principal: str, metric: str, dimension: str | None, f: Filters
) -> list[tuple[str | None, int]]:
    """Plain Python over the visible records: group, then fill every bucket day by day."""
    rows = [r for r in visible_records(principal) if _passes(r, f)]

    def value(group: list[dict[str, Any]]) -> int:
        if metric == "count":
            return len(group)
        return len({r[metric.split(":")[1]] for r in group})

    if dimension is None:
        return [(None, value(rows))]
    field, _, gran = dimension.partition(":")
    groups: dict[str | None, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        key = (
            r.get(field, "")
            if not gran
            else (None if r[field] is None else bucket_key(r[field], gran))
        )  # type: ignore[arg-type]
        groups[key].append(r)
    if not gran:
        return sorted(((k, value(g)) for k, g in groups.items()), key=lambda kv: (-kv[1], kv[0]))
    lo, hi = f.range(field)
    dates = sorted(r[field] for r in rows if r[field] is not None)
    start = date.fromisoformat((lo or (dates[0] if dates else "9999-12-31"))[:10])
    end = date.fromisoformat((hi or (dates[-1] if dates else "0001-01-01"))[:10])
    out: list[tuple[str | None, int]] = []
    d = start
    while d <= end:
        key = bucket_key(d.isoformat(), gran)  # type: ignore[arg-type]
        if not out or out[-1][0] != key:
            out.append((key, value(groups.get(key, []))))
        d += timedelta(days=1)
    if groups.get(None):
        out.append((None, value(groups[None])))
    return out


@st.composite
def _filters(draw: st.DrawFn) -> Filters:
    def some(values: list[str]) -> list[str]:
        return draw(st.lists(st.sampled_from(values), unique=True, max_size=2))

    bounds = [draw(st.sampled_from(_BOUNDS)) for _ in range(4)]
    if bounds[0] and bounds[1]:
        assume(bounds[0] <= bounds[1])
    if bounds[2] and bounds[3]:
        assume(bounds[2] <= bounds[3])
    return Filters.build(
        type=some(_TYPES),
        not_type=draw(st.sampled_from([[], ["codeSample"], ["ticket"]])),
        source=some(_SOURCES),
        status=some(_STATUSES),
        created_from=bounds[0],
        created_to=bounds[1],
        updated_from=bounds[2],
        updated_to=bounds[3],
    )


@given(
    principal=st.sampled_from(["everyone", "user:sam", "user:fay"]),
    metric=st.sampled_from(METRICS),
    dimension=st.sampled_from([None, *DIMENSIONS]),
    filters=_filters(),
)
@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_aggregate_equals_the_oracle_over_visible_records(
    fields_store: KnowledgeStore,
    principal: str,
    metric: str,
    dimension: str | None,
    filters: Filters,
) -> None:
    answer = fields_store.aggregate(metric, dimension, identity=principal, filters=filters)
    assert answer.pairs() == _oracle(principal, metric, dimension, filters)
    assert answer.metric == metric and answer.dimension == dimension


def test_counts_never_reveal_hidden_entities(fields_store: KnowledgeStore) -> None:
    total = fields_store.aggregate("count").pairs()
    assert total == [(None, len(visible_records("everyone")))]
    by_source = dict(fields_store.aggregate("count", "source").pairs())
    assert "finance" not in by_source  # ticket:3 is finance-only
    assert (
        dict(fields_store.aggregate("count", "source", identity="user:fay").pairs())["finance"] == 1
    )
    # doc:hidden (empty ACL) is counted for nobody
    for who in ("everyone", "user:sam", "user:fay"):
        drafts = fields_store.aggregate("count", identity=who, filters={"status": "draft"}).pairs()
        assert drafts == [(None, 2)]


def test_trend_returns_every_bucket_with_zeros(fields_store: KnowledgeStore) -> None:
    answer = fields_store.aggregate(
        "count",
        "created_at:month",
        filters={"created_from": "2023-10-01", "created_to": "2024-02-29", "type": "page"},
    )
    assert answer.to_dict()["rows"] == [
        {"key": "2023-10", "value": 0},
        {"key": "2023-11", "value": 1},
        {"key": "2023-12", "value": 1},
        {"key": "2024-01", "value": 2},
        {"key": "2024-02", "value": 1},
    ]
    weeks = fields_store.aggregate("count", "updated_at:week", filters={"type": "ticket"}).pairs()
    assert weeks[0] == ("2024-W02", 1) and len(weeks) == 1  # everyone sees ticket:4 only
    sam_weeks = dict(
        fields_store.aggregate(
            "count", "updated_at:week", identity="user:sam", filters={"type": "ticket"}
        ).pairs()
    )
    keys = list(sam_weeks)
    assert keys[0] == "2024-W02" and keys[-1] == "2024-W19"
    assert sum(sam_weeks.values()) == 3 and sam_weeks["2024-W10"] == 0
    # the undated glossary falls in the null bucket, listed last
    days = fields_store.aggregate("count", "created_at:day", filters={"source": "wiki"}).pairs()
    assert days[-1] == (None, 1) and days[0] == ("2024-01-01", 1)


def test_bad_aggregate_requests(fields_store: KnowledgeStore) -> None:
    with pytest.raises(UnknownField):
        fields_store.aggregate("avg")
    with pytest.raises(UnknownField):
        fields_store.aggregate("count", "owner")
    with pytest.raises(InvalidRequest, match="swap them"):
        fields_store.aggregate(
            "count", filters={"updated_from": "2024-02-01", "updated_to": "2024-01-01"}
        )
    with pytest.raises(UnknownField):
        fields_store.aggregate("count", filters={"title": "x"})


def test_cli_aggregate_json_shape(fields_store: KnowledgeStore) -> None:
    import json

    from typer.testing import CliRunner

    from knowledge_store.surfaces.cli import app

    base = ["--store", str(fields_store.engine.path)]  # type: ignore[attr-defined]
    result = CliRunner().invoke(app, [*base, "aggregate", "count", "--by", "type", "--json"])
    assert result.exit_code == 0, result.stdout
    payload = json.loads(result.stdout)
    assert set(payload) == {"content_root", "metric", "dimension", "rows"}
    assert payload["dimension"] == "type" and payload["rows"][0] == {"key": "page", "value": 9}
    result = CliRunner().invoke(app, [*base, "aggregate", "median", "--json"])
    assert result.exit_code == 2
    assert json.loads(result.stdout)["error"]["code"] == "unknown_field"
    result = CliRunner().invoke(app, [*base, "aggregate", "count", "--by", "created_at:week"])
    assert result.exit_code == 0 and "2024-W01" in result.stdout
