"""PDF files: the text layer of each page, headings from the outline or the font sizes.

Read with pypdfium2 (PDFium, Chrome's PDF engine; Apache-2.0/BSD-3; the ``docs``
extra), in the bounded worker (:mod:`.bounded`). Each page starts with a location
marker (``{"page": N}``), so a chunk never spans two pages and says which it is on.

Headings: the document's outline (bookmarks) where it has one — each entry a heading
at its page, where the entry's words start a line of that page, else at the top of the
page; otherwise the lines set larger than the body text (the most common size, by
characters), a level per size, largest first. Refused, with the reason: a file that
needs a password, one that is not a PDF PDFium can open, more than :data:`MAX_PAGES`
pages, and a document with no text layer (scanned pages: there is no OCR here).
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from knowledge_store.ingest.chunking import location_marker
from knowledge_store.ingest.loaders.parts import Part, Unreadable, escape_line

__all__ = ["MAX_PAGES", "MIN_TEXT_PER_PAGE", "read_pdf"]

#: A PDF with more pages is refused before any page is read.
MAX_PAGES = 5_000
#: Fewer characters of text than this per page, on average: no text layer (a scan).
MIN_TEXT_PER_PAGE = 16
#: Outline entries read at most, and how deep (an outline may loop or be huge).
_MAX_OUTLINE = 10_000
_OUTLINE_DEPTH = 6
#: A heading by font size: this much larger than the body text, and a short line. The body
#: text's size is the most common on lines of :data:`_PROSE_CHARS` or more (prose, not a
#: table of short cells or code).
_HEADING_RATIO = 1.08
_HEADING_CHARS = 200
_PROSE_CHARS = 40
_PDF_DATE = re.compile(r"D:(\d{4})(\d{2})?(\d{2})?(\d{2})?(\d{2})?(\d{2})?")


def _date(value: str | None) -> str | None:
    """A PDF date (``D:20240131120000Z``) as ISO 8601, or None."""
    match = _PDF_DATE.match(value or "")
    if match is None:
        return None
    year, month, day, hour, minute, second = (
        int(p) if p else d for p, d in zip(match.groups(), (0, 1, 1, 0, 0, 0), strict=True)
    )
    try:
        moment = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError:
        return None
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _outline(pdf: Any) -> dict[int, list[tuple[int, str]]]:
    """``page index → [(level, title)]`` of the outline, bounded in size and depth."""
    by_page: dict[int, list[tuple[int, str]]] = {}
    try:
        for count, item in enumerate(pdf.get_toc(max_depth=_OUTLINE_DEPTH)):
            if count >= _MAX_OUTLINE:
                break
            title = " ".join((item.get_title() or "").split())
            dest = item.get_dest()
            index = dest.get_index() if dest is not None else None
            if title and index is not None and index >= 0:
                by_page.setdefault(index, []).append((item.level + 1, title))
    except Exception:  # a damaged outline is no outline
        return {}
    return by_page


def _page_lines(page: Any) -> list[tuple[str, float]]:
    """The page's lines of text, each with its font size (the median of its letters')."""
    import pypdfium2.raw as raw

    textpage = page.get_textpage()
    try:
        count = textpage.count_chars()
        text = textpage.get_text_range() if count > 0 else ""
        sizes: list[float] | None = None
        if len(text) == count:
            sizes = [raw.FPDFText_GetFontSize(textpage, i) for i in range(count)]
    finally:
        textpage.close()
    lines: list[tuple[str, float]] = []
    start = 0
    for piece in re.split(r"(\r\n|\n|\r)", text):
        if piece in ("\r\n", "\n", "\r"):
            start += len(piece)
            continue
        size = 0.0
        if sizes is not None:
            letters = sorted(
                s
                for s, c in zip(sizes[start : start + len(piece)], piece, strict=False)
                if not c.isspace()
            )
            size = letters[len(letters) // 2] if letters else 0.0
        lines.append((piece.rstrip(), size))
        start += len(piece)
    return lines


def _heading_levels(pages: list[list[tuple[str, float]]]) -> tuple[float, dict[float, int]]:
    """The body text's size, and a level (1…) for each larger size set on short lines."""
    prose: Counter[float] = Counter()
    weights: Counter[float] = Counter()
    for lines in pages:
        for text, size in lines:
            letters = len(text.strip())
            weights[round(size * 2) / 2] += letters
            if letters >= _PROSE_CHARS:
                prose[round(size * 2) / 2] += letters
    if not weights:
        return 0.0, {}
    body = (prose or weights).most_common(1)[0][0]
    larger = sorted(
        {
            round(size * 2) / 2
            for lines in pages
            for text, size in lines
            if round(size * 2) / 2 >= body * _HEADING_RATIO
            and 2 <= len(text.strip()) <= _HEADING_CHARS
        },
        reverse=True,
    )
    return body, {size: min(level, 6) for level, size in enumerate(larger, start=1)}


def _page_blocks(
    lines: list[tuple[str, float]],
    outline: list[tuple[int, str]],
    levels: dict[float, int],
) -> list[str]:
    """A page's Markdown: its headings as ``#`` lines, the rest as escaped text lines."""
    out: list[str] = []
    pending = list(outline)
    placed: list[str] = []
    for text, size in lines:
        stripped = " ".join(text.split())
        match = next((h for h in pending if h[1].casefold() == stripped.casefold()), None)
        if match is not None:
            pending.remove(match)
            placed.append(f"\n{'#' * min(match[0], 6)} {stripped}\n")
            continue
        level = None if outline else levels.get(round(size * 2) / 2)
        if level is not None and 2 <= len(stripped) <= _HEADING_CHARS:
            placed.append(f"\n{'#' * level} {stripped}\n")
        else:
            placed.append(escape_line(text))
    # Outline entries whose words no line holds: a heading at the top of the page.
    out.extend(f"{'#' * min(level, 6)} {title}\n" for level, title in pending)
    out.append("\n".join(placed))
    return out


def read_pdf(data: bytes, name: str) -> list[Part] | Unreadable:
    """The PDF ``data`` (the file ``name``) as one part, or why it can't be read."""
    import pypdfium2 as pdfium

    try:
        pdf = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        if "password" in str(exc).lower():
            return Unreadable("encrypted: it needs a password to open")
        return Unreadable(f"not a PDF that can be read ({exc})")
    try:
        pages = len(pdf)
        if pages > MAX_PAGES:
            return Unreadable(f"{pages:,} pages; the limit is {MAX_PAGES:,} (docs/sources.md)")
        outline = _outline(pdf)
        texts = []
        for index in range(pages):
            page = pdf[index]
            try:
                texts.append(_page_lines(page))
            finally:
                page.close()
        meta = pdf.get_metadata_dict(skip_empty=True)
    finally:
        pdf.close()
    letters = sum(len(t.strip()) for lines in texts for t, _ in lines)
    if pages == 0 or letters < MIN_TEXT_PER_PAGE * pages:
        return Unreadable(
            f"no text layer: {letters:,} characters of text on {pages:,} pages (a scan?);"
            " there is no OCR in knowledge-store"
        )
    _, levels = _heading_levels(texts)
    blocks: list[str] = []
    for index, lines in enumerate(texts):
        blocks.append(location_marker({"page": index + 1}))
        blocks.extend(_page_blocks(lines, outline.get(index, []), levels))
    body = "\n\n".join(b.strip("\n") for b in blocks if b.strip())
    title = " ".join(str(meta.get("Title", "")).split()) or None
    attributes: dict[str, Any] = {"pages": pages}
    if meta.get("Author"):
        attributes["author"] = " ".join(str(meta["Author"]).split())
    return [
        Part(
            key=None,
            type="document",
            title=title,
            body=body,
            attributes=attributes,
            created_at=_date(meta.get("CreationDate")),
            updated_at=_date(meta.get("ModDate")),
        )
    ]
