"""The PostgreSQL engine's index components (:mod:`knowledge_store.engines.components`).

``lexical``: BM25 in SQL over the postings the publish transaction keeps (or the ranker
the store chose: :mod:`.lexical`); ``vector``: pgvector's HNSW (or an exact scan: the
planner of :mod:`.vector`). Both live in the catalog's own transactions, so the reader's
``REPEATABLE READ`` snapshot is their pin. ``fuzzy`` lives in :mod:`.fuzzy`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from knowledge_store.engines.base import RankedChunks
from knowledge_store.engines.components import ListQuery, register_component
from knowledge_store.errors import InvalidRequest

if TYPE_CHECKING:
    from knowledge_store.engines.postgres.reader import PostgresReader

__all__ = ["LexicalList", "VectorList"]

ENGINE = "postgres"


class LexicalList:
    """BM25 in SQL (or the store's lexical ranker), one statement with the ACL join."""

    name = "sql-bm25"

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def search(self, reader: PostgresReader, query: ListQuery) -> RankedChunks:
        return reader.lexical(query.text, query.k, query.filters, hydrate=query.hydrate)


class VectorList:
    """pgvector: HNSW, or an exact scan when few chunks are visible."""

    name = "pgvector"

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def search(self, reader: PostgresReader, query: ListQuery) -> RankedChunks:
        if query.vector is None:
            raise InvalidRequest("the vector list needs a query vector", field="vector")
        return reader.vector(query.vector, query.k, query.filters, hydrate=query.hydrate)


register_component(ENGINE, ("lexical",), LexicalList.name, LexicalList)
register_component(ENGINE, ("vector",), VectorList.name, VectorList)
