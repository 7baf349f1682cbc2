"""The sql primitive: closed fields, order, ACL inside the statement, typed errors, CLI."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from knowledge_store.errors import InvalidRequest, UnknownField
from knowledge_store.model import MAX_FILTER_VALUES, ORDER_FIELDS, Filters, Order
from knowledge_store.store import KnowledgeStore
from tests.fields_estate import RECORDS, fields_store, visible_records

__all__ = ["fields_store"]


def _uids(answer: Any) -> list[str]:
    return [h.uid for h in answer.hits]


def _stamp(value: str | None) -> str | None:
    return None if value is None else f"{value}T00:00:00Z"


def test_default_order_is_updated_at_desc_then_uid_with_null_dates_last(
    fields_store: KnowledgeStore,
) -> None:
    answer = fields_store.sql(k=100)
    expected = sorted(
        visible_records("everyone"),
        key=lambda r: (r["updated_at"] is None, "" if r["updated_at"] is None else r["updated_at"]),
    )
    # updated_at desc among dated records, ties by uid; undated last
    dated = sorted((r for r in expected if r["updated_at"]), key=lambda r: (r["uid"],))
    dated.sort(key=lambda r: r["updated_at"], reverse=True)
    undated = sorted(r["uid"] for r in expected if not r["updated_at"])
    assert _uids(answer) == [r["uid"] for r in dated] + undated
    assert [h.rank for h in answer.hits] == list(range(1, len(answer.hits) + 1))
    first = answer.hits[0]
    assert first.updated_at == _stamp(dated[0]["updated_at"])
    assert answer.content_root == fields_store.content_root()


@pytest.mark.parametrize(
    ("order", "field", "reverse"),
    [
        ("title", "title", False),
        ("title:desc", "title", True),
        ("created_at:asc", "created_at", False),
        ("created_at", "created_at", True),
        ("updated_at:asc", "updated_at", False),
    ],
)
def test_order_by_each_field(
    fields_store: KnowledgeStore, order: str, field: str, reverse: bool
) -> None:
    hits = fields_store.sql(order=order, k=100).hits
    values = [getattr(h, field) for h in hits if getattr(h, field) is not None]
    if field == "title":  # titles order without regard to case (ASCII A–Z folded)
        values = [v.lower() for v in values]
    assert values == sorted(values, reverse=reverse)
    nulls = [i for i, h in enumerate(hits) if getattr(h, field) is None]
    assert nulls == list(range(len(hits) - len(nulls), len(hits)))  # null dates last


def test_filters_narrow_what_the_acl_allows(fields_store: KnowledgeStore) -> None:
    tickets = {"type": ["ticket"]}
    assert _uids(fields_store.sql(tickets, order="title")) == ["ticket:4"]
    assert set(_uids(fields_store.sql(tickets, identity="user:sam"))) == {
        "ticket:1",
        "ticket:2",
        "ticket:4",
    }
    assert set(_uids(fields_store.sql(tickets, identity="user:fay"))) == {"ticket:3", "ticket:4"}
    # naming a hidden uid does not reveal it
    assert _uids(fields_store.sql({"uid": ["doc:hidden", "ticket:3"]})) == []
    # every filter kind at once
    answer = fields_store.sql(
        {
            "type": "page",
            "not_type": ["codeSample"],
            "source": ["docs", "wiki"],
            "status": ["published"],
            "created_from": "2024-01-01",
            "created_to": "2024-12-31",
            "updated_from": "2024-01-01",
        },
        identity="user:sam",
        order="created_at:asc",
    )
    assert _uids(answer) == [
        "doc:vacuum",
        "doc:monitoring",
        "doc:backup-new",
        "doc:replication-sre",
    ]


def test_long_filter_lists_answer_like_short_ones(fields_store: KnowledgeStore) -> None:
    """A list at its bound is one bound value (a JSON array / a text[]): same answers, any engine."""

    def padded(values: list[str]) -> list[str]:
        return [*values, *(f"nobody:{i}" for i in range(MAX_FILTER_VALUES - len(values)))]

    wanted = ["doc:vacuum", "ticket:4"]
    assert _uids(fields_store.sql({"uid": padded(wanted)}, k=100)) == _uids(
        fields_store.sql({"uid": wanted}, k=100)
    )
    assert _uids(fields_store.sql({"uid": padded(wanted)}, k=100)) != []
    every = fields_store.sql(k=100)
    types = sorted({h.type for h in every.hits})
    assert fields_store.sql({"not_type": padded(types)}, k=100).hits == []
    kept = fields_store.sql({"not_type": padded(["ticket"])}, k=100)
    assert _uids(kept) == [h.uid for h in every.hits if h.type != "ticket"]
    by_type = fields_store.aggregate("count", "type", filters={"type": padded(types)})
    assert sum(value for _, value in by_type.pairs()) == len(every.hits)
    hits = fields_store.lexical("vacuum", k=50, filters=Filters.build(uid=padded(wanted)))
    assert {h.uid for h in hits.hits} <= set(wanted)


def test_k_limits_and_is_bounded(fields_store: KnowledgeStore) -> None:
    assert len(fields_store.sql(k=3).hits) == 3
    for bad in (0, 1001):
        with pytest.raises(InvalidRequest, match="k must be between 1 and 1000"):
            fields_store.sql(k=bad)


def test_unknown_order_field_lists_the_valid_ones(fields_store: KnowledgeStore) -> None:
    with pytest.raises(UnknownField) as info:
        fields_store.sql(order="body:desc")
    assert info.value.code == "unknown_field"
    assert info.value.details["allowed"] == list(ORDER_FIELDS)
    for name in ORDER_FIELDS:
        assert name in info.value.message
    with pytest.raises(InvalidRequest, match="asc or desc"):
        Order.parse("title:sideways")


def test_unknown_filter_name_lists_the_valid_ones(fields_store: KnowledgeStore) -> None:
    with pytest.raises(UnknownField) as info:
        fields_store.sql({"author": "sam"})
    assert "type" in info.value.details["allowed"]
    assert "created_from" in info.value.message
    with pytest.raises(InvalidRequest):
        Filters.of({"type": 3})
    assert Filters.of({"not-type": "codeSample"}) == Filters.build(not_type=("codeSample",))


def test_inverted_date_range_is_a_clear_error(fields_store: KnowledgeStore) -> None:
    with pytest.raises(InvalidRequest, match="swap them"):
        fields_store.sql({"created_from": "2024-05-01", "created_to": "2024-01-01"})
    with pytest.raises(InvalidRequest, match="ISO 8601"):
        fields_store.sql({"updated_to": "last tuesday"})


def test_values_are_bound_never_spliced(fields_store: KnowledgeStore) -> None:
    hostile = "x' OR '1'='1"
    assert (
        fields_store.sql({"type": hostile, "source": ["docs); DROP TABLE entities;--"]}).hits == []
    )
    assert len(fields_store.sql(k=100).hits) == len(visible_records("everyone"))


# -- CLI ---------------------------------------------------------------------------------------
def _cli(store: KnowledgeStore, *args: str) -> tuple[int, Any]:
    from knowledge_store.surfaces.cli import app

    result = CliRunner().invoke(app, ["--store", str(store.engine.path), *args])  # type: ignore[attr-defined]
    return result.exit_code, json.loads(result.stdout) if "--json" in args else result.stdout


def test_cli_sql_json_shape(fields_store: KnowledgeStore) -> None:
    code, payload = _cli(
        fields_store,
        "sql",
        "--type",
        "ticket",
        "--as",
        "user:sam",
        "--order",
        "created_at:asc",
        "--json",
    )
    assert code == 0
    assert set(payload) == {"content_root", "hits"}
    assert [h["uid"] for h in payload["hits"]] == ["ticket:4", "ticket:2", "ticket:1"]
    assert set(payload["hits"][0]) == {
        "uid",
        "title",
        "type",
        "source",
        "status",
        "created_at",
        "updated_at",
        "rank",
    }


def test_cli_sql_errors_exit_2_with_the_error_shape(fields_store: KnowledgeStore) -> None:
    code, payload = _cli(fields_store, "sql", "--order", "body", "--json")
    assert code == 2
    assert payload["error"]["code"] == "unknown_field"
    code, payload = _cli(
        fields_store, "sql", "--created-from", "2024-02-01", "--created-to", "2024-01-01", "--json"
    )
    assert code == 2 and payload["error"]["code"] == "invalid_request"
    code, text = _cli(fields_store, "sql", "--k", "2")
    assert code == 0 and "content root" in text


def test_records_fixture_is_consistent() -> None:
    assert len({r["uid"] for r in RECORDS}) == len(RECORDS)
