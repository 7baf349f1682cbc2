"""Search-page snippets: Markdown to plain text, the best window, the query's terms marked.

Highlighting follows the lexical index, as Tantivy's snippet generator does: the
text is tokenized by the store's own analysis (``KnowledgeStore.text_analysis``, a
:class:`~knowledge_store.model.queries.TextAnalysis`), and a token
is marked when its analysed form is one of the query's analysed terms — whole
tokens only (``before`` is never ``be<mark>for</mark>e``), never a stop word
(the analyzer drops those), and a stem matches its inflections (``vacuum``
marks ``Vacuuming``). Identifiers such as ``pg_hba.conf`` or ``ERR-1042`` are
marked when the query names them.

Every function here is pure: text and terms in, text or HTML out.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence

from markdown_it import MarkdownIt
from markdown_it.token import Token

from knowledge_store.model.queries import QueryTerms, TextAnalysis

__all__ = ["Span", "highlight_spans", "inline_html", "plain_text", "snippet_html"]

Span = tuple[int, int]

_MD = MarkdownIt("commonmark", {"html": False}).enable("table")
_BLOCK_TEXT = ("fence", "code_block")
_SEPARATE = {"softbreak", "hardbreak"}


def _inline_text(token: Token) -> str:
    parts: list[str] = []
    for child in token.children or ():
        if child.type in ("text", "code_inline"):
            parts.append(child.content)
        elif child.type in _SEPARATE:
            parts.append(" ")
        elif child.type == "image":
            parts.append(_inline_text(child))
    return "".join(parts)


def inline_html(markdown: str) -> str:
    """One line of Markdown (a title) as HTML: code spans kept as ``<code>``, other markup dropped.

    Titles come from headings (``# `ks` — the command line``); links and emphasis
    become their text, so the result can sit inside a link.
    """
    out: list[str] = []
    for token in _MD.parseInline(markdown):
        for child in token.children or ():
            if child.type == "code_inline":
                out.append(f"<code>{html.escape(child.content)}</code>")
            elif child.type == "text":
                out.append(html.escape(child.content))
            elif child.type in _SEPARATE:
                out.append(" ")
            elif child.type == "image":
                out.append(html.escape(_inline_text(child)))
    return "".join(out) or html.escape(markdown)


def plain_text(markdown: str, *, keep_headings: bool = False) -> str:
    """The words of ``markdown`` without its markup, whitespace collapsed.

    Emphasis, links, inline code and tables become their text; code blocks keep
    their code (identifiers in them are worth showing). Headings are left out
    unless ``keep_headings`` (the page shows the heading path beside the snippet),
    and kept when the text is nothing but headings.
    """
    pieces: list[str] = []
    heading = False
    headings: list[str] = []
    for token in _MD.parse(markdown):
        if token.type == "heading_open":
            heading = True
        elif token.type == "heading_close":
            heading = False
        elif token.type == "inline":
            (headings if heading and not keep_headings else pieces).append(_inline_text(token))
        elif token.type in _BLOCK_TEXT:
            pieces.append(token.content)
    text = " ".join(" ".join(pieces).split())
    return text or " ".join(" ".join(headings).split())


def _merge(spans: Iterable[Span]) -> list[Span]:
    merged: list[Span] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def highlight_spans(
    text: str, terms: QueryTerms, analysis: TextAnalysis
) -> list[tuple[int, int, str]]:
    """``(start, end, term)`` of each token of ``text`` that one of the query's terms matches."""
    return analysis.matches(text, terms)


def _window(text: str, hits: Sequence[tuple[int, int, str]], width: int) -> Span:
    """The ``width``-character window holding the most distinct matched terms (earliest wins)."""
    if len(text) <= width:
        return 0, len(text)
    best, best_start = -1, 0
    for anchor, _, _ in hits:
        start = max(0, min(anchor - width // 5, len(text) - width))
        distinct = len({term for s, e, term in hits if s >= start and e <= start + width})
        if distinct > best:
            best, best_start = distinct, start
    start = best_start
    if start > 0:  # begin at a word
        space = text.find(" ", start, start + 20)
        start = space + 1 if space != -1 else start
    end = min(len(text), start + width)
    if end < len(text):
        space = text.rfind(" ", end - 20, end)
        end = space if space > start else end
    return start, end


def snippet_html(
    markdown: str, terms: QueryTerms, analysis: TextAnalysis, *, width: int = 320
) -> str:
    """HTML of the best ``width``-character window of ``markdown`` as plain text, terms marked."""
    text = plain_text(markdown)
    hits = highlight_spans(text, terms, analysis)
    start, end = _window(text, hits, width)
    spans = _merge((max(s, start), min(e, end)) for s, e, _ in hits if s < end and e > start)
    out = ["…"] if start > 0 else []
    at = start
    for s, e in spans:
        out.append(html.escape(text[at:s]))
        out.append(f"<mark>{html.escape(text[s:e])}</mark>")
        at = e
    out.append(html.escape(text[at:end]))
    if end < len(text):
        out.append("…")
    return "".join(out)
