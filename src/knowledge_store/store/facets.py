"""Declared facets (``ks facets add|list|remove``): an organisation's own fields, from the
entities' ``attributes``, as filters and aggregate dimensions on every surface and engine.

The declarations and values live in the store (``engines/sql/declared.py``); requests name
a declared facet like a built-in field (``team``, ``not_team``, ``deadline_from``; ``--by
deadline:month``), and each reader resolves those names against the facets of its snapshot
(:meth:`knowledge_store.model.Filters.resolve`). See :mod:`knowledge_store.model.declared`
for the kinds, the names a facet brings and the ones it may not take.
"""

from __future__ import annotations

from knowledge_store.engines.base import Engine
from knowledge_store.engines.sql.declared import FacetAdministration
from knowledge_store.model import DeclaredFacets, FacetInfo
from knowledge_store.model.declared import DeclaredFacet
from knowledge_store.requests import DeclaredFacetsRequest, DeclareFacetRequest, RemoveFacetRequest
from knowledge_store.retrieval.reader import request_of

__all__ = ["Facets"]


def _info(facet: DeclaredFacet, entities: int, values: int) -> FacetInfo:
    return FacetInfo(
        name=facet.name,
        kind=facet.kind,
        attribute=facet.key,
        filters=list(facet.request_names),
        dimensions=list(facet.dimensions),
        entities=entities,
        values=values,
    )


class Facets:
    """Declared facets; mixed into ``KnowledgeStore``, which gives it its engine."""

    engine: Engine

    def _facets(self) -> FacetAdministration:
        return FacetAdministration(self.engine.admin.catalog)

    def declared_facets(self) -> tuple[DeclaredFacet, ...]:
        """The declared facets' names and kinds, by name (cheap: no counts) — what a surface
        adds to its schemas."""
        return tuple(self._facets().declared())

    def facets(self, request: DeclaredFacetsRequest | None = None) -> DeclaredFacets:
        """The store's declared facets, with the filters and dimensions each adds and how
        many entities have a value."""
        return DeclaredFacets(facets=[_info(*found) for found in self._facets().list()])

    def declare_facet(
        self,
        name: str | DeclareFacetRequest,
        kind: str | None = None,
        *,
        attribute: str | None = None,
    ) -> DeclaredFacets:
        """Declare facet ``name`` of ``kind`` — keyword, date or number — read from
        ``attributes[attribute or name]``, and fill it from every entity, in one write
        transaction; the facets after it. Refused for a name that is or brings a built-in
        one."""
        request = request_of(DeclareFacetRequest, name, name=name, kind=kind, attribute=attribute)
        self._facets().add(request.name, request.kind, request.attribute)
        return self.facets()

    def remove_facet(self, name: str | RemoveFacetRequest) -> DeclaredFacets:
        """Forget facet ``name`` and its values (NotFound when none is declared)."""
        request = request_of(RemoveFacetRequest, name, name=name)
        self._facets().remove(request.name)
        return self.facets()
