"""Canonical ingest records → :class:`Entity`, or a :class:`Rejection` saying what to fix.

A record is one JSON object with the keys of :data:`RECORD_KEYS` (DESIGN §1).
Every loader ends here, so every format is held to the same rules, and the
bounds are those of :mod:`knowledge_store.model` (docs/cli.md, "Record limits").
Whatever passes here, every engine and every derived index can store.

JSON text is read with :func:`loads_strict`: a duplicate key (at any depth),
nesting deeper than :data:`~knowledge_store.model.MAX_JSON_DEPTH`, an integer
outside int64, ``NaN``/``Infinity`` or a number that overflows to infinity
are :class:`JsonProblem` errors, never silently taken.
"""

from __future__ import annotations

import json
import json.scanner
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from knowledge_store.errors import InputError, InvalidRecord, InvalidRequest, Rejection
from knowledge_store.model import (
    ACL_FROM,
    ENTITY_FIELDS,
    FACET_NAMES,
    JSON_INT_RANGE,
    LABELS,
    MAX_ACL_PRINCIPALS,
    MAX_ATTRIBUTE_DEPTH,
    MAX_ATTRIBUTES_BYTES,
    MAX_BODY_CHARS,
    MAX_DATE_CHARS,
    MAX_EDGE_POSITION,
    MAX_EDGES,
    MAX_HREF_BYTES,
    MAX_JSON_DEPTH,
    MAX_NAME_CHARS,
    MAX_TITLE_CHARS,
    MAX_UID_CHARS,
    Edge,
    Entity,
    check_principal,
    name_problem,
    normalize_timestamp,
    printable,
    text_problem,
)

__all__ = [
    "EDGE_KEYS",
    "MAX_BODY_CHARS",
    "MAX_UID_CHARS",
    "NO_ACL",
    "RECORD_KEYS",
    "REQUIRED_KEYS",
    "JsonProblem",
    "json_objects",
    "json_safe",
    "loads_strict",
    "raw_decode_strict",
    "read_lines",
    "record_to_entity",
    "strict_problem_line",
]

RECORD_KEYS: tuple[str, ...] = (*ENTITY_FIELDS, "edges", "acl")
#: Keys every record has (``acl`` too, unless the ingest gives an ``--acl`` default).
REQUIRED_KEYS: tuple[str, ...] = ("uid", "type", "title", "body")
EDGE_KEYS: tuple[str, ...] = ("label", "to", "position")
_RECORD_KEY_SET = frozenset(RECORD_KEYS)
_LABEL_SET = frozenset(LABELS)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_LINE_BREAKS = re.compile(r"[\t\n\r\x0b\x0c\x85\u2028\u2029]+")
_DATE_FORM = (
    "an ISO 8601 date or datetime in the years 0001–9999, e.g. 2024-05-01 or 2024-05-01T12:00:00Z"
)
#: Why a record without an ``acl`` is refused when the batch has no default.
NO_ACL = (
    "no acl and no default acl for the batch: nothing becomes public silently;"
    ' add "acl": [...] to the record, or give the batch a default acl (e.g. everyone)'
)
_INT_DIGITS = len(str(JSON_INT_RANGE[1])) + 1


# -- strict JSON --------------------------------------------------------------------------


class JsonProblem(ValueError):
    """A JSON text that parses but is not taken: duplicate keys, too deep, bad numbers."""

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.msg = message
        self.key = key
        #: where the innermost object holding the problem starts (:func:`strict_problem_line`)
        self.offset: int | None = None


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise JsonProblem(
                f"the key {_shown(key)} appears twice in one object; a key may appear once"
                " (the last one would silently win)",
                key=printable(key),
            )
        out[key] = value
    return out


def _int(text: str) -> int:
    if len(text.lstrip("-")) > _INT_DIGITS:
        raise JsonProblem(f"an integer of {len(text):,} digits; integers must fit in 64 bits")
    value = int(text)
    if not JSON_INT_RANGE[0] <= value <= JSON_INT_RANGE[1]:
        raise JsonProblem(f"the integer {text} does not fit in 64 bits")
    return value


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonProblem(f"the number {text[:40]} is out of range (it overflows to infinity)")
    return value


def _constant(name: str) -> NoReturn:
    raise JsonProblem(f"{name} is not JSON; numbers must be finite")


_DECODER = json.JSONDecoder(
    object_pairs_hook=_unique_keys, parse_int=_int, parse_float=_float, parse_constant=_constant
)


def _check_depth(value: object) -> None:
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children: Sequence[object] = (
            list(item.values())
            if isinstance(item, dict)
            else item
            if isinstance(item, list)
            else ()
        )
        if children and depth >= MAX_JSON_DEPTH:
            raise JsonProblem(f"the JSON nests deeper than {MAX_JSON_DEPTH} levels")
        stack.extend((child, depth + 1) for child in children)


def raw_decode_strict(text: str, at: int = 0) -> tuple[Any, int]:
    """``json.JSONDecoder.raw_decode`` with the rules of :func:`loads_strict`.

    Raises ``json.JSONDecodeError`` (syntax, with a position) or :class:`JsonProblem`.
    """
    try:
        value, end = _DECODER.raw_decode(text, at)
    except RecursionError:
        raise JsonProblem(f"the JSON nests deeper than {MAX_JSON_DEPTH} levels") from None
    _check_depth(value)
    return value, end


def strict_problem_line(text: str) -> int | None:
    """The line (1-based) where the innermost object that :func:`loads_strict` refuses in
    ``text`` starts — a duplicate key's object in a multi-line document — or None.

    Decodes again with the standard library's pure-Python scanner, whose object parser is
    called with its position (the C scanner's is not): only on an error path, small texts.
    """
    decoder = json.JSONDecoder(
        object_pairs_hook=_unique_keys, parse_int=_int, parse_float=_float, parse_constant=_constant
    )
    parse_object = decoder.parse_object  # type: ignore[attr-defined]

    def located(s_and_end: tuple[str, int], *rest: Any) -> Any:
        try:
            return parse_object(s_and_end, *rest)
        except JsonProblem as exc:
            if exc.offset is None:
                exc.offset = s_and_end[1] - 1  # the '{' (the scanner passes the index after it)
            raise

    decoder.parse_object = located  # type: ignore[attr-defined]
    decoder.scan_once = json.scanner.py_make_scanner(decoder)  # type: ignore[attr-defined]
    try:
        decoder.decode(text)
    except JsonProblem as exc:
        return None if exc.offset is None else text.count("\n", 0, exc.offset) + 1
    except (ValueError, RecursionError):
        return None
    return None


def loads_strict(text: str) -> Any:
    """One JSON value, held to the rules in the module docstring (both errors are ValueError)."""
    start = len(text) - len(text.lstrip())
    value, end = raw_decode_strict(text, start)
    if text[end:].strip():
        raise json.JSONDecodeError("extra data after the JSON value", text, end)
    return value


def read_lines(path: str | Path) -> list[str]:
    """The lines of a small input file the caller names (memberships, queries, judgements);
    one that can't be read is the caller's input error, naming it."""
    try:
        return Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # ValueError: a NUL in the path
        raise InvalidRequest(f"cannot read {path}: {exc}", file=str(path)) from None


def json_objects(path: str | Path, keys: Sequence[str], expected: str) -> Iterator[dict[str, Any]]:
    """Each non-blank line of the JSON Lines file ``path`` as an object holding ``keys``
    (parsed as :func:`loads_strict` does: a duplicate key would silently win). Any other line
    is the caller's input error: ``FILE:LINE: expected <expected> (what is wrong)``."""
    for line_no, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        try:
            obj = loads_strict(line)
            if not isinstance(obj, dict):
                why = f"it is not a JSON object: {line.strip()[:80]}"
            else:
                why = next((f"it has no {key!r}" for key in keys if key not in obj), "")
        except json.JSONDecodeError as exc:
            why = f"not JSON: {exc.msg} at column {exc.colno}"
        except JsonProblem as exc:
            why = exc.msg
        if why:
            raise InvalidRequest(
                f"{path}:{line_no}: expected {expected} ({why})", file=str(path), line=line_no
            )
        yield obj


# -- records ---------------------------------------------------------------------------------


class _Reject:
    """Builds the rejections of one record: where it is, and its uid once known."""

    def __init__(self, file: str, line: int | None) -> None:
        self.file = file
        self.line = line
        self.uid: str | None = None

    def __call__(self, field: str | None, message: str) -> NoReturn:
        raise InvalidRecord(Rejection(self.file, self.line, self.uid, field, message))


def _shown(value: object) -> str:
    if isinstance(value, str) and len(value) > 60:
        value = value[:60]
    try:
        text = json.dumps(value, ensure_ascii=False, default=repr)
    except (ValueError, RecursionError):
        text = type(value).__name__
    text = printable(text)
    return text if len(text) <= 60 else text[:57] + "..."


def _name(reject: _Reject, field: str, value: object, limit: int = MAX_NAME_CHARS) -> str:
    """A name: a uid, an edge target, a type, source or status (see ``model.name_problem``)."""
    if not isinstance(value, str) or not value.strip():
        reject(field, f"{field!r} must be a non-empty string, not {_shown(value)}")
    problem = name_problem(value, limit)
    if problem is not None:
        reject(field, f"{field!r} {problem}")
    return value


def _required(reject: _Reject, obj: Mapping[str, Any], field: str) -> object:
    if field not in obj:
        reject(field, f"{field!r} is missing; every record needs a non-empty string {field!r}")
    value = obj[field]
    if not isinstance(value, str) or not value.strip():
        reject(field, f"{field!r} must be a non-empty string, not {_shown(value)}")
    return value


def _title(reject: _Reject, obj: Mapping[str, Any]) -> str:
    """The title: one line of text. Tabs and line breaks become one space; other controls are
    rejected."""
    value = str(_required(reject, obj, "title"))
    problem = text_problem(value, MAX_TITLE_CHARS)
    if problem is not None:
        reject("title", f"'title' {problem}")
    value = _LINE_BREAKS.sub(" ", value)
    control = _CONTROL.search(value)
    if control:
        reject(
            "title",
            f"'title' must not contain control characters (U+{ord(control.group()):04X})",
        )
    return value


def _body(reject: _Reject, obj: Mapping[str, Any]) -> str:
    value = str(_required(reject, obj, "body"))
    if len(value) > MAX_BODY_CHARS:
        reject(
            "body",
            f"'body' has {len(value):,} characters; the limit is {MAX_BODY_CHARS:,}."
            " Split the document into several records",
        )
    problem = text_problem(value, MAX_BODY_CHARS)
    if problem is not None:
        reject("body", f"'body' {problem}")
    return value


def _optional_name(reject: _Reject, obj: Mapping[str, Any], field: str) -> str:
    value = obj.get(field)
    if value is None or value == "":
        return ""
    if not isinstance(value, str):
        reject(field, f"{field!r} must be a string or null, not {_shown(value)}")
    return _name(reject, field, value)


def _href(reject: _Reject, obj: Mapping[str, Any]) -> str | None:
    value = obj.get("href")
    if value is None:
        return None
    if not isinstance(value, str):
        reject("href", f"'href' must be a string or null, not {_shown(value)}")
    problem = text_problem(value, MAX_HREF_BYTES)
    if problem is None and _CONTROL.search(value):
        problem = "must not contain control characters (newline, tab, NUL …)"
    if problem is None and len(value.encode()) > MAX_HREF_BYTES:
        problem = f"takes {len(value.encode()):,} bytes in UTF-8; the limit is {MAX_HREF_BYTES:,}"
    if problem is not None:
        reject("href", f"'href' {problem}")
    return value


def _timestamp(reject: _Reject, obj: Mapping[str, Any], field: str) -> str | None:
    value = obj.get(field)
    if value is None:
        return None
    if isinstance(value, str) and len(value) <= MAX_DATE_CHARS:
        try:
            return normalize_timestamp(value)
        except ValueError:
            pass
    reject(field, f"{field!r} is {_shown(value)}; expected {_DATE_FORM}")


def json_safe(value: object) -> bool:
    """True when ``value`` is plain JSON: dicts with string keys, lists, str, finite numbers, bool, null."""
    return _json_problem(value, 1, [MAX_ATTRIBUTES_BYTES]) is None


def _json_problem(value: object, depth: int, budget: list[int]) -> str | None:
    """What makes ``value`` more than plain, bounded JSON (see ``_attributes``), or None.

    ``budget`` counts down the values visited (each takes at least one byte of JSON),
    so that a huge structure is refused without walking all of it.
    """
    budget[0] -= 1
    if budget[0] < 0:
        return f"takes more than {MAX_ATTRIBUTES_BYTES:,} bytes as JSON"
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        problem = text_problem(value, MAX_ATTRIBUTES_BYTES)
        return None if problem is None else f"holds a string that {problem}"
    if isinstance(value, int):
        if JSON_INT_RANGE[0] <= value <= JSON_INT_RANGE[1]:
            return None
        return "holds an integer that does not fit in 64 bits"
    if isinstance(value, float):
        return None if math.isfinite(value) else "holds NaN or an infinity"
    if depth > MAX_ATTRIBUTE_DEPTH and isinstance(value, list | dict):
        return f"nests deeper than {MAX_ATTRIBUTE_DEPTH} levels"
    if isinstance(value, list):
        for item in value:
            problem = _json_problem(item, depth + 1, budget)
            if problem is not None:
                return problem
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"has the key {_shown(key)}, which is not a string"
            key_problem = name_problem(key, MAX_NAME_CHARS)
            if key_problem is not None:
                return f"has the key {_shown(key)}, which {key_problem}"
            problem = _json_problem(item, depth + 1, budget)
            if problem is not None:
                return problem
        return None
    return f"holds a {type(value).__name__}, which is not JSON"


def _attributes(reject: _Reject, obj: Mapping[str, Any]) -> dict[str, Any]:
    value = obj.get("attributes")
    if value is None:
        return {}
    if not isinstance(value, dict):
        reject("attributes", f"'attributes' must be a JSON object, not {_shown(value)}")
    problem = _json_problem(value, 1, [MAX_ATTRIBUTES_BYTES])
    if problem is not None:
        reject(
            "attributes",
            f"'attributes' {problem}; it must hold only JSON values (objects, lists, strings,"
            " 64-bit integers, finite numbers, true/false, null)",
        )
    size = len(
        json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode()
    )
    if size > MAX_ATTRIBUTES_BYTES:
        reject(
            "attributes",
            f"'attributes' takes {size:,} bytes as JSON; the limit is {MAX_ATTRIBUTES_BYTES:,}."
            " Put long text in the body",
        )
    return value


def _edge(reject: _Reject, where: str, item: object, uid: str) -> Edge:
    if not isinstance(item, dict):
        reject(where, f"{where} must be an object {{label, to, position}}, not {_shown(item)}")
    unknown = sorted(str(key) for key in set(item) - set(EDGE_KEYS))
    if unknown:
        reject(
            f"{where}.{printable(unknown[0])}",
            f"{where} has the unknown key {_shown(unknown[0])}; an edge has only:"
            f" {', '.join(EDGE_KEYS)}",
        )
    label = item.get("label")
    if label not in _LABEL_SET:
        reject(
            f"{where}.label",
            f"edge label {_shown(label)} is not allowed; use one of: {', '.join(LABELS)}",
        )
    target = _name(reject, f"{where}.to", item.get("to"), MAX_UID_CHARS)
    position = item.get("position")
    if position is not None and (
        not isinstance(position, int)
        or isinstance(position, bool)
        or not 0 <= position <= MAX_EDGE_POSITION
    ):
        reject(
            f"{where}.position",
            f"{where}.position must be a whole number from 0 to {MAX_EDGE_POSITION:,} or null,"
            f" not {_shown(position)}",
        )
    if target == uid:
        reject(f"{where}.to", f"{where} points at the record itself ({uid!r}); remove it")
    return Edge(uid, str(label), target, position)


def _edges(reject: _Reject, obj: Mapping[str, Any], uid: str) -> tuple[Edge, ...]:
    value = obj.get("edges")
    if value is None:
        return ()
    if not isinstance(value, list):
        reject(
            "edges",
            f"'edges' must be a list of {{label, to, position}} objects, not {_shown(value)}",
        )
    if len(value) > MAX_EDGES:
        reject("edges", f"'edges' holds {len(value):,} edges; the limit is {MAX_EDGES:,}")
    edges: dict[tuple[str, str], Edge] = {}
    for index, item in enumerate(value):
        where = f"edges[{index}]"
        edge = _edge(reject, where, item, uid)
        key = (edge.label, edge.dst)
        seen = edges.get(key)
        if seen is not None and seen.position != edge.position:
            reject(
                f"{where}.position",
                f"edge {edge.label} → {edge.dst!r} is given twice, with positions"
                f" {seen.position} and {edge.position}; keep one",
            )
        edges.setdefault(key, edge)
    return tuple(edges.values())


def _acl(
    reject: _Reject, obj: Mapping[str, Any], default_acl: Sequence[str] | None
) -> tuple[str, ...]:
    if "acl" not in obj:
        if default_acl is None:
            reject("acl", NO_ACL)
        # A bad default is the caller's request, not this record: InvalidRequest.
        return tuple(sorted({check_principal(principal) for principal in default_acl}))
    value = obj["acl"]
    if not isinstance(value, list):
        reject("acl", f"'acl' must be a list of principals, not {_shown(value)}")
    if len(value) > MAX_ACL_PRINCIPALS:
        reject("acl", f"'acl' names {len(value):,} principals; the limit is {MAX_ACL_PRINCIPALS:,}")
    for principal in value:
        try:
            check_principal(principal)
        except InputError as exc:
            reject("acl", exc.message)
    return tuple(sorted(set(value)))


def _source(reject: _Reject, obj: Mapping[str, Any], source: str | None) -> str:
    if source is None:
        return _optional_name(reject, obj, "source")
    problem = name_problem(source, MAX_NAME_CHARS) if isinstance(source, str) else "is not text"
    if problem is not None:
        # The caller's option, not this record: InvalidRequest, like a bad default ACL.
        raise InvalidRequest(f"the source {_shown(source)} {problem}", field="source")
    return source


def not_a_record(obj: object) -> str | None:
    """Why ``obj`` cannot be a record at all, or ``None`` when it is a JSON object."""
    return None if isinstance(obj, dict) else f"a record must be a JSON object, not {_shown(obj)}"


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
    if (problem := not_a_record(obj)) is not None:
        reject(None, problem)
    assert isinstance(obj, dict)
    if isinstance(obj.get("uid"), str) and obj["uid"].strip():
        reject.uid = printable(obj["uid"][:MAX_UID_CHARS])
    unknown = [key for key in obj if key not in _RECORD_KEY_SET]
    if unknown:
        shown = printable(str(unknown[0]))
        reject(
            shown,
            f"unknown key {shown!r}; a record has only: {', '.join(RECORD_KEYS)}"
            " (put anything else under 'attributes')",
        )
    if "uid" not in obj:
        reject("uid", "'uid' is missing; every record needs a non-empty string 'uid'")
    uid = _name(reject, "uid", obj["uid"], MAX_UID_CHARS)
    kind = _name(reject, "type", _required(reject, obj, "type"))
    title = _title(reject, obj)
    body = _body(reject, obj)
    attributes = _attributes(reject, obj)
    edges = _edges(reject, obj, uid)
    _check_acl_from(reject, uid, attributes, edges)
    return Entity(
        uid=uid,
        type=kind,
        title=title,
        body=body,
        source=_source(reject, obj, source),
        status=_optional_name(reject, obj, "status"),
        facets={name: _optional_name(reject, obj, name) for name in FACET_NAMES},
        created_at=_timestamp(reject, obj, "created_at"),
        updated_at=_timestamp(reject, obj, "updated_at"),
        href=_href(reject, obj),
        attributes=attributes,
        edges=edges,
        acl=_acl(reject, obj, default_acl),
    )


def _check_acl_from(
    reject: _Reject, uid: str, attributes: Mapping[str, Any], edges: Sequence[Edge]
) -> None:
    """A record that shares another entity's ACL (``attributes.acl_from``) is derived from
    it, and says so with a ``partOf`` edge to it: the store finds a parent's derived
    entities by that edge (to delete them with it, and to give them its ACL)."""
    parent = attributes.get(ACL_FROM)
    if parent is None or parent == uid:
        return
    if not isinstance(parent, str):
        reject(
            f"attributes.{ACL_FROM}", f"'attributes.{ACL_FROM}' names a uid, not {_shown(parent)}"
        )
    if not any(e.label == "partOf" and e.dst == parent for e in edges):
        reject(
            f"attributes.{ACL_FROM}",
            f"'attributes.{ACL_FROM}' says this record shares the ACL of {parent!r}; add the"
            f' edge that says it is part of it ({{"label": "partOf", "to": {parent!r}}}),'
            f" or drop {ACL_FROM} to give it an ACL of its own",
        )
