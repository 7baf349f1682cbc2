"""Word and PowerPoint files (DOCX, PPTX) as Markdown, read with python-docx and python-pptx
(MIT; the ``docs`` extra), in the bounded worker.

DOCX: paragraphs in order, ``Title`` / ``Heading N`` styles as headings, list
paragraphs (numbered or bulleted, nested by level) as list items, runs of a code style
(``Source Code``, ``HTML Preformatted`` …) as a fenced block, hyperlinks as Markdown
links (a relative one becomes an ``xref`` where it names a loaded file), tables as pipe
tables. DOCX has no pages until it is laid out: its chunks carry their heading path only.

PPTX: a section per slide, ``## <its title>`` (else ``Slide N``), starting with a
location marker (``{"slide": N}``); its text frames in order (bullets by level),
tables, the text of grouped shapes, and its speaker notes under ``### Notes``.
"""

from __future__ import annotations

import io
import re
from datetime import UTC, datetime
from typing import Any

from knowledge_store.ingest.chunking import location_marker
from knowledge_store.ingest.loaders.parts import (
    Part,
    Unreadable,
    escape_line,
    markdown_table,
    paragraphs,
)

__all__ = ["read_docx", "read_pptx"]

_CODE_STYLES = ("source code", "html preformatted", "code", "preformatted", "verbatim")
_MAX_GROUP_DEPTH = 8


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    moment = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _core(properties: Any) -> tuple[str | None, dict[str, Any], str | None, str | None]:
    title = " ".join((properties.title or "").split()) or None
    attributes = {"author": properties.author} if properties.author else {}
    return title, attributes, _iso(properties.created), _iso(properties.modified)


# -- DOCX --------------------------------------------------------------------------------------


def _heading_level(style: str, below_title: int) -> int | None:
    """``Title`` is level 1; ``Heading N`` is N, one deeper in a document with a title."""
    name = style.lower()
    if name == "title":
        return 1
    if name.startswith("heading "):
        number = name.removeprefix("heading ").strip()
        if number.isdigit():
            return min(int(number) + below_title, 6)
    return None


def _inline(paragraph: Any) -> tuple[str, list[str]]:
    """A paragraph's text with its hyperlinks as Markdown links, and the link targets."""
    from docx.text.hyperlink import Hyperlink

    parts: list[str] = []
    links: list[str] = []
    for item in paragraph.iter_inner_content():
        text = item.text
        if isinstance(item, Hyperlink) and item.address:
            target = item.address + (f"#{item.fragment}" if item.fragment else "")
            links.append(target)
            parts.append(f"[{text}]({target.replace(' ', '%20')})")
        else:
            parts.append(text)
    return "".join(parts), links


_LIST_STYLE = re.compile(r"list(?: (?:bullet|number|paragraph|continue))?(?: (\d))?$")


def _list_level(paragraph: Any, style: str) -> int | None:
    """How deep a list item is (0 at the top), from its numbering, else its style's
    number (``List Bullet 2``); None for a paragraph that is not one."""
    p_pr = paragraph._p.pPr
    if p_pr is not None and p_pr.numPr is not None:
        ilvl = p_pr.numPr.ilvl
        return int(ilvl.val) if ilvl is not None and ilvl.val is not None else 0
    match = _LIST_STYLE.match(style.lower())
    if match is None:
        return None
    return int(match.group(1)) - 1 if match.group(1) else 0


def _table(table: Any) -> str:
    return markdown_table([[cell.text for cell in row.cells] for row in table.rows])


def read_docx(data: bytes, name: str) -> list[Part] | Unreadable:
    """The DOCX ``data`` as one part, or why it can't be read."""
    import docx
    from docx.opc.exceptions import PackageNotFoundError
    from docx.table import Table

    try:
        document = docx.Document(io.BytesIO(data))
    except (PackageNotFoundError, KeyError, ValueError) as exc:
        return Unreadable(f"not a Word document that can be read ({exc})")
    blocks: list[str] = []
    links: list[str] = []
    code: list[str] = []
    titled = any(
        p.style is not None and p.style.name.lower() == "title" for p in document.paragraphs
    )
    for item in document.iter_inner_content():
        if isinstance(item, Table):
            blocks.append(_table(item))
            continue
        style = item.style.name if item.style is not None else ""
        if any(word in style.lower() for word in _CODE_STYLES):
            code.append(item.text)
            continue
        if code:
            blocks.append("```\n" + "\n".join(code) + "\n```")
            code = []
        text, found = _inline(item)
        links.extend(found)
        if not text.strip():
            continue
        level = _heading_level(style, 1 if titled else 0)
        listed = _list_level(item, style)
        if level is not None:
            blocks.append(f"{'#' * level} {' '.join(text.split())}")
        elif listed is not None:
            marker = "1." if "number" in style.lower() else "-"
            blocks.append(f"{'  ' * listed}{marker} {' '.join(text.split())}")
        else:
            blocks.append("\n".join(escape_line(line) for line in text.splitlines()))
    if code:
        blocks.append("```\n" + "\n".join(code) + "\n```")
    title, attributes, created, modified = _core(document.core_properties)
    body = _join_lists(blocks)
    return [
        Part(
            key=None,
            type="document",
            title=title,
            body=body,
            attributes=attributes,
            created_at=created,
            updated_at=modified,
            links=tuple(links),
        )
    ]


def _join_lists(blocks: list[str]) -> str:
    """Blocks blank-line separated, but the items of one list on consecutive lines."""
    out: list[str] = []
    for block in blocks:
        item = block.lstrip().startswith(("- ", "1. "))
        if out and item and out[-1].lstrip().startswith(("- ", "1. ")):
            out[-1] += "\n" + block
        else:
            out.append(block)
    return paragraphs(out)


# -- PPTX --------------------------------------------------------------------------------------


def _shape_blocks(shape: Any, depth: int = 0) -> list[str]:
    from pptx.enum.shapes import MSO_SHAPE_TYPE

    if depth > _MAX_GROUP_DEPTH:
        return []
    if shape.shape_type == MSO_SHAPE_TYPE.GROUP:
        return [b for child in shape.shapes for b in _shape_blocks(child, depth + 1)]
    if getattr(shape, "has_table", False) and shape.has_table:
        rows = [[cell.text for cell in row.cells] for row in shape.table.rows]
        return [markdown_table(rows)]
    if not getattr(shape, "has_text_frame", False) or not shape.has_text_frame:
        return []
    lines = []
    for paragraph in shape.text_frame.paragraphs:
        text = " ".join(paragraph.text.split())
        if text:
            lines.append(f"{'  ' * paragraph.level}- {text}" if paragraph.level else text)
    return ["\n".join(lines)] if lines else []


def read_pptx(data: bytes, name: str) -> list[Part] | Unreadable:
    """The PPTX ``data`` as one part, a section per slide, or why it can't be read."""
    from pptx import Presentation
    from pptx.exc import PackageNotFoundError

    try:
        deck = Presentation(io.BytesIO(data))
    except (PackageNotFoundError, KeyError, ValueError) as exc:
        return Unreadable(f"not a PowerPoint file that can be read ({exc})")
    blocks: list[str] = []
    first_title: str | None = None
    for number, slide in enumerate(deck.slides, start=1):
        title_shape = slide.shapes.title
        heading = " ".join(title_shape.text.split()) if title_shape is not None else ""
        first_title = first_title or heading or None
        blocks.append(location_marker({"slide": number}))
        blocks.append(f"## {heading or f'Slide {number}'}")
        for shape in slide.shapes:
            if title_shape is not None and shape.shape_id == title_shape.shape_id:
                continue
            blocks.extend(_shape_blocks(shape))
        if slide.has_notes_slide:
            notes = slide.notes_slide.notes_text_frame
            text = notes.text.strip() if notes is not None else ""
            if text:
                blocks.append("### Notes")
                blocks.append("\n".join(escape_line(line) for line in text.splitlines()))
    title, attributes, created, modified = _core(deck.core_properties)
    attributes["slides"] = len(deck.slides)
    return [
        Part(
            key=None,
            type="presentation",
            title=title or first_title,
            body=paragraphs(blocks),
            attributes=attributes,
            created_at=created,
            updated_at=modified,
        )
    ]
