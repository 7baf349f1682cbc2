"""How the embedded engine's lexical index sees text and fields: its document schema,
its two analyzers, a query's terms, and dates as seconds since the epoch.

One definition for the index (:mod:`.lexical`) and for anything that must agree
with it (the search page highlights the tokens a query's terms match). A change
to the fields or the analyzers bumps ``lexical.SCHEMA_VERSION`` (the index is rebuilt).

Fields of a chunk document:

==============  =========================================  ==========================
field           what                                       how
==============  =========================================  ==========================
chunk_id        the catalog's chunk row id                 i64, indexed, fast, stored
uid             the entity uid                             raw string, stored
acl             the principals of the entity's ACL set     raw strings, one per principal
type/source/    entity fields for filters                  raw strings
status
created_at/     entity dates, seconds since the epoch      i64, indexed, fast
updated_at
body            title + heading path + text                English: words, stop words, stems
title           the entity title                           English analyzer (boosted)
heading         the chunk's last heading below the title   English analyzer (boosted)
ident           title + heading path + text                identifiers kept whole, lowercased
==============  =========================================  ==========================
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import tantivy

from knowledge_store.errors import StoreError
from knowledge_store.model import FILTER_FIELDS, relevance, stored_timestamp
from knowledge_store.model.queries import (
    FUNCTION_WORDS,
    WORD_PATTERN,
    QueryTerms,
    query_features,
)

__all__ = [
    "IDENTIFIER_ONLY_CODES",
    "USE_STOPWORDS",
    "Analyzers",
    "QueryTerms",
    "bound",
    "epoch",
    "schema",
    "text_clauses",
]

log = logging.getLogger(__name__)

# Analyzer and scoring choices, measured with bench/tune_lexical.py on postgres-docs
# (1500 queries, page-level nDCG@10; bm25s baseline 0.740): 0.801 with these; 0.789
# without the identifier field; 0.796 with every token on it; 0.776 with title boost
# 1.0; 0.790 without the title field. Without stop words 0.803 (SQL keywords such as
# IS, NOT, INTO count in that corpus) — within noise, so the stop list stays: a smaller
# index, shorter posting lists, and a stop-word-only query finds nothing.
#
# At index time the word analyzer drops Tantivy's ``english`` stop list (Lucene's 33 words:
# ``the``, ``of``, ``is``…), so an index term such as ``BETWEEN``, ``ALL`` or ``OVER`` stays
# searchable. A natural-language query (``model.queries``) is searched without its function
# words too — Snowball's English list, the one PostgreSQL's ``english`` configuration drops:
# "how do I list all tables?" by ``list`` and ``tabl`` (docs/relevance.md §9).
USE_STOPWORDS = True
# The field boosts are both engines': knowledge_store.model.relevance, read at query time.
#: Query the identifier field only with tokens that are not plain words
#: (``pg_hba.conf``, ``err-1042``, ``1042``): plain words already count once, stemmed.
IDENTIFIER_ONLY_CODES = True

# Words: model.queries.WORD_PATTERN, runs of letters, digits and ``_`` (so
# ``pg_stat_activity`` stays one word).
#: Identifiers as written: a run of word characters and inner punctuation
#: (``pg_hba.conf``, ``ERR-1042``, ``$libdir``, ``c++``), with surrounding
#: punctuation stripped.
_IDENT_PATTERN = r"[\w$](?:[\w$.\-/:+#@]*[\w$+#])?"
_MAX_TOKEN = 64
#: At most this many distinct query terms per field (a 10k-character query stays cheap).
_MAX_QUERY_TERMS = 256


def epoch(stamp: str) -> int | None:
    """A stored ``YYYY-MM-DDTHH:MM:SSZ`` → seconds since the epoch (negative before 1970).

    Total over what a catalog may hold: a stamp that can't be read (none can be
    written since validation normalises every date) gives None — the document is
    indexed without that date rather than not at all.
    """
    moment = stored_timestamp(stamp)
    if moment is None:
        log.warning("lexical index: the date %r can't be read; indexed without it", stamp)
        return None
    return int(moment.timestamp())


def bound(stamp: str) -> int:
    """A FILTERS date (normalised by ``Filters.build``) as a range bound."""
    seconds = epoch(stamp)
    if seconds is None:
        raise StoreError(f"lexical index: the filter date {stamp!r} is not normalised")
    return seconds


def _word_analyzer(*, function_words: bool = False) -> tantivy.TextAnalyzer:
    """The index's word analyzer; with ``function_words``, a natural-language query's (which
    drops :data:`~knowledge_store.model.queries.FUNCTION_WORDS` as well)."""
    builder = (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.regex(WORD_PATTERN))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.remove_long(_MAX_TOKEN))
    )
    if USE_STOPWORDS:
        builder = builder.filter(tantivy.Filter.stopword("english"))
    if function_words:
        builder = builder.filter(tantivy.Filter.custom_stopword(list(FUNCTION_WORDS)))
    return builder.filter(tantivy.Filter.stemmer("english")).build()


def _ident_analyzer() -> tantivy.TextAnalyzer:
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.regex(_IDENT_PATTERN))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.remove_long(_MAX_TOKEN))
        .build()
    )


class Analyzers:
    """The index's two analyzers, and a query's terms under them.

    One definition for the index and for anything that must agree with it (the
    search page highlights the tokens a query's terms match).
    """

    def __init__(self) -> None:
        self.words = _word_analyzer()
        self.ident = _ident_analyzer()
        #: A natural-language query's words: the function words out as well.
        self.question_words = _word_analyzer(function_words=True)

    def query_terms(self, text: str) -> QueryTerms:
        natural = query_features(text).natural_language
        analyzer = self.question_words if natural else self.words
        words = _unique(analyzer.analyze(text))
        idents: list[str] = []
        if relevance.IDENTIFIER_BOOST > 0:
            # Stop words are never identifiers: "a" or "the" must not match everything.
            idents = [t for t in _unique(self.ident.analyze(text)) if analyzer.analyze(t)]
            if IDENTIFIER_ONLY_CODES:
                idents = [t for t in idents if not t.isalpha()]
        return QueryTerms(tuple(words), tuple(idents))

    def matches(self, text: str, terms: QueryTerms) -> list[tuple[int, int, str]]:
        """``(start, end, term)`` of each token of ``text`` that one of ``terms`` matches:
        a word token whose analysed form is one of the words, an identifier token that is
        one of the identifiers — whole tokens only, in order (the search page's marks)."""
        words, idents = set(terms.words), set(terms.idents)
        found = [
            (t.char_offset_from, t.char_offset_to, t.text)
            for t in self.words.pre_tokenize(text).tokens
            if t.text in words
        ]
        if idents:
            found += [
                (t.char_offset_from, t.char_offset_to, t.text)
                for t in self.ident.pre_tokenize(text).tokens
                if t.text in idents
            ]
        return sorted(found)


def text_clauses(
    schema: tantivy.Schema, terms: QueryTerms, *, heading: bool = True
) -> list[tuple[tantivy.Occur, tantivy.Query]]:
    """The BM25 clauses of ``terms``, all SHOULD: words on ``body``, (× ``TITLE_BOOST``)
    ``title`` and (× ``HEADING_BOOST``) ``heading``, identifiers on ``ident`` (×
    ``IDENTIFIER_BOOST``). The boosts are :mod:`knowledge_store.model.relevance`'s, read at
    call time (``bench/tune_lexical.py`` varies them); any index with these fields (the
    engine's, the benches' side indexes) queries this way — one without a ``heading`` field (the benches' page and unit
    indexes: no chunk headings) with ``heading=False``."""
    query, should = tantivy.Query, tantivy.Occur.Should
    clauses = [(should, query.term_query(schema, "body", w)) for w in terms.words]
    heading_boost = relevance.HEADING_BOOST if heading else 0.0
    for name, boost in (("title", relevance.TITLE_BOOST), ("heading", heading_boost)):
        if boost > 0:
            clauses += [
                (should, query.boost_query(query.term_query(schema, name, w), boost))
                for w in terms.words
            ]
    clauses += [
        (
            should,
            query.boost_query(query.term_query(schema, "ident", t), relevance.IDENTIFIER_BOOST),
        )
        for t in terms.idents
    ]
    return clauses


def schema(*, positions: bool = False) -> tantivy.Schema:
    """The index's schema; ``positions`` also records word positions on ``body`` (phrase
    queries: the engine has none, ``bench/eval_lexical.py`` measures them)."""
    builder = tantivy.SchemaBuilder()
    builder.add_integer_field("chunk_id", stored=True, indexed=True, fast=True)
    builder.add_text_field("uid", stored=True, tokenizer_name="raw", index_option="basic")
    builder.add_text_field("acl", tokenizer_name="raw", index_option="basic")
    for field in FILTER_FIELDS:
        if field.name == "uid":  # the stored key of a hit, above
            continue
        if field.kind == "keyword":
            builder.add_text_field(field.name, tokenizer_name="raw", index_option="basic")
        else:
            builder.add_integer_field(field.name, indexed=True, fast=True)
    body_option = "position" if positions else "freq"
    builder.add_text_field("body", tokenizer_name="ks_words", index_option=body_option)
    builder.add_text_field("title", tokenizer_name="ks_words", index_option="freq")
    builder.add_text_field("heading", tokenizer_name="ks_words", index_option="freq")
    builder.add_text_field("ident", tokenizer_name="ks_ident", index_option="freq")
    return builder.build()


def _unique(tokens: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(tokens))[:_MAX_QUERY_TERMS]
