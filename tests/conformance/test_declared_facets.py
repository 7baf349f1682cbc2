"""Declared facets (issue 31 item 4): an operator's own fields, from ``attributes``, as filters
and aggregate dimensions on both engines — no code changed.

A keyword, a date and a number facet are declared on a store of random records; every
filter and aggregate over them agrees with a reference computed from the records'
attributes (hypothesis), in every ranked list (sql, lexical, vector, fused search) and on
both engines. The values follow every publish (an update, a delete, a new entity); the
backfill is one transaction (a reader opened before it does not see the facet); names
that clash are refused; values are bound, never spliced.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from knowledge_store.errors import InvalidRequest, NotFound, UnknownField
from knowledge_store.model.declared import DeclaredFacet, facet_values
from knowledge_store.store import KnowledgeStore
from tests.conftest import EngineUnderTest

TEAMS = ("search", "infra", "docs", "o'brien; DROP TABLE entities; --")
FACETS = (
    DeclaredFacet("team", "keyword"),
    DeclaredFacet("deadline", "date"),
    DeclaredFacet("priority", "number"),
)


def _records(seed: int, count: int = 60) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        attributes: dict[str, Any] = {"owner": f"user{i % 4}"}
        if rng.random() < 0.85:
            attributes["team"] = (
                rng.sample(TEAMS, rng.randint(1, 2)) if rng.random() < 0.3 else rng.choice(TEAMS)
            )
        if rng.random() < 0.8:
            attributes["deadline"] = rng.choice(
                [f"2024-{m:02d}-{d:02d}" for m in range(1, 13) for d in (1, 15, 28)] + ["soon"]
            )
        if rng.random() < 0.8:
            attributes["priority"] = rng.choice([1, 2, 3, 4.5, "5", True, None])
        out.append(
            {
                "uid": f"item:{i:03d}",
                "type": rng.choice(["page", "ticket"]),
                "title": f"Item {i}",
                "body": f"# Item {i}\n\nreplication lag alpha beta {rng.choice(['gamma', 'delta'])}",
                "attributes": attributes,
                "acl": ["everyone"] if i % 5 else ["group:hidden"],
            }
        )
    return out


@pytest.fixture
def faceted(engine: EngineUnderTest, embedder: Any) -> Iterator[tuple[KnowledgeStore, list[Any]]]:
    records = _records(31)
    with engine.open(embedder) as store:
        store.ingest_records(records)
        for facet in FACETS:
            store.declare_facet(facet.name, facet.kind)
        yield store, records


def _values(record: dict[str, Any], name: str) -> list[tuple[str, float | None]]:
    facet = next(f for f in FACETS if f.name == name)
    return facet_values(record["attributes"], facet)


def _expected(records: list[dict[str, Any]], filters: dict[str, Any]) -> set[str]:
    out = set()
    for record in records:
        if "everyone" not in record["acl"]:
            continue
        teams = {t for t, _ in _values(record, "team")}
        if "team" in filters and not teams & set(filters["team"]):
            continue
        if "not_team" in filters and teams & set(filters["not_team"]):
            continue
        dates = [t for t, _ in _values(record, "deadline")]
        low, high = filters.get("deadline_from"), filters.get("deadline_to")
        if (low or high) and not any(
            (low is None or d >= f"{low}T00:00:00Z") and (high is None or d <= f"{high}T23:59:59Z")
            for d in dates
        ):
            continue
        numbers = [n for _, n in _values(record, "priority") if n is not None]
        low, high = filters.get("priority_from"), filters.get("priority_to")
        if (low is not None or high is not None) and not any(
            (low is None or n >= low) and (high is None or n <= high) for n in numbers
        ):
            continue
        out.add(record["uid"])
    return out


_dates = st.sampled_from([f"2024-{m:02d}-{d:02d}" for m in range(1, 13) for d in (1, 14, 28)])
_filters = st.fixed_dictionaries(
    {},
    optional={
        "team": st.lists(st.sampled_from(TEAMS), min_size=1, max_size=2),
        "not_team": st.lists(st.sampled_from(TEAMS), min_size=1, max_size=1),
        "deadline_from": _dates,
        "deadline_to": _dates,
        "priority_from": st.sampled_from([1, 2, 3.5]),
        "priority_to": st.sampled_from([2, 4.5, 5]),
    },
).filter(
    lambda f: (
        f.get("deadline_from", "") <= f.get("deadline_to", "9")
        and f.get("priority_from", 0) <= f.get("priority_to", 9)
    )
)


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(filters=_filters)
def test_every_ranked_list_filters_by_declared_facets_as_the_reference(
    faceted: tuple[KnowledgeStore, list[Any]], filters: dict[str, Any]
) -> None:
    store, records = faceted
    expected = _expected(records, filters)
    assert {h.uid for h in store.sql(filters=filters, k=1000).hits} == expected
    for found in (
        store.lexical("replication lag", filters=filters, k=1000).hits,
        store.vector("replication lag alpha", filters=filters, k=1000).hits,
    ):
        assert {h.uid for h in found} == expected
    if filters:
        fused = store.search("replication lag", filters=filters, k=100).results
        assert {r.uid for r in fused} == expected


def test_declared_facets_are_aggregate_dimensions(
    faceted: tuple[KnowledgeStore, list[Any]],
) -> None:
    store, records = faceted
    readable = [r for r in records if "everyone" in r["acl"]]
    teams = Counter(t for r in readable for t, _ in _values(r, "team"))
    teams[None] = sum(1 for r in readable if not _values(r, "team"))  # type: ignore[index]
    assert dict(store.aggregate("count", "team").pairs()) == {k: v for k, v in teams.items() if v}
    numbers = Counter(t for r in readable for t, _ in _values(r, "priority"))
    got = dict(store.aggregate("count", "priority").pairs())
    assert {k: v for k, v in got.items() if k is not None} == dict(numbers)
    months = Counter(t[:7] for r in readable for t, _ in _values(r, "deadline"))
    trend = store.aggregate(
        "count",
        "deadline:month",
        filters={"deadline_from": "2024-03-01", "deadline_to": "2024-06-30"},
    ).pairs()
    assert trend == [(m, months.get(m, 0)) for m in ("2024-03", "2024-04", "2024-05", "2024-06")]
    by_type = store.aggregate("count_distinct:type", "team", filters={"type": "ticket"}).pairs()
    assert all(v <= 1 for _, v in by_type)


def test_values_follow_every_publish(faceted: tuple[KnowledgeStore, list[Any]]) -> None:
    store, records = faceted
    store.ingest_records(
        [
            {**records[1], "attributes": {"team": "newteam", "priority": 9}},
            {**records[2], "uid": "item:new", "attributes": {"team": ["newteam", "infra"]}},
        ]
    )
    assert {h.uid for h in store.sql(filters={"team": "newteam"}).hits} == {"item:001", "item:new"}
    assert [h.uid for h in store.sql(filters={"priority_from": 9}).hits] == ["item:001"]
    store.delete(["item:new"])
    assert {h.uid for h in store.sql(filters={"team": "newteam"}).hits} == {"item:001"}
    # a record without the attribute has no value: none of the facet's filters match it
    store.ingest_records([{**records[1], "attributes": {}}])
    assert store.sql(filters={"team": "newteam"}).hits == []
    info = {f.name: f for f in store.facets().facets}
    assert info["team"].entities == sum(
        1 for r in records if r["uid"] != "item:001" and _values(r, "team")
    )


def test_the_backfill_is_one_transaction(engine: EngineUnderTest, embedder: Any) -> None:
    """A reader that opened before the facet was declared reads the store without it (its
    snapshot); one opened after reads every value."""
    with engine.open(embedder) as store:
        store.ingest_records(_records(7))
        declared = threading.Event()
        with store.reader() as before:
            thread = threading.Thread(
                target=lambda: (store.declare_facet("team", "keyword"), declared.set())
            )
            thread.start()
            assert declared.wait(timeout=60)
            thread.join()
            with pytest.raises(UnknownField, match="unknown filter 'team'"):
                before.sql({"team": "search"})
        with store.reader() as after:
            assert after.sql({"team": "search"}, k=100).hits
        assert store.content_root() == store.content_root()  # no entity changed


def test_names_that_clash_are_refused(faceted: tuple[KnowledgeStore, list[Any]]) -> None:
    store, _ = faceted
    for name, kind, says in [
        ("type", "keyword", "'not_type', which is a built-in"),
        ("status", "keyword", "'status', which is a built-in"),
        ("created", "date", "'created', which is a built-in"),
        ("title", "keyword", "'title', which is a built-in"),
        ("acl", "keyword", "'acl', which is a built-in"),
        ("team", "keyword", "already declared"),
        ("not_team", "keyword", "the declared keyword facet 'team'"),
        ("deadline_from", "keyword", "the declared date facet 'deadline'"),
        ("Team", "keyword", "lowercase letters"),
        ("owner", "colour", "unknown kind 'colour'"),
    ]:
        with pytest.raises(InvalidRequest, match=says):
            store.declare_facet(name, kind)
    with pytest.raises(UnknownField, match="team, not_team"):
        store.sql(filters={"teem": "search"})
    with pytest.raises(InvalidRequest, match="takes a number"):
        store.sql(filters={"priority_from": "high"})
    with pytest.raises(InvalidRequest, match="not an ISO 8601 date"):
        store.sql(filters={"deadline_to": "soon"})
    with pytest.raises(UnknownField, match="needs a granularity: deadline:day"):
        store.aggregate("count", "deadline")
    store.remove_facet("team")
    with pytest.raises(UnknownField, match="unknown filter 'team'"):
        store.sql(filters={"team": "search"})
    with pytest.raises(NotFound):
        store.remove_facet("team")
    store.declare_facet("team", "keyword")  # declared again: filled again
    assert store.sql(filters={"team": TEAMS[3]}, k=100).hits


def test_values_are_bound_never_spliced(faceted: tuple[KnowledgeStore, list[Any]]) -> None:
    store, records = faceted
    hostile = TEAMS[3]
    found = {h.uid for h in store.sql(filters={"team": hostile}, k=1000).hits}
    assert found == _expected(records, {"team": [hostile]}) != set()
    assert store.stats().entities == len(records)  # nothing was dropped


def test_a_facet_reads_the_attribute_it_names(faceted: tuple[KnowledgeStore, list[Any]]) -> None:
    """A camelCase key (``docbookClass``) is read under a name of the facet's own."""
    store, records = faceted
    with pytest.raises(InvalidRequest, match="lowercase letters"):
        store.declare_facet("ownerName", "keyword")
    info = store.declare_facet("owner_name", "keyword", attribute="owner").facets
    assert next(f for f in info if f.name == "owner_name").attribute == "owner"
    found = {h.uid for h in store.sql(filters={"owner_name": "user1"}, k=1000).hits}
    assert found == {
        r["uid"] for r in records if r["attributes"]["owner"] == "user1" and "everyone" in r["acl"]
    }
    assert "owner" not in {f.name for f in store.facets().facets}
