"""Stored text on a terminal: shown as text, never obeyed as markup or control sequences.

Titles, uids, headings, chunk text, principals and error messages come from
data somebody else wrote. The human CLI output (rich) would otherwise read
``[/]`` or ``[link=…]`` in a title as markup — crashing on the first and
obeying the second — and pass ``ESC`` sequences to the terminal (clear the
screen, set the title, write a hyperlink). :func:`safe` is the one way data
reaches rich: control characters (C0, DEL, C1) and the bidirectional
overrides that reorder what a line appears to say become ``�`` (whitespace
controls a space), and rich markup is escaped. The ``--json`` output needs
none of this: JSON escapes control characters itself.
"""

from __future__ import annotations

import re

from rich.markup import escape

__all__ = ["safe", "strip_controls"]

_WHITESPACE = re.compile(r"[\t\n\r\v\f]")
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def strip_controls(text: str) -> str:
    """``text`` with whitespace controls as spaces and every other control character as ``�``."""
    return _CONTROLS.sub("\ufffd", _WHITESPACE.sub(" ", text))


def safe(value: object) -> str:
    """``value`` as text for rich: control characters replaced, markup escaped."""
    return escape(strip_controls(str(value)))
