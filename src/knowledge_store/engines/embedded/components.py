"""The embedded engine's index components (:mod:`knowledge_store.engines.components`).

``lexical``: Tantivy BM25 (:mod:`.lexical`); ``vector``: the in-process HNSW index
(:mod:`.dense`). Each searches the view its reader pinned at the reader's publish, with
the ACL and FILTERS inside its query (see :class:`~.reader.EmbeddedReader`). ``fuzzy``
lives in :mod:`.fuzzy`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from knowledge_store.engines.base import RankedChunks
from knowledge_store.engines.components import ListQuery, register_component
from knowledge_store.errors import InvalidRequest

if TYPE_CHECKING:
    from knowledge_store.engines.embedded.reader import EmbeddedReader

__all__ = ["DenseList", "LexicalList"]

ENGINE = "embedded"


class LexicalList:
    """BM25 over the Tantivy index pinned at the reader's publish."""

    name = "tantivy"

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def search(self, reader: EmbeddedReader, query: ListQuery) -> RankedChunks:
        return reader.lexical(query.text, query.k, query.filters, hydrate=query.hydrate)


class DenseList:
    """The nearest chunks in the HNSW generation pinned at the reader's publish."""

    name = "faiss"

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def search(self, reader: EmbeddedReader, query: ListQuery) -> RankedChunks:
        if query.vector is None:
            raise InvalidRequest("the vector list needs a query vector", field="vector")
        return reader.vector(query.vector, query.k, query.filters, hydrate=query.hydrate)


register_component(ENGINE, ("lexical",), LexicalList.name, LexicalList)
register_component(ENGINE, ("vector",), DenseList.name, DenseList)
