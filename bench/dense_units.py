"""What each dense variant embeds per page: the baseline's passages, our chunks, entity texts.

A *unit* is ``(uid, text)``; a variant is the list of units of every page of a
set (code samples are never judged, so never embedded here). The texts go
through :class:`evalsets.VectorCache`, so a text shared by two variants (a
chunk that is the same at 128 and 200 tokens, a short page) is embedded once.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

from knowledge_store.ingest.chunking import chunk_markdown, scan_blocks
from knowledge_store.model import compose_context

Unit = tuple[str, str]
Record = dict[str, Any]

_PARAGRAPHS = re.compile(r"\n\s*\n")


def baseline_passages(body: str, size: int = 800) -> Iterator[str]:
    """The body cut into ~``size``-character passages at paragraph breaks (words at worst)."""
    buf = ""
    for para in (p.strip() for p in _PARAGRAPHS.split(body)):
        if not para:
            continue
        while len(para) > size:  # a paragraph longer than a passage: cut at a space
            if buf:
                yield buf
                buf = ""
            cut = para.rfind(" ", size // 2, size)
            cut = size if cut < 0 else cut
            yield para[:cut].strip()
            para = para[cut:].strip()
        if buf and len(buf) + 2 + len(para) > size:
            yield buf
            buf = ""
        buf = f"{buf}\n\n{para}" if buf else para
    if buf:
        yield buf


def baseline_units(page: Record) -> list[Unit]:
    """BASELINES.md's dense baseline: ~800-character passages, the title prefixed."""
    return [(page["uid"], f"{page['title']}\n{p}") for p in baseline_passages(page["body"])]


def chunk_units(
    max_tokens: int = 200, overlap: int = 32, context: str = "path"
) -> Callable[[Record], list[Unit]]:
    """Our chunker at ``max_tokens``; ``context``: ``path`` (title + headings, the store's
    ``compose_context``), ``title`` (title only), ``none`` (the chunk text alone)."""

    def units(page: Record) -> list[Unit]:
        chunks = chunk_markdown(page["body"], max_tokens=max_tokens, overlap_tokens=overlap)
        if not chunks:
            return [(page["uid"], compose_context(page["title"], (), page["body"]))]
        out = []
        for c in chunks:
            if context == "path":
                text = compose_context(page["title"], c.heading, c.text)
            elif context == "title":
                text = compose_context(page["title"], (), c.text)
            else:
                text = c.text
            out.append((page["uid"], text))
        return out

    return units


def entity_text(page: Record, budget: int = 900) -> str:
    """One text for the whole page: title, purpose line, section headings, first paragraph.

    Cut to about ``budget`` characters (within the model window).
    """
    attrs = page.get("attributes") or {}
    parts = [page["title"]]
    purpose = attrs.get("refpurpose")
    if isinstance(purpose, str) and purpose.strip():
        parts.append(purpose.strip())
    body = page["body"]
    first = next(
        (body[b.start : b.end] for b in scan_blocks(body) if b.kind == "paragraph"),
        "",
    )
    if first:
        parts.append(first)
    headings = [h for h in attrs.get("headings") or [] if isinstance(h, str)]
    if headings:
        parts.append("Sections: " + "; ".join(headings))
    return "\n".join(parts)[:budget]


def entity_units(page: Record) -> list[Unit]:
    return [(page["uid"], entity_text(page))]


#: name → (units of one page, truncated like the baseline?)
VARIANTS: dict[str, tuple[Callable[[Record], list[Unit]], bool]] = {
    "baseline": (baseline_units, True),
    "ours": (chunk_units(200, 32, "path"), False),
    "ours-trunc": (chunk_units(200, 32, "path"), True),
    "ours-title": (chunk_units(200, 32, "title"), False),
    "ours-none": (chunk_units(200, 32, "none"), False),
    "ours-128": (chunk_units(128, 16, "path"), False),
    "ours-256": (chunk_units(256, 32, "path"), False),
    "entity": (entity_units, False),
}
