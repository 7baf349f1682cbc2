"""FILTERS and ``--order`` given by name — the closed field lists of the ``sql`` primitive.

Pure: no engine, no SQL. The Python API and the agent tools accept FILTERS as
a mapping (``{"type": ["page"], "created_from": "2024-01-01"}``); a name
outside the closed list is an :class:`~knowledge_store.errors.UnknownField`
that lists the valid ones. ``--order`` is ``FIELD[:asc|:desc]`` on one of
:data:`ORDER_FIELDS`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from knowledge_store.errors import InvalidRequest, UnknownField
from knowledge_store.model import Filters

__all__ = [
    "DEFAULT_ORDER",
    "FILTER_NAMES",
    "ORDER_FIELDS",
    "FiltersLike",
    "Order",
    "coerce_filters",
    "parse_order",
]

#: The FILTERS a caller may name (DESIGN §6), mapped to the ``Filters`` field each sets.
_FILTER_FIELDS: dict[str, str] = {
    "type": "types",
    "not_type": "not_types",
    "source": "sources",
    "status": "statuses",
    "uid": "uids",
    "created_from": "created_from",
    "created_to": "created_to",
    "updated_from": "updated_from",
    "updated_to": "updated_to",
}
FILTER_NAMES: tuple[str, ...] = tuple(_FILTER_FIELDS)
_LIST_FILTERS = frozenset({"type", "not_type", "source", "status", "uid"})

#: The fields ``sql`` can order by.
ORDER_FIELDS: tuple[str, ...] = ("updated_at", "created_at", "title")

FiltersLike = Filters | Mapping[str, Any] | None


@dataclass(frozen=True)
class Order:
    """``field direction``; ties (and null dates, always last) are broken by uid."""

    field: str
    direction: Literal["asc", "desc"]

    def __str__(self) -> str:
        return f"{self.field}:{self.direction}"


DEFAULT_ORDER = Order("updated_at", "desc")


def parse_order(text: str | Order | None) -> Order:
    """``"title"``, ``"created_at:asc"``, ``"updated_at:desc"`` → :class:`Order`.

    None or empty gives the default, ``updated_at:desc``. A field outside
    :data:`ORDER_FIELDS` is an ``UnknownField`` naming them.
    """
    if isinstance(text, Order):
        return text
    if text is None or not text.strip():
        return DEFAULT_ORDER
    field, sep, direction = (part.strip() for part in text.strip().partition(":"))
    if field not in ORDER_FIELDS:
        raise UnknownField(
            f"cannot order by {field!r}; order by one of: {', '.join(ORDER_FIELDS)}"
            " (optionally followed by :asc or :desc)",
            field=field,
            allowed=list(ORDER_FIELDS),
        )
    if not sep:
        direction = "asc" if field == "title" else "desc"
    if direction not in ("asc", "desc"):
        raise InvalidRequest(
            f"--order {text!r}: the direction must be asc or desc, e.g. {field}:desc",
            field=field,
            value=text,
        )
    return Order(field, "asc" if direction == "asc" else "desc")


def coerce_filters(value: FiltersLike) -> Filters:
    """A ``Filters``, None, or a mapping of FILTER names → validated ``Filters``.

    Mapping keys are the names of DESIGN §6 (``type``, ``not_type``, ``source``,
    ``status``, ``uid``, ``created_from`` … ``updated_to``; ``-`` may stand
    for ``_``). List filters take a string or a list of strings; date filters
    an ISO 8601 string. Validation is :meth:`Filters.build`'s (dates, inverted
    ranges).
    """
    if value is None:
        return Filters()
    if isinstance(value, Filters):
        return value
    if not isinstance(value, Mapping):
        raise InvalidRequest(
            f"filters must be a mapping of filter names to values, not {type(value).__name__}",
            allowed=list(FILTER_NAMES),
        )
    kwargs: dict[str, Any] = {}
    for raw_name, raw in value.items():
        name = str(raw_name).replace("-", "_")
        if name not in _FILTER_FIELDS:
            raise UnknownField(
                f"unknown filter {raw_name!r}; filter on one of: {', '.join(FILTER_NAMES)}",
                field=str(raw_name),
                allowed=list(FILTER_NAMES),
            )
        if raw is None:
            continue
        if name in _LIST_FILTERS:
            values: Sequence[Any] = [raw] if isinstance(raw, str) else raw
            if not isinstance(values, Sequence) or not all(isinstance(v, str) for v in values):
                raise InvalidRequest(
                    f"filter {name!r} takes a string or a list of strings, not {raw!r}",
                    field=name,
                )
            kwargs[_FILTER_FIELDS[name]] = list(values)
        else:
            if not isinstance(raw, str):
                raise InvalidRequest(
                    f"filter {name!r} takes an ISO 8601 date string such as 2024-05-01,"
                    f" not {raw!r}",
                    field=name,
                )
            kwargs[_FILTER_FIELDS[name]] = raw
    return Filters.build(**kwargs)
