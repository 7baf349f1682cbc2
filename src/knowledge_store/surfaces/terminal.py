"""Stored text on a terminal: shown as text, never obeyed as markup or control sequences.

Titles, uids, headings, chunk text, principals and error messages come from
data somebody else wrote. The human CLI output (rich) would otherwise read
``[/]`` or ``[link=…]`` in a title as markup — crashing on the first and
obeying the second — and pass ``ESC`` sequences to the terminal (clear the
screen, set the title, write a hyperlink). :func:`safe` is the one way data
reaches rich: control characters (C0, DEL, C1) and the bidirectional
overrides that reorder what a line appears to say become ``�`` (whitespace
controls a space), and rich markup is escaped. The ``--json`` output needs
none of this — JSON escapes control characters itself — but it must always be
valid UTF-8: :func:`json_text` writes it.

Both show text that is not Unicode the one way :func:`~knowledge_store.model.printable`
does: a byte of a file name that is not UTF-8 as ``\\xNN`` (``docs/bad\\xffname.md``, a
path a shell takes as ``$'docs/bad\\xffname.md'``), any other lone surrogate as
``\\uXXXX``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from rich.markup import escape

from knowledge_store.model import printable

__all__ = ["json_text", "safe", "strip_controls"]

_SURROGATE = re.compile("[\ud800-\udfff]")

_WHITESPACE = re.compile(r"[\t\n\r\v\f]")
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def strip_controls(text: str) -> str:
    """``text`` with whitespace controls as spaces and every other control character as ``�``."""
    return _CONTROLS.sub("\ufffd", _WHITESPACE.sub(" ", text))


def safe(value: object) -> str:
    """``value`` as text for rich: control characters replaced, markup escaped, text that is
    not Unicode escaped."""
    return escape(strip_controls(printable(str(value))))


def json_text(payload: Any, *, indent: int | None = None) -> str:
    """``payload`` as JSON text that is always valid UTF-8 (``ensure_ascii=False``): a lone
    surrogate in a string — a file name that is not UTF-8 — is written as the escape
    :func:`~knowledge_store.model.printable` gives, inside the JSON string."""
    text = json.dumps(payload, ensure_ascii=False, indent=indent)
    return _SURROGATE.sub(lambda m: json.dumps(printable(m.group()))[1:-1], text)
