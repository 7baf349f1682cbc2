"""The lexical primitive on PostgreSQL: one statement per query, the ACL join inside it.

Rankers (a small registry; ``LEXICAL_RANKERS``):

``bm25`` (default, measured)
    Okapi BM25 (``model.relevance``: k1=1.2, b=0.75, the field boosts) computed in SQL from statistics the publish
    transaction keeps exact: ``lexical_postings`` (term frequency and field
    length per chunk and term), ``lexical_terms`` (document frequency per
    term) and ``lexical_fields`` (chunks and total length per field → avgdl).
    Four fields, summed, as in the embedded engine's Tantivy index: ``body``
    (English stems over title + heading path + text, every word but Lucene's 33
    stop words), ``title`` (boost 0.25),
    ``heading`` (the chunk's innermost heading below the title, boost 0.1)
    and ``ident`` (identifiers as written — ``pg_stat_activity``,
    ``pg_hba.conf``, ``err-1042`` — matched whole).
``ts_rank_cd``
    PostgreSQL's cover-density rank over the chunk's English ``tsvector``
    (GIN), each whitespace-separated piece of the query a phrase, the pieces
    OR-ed — so an identifier matches its adjacent lexemes.
``pg_search`` / ``pg_textsearch``
    A BM25 extension's index and score, used when the extension is installed
    (detected on open, reported by ``stats``); the extension analyses the text
    itself, not as the two rankers above do.

A query's terms are the documents' analysis of its text (``schema``'s text
functions) — and, for a natural-language query (``model.queries.query_features``,
decided here once per statement, as the embedded engine decides it), without its
function words: "how do I list all tables?" is searched by ``list`` and ``tabl``,
``WHERE`` or ``BETWEEN`` alone by themselves.

Every statement starts with the dialect's ACL CTEs — the principals the
reader's identity holds, expanded once when the reader opened and bound
here, and the ACL sets they reach; candidates outside them, or outside
FILTERS, are never scored. A statement ranks chunk ids (with their entity's
uid and the score); the reader hydrates what the answer returns. Corpus
statistics (df, avgdl) are global: a known side channel, described in
docs/security.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from knowledge_store.engines.postgres.schema import (
    FIELD_BODY,
    FIELD_HEADING,
    FIELD_IDENT,
    FIELD_TITLE,
)
from knowledge_store.engines.sql.dialect import POSTGRES
from knowledge_store.engines.sql.filters import filter_clause
from knowledge_store.errors import InvalidRequest
from knowledge_store.model import Filters, relevance
from knowledge_store.model.queries import query_features

__all__ = [
    "DEFAULT_RANKER",
    "LEXICAL_RANKERS",
    "LexicalStatement",
    "lexical_statement",
]

#: At most this many distinct query terms per field (a 10k-character query stays cheap).
MAX_QUERY_TERMS = 256
#: ts_rank_cd normalisation: 1 divides by 1 + log(document length).
TS_RANK_NORMALIZATION = 1

#: What every ranker returns: the chunk id, its entity's uid, then the score.
_ROW = "c.id, e.uid"
#: A query's word terms (``schema``'s text functions), as a FROM item with alias ``w``.
_WORDS = "ks_query_words(%(text)s, %(question)s) AS w"


@dataclass(frozen=True)
class LexicalStatement:
    sql: str
    params: dict[str, Any]


def _prefix(held: Sequence[str], filters: Filters) -> tuple[str, str, dict[str, Any]]:
    where, params = filter_clause(filters, POSTGRES, alias="e")
    params.update(POSTGRES.held_params(held))
    return POSTGRES.with_acl().rstrip("\n"), where, params


def _bm25(held: Sequence[str], text: str, k: int, filters: Filters) -> LexicalStatement:
    head, where, params = _prefix(held, filters)
    sql = f"""{head},
q(field, term, boost) AS (
    (SELECT {FIELD_BODY}::smallint, w.term, 1.0::float8 FROM {_WORDS} LIMIT {MAX_QUERY_TERMS})
    UNION ALL
    (SELECT {FIELD_TITLE}::smallint, w.term, %(title_boost)s::float8 FROM {_WORDS}
     LIMIT {MAX_QUERY_TERMS})
    UNION ALL
    (SELECT {FIELD_HEADING}::smallint, w.term, %(heading_boost)s::float8 FROM {_WORDS}
     LIMIT {MAX_QUERY_TERMS})
    UNION ALL
    (SELECT {FIELD_IDENT}::smallint, i.term, %(ident_boost)s::float8
     FROM ks_query_idents(%(text)s, %(question)s) AS i LIMIT {MAX_QUERY_TERMS})
),
w AS MATERIALIZED (
    SELECT q.field, q.term,
           q.boost * ln(1.0 + (f.docs - t.df + 0.5) / (t.df + 0.5)) AS idf,
           greatest(f.total_len::float8 / greatest(f.docs, 1), 1e-9) AS avgdl
    FROM q
    JOIN lexical_terms AS t ON t.field = q.field AND t.term = q.term
    JOIN lexical_fields AS f ON f.field = q.field
    WHERE q.boost > 0
),
visible AS MATERIALIZED (
    SELECT e.id FROM entities AS e WHERE {POSTGRES.visible("e")} AND {where}
),
scored AS (
    SELECT p.chunk,
           sum(w.idf * p.tf * (%(k1)s + 1.0)
               / (p.tf + %(k1)s * (1.0 - %(b)s + %(b)s * p.dl / w.avgdl))) AS score
    FROM w
    JOIN lexical_postings AS p ON p.field = w.field AND p.term = w.term
    JOIN visible AS v ON v.id = p.entity
    GROUP BY p.chunk
    ORDER BY score DESC, p.chunk
    LIMIT %(k)s
)
SELECT {_ROW}, s.score
FROM scored AS s JOIN chunks AS c ON c.id = s.chunk JOIN entities AS e ON e.id = c.entity
ORDER BY s.score DESC, c.id"""
    params.update(
        text=text,
        k=k,
        k1=relevance.BM25_K1,
        b=relevance.BM25_B,
        title_boost=relevance.TITLE_BOOST,
        heading_boost=relevance.HEADING_BOOST,
        ident_boost=relevance.IDENTIFIER_BOOST,
    )
    return LexicalStatement(sql, params)


def _ts_rank_cd(held: Sequence[str], text: str, k: int, filters: Filters) -> LexicalStatement:
    head, where, params = _prefix(held, filters)
    sql = f"""{head},
q AS MATERIALIZED (SELECT ks_or_query(%(text)s, %(question)s) AS query)
SELECT {_ROW}, ts_rank_cd(c.tsv, (SELECT query FROM q), {TS_RANK_NORMALIZATION})::float8 AS score
FROM chunks AS c JOIN entities AS e ON e.id = c.entity
WHERE c.tsv @@ (SELECT query FROM q)
  AND {POSTGRES.visible("e")} AND {where}
ORDER BY score DESC, c.id
LIMIT %(k)s"""
    params.update(text=text, k=k)
    return LexicalStatement(sql, params)


def _pg_search(held: Sequence[str], text: str, k: int, filters: Filters) -> LexicalStatement:
    """ParadeDB pg_search: a match query (tokenised by the index, never parsed as query syntax)."""
    head, where, params = _prefix(held, filters)
    sql = f"""{head}
SELECT {_ROW}, paradedb.score(c.id)::float8 AS score
FROM chunks AS c JOIN entities AS e ON e.id = c.entity
WHERE c.id @@@ paradedb.match('text', %(text)s)
  AND {POSTGRES.visible("e")} AND {where}
ORDER BY score DESC, c.id
LIMIT %(k)s"""
    params.update(text=text, k=k)
    return LexicalStatement(sql, params)


def _pg_textsearch(held: Sequence[str], text: str, k: int, filters: Filters) -> LexicalStatement:
    """Timescale pg_textsearch: ``<@>`` is the negated BM25 score (lower is better)."""
    head, where, params = _prefix(held, filters)
    sql = f"""{head}
SELECT {_ROW}, -(c.text <@> to_bm25query(%(text)s, 'chunks_bm25'))::float8 AS score
FROM chunks AS c JOIN entities AS e ON e.id = c.entity
WHERE {POSTGRES.visible("e")} AND {where}
ORDER BY c.text <@> to_bm25query(%(text)s, 'chunks_bm25'), c.id
LIMIT %(k)s"""
    params.update(text=text, k=k)
    return LexicalStatement(sql, params)


Builder = Callable[[Sequence[str], str, int, Filters], LexicalStatement]

#: name → statement builder. ``bm25`` wins on postgres-docs (see docs/scaling.md figures).
LEXICAL_RANKERS: dict[str, Builder] = {
    "bm25": _bm25,
    "ts_rank_cd": _ts_rank_cd,
    "pg_search": _pg_search,
    "pg_textsearch": _pg_textsearch,
}
DEFAULT_RANKER = "bm25"

#: The index a BM25 extension needs on ``chunks`` (created on open when it is installed).
EXTENSION_INDEX: dict[str, str] = {
    "pg_search": "CREATE INDEX IF NOT EXISTS chunks_bm25 ON chunks"
    " USING bm25 (id, text) WITH (key_field = 'id')",
    "pg_textsearch": "CREATE INDEX IF NOT EXISTS chunks_bm25 ON chunks"
    " USING bm25 (text) WITH (text_config = 'english')",
}


def lexical_statement(
    ranker: str, held: Sequence[str], text: str, k: int, filters: Filters
) -> LexicalStatement:
    """The one statement of a lexical query with ``ranker``; an unknown name lists the valid ones."""
    try:
        build = LEXICAL_RANKERS[ranker]
    except KeyError:
        raise InvalidRequest(
            f"unknown lexical ranker {ranker!r}; use one of {', '.join(LEXICAL_RANKERS)}",
            field="ranker",
            allowed=list(LEXICAL_RANKERS),
        ) from None
    statement = build(held, text.replace("\x00", " "), k, filters)
    # bm25's and ts_rank_cd's query analysis (``schema``): a question's function words out
    statement.params["question"] = query_features(text).natural_language
    return statement
