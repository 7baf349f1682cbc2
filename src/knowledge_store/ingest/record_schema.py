"""The JSON Schema of a canonical ingest record, built from the validator's own constants.

:func:`record_json_schema` is the one source of the schema (docs/records.md
describes the same record in prose); nothing is written by hand into a JSON
file. Its keys, required keys, labels, principal pattern and size limits come
from :mod:`knowledge_store.ingest.records` and :mod:`knowledge_store.model`, so
a change there changes the schema. tests/ingest/test_record_schema.py holds the
two in agreement: every record the schema accepts (and that keeps the rules of
:data:`RULES_BEYOND_SCHEMA`) the JSON Lines loader accepts, and every record of
a corpus of bad ones that the loader rejects, the schema rejects too, unless a
rule beyond the schema is what it breaks.

Patterns are written to mean the same in Python's ``re`` and in ECMA-262
(the regex dialect of JSON Schema): no ``$`` anchors where a trailing newline
would matter — "no control characters" is a ``not`` of a search instead.
"""

from __future__ import annotations

from typing import Any

from knowledge_store.ingest.records import (
    EDGE_KEYS,
    RECORD_KEYS,
    REQUIRED_KEYS,
)
from knowledge_store.model import (
    FACETS,
    LABELS,
    MAX_ACL_PRINCIPALS,
    MAX_BODY_CHARS,
    MAX_EDGE_POSITION,
    MAX_EDGES,
    MAX_HREF_BYTES,
    MAX_NAME_CHARS,
    MAX_TITLE_CHARS,
    MAX_UID_CHARS,
    PRINCIPAL_PATTERN,
)

__all__ = ["DATE_PATTERN", "RULES_BEYOND_SCHEMA", "SCHEMA_DIALECT", "record_json_schema"]

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

_YEAR = "([0-9]{3}[1-9]|[0-9]{2}[1-9][0-9]|[0-9][1-9][0-9]{2}|[1-9][0-9]{3})"  # 0001–9999
_MONTH = "(0[1-9]|1[0-2])"
_DAY = "(0[1-9]|[12][0-9]|3[01])"
_TIME = "([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9](\\.[0-9]{1,6})?)?"
_OFFSET = "(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
#: The date forms documented for ``created_at``/``updated_at``: a date, or a date and
#: time with an optional offset (none means UTC). The store reads a few more ISO 8601
#: forms (``20240501``, ``2024-W18-3``); these are the ones to write.
DATE_PATTERN = f"^{_YEAR}-{_MONTH}-{_DAY}([T ]{_TIME}{_OFFSET}?)?$"

#: Rules the loader enforces that a JSON Schema cannot state (cross-field, calendar, or
#: beyond JSON's own data model). They are listed in the schema's description too.
RULES_BEYOND_SCHEMA: tuple[str, ...] = (
    "created_at / updated_at name a real day and time (no 2024-02-30), within"
    " years 0001–9999 once converted to UTC",
    "an edge does not point at its own record",
    "an edge (label, to) given twice has the same position both times",
    "an edge position is written as an integer (2, not 2.0)",
    "numbers in attributes are finite (no NaN or Infinity)",
    "a uid appears once in one load",
    "names (uid, edge targets, type, source, status, principal ids, attribute keys) hold no"
    " invisible format characters (zero-width, bidi, soft hyphen …) and are in Unicode NFC",
    "attributes take at most 65,536 bytes as JSON, nest at most 16 levels, have names as"
    " keys, and hold integers that fit in 64 bits",
    "an href takes at most 2,000 bytes in UTF-8",
    "attributes.acl_from (the uid whose ACL the record shares) is a string, and the record"
    " has a partOf edge to that uid",
    "a key appears once in each object, at every depth, and a record nests at most 32"
    " levels (a parsed value can't show a repeated key)",
)

#: C0 and C1 control characters and DEL.
_CONTROL = "[\\x00-\\x1f\\x7f-\\x9f]"
#: Controls a title may hold: tabs and line breaks (they become one space).
_TITLE_CONTROL = "[\\x00-\\x08\\x0e-\\x1f\\x7f-\\x84\\x86-\\x9f]"
_NUL = "\\x00"
#: Not blank, no whitespace at either end (with ``_CONTROL`` excluded, ``$`` is safe).
_NAME = "^\\S(.*\\S)?$"


def _text(
    description: str, *, max_length: int | None = None, control: str = _NUL
) -> dict[str, Any]:
    """A required text field: not blank, without ``control`` characters (NUL at least)."""
    schema: dict[str, Any] = {
        "description": description,
        "type": "string",
        "pattern": "\\S",
        "not": {"pattern": control},
    }
    if max_length is not None:
        schema["maxLength"] = max_length
    return schema


def _name(description: str, max_length: int = MAX_NAME_CHARS) -> dict[str, Any]:
    """A name (a uid, a type, …): not blank, no surrounding whitespace, no control characters."""
    return {
        "description": description,
        "type": "string",
        "pattern": _NAME,
        "maxLength": max_length,
        "not": {"pattern": _CONTROL},
    }


def _uid(description: str) -> dict[str, Any]:
    """A uid or an edge target: a name of at most MAX_UID_CHARS."""
    return _name(description, MAX_UID_CHARS)


def _nullable(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "anyOf": [{"type": "null"}, schema]}


def _optional_name(description: str) -> dict[str, Any]:
    """A name, or "" or null for none."""
    return {
        "description": description,
        "anyOf": [{"type": "null"}, {"enum": [""]}, _name(description)],
    }


def _date(description: str) -> dict[str, Any]:
    return _nullable(description, {"type": "string", "pattern": DATE_PATTERN})


def _described(what: str, keys: tuple[str, ...], properties: dict[str, Any]) -> dict[str, Any]:
    """``properties`` in the validator's key order; a key added there fails here until described."""
    if set(keys) != set(properties):
        raise RuntimeError(f"the {what} schema does not match its keys {keys}")
    return {key: properties[key] for key in keys}


def _edge() -> dict[str, Any]:
    properties = {
        "label": {
            "description": "One of the nine edge labels; anything else is rejected.",
            "enum": list(LABELS),
        },
        "to": _uid(
            "The uid of the entity linked to. It need not exist yet: an edge to a"
            " missing or unreadable entity is invisible until it appears."
        ),
        "position": _nullable(
            "The order among siblings (a section's place in its chapter), or null.",
            {"type": "integer", "minimum": 0, "maximum": MAX_EDGE_POSITION},
        ),
    }
    return {
        "description": "A typed link from this record to another entity (by uid).",
        "type": "object",
        "required": ["label", "to"],
        "additionalProperties": False,
        "properties": _described("edge", EDGE_KEYS, properties),
    }


def _acl() -> dict[str, Any]:
    return {
        "description": (
            "The principals that may read the entity. [] is visible to nobody (default"
            " deny); duplicates are dropped."
        ),
        "type": "array",
        "maxItems": MAX_ACL_PRINCIPALS,
        "items": {
            "description": "everyone, user:<id> or group:<id> (an id of 1–256 characters).",
            "type": "string",
            "pattern": PRINCIPAL_PATTERN,
            "not": {"pattern": _CONTROL},
        },
    }


def _properties() -> dict[str, dict[str, Any]]:
    properties: dict[str, dict[str, Any]] = {
        "uid": _uid(
            "The entity's stable id: the merge key of every re-ingest, edge and ACL command."
        ),
        "type": _name("The entity's type (page, codeSample, ticket, …): an open vocabulary."),
        "title": _text(
            "The title shown in results; indexed with every chunk. Tabs and line breaks"
            " become one space.",
            max_length=MAX_TITLE_CHARS,
            control=_TITLE_CONTROL,
        ),
        "body": _text(
            "The text, Markdown or plain. Headings make the chunks' heading paths; fenced"
            " code in a page loaded from a folder or a Learn unit becomes codeSample"
            " entities. Split longer documents into several records.",
            max_length=MAX_BODY_CHARS,
        ),
        "source": _optional_name(
            "The system the record came from (docs, jira, …); a filter. The source an ingest"
            " is given replaces it."
        ),
        "status": _optional_name("A free status (published, open, closed, …); a filter."),
        **{f.name: _optional_name(f.record or "") for f in FACETS},
        "created_at": _date("When the entity was created; a filter and an aggregate dimension."),
        "updated_at": _date("When it last changed; a filter, an order and a dimension."),
        "href": _nullable(
            "Where the original lives (a URL or a path); returned as is.",
            {"type": "string", "maxLength": MAX_HREF_BYTES, "not": {"pattern": _CONTROL}},
        ),
        "attributes": _nullable(
            "Anything else, as JSON; stored and returned, not searched.", {"type": "object"}
        ),
        "edges": _nullable(
            "Typed links to other entities.",
            {"type": "array", "maxItems": MAX_EDGES, "items": _edge()},
        ),
        "acl": _acl(),
    }
    return _described("record", RECORD_KEYS, properties)


def record_json_schema(*, acl_default: bool = False) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one canonical record (one JSON Lines line).

    ``acl_default`` is the schema for an ingest that gives ``--acl``: then a record
    may leave ``acl`` out. Without it, ``acl`` is required, as the loader requires it.
    """
    rules = "".join(f"\n- {rule}" for rule in RULES_BEYOND_SCHEMA)
    return {
        "$schema": SCHEMA_DIALECT,
        "title": "knowledge-store record",
        "description": (
            "One entity to ingest: one JSON object a line in a .jsonl file (docs/records.md)."
            " Any key not listed is rejected; put extra data under attributes. The loader"
            f" also checks what a schema cannot say:{rules}"
        ),
        "type": "object",
        "required": [*REQUIRED_KEYS, *(() if acl_default else ("acl",))],
        "additionalProperties": False,
        "properties": _properties(),
        "examples": [
            {
                "uid": "runbook:rotate-keys",
                "type": "page",
                "title": "Rotating API keys",
                "body": "# Rotating API keys\n\nRotate every 90 days.",
                "source": "wiki",
                "updated_at": "2024-05-01",
                "edges": [{"label": "partOf", "to": "runbook:index", "position": 3}],
                "acl": ["group:sre"],
            }
        ],
    }
