"""record_to_entity: canonical records → entities, bad ones → rejections that say what to fix."""

from __future__ import annotations

from typing import Any

import pytest

from knowledge_store.errors import InvalidRecord, InvalidRequest, Rejection
from knowledge_store.ingest.records import MAX_BODY_CHARS, RECORD_KEYS, record_to_entity
from knowledge_store.model import LABELS, MAX_UID_CHARS, Edge


def good(**changes: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "uid": "doc:1",
        "type": "page",
        "title": "Vacuum",
        "body": "# Vacuum\n\nVACUUM reclaims storage.",
        "acl": ["everyone"],
    }
    record.update(changes)
    return {k: v for k, v in record.items() if v is not Ellipsis}


def build(record: object, default_acl: list[str] | None = None, source: str | None = None) -> Any:
    return record_to_entity(record, file="in.jsonl", line=7, default_acl=default_acl, source=source)


def rejection(record: object, default_acl: list[str] | None = None) -> Rejection:
    with pytest.raises(InvalidRecord) as caught:
        build(record, default_acl)
    found = caught.value.rejection
    assert (found.file, found.line) == ("in.jsonl", 7)
    return found


def test_a_full_record_becomes_an_entity() -> None:
    entity = build(
        {
            "uid": "doc:1",
            "type": "page",
            "title": "Vacuum",
            "body": "text",
            "source": "docs",
            "status": "published",
            "created_at": "2024-05-01",
            "updated_at": "2024-05-02T12:30:00+02:00",
            "href": "/vacuum",
            "attributes": {"version": "15", "tags": ["a"]},
            "edges": [
                {"label": "partOf", "to": "book", "position": 2},
                {"label": "xref", "to": "doc:2"},
            ],
            "acl": ["group:b", "everyone", "group:b", "user:ann"],
        }
    )
    assert entity.uid == "doc:1"
    assert (entity.type, entity.title, entity.body) == ("page", "Vacuum", "text")
    assert (entity.source, entity.status, entity.href) == ("docs", "published", "/vacuum")
    assert entity.created_at == "2024-05-01T00:00:00Z"
    assert entity.updated_at == "2024-05-02T10:30:00Z"
    assert entity.attributes == {"version": "15", "tags": ["a"]}
    assert entity.edges == (
        Edge("doc:1", "partOf", "book", 2),
        Edge("doc:1", "xref", "doc:2", None),
    )
    assert entity.acl == ("everyone", "group:b", "user:ann")


def test_optional_fields_default_to_empty() -> None:
    entity = build(good())
    assert (entity.source, entity.status, entity.href) == ("", "", None)
    assert (entity.created_at, entity.updated_at, entity.attributes, entity.edges) == (
        None,
        None,
        {},
        (),
    )


@pytest.mark.parametrize("field", ["uid", "type", "title", "body"])
def test_a_missing_required_field_is_rejected(field: str) -> None:
    found = rejection(good(**{field: ...}))
    assert found.field == field
    assert f"'{field}' is missing" in found.message
    assert "non-empty string" in found.message


@pytest.mark.parametrize("field", ["uid", "type", "title", "body"])
@pytest.mark.parametrize("value", ["", "   ", 3, None, ["x"]])
def test_a_required_field_must_be_a_non_empty_string(field: str, value: object) -> None:
    found = rejection(good(**{field: value}))
    assert found.field == field
    assert "non-empty string" in found.message


def test_the_rejection_names_the_uid_when_it_is_known() -> None:
    assert rejection(good(title="")).uid == "doc:1"
    assert rejection(good(uid=..., title="")).uid is None


def test_a_body_over_the_limit_is_rejected_saying_the_limit() -> None:
    found = rejection(good(body="x" * (MAX_BODY_CHARS + 1)))
    assert found.field == "body"
    assert "1,000,000" in found.message and "1,000,001" in found.message
    assert build(good(body="x" * MAX_BODY_CHARS)).body == "x" * MAX_BODY_CHARS


def test_a_long_uid_or_one_with_control_characters_is_rejected() -> None:
    assert f"limit is {MAX_UID_CHARS}" in rejection(good(uid="u" * (MAX_UID_CHARS + 1))).message
    assert build(good(uid="u" * MAX_UID_CHARS)).uid == "u" * MAX_UID_CHARS
    assert "control characters" in rejection(good(uid="a\nb")).message


def test_an_unknown_key_is_rejected_naming_it_and_the_allowed_keys() -> None:
    found = rejection(good(mentions=["x"]))
    assert found.field == "mentions"
    assert "'mentions'" in found.message
    assert all(key in found.message for key in RECORD_KEYS)


def test_an_unknown_edge_label_is_rejected_listing_the_nine() -> None:
    found = rejection(
        good(edges=[{"label": "partOf", "to": "b"}, {"label": "mentions", "to": "b"}])
    )
    assert found.field == "edges[1].label"
    assert "'mentions'" in found.message or '"mentions"' in found.message
    assert all(label in found.message for label in LABELS)


@pytest.mark.parametrize(
    ("edge", "field"),
    [
        ({"label": "xref", "to": ""}, "edges[0].to"),
        ({"label": "xref"}, "edges[0].to"),
        ({"label": "xref", "to": 5}, "edges[0].to"),
        ({"label": "xref", "to": "b", "position": "2"}, "edges[0].position"),
        ({"label": "xref", "to": "b", "position": True}, "edges[0].position"),
        ({"label": "xref", "to": "b", "weight": 1}, "edges[0].weight"),
        ({"label": "xref", "to": "doc:1"}, "edges[0].to"),
        ("b", "edges[0]"),
    ],
)
def test_a_bad_edge_is_rejected(edge: object, field: str) -> None:
    assert rejection(good(edges=[edge])).field == field


def test_edges_must_be_a_list() -> None:
    assert rejection(good(edges={"label": "xref", "to": "b"})).field == "edges"


def test_a_repeated_edge_is_kept_once_and_conflicting_positions_are_rejected() -> None:
    same = [{"label": "xref", "to": "b"}, {"label": "xref", "to": "b", "position": None}]
    assert build(good(edges=same)).edges == (Edge("doc:1", "xref", "b"),)
    clash = [
        {"label": "partOf", "to": "b", "position": 1},
        {"label": "partOf", "to": "b", "position": 2},
    ]
    assert "positions 1 and 2" in rejection(good(edges=clash)).message


@pytest.mark.parametrize("field", ["created_at", "updated_at"])
@pytest.mark.parametrize("value", ["yesterday", "2024-13-01", "01/05/2024", 20240501, ""])
def test_an_invalid_date_is_rejected_saying_the_expected_form(field: str, value: object) -> None:
    found = rejection(good(**{field: value}))
    assert found.field == field
    assert "ISO 8601" in found.message and "2024-05-01" in found.message


def test_dates_are_normalised_to_utc() -> None:
    entity = build(good(created_at="2024-05-01T23:30:00-02:00", updated_at="2024-05-01T08:00:00Z"))
    assert entity.created_at == "2024-05-02T01:30:00Z"
    assert entity.updated_at == "2024-05-01T08:00:00Z"


def test_no_acl_and_no_default_is_rejected() -> None:
    found = rejection(good(acl=...))
    assert found.field == "acl"
    assert "no acl and no default acl" in found.message
    assert '"acl": [...]' in found.message and "--" not in found.message


def test_no_acl_takes_the_default_sorted_and_deduplicated() -> None:
    entity = build(good(acl=...), default_acl=["group:b", "everyone", "group:b"])
    assert entity.acl == ("everyone", "group:b")


def test_an_explicit_acl_wins_over_the_default_and_may_be_empty() -> None:
    assert build(good(acl=["user:ann"]), default_acl=["everyone"]).acl == ("user:ann",)
    assert build(good(acl=[]), default_acl=["everyone"]).acl == ()


@pytest.mark.parametrize("acl", [["admins"], ["user:"], [3], "everyone"])
def test_a_bad_acl_is_rejected(acl: object) -> None:
    assert rejection(good(acl=acl)).field == "acl"


def test_a_bad_default_acl_is_a_request_error() -> None:
    with pytest.raises(InvalidRequest):
        build(good(acl=...), default_acl=["admins"])


def test_the_source_argument_overrides_the_record() -> None:
    assert build(good(source="wiki"), source="docs").source == "docs"
    assert build(good(source="wiki")).source == "wiki"
    assert build(good(), source="docs").source == "docs"


@pytest.mark.parametrize("attributes", [[1, 2], "x", {"n": float("nan")}, {"d": {1, 2}}])
def test_attributes_must_be_a_json_object(attributes: object) -> None:
    assert rejection(good(attributes=attributes)).field == "attributes"


@pytest.mark.parametrize("field", ["source", "status", "href"])
def test_optional_strings_must_be_strings(field: str) -> None:
    assert rejection(good(**{field: 5})).field == field


@pytest.mark.parametrize("record", [[], "text", 5, None])
def test_a_record_must_be_an_object(record: object) -> None:
    assert "JSON object" in rejection(record).message


def test_the_rejection_describes_file_line_uid_and_field() -> None:
    with pytest.raises(InvalidRecord) as caught:
        build(good(edges=[{"label": "mentions", "to": "b"}]))
    message = caught.value.message
    assert "in.jsonl:7" in message and "doc:1" in message and "edges[0].label" in message


def test_the_documented_record_limits_are_the_declared_ones() -> None:
    """docs/records.md "Limits and names" names each bound of model.py beside its value."""
    import re
    from pathlib import Path

    from knowledge_store import model

    text = (Path(__file__).resolve().parents[2] / "docs" / "records.md").read_text()
    found = {
        name: int(number.replace(",", ""))
        for number, name in re.findall(r"([\d,]+)[A-Za-z\s]*\(`(MAX_\w+)`[);]", text)
    }
    assert found == {name: getattr(model, name) for name in found}
    record_bounds = {
        "MAX_UID_CHARS",
        "MAX_NAME_CHARS",
        "MAX_TITLE_CHARS",
        "MAX_BODY_CHARS",
        "MAX_HREF_BYTES",
        "MAX_DATE_CHARS",
        "MAX_ATTRIBUTES_BYTES",
        "MAX_ATTRIBUTE_DEPTH",
        "MAX_EDGES",
        "MAX_EDGE_POSITION",
        "MAX_ACL_PRINCIPALS",
        "MAX_PRINCIPAL_ID_CHARS",
        "MAX_JSON_DEPTH",
        "MAX_CHUNK_CHARS",
    }
    assert record_bounds <= set(found)
