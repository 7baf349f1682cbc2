"""JSON Lines: one canonical record a line, taken as it is (never split into code samples)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO

from knowledge_store.errors import InvalidRecord, Rejection
from knowledge_store.ingest.loaders.base import LoadedRecord, Options, decode_utf8
from knowledge_store.ingest.records import JsonProblem, loads_strict, record_to_entity

__all__ = ["json_lines", "read_jsonl"]


def json_lines(lines: Iterable[bytes], file: str) -> Iterator[tuple[int, Any] | Rejection]:
    """Each non-blank line of ``file`` as ``(line number, parsed JSON)``, or a rejection that
    names the line (not UTF-8, not JSON, a JSON value beyond the bounds). Blank lines are
    skipped but counted, so the numbers are the file's own."""
    offset = 0
    for number, raw in enumerate(lines, start=1):
        start, offset = offset, offset + len(raw)
        text = decode_utf8(raw, file=file, line=number, offset=start)
        if isinstance(text, Rejection):
            yield text
            continue
        if not text.strip():
            continue
        try:
            yield number, loads_strict(text)
        except json.JSONDecodeError as exc:
            yield Rejection(
                file,
                number,
                None,
                None,
                f"malformed JSON: {exc.msg} at column {exc.colno}; each line must be one JSON object",
            )
        except JsonProblem as exc:
            yield Rejection(
                file, number, None, exc.key, f"{exc.msg}; nothing of this line was taken"
            )


def read_jsonl(stream: BinaryIO, file: str, options: Options) -> Iterator[LoadedRecord | Rejection]:
    """Each line of ``stream`` (the file ``file``, closed when read) as a record or a rejection.

    Blank lines are skipped.
    """
    with stream:
        for item in json_lines(stream, file):
            if isinstance(item, Rejection):
                yield item
                continue
            number, obj = item
            try:
                entity = record_to_entity(
                    obj,
                    file=file,
                    line=number,
                    default_acl=options.default_acl,
                    source=options.source,
                )
            except InvalidRecord as exc:
                yield exc.rejection
                continue
            yield LoadedRecord(file, number, entity)
