"""What a document reader answers, from the bounded worker to the loader: the parts of one
file (a PDF is one part; an e-book a part per chapter; a mailbox a part per message), or
why it could not be read. Plain values that pickle; nothing here imports a parser.

A part's ``body`` is Markdown; a paged document marks its places in it with
:func:`~knowledge_store.ingest.chunking.location_marker`, so that each chunk knows its
page, slide or rows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Part", "Unreadable", "escape_line", "markdown_table", "paragraphs"]


@dataclass(frozen=True)
class Part:
    """One entity a document file makes.

    ``key`` None: the document itself (uid: the file's); else its part (uid:
    ``{file uid}#{key}``). ``parent``: the key of the part it belongs to (``""``: the
    document), None for the document. ``links``: the link targets it holds, relative to
    the file; for a part with a ``name`` (where it is inside its file: an e-book's
    chapter path), paths inside the file, resolved against the other parts' names. ``message_id`` /
    ``replies_to``: an e-mail's ``Message-ID`` and ``In-Reply-To``, threaded across the load.
    """

    key: str | None
    type: str
    title: str | None
    body: str
    attributes: dict[str, Any] = field(default_factory=dict)
    created_at: str | None = None
    updated_at: str | None = None
    parent: str | None = None
    position: int | None = None
    links: tuple[str, ...] = ()
    name: str | None = None
    message_id: str | None = None
    replies_to: str | None = None


@dataclass(frozen=True)
class Unreadable:
    """A file its reader could not read, and why (it goes to ``skipped`` with its path)."""

    reason: str


_MARKDOWN_START = re.compile(r"^(\s*)([#>]|```|~~~|<!--|[-+*]\s|\d+[.)]\s|=+\s*$|-+\s*$)")


def escape_line(line: str) -> str:
    """A line of extracted text that Markdown reads as text, not as a heading, quote, list,
    fence or marker."""
    return _MARKDOWN_START.sub(lambda m: m.group(1) + "\\" + m.group(2), line, count=1)


def paragraphs(blocks: list[str]) -> str:
    """Blocks of Markdown as one body: blank-line separated, empty ones left out."""
    return "\n\n".join(block.strip("\n") for block in blocks if block.strip())


def _cell(value: object) -> str:
    text = "" if value is None else str(value)
    return " ".join(text.split()).replace("|", "\\|")


def markdown_table(rows: list[list[object]]) -> str:
    """A pipe table: the first row its header, every row as wide as the widest."""
    if not rows:
        return ""
    width = max(len(row) for row in rows)
    cells = [[_cell(v) for v in row] + [""] * (width - len(row)) for row in rows]
    lines = ["| " + " | ".join(cells[0]) + " |", "|" + "---|" * width]
    lines += ["| " + " | ".join(row) + " |" for row in cells[1:]]
    return "\n".join(lines)
