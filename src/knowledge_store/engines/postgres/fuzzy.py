"""The ``fuzzy`` list on PostgreSQL: typo-tolerant BM25 in SQL.

A word of the query that no chunk the reader may read holds is replaced by the word one
edit away that most of them hold (:mod:`knowledge_store.engines.spelling`), and the
corrected query is ranked by the lexical statement (the same ACL join, FILTERS and
ranker). Counting is one statement per round (the query's words, then their variants):
each string analysed as documents are (``ks_words``: English stems, stop words out),
its stem's postings counted among the entities the reader may read — so a correction
never names a word only unreadable chunks hold. No extension is needed (the bundled
server has no ``pg_trgm``): the variants are made in Python and looked up by key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from knowledge_store.engines.base import RankedChunks
from knowledge_store.engines.components import ListQuery, register_component
from knowledge_store.engines.postgres.schema import FIELD_BODY
from knowledge_store.engines.spelling import correct, corrected, misspelt_candidates
from knowledge_store.engines.sql.dialect import POSTGRES

if TYPE_CHECKING:
    from knowledge_store.engines.postgres.reader import PostgresReader

__all__ = ["FuzzyList", "word_counts"]

#: Per word: its stem (none for a stop word) and how many readable chunks hold the stem.
_COUNTS = f"""{POSTGRES.with_acl().rstrip()},
v AS (
    SELECT u.word, (SELECT w.term FROM ks_words(u.word) AS w LIMIT 1) AS term
    FROM unnest(%(words)s::text[]) AS u(word)
),
known AS (
    SELECT DISTINCT v.term FROM v
    JOIN lexical_terms AS t ON t.field = {FIELD_BODY} AND t.term = v.term
),
counted AS (
    SELECT k.term, (
        SELECT count(*) FROM lexical_postings AS p JOIN entities AS e ON e.id = p.entity
        WHERE p.field = {FIELD_BODY} AND p.term = k.term AND {POSTGRES.visible("e", "probe")}
    ) AS n
    FROM known AS k
)
SELECT v.word, v.term IS NOT NULL, coalesce(c.n, 0) FROM v LEFT JOIN counted AS c ON c.term = v.term"""


def word_counts(reader: PostgresReader, words: Sequence[str]) -> dict[str, int | None]:
    """How many chunks ``reader`` may read hold each of ``words`` as the index analyses it;
    None for a word the analysis drops (a stop word)."""
    if not words:
        return {}
    params = {"words": list(words), **POSTGRES.held_params(reader.held)}
    rows = reader.rows(_COUNTS, params)
    return {str(word): int(n) if indexed else None for word, indexed, n in rows}


class FuzzyList:
    """See the module docstring."""

    name = "sql-fuzzy"

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def search(self, reader: PostgresReader, query: ListQuery) -> RankedChunks:
        fixes = correct(misspelt_candidates(query.text), lambda ws: word_counts(reader, ws))
        ranked = reader.lexical(corrected(query.text, fixes), query.k, query.filters)
        details = {**ranked.details, "corrected": {f.word: f.to for f in fixes}}
        return RankedChunks(ranked.ids, ranked.uids, ranked.scores, ranked.vector, details)


register_component("postgres", ("fuzzy",), FuzzyList.name, FuzzyList)
