"""Index components: what an engine holds beyond its catalog, each registered by name (DESIGN §4).

An engine is a catalog (the one source of truth) plus index components — Tantivy,
faiss, BM25 in SQL, pgvector, fuzzy — each answering one or more *lists* (the
ranked lists of fused search: ``lexical``, ``vector``, ``fuzzy``…). A reader is one
catalog snapshot plus what the components pinned at that publish; its
:meth:`~knowledge_store.engines.base.Reader.rank` runs the component registered for
the list asked (:func:`component`), which ranks chunk ids under the reader's identity
and FILTERS, applied inside the component's own query, before ranking.

The registry maps ``(engine, list)`` to a factory of the engine's component (made once
per engine, from the engine): a new list on an engine is one module and one
:func:`register_component` call; a new engine that shares another's indexes (Citus and
PostgreSQL) registers the same factories under its own name. An unknown pair fails
naming the lists the engine has.

The search side is what every component has today. The embedded engine's derived
indexes (Tantivy, faiss) are still applied, caught up and rebuilt by the engine itself
(``engines/embedded/engine.py``), each with its watermark; PostgreSQL's live in the
catalog's own transactions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from knowledge_store.engines.base import RankedChunks, Vector
from knowledge_store.errors import InvalidRequest
from knowledge_store.model import Filters

__all__ = [
    "Components",
    "IndexComponent",
    "ListQuery",
    "component",
    "components_of",
    "lists_of",
    "register_component",
]


@dataclass(frozen=True)
class ListQuery:
    """What a list is asked: its text (and the query vector, for a dense list), how many
    chunk ids, the FILTERS; ``hydrate``: make the answer's hits with the final check."""

    text: str
    k: int
    filters: Filters
    vector: Vector | None = None
    hydrate: bool = False


class IndexComponent(Protocol):
    """A component as a reader uses it: its name and its search on one reader (whose
    snapshot pins what the component searches)."""

    @property
    def name(self) -> str: ...

    def search(self, reader: Any, query: ListQuery) -> RankedChunks: ...


#: A component of an engine, made from the engine (its catalog, its files, its settings).
ComponentFactory = Callable[[Any], IndexComponent]

_REGISTRY: dict[tuple[str, str], tuple[str, ComponentFactory]] = {}


def register_component(
    engine: str, lists: tuple[str, ...], name: str, factory: ComponentFactory
) -> None:
    """Make ``factory`` the component of engine ``engine`` that answers ``lists`` (``name``:
    what ``explain`` and ``stats`` call it). Registering a pair again replaces it."""
    for list_name in lists:
        _REGISTRY[(engine, list_name)] = (name, factory)


def lists_of(engine: str) -> tuple[str, ...]:
    """The lists engine ``engine`` answers with a component, in registration order."""
    return tuple(list_name for (kind, list_name) in _REGISTRY if kind == engine)


def components_of(engine: str) -> dict[str, tuple[str, ComponentFactory]]:
    """``list → (component name, factory)`` of engine ``engine``."""
    return {list_name: entry for (kind, list_name), entry in _REGISTRY.items() if kind == engine}


def component(engine: str, list_name: str) -> tuple[str, ComponentFactory]:
    """The component of ``engine`` for ``list_name``; an unknown one fails naming the lists."""
    found = _REGISTRY.get((engine, list_name))
    if found is None:
        known = ", ".join(lists_of(engine)) or "none"
        raise InvalidRequest(
            f"the {engine} engine has no index component for the list {list_name!r};"
            f" its lists are: {known}",
            list=list_name,
            allowed=list(lists_of(engine)),
        )
    return found


class Components:
    """An engine's components, each made once, on first use (see the module docstring)."""

    def __init__(self, kind: str, engine: Any) -> None:
        self._kind = kind
        self._engine = engine
        self._made: dict[str, IndexComponent] = {}

    def __call__(self, list_name: str) -> IndexComponent:
        made = self._made.get(list_name)
        if made is None:
            _, factory = component(self._kind, list_name)
            made = self._made[list_name] = factory(self._engine)
        return made

    def names(self) -> dict[str, str]:
        """``list → component name`` of every list the engine answers."""
        return {list_name: name for list_name, (name, _) in components_of(self._kind).items()}
