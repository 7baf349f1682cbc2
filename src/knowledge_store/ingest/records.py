"""Canonical ingest records → :class:`Entity`, or a :class:`Rejection` saying what to fix.

A record is one JSON object with the keys of :data:`RECORD_KEYS` (DESIGN §1).
Every loader ends here, so every format is held to the same rules.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from knowledge_store.errors import InputError, InvalidRecord, Rejection
from knowledge_store.model import (
    ENTITY_FIELDS,
    LABELS,
    Edge,
    Entity,
    check_principal,
    normalize_timestamp,
)

__all__ = [
    "EDGE_KEYS",
    "MAX_BODY_CHARS",
    "MAX_UID_CHARS",
    "RECORD_KEYS",
    "REQUIRED_KEYS",
    "json_safe",
    "record_to_entity",
]

MAX_BODY_CHARS = 1_000_000
MAX_UID_CHARS = 512
RECORD_KEYS: tuple[str, ...] = (*ENTITY_FIELDS, "edges", "acl")
#: Keys every record has (``acl`` too, unless the ingest gives an ``--acl`` default).
REQUIRED_KEYS: tuple[str, ...] = ("uid", "type", "title", "body")
EDGE_KEYS: tuple[str, ...] = ("label", "to", "position")
_RECORD_KEY_SET = frozenset(RECORD_KEYS)
_LABEL_SET = frozenset(LABELS)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_DATE_FORM = "an ISO 8601 date or datetime, e.g. 2024-05-01 or 2024-05-01T12:00:00Z"
_NO_ACL = (
    "no acl and no default acl for the batch: nothing becomes public silently;"
    ' add "acl": [...] to the record, or give the batch a default acl (e.g. everyone)'
)


class _Reject:
    """Builds the rejections of one record: where it is, and its uid once known."""

    def __init__(self, file: str, line: int | None) -> None:
        self.file = file
        self.line = line
        self.uid: str | None = None

    def __call__(self, field: str | None, message: str) -> NoReturn:
        raise InvalidRecord(Rejection(self.file, self.line, self.uid, field, message))


def _shown(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= 60 else text[:57] + "..."


def _uid_text(reject: _Reject, field: str, value: object) -> str:
    """A uid (or an edge target): a non-empty string of at most 512 characters, no controls."""
    if not isinstance(value, str) or not value.strip():
        reject(field, f"{field!r} must be a non-empty string, not {_shown(value)}")
    if len(value) > MAX_UID_CHARS:
        reject(field, f"{field!r} has {len(value)} characters; the limit is {MAX_UID_CHARS}")
    if _CONTROL.search(value):
        reject(field, f"{field!r} must not contain control characters (newline, tab, NUL …)")
    return value


def _required_text(reject: _Reject, obj: Mapping[str, Any], field: str) -> str:
    if field not in obj:
        reject(field, f"{field!r} is missing; every record needs a non-empty string {field!r}")
    value = obj[field]
    if not isinstance(value, str) or not value.strip():
        reject(field, f"{field!r} must be a non-empty string, not {_shown(value)}")
    if "\x00" in value:
        reject(field, f"{field!r} must not contain NUL characters")
    return value


def _optional_text(reject: _Reject, obj: Mapping[str, Any], field: str) -> str | None:
    value = obj.get(field)
    if value is None:
        return None
    if not isinstance(value, str):
        reject(field, f"{field!r} must be a string or null, not {_shown(value)}")
    if "\x00" in value:
        reject(field, f"{field!r} must not contain NUL characters")
    return value


def _timestamp(reject: _Reject, obj: Mapping[str, Any], field: str) -> str | None:
    value = obj.get(field)
    if value is None:
        return None
    if isinstance(value, str):
        try:
            return normalize_timestamp(value)
        except (ValueError, OverflowError):
            pass
    reject(field, f"{field!r} is {_shown(value)}; expected {_DATE_FORM}")


def json_safe(value: object) -> bool:
    """True when ``value`` is plain JSON: dicts with string keys, lists, str, finite numbers, bool, null."""
    if value is None or isinstance(value, str | bool | int):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(json_safe(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and json_safe(v) for k, v in value.items())
    return False


def _attributes(reject: _Reject, obj: Mapping[str, Any]) -> dict[str, Any]:
    value = obj.get("attributes")
    if value is None:
        return {}
    if not isinstance(value, dict):
        reject("attributes", f"'attributes' must be a JSON object, not {_shown(value)}")
    if not json_safe(value):
        reject(
            "attributes",
            "'attributes' must hold only JSON values (objects, lists, strings,"
            " finite numbers, true/false, null)",
        )
    return value


def _edges(reject: _Reject, obj: Mapping[str, Any], uid: str) -> tuple[Edge, ...]:
    value = obj.get("edges")
    if value is None:
        return ()
    if not isinstance(value, list):
        reject(
            "edges",
            f"'edges' must be a list of {{label, to, position}} objects, not {_shown(value)}",
        )
    edges: dict[tuple[str, str], Edge] = {}
    for index, item in enumerate(value):
        where = f"edges[{index}]"
        if not isinstance(item, dict):
            reject(where, f"{where} must be an object {{label, to, position}}, not {_shown(item)}")
        unknown = sorted(set(item) - set(EDGE_KEYS))
        if unknown:
            reject(
                f"{where}.{unknown[0]}",
                f"{where} has the unknown key {unknown[0]!r}; an edge has only: {', '.join(EDGE_KEYS)}",
            )
        label = item.get("label")
        if label not in _LABEL_SET:
            reject(
                f"{where}.label",
                f"edge label {_shown(label)} is not allowed; use one of: {', '.join(LABELS)}",
            )
        target = _uid_text(reject, f"{where}.to", item.get("to"))
        position = item.get("position")
        if position is not None and (not isinstance(position, int) or isinstance(position, bool)):
            reject(
                f"{where}.position",
                f"{where}.position must be an integer or null, not {_shown(position)}",
            )
        if target == uid:
            reject(f"{where}.to", f"{where} points at the record itself ({uid!r}); remove it")
        key = (label, target)
        seen = edges.get(key)
        if seen is not None and seen.position != position:
            reject(
                f"{where}.position",
                f"edge {label} → {target!r} is given twice, with positions"
                f" {seen.position} and {position}; keep one",
            )
        edges.setdefault(key, Edge(uid, label, target, position))
    return tuple(edges.values())


def _acl(
    reject: _Reject, obj: Mapping[str, Any], default_acl: Sequence[str] | None
) -> tuple[str, ...]:
    if "acl" not in obj:
        if default_acl is None:
            reject("acl", _NO_ACL)
        # A bad default is the caller's request, not this record: InvalidRequest.
        return tuple(sorted({check_principal(principal) for principal in default_acl}))
    value = obj["acl"]
    if not isinstance(value, list):
        reject("acl", f"'acl' must be a list of principals, not {_shown(value)}")
    for principal in value:
        try:
            check_principal(principal)
        except InputError as exc:
            reject("acl", exc.message)
    return tuple(sorted(set(value)))


def record_to_entity(
    obj: object,
    *,
    file: str,
    line: int | None,
    default_acl: Sequence[str] | None,
    source: str | None,
) -> Entity:
    """Validate one canonical record and build its :class:`Entity`.

    ``default_acl`` is taken when the record has no ``acl`` key (``--acl``);
    with none, the record is rejected. ``source`` (``--source``) replaces the
    record's own. Raises :class:`InvalidRecord` naming the file, line, uid and
    field, and what was expected.
    """
    reject = _Reject(file, line)
    if not isinstance(obj, dict):
        reject(None, f"a record must be a JSON object, not {_shown(obj)}")
    if isinstance(obj.get("uid"), str) and obj["uid"].strip():
        reject.uid = obj["uid"][:MAX_UID_CHARS]
    unknown = [key for key in obj if key not in _RECORD_KEY_SET]
    if unknown:
        reject(
            unknown[0],
            f"unknown key {unknown[0]!r}; a record has only: {', '.join(RECORD_KEYS)}"
            " (put anything else under 'attributes')",
        )
    if "uid" not in obj:
        reject("uid", "'uid' is missing; every record needs a non-empty string 'uid'")
    uid = _uid_text(reject, "uid", obj["uid"])
    kind = _required_text(reject, obj, "type")
    title = _required_text(reject, obj, "title")
    body = _required_text(reject, obj, "body")
    if len(body) > MAX_BODY_CHARS:
        reject(
            "body",
            f"'body' has {len(body):,} characters; the limit is {MAX_BODY_CHARS:,}."
            " Split the document into several records",
        )
    record_source = _optional_text(reject, obj, "source")
    status = _optional_text(reject, obj, "status")
    href = _optional_text(reject, obj, "href")
    return Entity(
        uid=uid,
        type=kind,
        title=title,
        body=body,
        source=source if source is not None else (record_source or ""),
        status=status or "",
        created_at=_timestamp(reject, obj, "created_at"),
        updated_at=_timestamp(reject, obj, "updated_at"),
        href=href,
        attributes=_attributes(reject, obj),
        edges=_edges(reject, obj, uid),
        acl=_acl(reject, obj, default_acl),
    )
