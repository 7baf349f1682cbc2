"""Dates round-trip exactly for every year 0001–9999, on every engine (issue 11, item 1).

The normaliser writes one form (``YYYY-MM-DDTHH:MM:SSZ``, the year four digits),
which sorts as text in time order — the engines' SQL compares it as text, the
lexical index as seconds since the epoch. Years below 1000 were written
unpadded: the lexical index could not parse them back (a wedged store) and
filters compared them wrong.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from knowledge_store.engines.embedded.analysis import epoch
from knowledge_store.model import (
    TIMESTAMP_FORM,
    Filters,
    normalize_timestamp,
    stored_timestamp,
)
from knowledge_store.store import KnowledgeStore

FIRST = datetime(1, 1, 1)
LAST = datetime(9999, 12, 31, 23, 59, 59)
offsets = st.one_of(
    st.none(),
    st.integers(min_value=-23 * 60 - 59, max_value=23 * 60 + 59).map(
        lambda minutes: timezone(timedelta(minutes=minutes))
    ),
)
moments = st.datetimes(min_value=FIRST, max_value=LAST, timezones=offsets)


def _utc(moment: datetime) -> datetime | None:
    """The moment in UTC, whole seconds (None outside the years 0001–9999)."""
    try:
        aware = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    except OverflowError:
        return None
    return aware.replace(microsecond=0)


@settings(max_examples=400, deadline=None)
@given(moments)
def test_every_moment_of_the_years_0001_to_9999_round_trips(moment: datetime) -> None:
    expected = _utc(moment)
    text = moment.isoformat()
    if expected is None:
        with pytest.raises(ValueError, match="0001–9999"):
            normalize_timestamp(text)
        return
    stamp = normalize_timestamp(text)
    assert TIMESTAMP_FORM.fullmatch(stamp), stamp
    assert stored_timestamp(stamp) == expected
    assert normalize_timestamp(stamp) == stamp  # idempotent: a stored stamp is its own form
    # the lexical document's date field: seconds since the epoch, exactly
    assert epoch(stamp) == int(expected.timestamp())


@settings(max_examples=300, deadline=None)
@given(moments, moments)
def test_stamps_sort_as_text_in_time_order(a: datetime, b: datetime) -> None:
    ua, ub = _utc(a), _utc(b)
    assume(ua is not None and ub is not None)
    sa, sb = normalize_timestamp(a.isoformat()), normalize_timestamp(b.isoformat())
    assert (sa < sb) == (ua < ub) and (sa == sb) == (ua == ub)  # type: ignore[operator]


@settings(max_examples=200, deadline=None)
@given(st.dates(min_value=FIRST.date(), max_value=LAST.date()))
def test_a_bare_date_is_its_first_or_last_second(day: object) -> None:
    text = str(day)
    assert normalize_timestamp(text) == f"{text}T00:00:00Z"
    assert normalize_timestamp(text, end_of_day=True) == f"{text}T23:59:59Z"
    assert (
        Filters.build(created_from=text, created_to=text).range("created_at")[1]
        == f"{text}T23:59:59Z"
    )


# -- both engines: what a filter selects is what the dates say ---------------------------------------

_batches = itertools.count()
days = st.dates(min_value=FIRST.date(), max_value=LAST.date()).map(str)


def test_the_issue_record_is_taken_and_every_primitive_answers(store: KnowledgeStore) -> None:
    """``created_at: 0001-01-01`` wedged the embedded store; ``0500-06-01`` as a bound
    returned entities of 2024."""
    store.ingest_records(
        [
            {
                "uid": "legacy:1",
                "type": "page",
                "title": "Legacy",
                "body": "x kiwi",
                "acl": ["everyone"],
                "created_at": "0001-01-01",
                "updated_at": "0499-12-31",
            },
            {
                "uid": "new:1",
                "type": "page",
                "title": "New",
                "body": "y kiwi",
                "acl": ["everyone"],
                "created_at": "2024-05-01",
                "updated_at": "2024-05-02",
            },
        ]
    )
    assert store.stats().entities == 2
    assert [h.created_at for h in store.sql({"uid": ["legacy:1"]}).hits] == ["0001-01-01T00:00:00Z"]
    old = {"updated_to": "0500-06-01"}
    assert [h.uid for h in store.sql(old).hits] == ["legacy:1"]
    assert {h.uid for h in store.lexical("kiwi", filters=Filters.build(**old)).hits} == {"legacy:1"}
    assert {h.uid for h in store.vector("kiwi", filters=Filters.build(**old)).hits} == {"legacy:1"}
    assert [r.uid for r in store.search("kiwi", filters=old).results] == ["legacy:1"]
    month = store.aggregate("count", "created_at:month", filters=old).rows
    assert [(r.key, r.value) for r in month] == [("0001-01", 1)]
    store.delete(["legacy:1"])
    store.rebuild()
    assert [h.uid for h in store.lexical("kiwi").hits] == ["new:1"]


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    stamps=st.lists(days, min_size=1, max_size=6),
    low=days,
    high=days,
)
def test_date_filters_select_the_same_entities_on_every_primitive(
    store: KnowledgeStore, stamps: list[str], low: str, high: str
) -> None:
    low, high = min(low, high), max(low, high)
    batch = next(_batches)
    uids = [f"d{batch}:{i}" for i in range(len(stamps))]
    store.ingest_records(
        [
            {
                "uid": uid,
                "type": "page",
                "title": "Dated",
                "body": "kiwi dated record",
                "acl": ["everyone"],
                "created_at": stamp,
            }
            for uid, stamp in zip(uids, stamps, strict=True)
        ]
    )
    filters = Filters.build(uid=uids, created_from=low, created_to=high)
    expected = {uid for uid, stamp in zip(uids, stamps, strict=True) if low <= stamp <= high}
    assert {h.uid for h in store.sql(filters, k=100).hits} == expected
    assert {h.uid for h in store.lexical("kiwi", k=100, filters=filters).hits} == expected
    assert {h.uid for h in store.vector("kiwi", k=100, filters=filters).hits} == expected
    got = {h.uid: h.created_at for h in store.sql(Filters.build(uid=uids), k=100).hits}
    assert got == {uid: f"{stamp}T00:00:00Z" for uid, stamp in zip(uids, stamps, strict=True)}
