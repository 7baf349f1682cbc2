"""The lexical analysis, through each engine's own lexical primitive: both index every word
but Lucene's 33 stop words (``model.queries.STOP_WORDS``), and both search a natural-language
query without its function words (``model.queries.FUNCTION_WORDS``) — so an SQL keyword
(``WHERE``, ``BETWEEN``) is found by itself on either engine, and a question by its content
words. Until schema version 6 PostgreSQL's index dropped Snowball's 127 words: ``WHERE``
found nothing there."""

from __future__ import annotations

from typing import Any

import pytest

from knowledge_store.store import KnowledgeStore

RECORDS: list[dict[str, Any]] = [
    {
        "uid": "sql:between",
        "type": "page",
        "title": "Comparison Predicates",
        "body": "The predicate a BETWEEN x AND y is equivalent to a >= x AND a <= y.",
    },
    {
        "uid": "sql:where",
        "type": "page",
        "title": "The Search Condition",
        "body": "WHERE search_condition keeps the rows of the FROM clause that satisfy it.",
    },
    {
        "uid": "sql:tables",
        "type": "page",
        "title": "Listing Tables",
        "body": "The meta-command lists all tables of the current schema.",
    },
    {
        "uid": "sql:list",
        "type": "page",
        "title": "Lists",
        "body": "A list of settings, and the tables that hold them, each on its own line.",
    },
    {
        "uid": "sql:being",
        "type": "page",
        "title": "Locks",
        "body": "A row being updated waits for a transaction willing to commit.",
    },
]


@pytest.fixture
def sql_store(store: KnowledgeStore) -> KnowledgeStore:
    store.ingest_records([{"acl": ["everyone"], **r} for r in RECORDS])
    return store


def _hits(store: KnowledgeStore, text: str) -> list[tuple[str, float]]:
    return [(h.uid, round(h.score, 9)) for h in store.lexical(text, k=10).hits]


@pytest.mark.parametrize(("keyword", "uid"), [("WHERE", "sql:where"), ("BETWEEN", "sql:between")])
def test_an_sql_keyword_finds_the_page_that_holds_it(
    sql_store: KnowledgeStore, keyword: str, uid: str
) -> None:
    assert [u for u, _ in _hits(sql_store, keyword)] == [uid]
    assert [u for u, _ in _hits(sql_store, keyword.lower())] == [uid]


def test_a_question_is_searched_by_its_content_words_and_a_keyword_query_by_all(
    sql_store: KnowledgeStore,
) -> None:
    question = _hits(sql_store, "how do I list all tables?")
    assert question and question == _hits(sql_store, "list tables")
    # the same words as index terms: ``all`` is searched for, and moves the page holding it
    keywords = _hits(sql_store, "list all tables")
    assert keywords[0][0] == "sql:tables" and keywords != question


def test_lucene_stop_words_are_cut_before_stemming(sql_store: KnowledgeStore) -> None:
    """``being`` stems to ``be`` and ``willing`` to ``will``: both stay terms, though ``be``
    and ``will`` are stop words that no index holds."""
    assert [u for u, _ in _hits(sql_store, "being")] == ["sql:being"]
    assert [u for u, _ in _hits(sql_store, "willing")] == ["sql:being"]
    assert _hits(sql_store, "be") == _hits(sql_store, "will") == []
    assert _hits(sql_store, "the of AND is") == []


@pytest.mark.parametrize(
    ("text", "words"),
    [("the of AND is", "'the', 'of', 'and', 'is'"), ("how do I?", "'how', 'do', 'i'")],
)
def test_a_query_of_stop_words_only_says_why_it_finds_nothing(
    sql_store: KnowledgeStore, text: str, words: str
) -> None:
    """A keyword query of Lucene's stop words, or a question of function words only, has no
    term to look for on either engine: the empty answer says so instead of staying silent."""
    answer = sql_store.lexical(text, k=10)
    assert answer.hits == []
    assert len(answer.warnings) == 1
    assert f"every word of the query ({words}) is a stop word" in answer.warnings[0]
    # a keyword query of Snowball-only words is searched (WHERE), and a miss says nothing
    assert sql_store.lexical("WHERE", k=10).warnings == ()
    assert sql_store.lexical("zebra", k=10).warnings == ()
