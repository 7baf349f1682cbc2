"""PostgreSQL's lexical analysis against the embedded engine's, the reference, on a real
PostgreSQL: the same terms for a word, a text, a question, an identifier — and schema
version 6, which re-derives a version-5 store's analysis in place.

Both index every word but Lucene's 33 stop words (``model.queries.STOP_WORDS``) and search
a natural-language query without its function words (``FUNCTION_WORDS``); PostgreSQL's
query terms are read here through the statement ``lexical.lexical_statement`` builds, so the
question/keyword decision is the one the engine makes. What they do not share: the tokenizer
(PostgreSQL's parser keeps ``user.name`` or ``tables/indices`` whole, and the engine joins
``_``-parts; Tantivy cuts at ``\\W``) and the Snowball stemmer's version (:data:`STEMMED_APART`)
— so the text property draws plain words whose stems agree.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from knowledge_store.engines.embedded.analysis import Analyzers
from knowledge_store.engines.postgres.engine import PostgresEngine
from knowledge_store.engines.postgres.lexical import lexical_statement
from knowledge_store.engines.postgres.schema import MIGRATIONS
from knowledge_store.model import Filters
from knowledge_store.model.queries import FUNCTION_WORDS, STOP_WORDS
from knowledge_store.store import KnowledgeStore
from tests import postgres_support
from tests.conformance.test_lexical_analysis import RECORDS
from tests.conftest import HASH_SPEC

FIXTURES = Path(__file__).parent / "fixtures"
DOCS = [json.loads(line) for line in (FIXTURES / "pg-docs-sample.jsonl").open(encoding="utf-8")]
#: Every word of the sample pages, and both stop lists.
VOCABULARY = sorted(
    {w.lower() for d in DOCS for w in re.findall(r"[A-Za-z]+", d["body"])}
    | set(FUNCTION_WORDS)
    | set(STOP_WORDS)
)
#: The words of :data:`VOCABULARY` the two Snowball versions stem apart (PostgreSQL 16's, then
#: rust-stemmers' in Tantivy): ``added`` → ``ad`` / ``add``, ``internal`` → ``intern`` / ``internal``.
STEMMED_APART = frozenset(("added", "adding", "internal", "internally", "interval", "universally"))
ANALYZERS = Analyzers()


@pytest.fixture(scope="module")
def database() -> str:
    return postgres_support.fresh_database("postgres_analysis")


@pytest.fixture(scope="module")
def pg(database: str) -> Iterator[KnowledgeStore]:
    store = KnowledgeStore.open(postgres_support.store_url(database), embedder=HASH_SPEC)
    store.ingest_records([{"acl": ["everyone"], **r} for r in RECORDS])
    yield store
    store.close()


def _engine(store: KnowledgeStore) -> PostgresEngine:
    assert isinstance(store.engine, PostgresEngine)
    return store.engine


def _pg_terms(store: KnowledgeStore, text: str) -> tuple[set[str], set[str]]:
    """The word and identifier terms of ``text`` as the engine's BM25 statement analyses it."""
    params = lexical_statement("bm25", ("everyone",), text, 10, Filters()).params
    conn = _engine(store).db.conn()
    words = conn.execute("SELECT term FROM ks_query_words(%(text)s, %(question)s)", params)
    idents = conn.execute("SELECT term FROM ks_query_idents(%(text)s, %(question)s)", params)
    return {str(w) for (w,) in words}, {str(i) for (i,) in idents}


def test_every_word_is_analysed_alike_as_a_keyword_and_in_a_question(
    pg: KnowledgeStore,
) -> None:
    """Over the 2,100 distinct words of the sample pages and both stop lists: PostgreSQL's
    terms of each word are Tantivy's, in a keyword query and in a question, but for the few
    words the two stemmer versions cut apart."""
    conn = _engine(pg).db.conn()
    for question, analyzer in ((False, ANALYZERS.words), (True, ANALYZERS.question_words)):
        rows = conn.execute(
            "SELECT w, ARRAY(SELECT term FROM ks_query_words(w, %s) ORDER BY term)"
            " FROM unnest(%s::text[]) AS w",
            (question, VOCABULARY),
        ).fetchall()
        assert len(rows) == len(VOCABULARY) > 2000
        apart = {w for w, terms in rows if list(terms) != sorted(analyzer.analyze(w))}
        assert apart == STEMMED_APART, question
        dropped = {w for w, terms in rows if not terms}
        assert dropped == set(FUNCTION_WORDS if question else STOP_WORDS)
    kept = {"between", "where", "all", "over", "any", "some", "until", "being", "willing"}
    assert all(_pg_terms(pg, w.upper())[0] for w in kept)


_WORDS = st.sampled_from([w for w in VOCABULARY if w not in STEMMED_APART]).flatmap(
    lambda w: st.sampled_from((w, w.upper(), w.title()))
)
_SEPARATORS = st.sampled_from((" ", "  ", ", ", ". ", "; ", " (", ") ", "\n", ": ", " — "))
_TEXTS = st.builds(
    lambda pieces, end: "".join(w + s for w, s in pieces).strip() + end,
    st.lists(st.tuples(_WORDS, _SEPARATORS), min_size=1, max_size=12),
    st.sampled_from(("", "?", "!")),
)


@settings(max_examples=200)
@given(text=_TEXTS)
def test_a_text_of_plain_words_gives_both_engines_the_same_query_terms(
    pg: KnowledgeStore, text: str
) -> None:
    """Any sequence of plain words — stop words, function words, SQL keywords, in any case and
    punctuation, as a keyword query or a question — is searched by the same terms."""
    terms = ANALYZERS.query_terms(text)
    assert _pg_terms(pg, text) == (set(terms.words), set(terms.idents))


@pytest.mark.parametrize(
    "text",
    [
        "and/or",
        "the/a",
        "to/from",
        "how do I use to/from?",
        "pg_hba.conf and/or ERR-1042",
        "what is x86_64 in $libdir?",
    ],
)
def test_an_identifier_of_stop_words_is_no_identifier_on_either_engine(
    pg: KnowledgeStore, text: str
) -> None:
    """The ident field's query terms: identifiers as written, but none whose words the query's
    analysis drops entirely (``and/or`` matches no and/or; ``to/from`` only as an index term)."""
    assert _pg_terms(pg, text)[1] == set(ANALYZERS.query_terms(text).idents)


def test_ts_rank_cd_follows_the_same_analysis(pg: KnowledgeStore) -> None:
    conn = _engine(pg).db.conn()

    def query(text: str) -> str:
        params = lexical_statement("ts_rank_cd", ("everyone",), text, 10, Filters()).params
        row = conn.execute("SELECT ks_or_query(%(text)s, %(question)s)::text", params).fetchone()
        assert row is not None
        return str(row[0])

    assert query("how do I list all tables?") == query("list tables") == "'list' | 'tabl'"
    assert query("list all tables") == "'list' | 'all' | 'tabl'"
    assert query("BETWEEN") == "'between'"
    engine = PostgresEngine.open(_engine(pg).path, lexical_ranker="ts_rank_cd")
    try:
        store = KnowledgeStore(engine)
        assert [h.uid for h in store.lexical("WHERE", k=3).hits] == ["sql:where"]
        assert [h.uid for h in store.lexical("being", k=3).hits] == ["sql:being"]
        assert store.lexical("the of", k=3).hits == []
    finally:
        engine.close()


def _derived(engine: PostgresEngine) -> tuple[Any, ...]:
    """Everything the lexical analysis derives: each chunk's tsv and field lengths, and the BM25
    statistics."""
    conn = engine.db.conn()
    return (
        conn.execute(
            "SELECT id, tsv::text, len_body, len_title, len_ident, len_heading FROM chunks"
            " ORDER BY id"
        ).fetchall(),
        conn.execute("SELECT field, term, df FROM lexical_terms ORDER BY 1, 2").fetchall(),
        conn.execute("SELECT * FROM lexical_fields ORDER BY 1").fetchall(),
        conn.execute("SELECT * FROM lexical_postings ORDER BY 1, 2, 3").fetchall(),
    )


def _hits(store: KnowledgeStore, text: str) -> list[tuple[str, int, float]]:
    """A lexical answer without its chunk ids (each store has its own)."""
    return [(h.uid, h.start, h.score) for h in store.lexical(text, k=20).hits]


def test_version_6_reanalyses_a_version_5_store_in_place(database: str) -> None:
    records = [*DOCS, *({"acl": ["everyone"], **r} for r in RECORDS)]
    old_url = postgres_support.store_url(database, "version5")
    with KnowledgeStore(
        PostgresEngine.open(old_url, migrations=MIGRATIONS[:5]), embedder=HASH_SPEC
    ) as old:
        with _engine(old).db.write() as conn:  # this build's publish writes chunk locations
            for statement in MIGRATIONS[6].statements:
                conn.execute(statement)
        old.ingest_records(records)
        conn = _engine(old).db.conn()
        row = conn.execute("SELECT count(*) FROM lexical_terms WHERE term = 'where'").fetchone()
        assert row == (0,)  # version 5's index dropped Snowball's 127 words
    with KnowledgeStore.open(postgres_support.store_url(database), embedder=HASH_SPEC) as fresh:
        fresh.ingest_records(records)
        expected = _derived(_engine(fresh))
        found = _hits(fresh, "WHERE")
    with KnowledgeStore.open(old_url, embedder=HASH_SPEC) as upgraded:
        stats = upgraded.stats().to_dict()
        assert stats["schema_version"] == MIGRATIONS[-1].version and stats["needs_rebuild"] is False
        assert _derived(_engine(upgraded)) == expected
        assert found[0][0] == "sql:where" and _hits(upgraded, "WHERE") == found
