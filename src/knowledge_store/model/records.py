"""The data model (DESIGN §1): entities, their chunks and edges, and who is asking.

Frozen dataclasses: values, with no behaviour beyond the content hash the
publish root is built from.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from knowledge_store.errors import InvalidRequest
from knowledge_store.model.text import check_principal
from knowledge_store.model.vocabulary import EVERYONE, FACET_NAMES

__all__ = [
    "ENTITY_FIELDS",
    "Chunk",
    "Edge",
    "Entity",
    "Identity",
    "compose_context",
    "last_heading",
]


@dataclass(frozen=True)
class Edge:
    """``src --label--> dst`` with an optional sibling ``position``."""

    src: str
    label: str
    dst: str
    position: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"src": self.src, "label": self.label, "dst": self.dst, "position": self.position}


#: An entity's own fields, in record order (without its edges and ACL): the facets
#: (``FACET_NAMES``, each a record key of its own) come after ``status``.
ENTITY_FIELDS: tuple[str, ...] = (
    "uid",
    "type",
    "title",
    "body",
    "source",
    "status",
    *FACET_NAMES,
    "created_at",
    "updated_at",
    "href",
    "attributes",
)


@dataclass(frozen=True)
class Entity:
    """A node of the estate. ``acl`` is the sorted, deduplicated principal set."""

    uid: str
    type: str
    title: str
    body: str
    source: str = ""
    status: str = ""
    created_at: str | None = None
    updated_at: str | None = None
    href: str | None = None
    attributes: Mapping[str, Any] = field(default_factory=dict)
    edges: tuple[Edge, ...] = ()
    acl: tuple[str, ...] = ()
    #: The facets that are set (``FACET_NAMES`` order; an empty value is left out).
    facets: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.facets) - set(FACET_NAMES))
        if unknown:
            raise ValueError(f"not a facet: {', '.join(unknown)}; facets are {FACET_NAMES}")
        kept = {name: str(self.facets[name]) for name in FACET_NAMES if self.facets.get(name)}
        object.__setattr__(self, "facets", kept)

    @classmethod
    def from_fields(
        cls, fields: Mapping[str, Any], *, edges: tuple[Edge, ...] = (), acl: tuple[str, ...] = ()
    ) -> Entity:
        """The entity whose ``ENTITY_FIELDS`` are ``fields`` (a facet's empty value: none)."""
        own = {name: value for name, value in fields.items() if name not in FACET_NAMES}
        facets = {name: fields[name] or "" for name in FACET_NAMES if name in fields}
        return cls(**own, edges=edges, acl=acl, facets=facets)

    def field_values(self) -> tuple[Any, ...]:
        """The values of ``ENTITY_FIELDS``, in order (an unset facet: ``""``)."""
        return tuple(self._field(name) for name in ENTITY_FIELDS)

    def _field(self, name: str) -> Any:
        return self.facets.get(name, "") if name in FACET_NAMES else getattr(self, name)

    @cached_property
    def content_hash(self) -> str:
        """sha256 over every field, the edges and the ACL (the publish root is built from it)."""
        canonical = json.dumps(
            {
                "uid": self.uid,
                "type": self.type,
                "title": self.title,
                "body": self.body,
                "source": self.source,
                "status": self.status,
                "created_at": self.created_at,
                "updated_at": self.updated_at,
                "href": self.href,
                "attributes": self.attributes,
                "edges": sorted(
                    (e.label, e.dst, -1 if e.position is None else e.position) for e in self.edges
                ),
                "acl": sorted(self.acl),
                # only the facets set: adding one changes no other entity's hash (or root)
                **self.facets,
            },
            sort_keys=True,
            ensure_ascii=False,
            separators=(",", ":"),
        )
        return hashlib.sha256(canonical.encode()).hexdigest()

    def to_record(self) -> dict[str, Any]:
        """The canonical JSON Lines record of this entity."""
        return {
            "uid": self.uid,
            "type": self.type,
            "title": self.title,
            "body": self.body,
            "source": self.source,
            "status": self.status,
            **self.facets,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "href": self.href,
            "attributes": dict(self.attributes),
            "edges": [{"label": e.label, "to": e.dst, "position": e.position} for e in self.edges],
            "acl": list(self.acl),
        }


@dataclass(frozen=True)
class Chunk:
    """A slice ``body[start:end]`` of an entity, with the heading path it sits under and,
    in a paged document, where it is (``{"page": 3}``, ``{"slide": 2}``, ``{"sheet":
    "Budget", "rows": "2-51"}``; None elsewhere)."""

    ordinal: int
    text: str
    heading: tuple[str, ...]
    start: int
    end: int
    location: Mapping[str, Any] | None = None

    def context_text(self, title: str) -> str:
        """What is embedded and indexed: the entity title, the heading path, the text."""
        return compose_context(title, self.heading, self.text)


def compose_context(title: str, heading: Sequence[str], text: str) -> str:
    path = " > ".join(_below_title(title, heading))
    return f"{title}\n{path}\n{text}" if path else f"{title}\n{text}"


def last_heading(title: str, heading: Sequence[str]) -> str:
    """The innermost heading of a chunk's path below the entity title ("" when none):
    what the lexical index's ``heading`` field holds."""
    below = _below_title(title, heading)
    return below[-1] if below else ""


def _below_title(title: str, heading: Sequence[str]) -> list[str]:
    return [h for h in heading if h and h != title]


@dataclass(frozen=True)
class Identity:
    """Who is asking. Expanded by the store over memberships; always holds ``everyone``.

    ``groups``: groups the caller holds by its credential rather than by a membership
    in the store — an access token's groups claim (``surfaces/oidc.py``). Each is
    expanded over memberships like the principal; they last as long as the credential.
    """

    principal: str = EVERYONE
    groups: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_principal(self.principal)
        for group in self.groups:
            if not check_principal(group).startswith("group:"):
                raise InvalidRequest(
                    f"{group[:200]!r} is not a group; an identity's groups are 'group:<id>'",
                    field="groups",
                )
        ordered = tuple(sorted(set(self.groups)))
        if ordered != self.groups:
            object.__setattr__(self, "groups", ordered)
