"""Learn-style unit JSON: one unit object, or a list of them, per ``.json`` file.

``kind`` → type, ``source`` (Markdown) → body, ``partOf`` → a ``partOf`` edge
(with ``position`` when given), ``uid``/``title``/``href``/``acl`` as they are,
everything else → attributes. The entity's source is ``--source`` or ``learn``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from knowledge_store.errors import InvalidRecord, Rejection
from knowledge_store.ingest.loaders.base import LoadedRecord, Options, decode_utf8
from knowledge_store.ingest.loaders.code_samples import with_code_samples
from knowledge_store.ingest.records import JsonProblem, raw_decode_strict, record_to_entity

__all__ = ["LEARN_SOURCE", "learn_record", "read_learn"]

LEARN_SOURCE = "learn"
_AS_IS = ("uid", "title", "href", "acl")
_MAPPED = frozenset((*_AS_IS, "kind", "source", "partOf", "position"))


class _ItemProblem(ValueError):
    """A JSON problem (:class:`JsonProblem`) in the item that starts on ``line``."""

    def __init__(self, problem: JsonProblem, line: int) -> None:
        super().__init__(problem.msg)
        self.problem = problem
        self.line = line


def _json_items(text: str) -> list[tuple[int, Any]]:
    """The top-level object of ``text``, or each item of a top-level list, with its line.

    Raises ``json.JSONDecodeError``, or ``_ItemProblem`` naming the line of the item.
    """

    def skip(at: int) -> int:
        while at < len(text) and text[at] in " \t\r\n":
            at += 1
        return at

    def line_of(at: int) -> int:
        return text.count("\n", 0, at) + 1

    def decode(at: int) -> tuple[Any, int]:
        try:
            return raw_decode_strict(text, at)
        except JsonProblem as exc:
            raise _ItemProblem(exc, line_of(at)) from None

    at = skip(0)
    if not text.startswith("[", at):
        value, end = decode(at)
        if skip(end) != len(text):
            raise json.JSONDecodeError("extra data after the JSON value", text, skip(end))
        return [(line_of(at), value)]
    items: list[tuple[int, Any]] = []
    at = skip(at + 1)
    if text.startswith("]", at):
        at = skip(at + 1)
    else:
        while True:
            value, end = decode(at)
            items.append((line_of(at), value))
            at = skip(end)
            if text.startswith(",", at):
                at = skip(at + 1)
                continue
            if text.startswith("]", at):
                at = skip(at + 1)
                break
            raise json.JSONDecodeError("expected ',' or ']' in the list", text, at)
    if at != len(text):
        raise json.JSONDecodeError("extra data after the JSON list", text, at)
    return items


def learn_record(obj: object, *, file: str, line: int | None) -> dict[str, Any]:
    """The canonical record of one Learn unit. Raises :class:`InvalidRecord`."""
    if not isinstance(obj, dict):
        raise InvalidRecord(Rejection(file, line, None, None, "a Learn unit must be a JSON object"))
    uid = obj.get("uid") if isinstance(obj.get("uid"), str) else None
    for key, meaning in (("kind", "the unit's type"), ("source", "the unit's Markdown")):
        value = obj.get(key)
        if not isinstance(value, str) or not value.strip():
            shown = "missing" if key not in obj else f"{json.dumps(value)[:60]}"
            raise InvalidRecord(
                Rejection(
                    file,
                    line,
                    uid,
                    key,
                    f"{key!r} ({meaning}) is {shown}; a Learn unit needs a non-empty string {key!r}",
                )
            )
    record: dict[str, Any] = {key: obj[key] for key in _AS_IS if key in obj}
    record["type"] = obj["kind"]
    record["body"] = obj["source"]
    parents = obj.get("partOf")
    if parents is not None:
        targets = parents if isinstance(parents, list) else [parents]
        record["edges"] = [
            {"label": "partOf", "to": target, "position": obj.get("position")} for target in targets
        ]
    record["attributes"] = {key: value for key, value in obj.items() if key not in _MAPPED}
    return record


def read_learn(data: bytes, file: str, options: Options) -> Iterator[LoadedRecord | Rejection]:
    """The units of one Learn JSON file (its bytes), each followed by its code samples."""
    text = decode_utf8(data, file=file)
    if isinstance(text, Rejection):
        yield text
        return
    try:
        items = _json_items(text)
    except _ItemProblem as exc:
        yield Rejection(
            file,
            exc.line,
            None,
            exc.problem.key,
            f"{exc.problem.msg}; nothing of this file was taken",
        )
        return
    except json.JSONDecodeError as exc:
        yield Rejection(
            file,
            exc.lineno,
            None,
            None,
            f"malformed JSON: {exc.msg} at column {exc.colno};"
            " a Learn file holds one unit object or a list of them",
        )
        return
    source = options.source if options.source is not None else LEARN_SOURCE
    for line, obj in items:
        try:
            record = learn_record(obj, file=file, line=line)
            page = record_to_entity(
                record, file=file, line=line, default_acl=options.default_acl, source=source
            )
        except InvalidRecord as exc:
            yield exc.rejection
            continue
        page, samples, rejected = with_code_samples(page, file=file, line=line)
        yield LoadedRecord(file, line, page)
        yield from (LoadedRecord(file, line, sample, page.uid) for sample in samples)
        yield from rejected
