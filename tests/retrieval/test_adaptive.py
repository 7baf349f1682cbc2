"""Query-adaptive fusion weights (retrieval.adaptive)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from knowledge_store.model.queries import STOP_WORDS, unsearched_words
from knowledge_store.retrieval.adaptive import AdaptiveParams, adaptive_weights, query_features


@pytest.mark.parametrize(
    "text",
    [
        "How do I create an AUTOINCREMENT field?",
        "What datatypes does SQLite support?",
        "Is SQLite threadsafe?",
        "how do I find out which queries are running",
        "I asked Git to ignore various files, yet they are still tracked",
        "INSERT is really slow - I can only do few dozen INSERTs per second",
        "Case-insensitive matching of Unicode characters does not work.",
    ],
)
def test_questions_and_long_requests_are_natural_language(text: str) -> None:
    assert query_features(text).natural_language


@pytest.mark.parametrize(
    "text, identifiers",
    [
        ("pg_stat_activity", ("pg_stat_activity",)),
        ("_PG_init", ("_PG_init",)),
        ("$libdir", ("$libdir",)),
        ("http.postBuffer", ("http.postBuffer",)),
        ("sqlite3_busy_timeout()", ("sqlite3_busy_timeout()",)),
        ("IS DISTINCT FROM", ("IS", "DISTINCT", "FROM")),
        ("advisory lock", ()),
    ],
)
def test_keyword_queries_are_not_questions_and_identifiers_are_found(
    text: str, identifiers: tuple[str, ...]
) -> None:
    features = query_features(text)
    assert not features.question and not features.natural_language
    assert features.identifiers == identifiers


def test_a_question_scales_the_lexical_weight_and_says_why() -> None:
    chosen = adaptive_weights(
        "how do I see which queries are running?",
        {"vector": 1.0, "lexical": 1.0, "graph": 0.05},
        AdaptiveParams(question=0.5),
    )
    assert chosen.weights == {"vector": 1.0, "lexical": 0.5, "graph": 0.05}
    explained = chosen.explain()
    assert explained["weights"] == chosen.weights
    assert "question" in str(explained["why"]) and explained["features"]["question"]  # type: ignore[index]


def test_identifiers_scale_lexical_only_outside_a_question() -> None:
    params = AdaptiveParams(question=0.5, identifier=1.5)
    assert adaptive_weights("pg_stat_activity", {"lexical": 1.0}, params).weights == {
        "lexical": 1.5
    }
    inside = adaptive_weights("What is an SQLITE_SCHEMA error?", {"lexical": 1.0}, params)
    assert inside.weights == {"lexical": 0.5}


def test_a_plain_keyword_query_keeps_the_base_weights() -> None:
    chosen = adaptive_weights("advisory lock", {"vector": 1.0, "lexical": 1.0})
    assert chosen.weights == {"vector": 1.0, "lexical": 1.0}
    assert chosen.reasons == ("base weights: keyword-style query without identifiers",)


@given(st.text(max_size=80), st.floats(min_value=0, max_value=10))
def test_only_the_lexical_weight_changes_and_never_grows_for_natural_language(
    text: str, lexical: float
) -> None:
    base = {"vector": 0.7, "lexical": lexical, "graph": 0.05}
    chosen = adaptive_weights(text, base, AdaptiveParams(question=0.5, identifier=1.5))
    assert {k: v for k, v in chosen.weights.items() if k != "lexical"} == {
        "vector": 0.7,
        "graph": 0.05,
    }
    assert chosen.weights["lexical"] >= 0
    if chosen.features.natural_language:
        assert chosen.weights["lexical"] <= lexical
    assert chosen.reasons


@given(
    st.lists(st.sampled_from(STOP_WORDS), min_size=1, max_size=6),
    st.lists(st.sampled_from(["vacuum", "tables", "wal", "pg_hba"]), max_size=2),
    st.sampled_from(["", "?", "!"]),
)
def test_unsearched_words_names_a_query_only_when_the_analysis_drops_every_word(
    stops: list[str], content: list[str], end: str
) -> None:
    """Lucene's stop words are dropped from any query: a query of them alone is named, one
    content word among them makes it searchable."""
    text = " ".join(w.upper() if i % 2 else w for i, w in enumerate(stops + content)) + end
    found = unsearched_words(text)
    if content:
        assert found is None
    else:
        assert found == tuple(dict.fromkeys(stops))


def test_a_questions_function_words_alone_are_unsearched_but_a_keyword_query_keeps_them() -> None:
    assert unsearched_words("how do I?") == ("how", "do", "i")
    assert unsearched_words("WHERE") is None  # a keyword query searches Snowball-only words
    assert unsearched_words("") is None and unsearched_words("&& ||") is None
