"""The ``fuzzy`` list on the embedded engine: typo-tolerant BM25 over the Tantivy index.

A word of the query that no chunk the reader may read holds is replaced by the word one
edit away that most of them hold (:mod:`knowledge_store.engines.spelling`), counted in
the Tantivy index pinned at the reader's publish — under the reader's ACL, so that a
correction never names a word only unreadable chunks hold — and the corrected query is
ranked as the lexical list ranks (the same ACL and FILTERS inside the query, the same
final check). ``details["corrected"]`` says what was replaced.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from knowledge_store.engines.base import RankedChunks
from knowledge_store.engines.components import ListQuery, register_component
from knowledge_store.engines.spelling import correct, corrected, misspelt_candidates
from knowledge_store.model import Filters

if TYPE_CHECKING:
    from knowledge_store.engines.embedded.reader import EmbeddedReader

__all__ = ["FuzzyList"]


class FuzzyList:
    """See the module docstring."""

    name = "tantivy-fuzzy"

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def search(self, reader: EmbeddedReader, query: ListQuery) -> RankedChunks:
        fixes = correct(misspelt_candidates(query.text), lambda words: self._counts(reader, words))
        ranked = reader.lexical(
            corrected(query.text, fixes), query.k, query.filters, hydrate=query.hydrate
        )
        details = {**ranked.details, "corrected": {f.word: f.to for f in fixes}}
        return RankedChunks(
            ranked.ids, ranked.uids, ranked.scores, ranked.vector, details, ranked.hits
        )

    def _counts(self, reader: EmbeddedReader, words: Sequence[str]) -> dict[str, int | None]:
        hides = self._engine.views.hides_any(reader, Filters())
        return reader.word_counts(words, everything=not hides)


register_component("embedded", ("fuzzy",), FuzzyList.name, FuzzyList)
