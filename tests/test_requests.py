"""The request models: one per operation, bounds from the model, errors in the one tree."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from knowledge_store.errors import BoundExceeded, InvalidRequest, UnknownField, UnknownLabel
from knowledge_store.model import (
    DIMENSIONS,
    FILTER_FIELDS,
    FILTER_NAMES,
    GRAPH_MAX_DEPTH,
    MAX_K,
    MAX_SEARCH_K,
    AggregateSpec,
    Filters,
    Order,
)
from knowledge_store.requests import (
    AggregateRequest,
    GraphRequest,
    SearchRequest,
    SqlRequest,
    VectorRequest,
    request_models,
)
from knowledge_store.store import KnowledgeStore

pytestmark = pytest.mark.embedded_only(
    reason="request parsing at the store boundary, before any engine"
)


def _properties(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = []
    for name, prop in schema.get("properties", {}).items():
        out.append((f"{path}{name}", prop))
        out.extend(_properties(prop, f"{path}{name}."))
    return out


@pytest.mark.parametrize("model", request_models(), ids=lambda m: m.__name__)
def test_every_property_of_every_schema_has_an_explicit_type(model: Any) -> None:
    schema = model.json_schema()
    assert "$defs" not in schema and "$ref" not in str(schema)
    for path, prop in _properties(schema):
        assert "type" in prop, f"{model.__name__}.{path} has no explicit type: {prop}"


def test_the_filters_schema_is_generated_from_the_filter_fields() -> None:
    filters = SearchRequest.json_schema()["properties"]["filters"]
    assert filters["type"] == "object" and list(filters["properties"]) == list(FILTER_NAMES)
    for field in FILTER_FIELDS:
        for name in field.request_names:
            kind = filters["properties"][name]["type"]
            assert kind == ("array" if field.kind == "keyword" else ["string", "null"])


def test_bounds_come_from_the_model() -> None:
    props = SearchRequest.json_schema()["properties"]
    assert props["k"]["maximum"] == MAX_SEARCH_K
    assert GraphRequest.json_schema()["properties"]["depth"]["maximum"] == GRAPH_MAX_DEPTH
    assert SqlRequest.json_schema()["properties"]["k"]["maximum"] == MAX_K
    assert AggregateRequest.json_schema()["properties"]["dimension"]["enum"] == [*DIMENSIONS, None]


@pytest.mark.parametrize(
    ("model", "given", "error", "field"),
    [
        # a name no declared facet can have (a store's own facets are its readers' to resolve)
        (SearchRequest, {"filters": {"created": "sam"}}, UnknownField, "filters.created"),
        (
            SearchRequest,
            {"filters": {"created_from": "May"}},
            InvalidRequest,
            "filters.created_from",
        ),
        (SearchRequest, {"k": MAX_SEARCH_K + 1}, InvalidRequest, "k"),
        (SearchRequest, {"query": "x" * 5000}, BoundExceeded, "query"),
        (SearchRequest, {"mode": "borda"}, InvalidRequest, "mode"),
        (SearchRequest, {"surprise": 1}, InvalidRequest, "surprise"),
        (GraphRequest, {"starts": ["a"], "depth": GRAPH_MAX_DEPTH + 1}, BoundExceeded, "depth"),
        (GraphRequest, {"starts": ["a"], "labels": ["likes"]}, UnknownLabel, "labels"),
        (GraphRequest, {"starts": []}, InvalidRequest, "starts"),
        (SqlRequest, {"order": "body:desc"}, UnknownField, "order"),
        (AggregateRequest, {"metric": "sum"}, UnknownField, "metric"),
        (VectorRequest, {}, InvalidRequest, "query"),
        (VectorRequest, {"query": "x", "vector": [0.0]}, InvalidRequest, "query"),
    ],
)
def test_errors_are_typed_and_name_a_surface_neutral_field(
    model: Any, given: dict[str, Any], error: type[Exception], field: str
) -> None:
    with pytest.raises(error) as caught:
        model.parse(given)
    assert caught.value.details["field"] == field  # type: ignore[attr-defined]
    assert "--" not in caught.value.message  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"query": " "}, "a non-empty text to look for"),
        ({"query": "x", "vector": [0.0]}, "not both"),
    ],
)
def test_a_vector_request_without_one_query_says_which_way_it_is_wrong(
    given: dict[str, Any], says: str
) -> None:
    # one sentence for both ways read "a non-empty text or a query vector (one of them)", and
    # the CLI, respelling the field query as TEXT, printed "… or a TEXT vector"
    with pytest.raises(InvalidRequest) as caught:
        VectorRequest.parse(given)
    assert says in caught.value.message
    assert "query" not in caught.value.message  # the field's name is respelled by each surface


def test_an_item_of_the_wrong_kind_is_named_with_its_position() -> None:
    # REST {"records": [1, {...}]} said "records: Input should be a valid dictionary"
    from knowledge_store.requests.admin import IngestRequest

    with pytest.raises(InvalidRequest) as caught:
        IngestRequest.parse({"records": [{"uid": "a"}, 1]})
    assert caught.value.message == "records[1] must be a JSON object, not 1"
    assert caught.value.details == {"field": "records"}  # the field, as each surface spells it


def test_requests_carry_typed_values() -> None:
    sql = SqlRequest.parse(order="title", filters={"type": "page", "not-type": ["codeSample"]})
    assert sql.order_value == Order("title", "asc")
    assert sql.filters.value == Filters.build(type=["page"], not_type=["codeSample"])
    aggregate = AggregateRequest.parse(metric="count", dimension="created_at:week")
    assert aggregate.spec == AggregateSpec("count", "created_at:week", "created_at", "week")
    graph = GraphRequest.parse(starts="a", labels="partOf", depth=2)
    assert graph.value.starts == ("a",) and graph.value.labels == ("partOf",)


dates = st.none() | st.dates().map(lambda d: d.isoformat())
words = st.lists(st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=8))


@given(
    st.fixed_dictionaries(
        {},
        optional={
            **{n: words for f in FILTER_FIELDS if f.kind == "keyword" for n in f.request_names},
            **{n: dates for f in FILTER_FIELDS if f.kind == "date" for n in f.request_names},
        },
    )
)
def test_filters_are_one_normalised_hashable_value(given: dict[str, Any]) -> None:
    try:
        filters = Filters.of(given)
    except InvalidRequest:
        return  # an inverted range
    again = Filters.of(filters.to_dict())
    assert again == filters and hash(again) == hash(filters)
    assert SearchRequest.parse(query="x", filters=given).filters.value == filters


def test_a_store_method_takes_the_request_or_its_arguments(store: KnowledgeStore) -> None:
    by_request = store.sql(SqlRequest.parse(order="title", k=3))
    by_arguments = store.sql(order="title", k=3)
    assert by_request == by_arguments
