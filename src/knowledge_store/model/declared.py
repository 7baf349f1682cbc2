"""Facets an operator declares on a store, from its entities' ``attributes`` (``ks facets add``).

A declared facet is a name and a kind; it lives in the store (not in the code), and
becomes a filter and an aggregate dimension on every surface and engine, like the
built-in fields of :data:`~knowledge_store.model.FILTER_FIELDS`:

==========  ================================================  =========================
kind        filter (request names)                            aggregate dimension
==========  ================================================  =========================
keyword     ``team`` (any of), ``not_team`` (none of)          ``team``
date        ``deadline_from``, ``deadline_to`` (inclusive)     ``deadline:day|week|month``
number      ``priority_from``, ``priority_to`` (inclusive)     ``priority``
==========  ================================================  =========================

An entity's values are read from ``attributes[name]`` (:func:`facet_values`): a string
or a number (or ``true``/``false``), or a list of them — several values, each of which
matches and is counted (a keyword list is "tagged with each"). A value that is not of
the facet's kind (a date facet's ``"soon"``) or longer than :data:`MAX_NAME_CHARS` is
left out, and so is an object. Declaring a facet never changes an entity: its values
come from attributes the content hash already covers.

A name is refused (:func:`check_declaration`) unless it is lowercase letters, digits
and ``_`` (a letter first, at most :data:`MAX_FACET_NAME` characters), and none of the
names it brings — itself, its request names, its dimensions — is a built-in filter,
dimension, entity field or record key, or another declared facet's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from knowledge_store.errors import InvalidRequest
from knowledge_store.model.records import ENTITY_FIELDS
from knowledge_store.model.text import normalize_timestamp
from knowledge_store.model.vocabulary import (
    DIMENSIONS,
    FILTER_FIELDS,
    FILTER_NAMES,
    GRANULARITIES,
    MAX_NAME_CHARS,
    ORDER_FIELDS,
)

__all__ = [
    "FACET_KINDS",
    "MAX_DECLARED_FACETS",
    "MAX_FACET_NAME",
    "RESERVED_NAMES",
    "DeclaredFacet",
    "FacetKind",
    "check_declaration",
    "facet_values",
    "looks_declared",
]

FacetKind = Literal["keyword", "date", "number"]
FACET_KINDS: tuple[str, ...] = get_args(FacetKind)
#: The longest facet name (a PostgreSQL identifier is 63 bytes; the facet's request names
#: add ``not_`` or ``_from``).
MAX_FACET_NAME = 48
#: How many facets a store may declare.
MAX_DECLARED_FACETS = 64
_NAME = re.compile(r"[a-z][a-z0-9_]*")
#: What a request name of a declared facet may look like (its facet still has to exist).
_REQUEST_NAME = re.compile(r"[a-z][a-z0-9_]{0,62}")
#: The record keys beyond ``ENTITY_FIELDS``, and what answers and requests use.
_RECORD_KEYS = ("edges", "acl", "acl_from", "content_hash", "chunks", "facets", "filters")
#: Every name a declared facet may not take or bring: the built-in filters (their fields
#: and request names), dimensions, order fields, entity fields and record keys.
RESERVED_NAMES: frozenset[str] = frozenset(
    [*FILTER_NAMES, *(f.name for f in FILTER_FIELDS), *(f.stem for f in FILTER_FIELDS)]
    + [d.partition(":")[0] for d in DIMENSIONS]
    + [*ORDER_FIELDS, *ENTITY_FIELDS, *_RECORD_KEYS]
)


@dataclass(frozen=True)
class DeclaredFacet:
    """A facet declared on a store: its name, kind, and the ``attributes`` key it is read
    from (``attribute``; None: the key is the name — a camelCase key such as
    ``docbookClass`` gets a name of its own, ``docbook_class``)."""

    name: str
    kind: FacetKind
    attribute: str | None = None

    @property
    def key(self) -> str:
        """The ``attributes`` key the facet's values are read from."""
        return self.attribute or self.name

    @property
    def request_names(self) -> tuple[str, ...]:
        """The names a request filters on (``team``, ``not_team``; ``deadline_from`` …)."""
        if self.kind == "keyword":
            return (self.name, f"not_{self.name}")
        return (f"{self.name}_from", f"{self.name}_to")

    @property
    def dimensions(self) -> tuple[str, ...]:
        """The aggregate dimensions it adds (a date's by day, week and month)."""
        if self.kind == "date":
            return tuple(f"{self.name}:{g}" for g in GRANULARITIES)
        return (self.name,)

    @property
    def names(self) -> frozenset[str]:
        """Every name it brings: itself, its request names, its dimensions."""
        return frozenset([self.name, *self.request_names, *self.dimensions])

    def role(self, request_name: str) -> str | None:
        """What ``request_name`` asks of this facet: ``any``, ``none``, ``from``, ``to``."""
        roles = dict(
            zip(
                self.request_names,
                ("any", "none") if self.kind == "keyword" else ("from", "to"),
                strict=True,
            )
        )
        return roles.get(request_name)


def looks_declared(name: str) -> bool:
    """Whether ``name`` could be a declared facet's request name or dimension (syntax only:
    whether the store declares it is the reader's to say)."""
    field, _, granularity = name.partition(":")
    if granularity and granularity not in GRANULARITIES:
        return False
    return _REQUEST_NAME.fullmatch(field) is not None and field not in RESERVED_NAMES


def check_declaration(
    name: str, kind: str, declared: Sequence[DeclaredFacet], attribute: str | None = None
) -> DeclaredFacet:
    """The facet ``name`` of ``kind`` (read from ``attributes[attribute or name]``), or
    ``InvalidRequest`` saying what to change (see the module docstring); ``declared``: the
    store's facets."""
    if kind not in FACET_KINDS:
        raise InvalidRequest(
            f"unknown facet kind {str(kind)[:40]!r}; use one of: {', '.join(FACET_KINDS)}",
            field="kind",
            allowed=list(FACET_KINDS),
        )
    if not isinstance(name, str) or not _NAME.fullmatch(name) or len(name) > MAX_FACET_NAME:
        raise InvalidRequest(
            f"facet name {str(name)[:80]!r}: use lowercase letters, digits and _, a letter"
            f" first, at most {MAX_FACET_NAME} characters (the attribute's key, e.g. team)",
            field="name",
        )
    if attribute is not None and (
        not attribute or len(attribute) > MAX_NAME_CHARS or attribute != attribute.strip()
    ):
        raise InvalidRequest(
            f"attribute {attribute[:80]!r}: an attributes key of 1–{MAX_NAME_CHARS} characters",
            field="attribute",
        )
    facet = DeclaredFacet(name, kind, None if attribute == name else attribute)  # type: ignore[arg-type]
    clash = sorted(facet.names & RESERVED_NAMES)
    if clash:
        raise InvalidRequest(
            f"facet {name!r} would bring the name {clash[0]!r}, which is a built-in filter,"
            " dimension or field of every entity; declare it under another name",
            field="name",
            reserved=clash,
        )
    for other in declared:
        if other.name == name:
            raise InvalidRequest(
                f"facet {name!r} is already declared ({other.kind}); remove it first to"
                " declare it again",
                field="name",
            )
        if common := sorted(facet.names & other.names):
            raise InvalidRequest(
                f"facet {name!r} would bring the name {common[0]!r}, which the declared"
                f" {other.kind} facet {other.name!r} already has; choose another name",
                field="name",
            )
    if len(declared) >= MAX_DECLARED_FACETS:
        raise InvalidRequest(
            f"a store declares at most {MAX_DECLARED_FACETS} facets; remove one first",
            field="name",
            maximum=MAX_DECLARED_FACETS,
        )
    return facet


def _scalars(value: Any) -> Iterable[Any]:
    if isinstance(value, list):
        return value
    return (value,)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return None
    else:
        return None
    return number if math.isfinite(number) else None


def number_text(number: float) -> str:
    """A number facet's value as text (its aggregate key): ``3``, ``2.5``."""
    return str(int(number)) if number.is_integer() and abs(number) < 2**53 else repr(number)


def facet_values(
    attributes: Mapping[str, Any], facet: DeclaredFacet
) -> list[tuple[str, float | None]]:
    """``(text, number)`` of each value ``attributes[facet.key]`` holds (module docstring):
    the text is what a keyword filter matches and an aggregate groups by (a date in the
    stored form ``YYYY-MM-DDTHH:MM:SSZ``), the number a number facet's value."""
    raw = attributes.get(facet.key)
    out: dict[str, float | None] = {}
    for value in _scalars(raw):
        if value is None or isinstance(value, dict | list):
            continue
        if facet.kind == "number":
            number = _number(value)
            if number is not None:
                out[number_text(number)] = number
            continue
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        if isinstance(value, float) and value.is_integer():
            text = number_text(value)
        if facet.kind == "date":
            try:
                text = normalize_timestamp(text)
            except (ValueError, OverflowError):
                continue
        if text and len(text) <= MAX_NAME_CHARS:
            out[text] = None
    return list(out.items())
