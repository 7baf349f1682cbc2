"""chunk_markdown: heading paths, offsets, coverage, fences kept whole, sizes, merging."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from knowledge_store.errors import InvalidRequest
from knowledge_store.ingest.chunking import chunk_markdown, scan_blocks, token_counter
from knowledge_store.model import Chunk


def words(text: str) -> int:
    """A simple, additive token count for the properties (the real one is tested below)."""
    return len(text.split())


def chunk(body: str, max_tokens: int = 200, overlap_tokens: int = 0) -> list[Chunk]:
    return chunk_markdown(
        body, max_tokens=max_tokens, overlap_tokens=overlap_tokens, count_tokens=words
    )


# -- generated documents -----------------------------------------------------------------------


@dataclass(frozen=True)
class Piece:
    kind: str  # heading, paragraph, fence
    text: str
    level: int = 0
    title: str = ""


@dataclass
class Doc:
    body: str
    fences: list[tuple[int, int]]
    content: list[tuple[int, int, tuple[str, ...]]]  # paragraphs and fences with their heading path


WORD = st.sampled_from(
    ["alpha", "beta", "gamma", "delta", "pg_dump", "x", "SELECT", "café", "#tag"]
)


@st.composite
def sentences(draw: st.DrawFn) -> str:
    text = " ".join(draw(st.lists(WORD, min_size=1, max_size=8)))
    return text + draw(st.sampled_from([".", "!", "?", ",", ""]))


@st.composite
def paragraphs(draw: st.DrawFn) -> Piece:
    lines = [
        " ".join(draw(st.lists(sentences(), min_size=1, max_size=3)))
        for _ in range(draw(st.integers(1, 3)))
    ]
    return Piece("paragraph", "\n".join(lines))


@st.composite
def fences(draw: st.DrawFn) -> Piece:
    mark = draw(st.sampled_from(["```", "~~~", "````"]))
    info = draw(st.sampled_from(["", "python", "sql extra"]))
    other = "~~~" if mark.startswith("`") else "```"
    line = st.sampled_from(
        ["# not a heading", "", "x = 1", "    indented", "Heading", "===", other, "- item"]
    )
    body = draw(st.lists(st.one_of(line, sentences()), min_size=0, max_size=12))
    return Piece("fence", "\n".join([mark + info, *body, mark]))


@st.composite
def headings(draw: st.DrawFn) -> Piece:
    level = draw(st.integers(1, 4))
    title = draw(st.sampled_from(["Intro", "Install", "Use", "Linux", "Notes", "Install"]))
    return Piece("heading", "#" * level + " " + title, level, title)


@st.composite
def docs(draw: st.DrawFn) -> Doc:
    pieces = draw(st.lists(st.one_of(headings(), paragraphs(), fences()), max_size=14))
    parts: list[str] = [draw(st.sampled_from(["", "\n", "  \n\n"]))]
    fence_spans: list[tuple[int, int]] = []
    content: list[tuple[int, int, tuple[str, ...]]] = []
    stack: list[tuple[int, str]] = []
    for piece in pieces:
        start = sum(map(len, parts))
        parts.append(piece.text)
        end = start + len(piece.text)
        if piece.kind == "heading":
            while stack and stack[-1][0] >= piece.level:
                stack.pop()
            stack.append((piece.level, piece.title))
        else:
            content.append((start, end, tuple(t for _, t in stack)))
            if piece.kind == "fence":
                fence_spans.append((start, end))
        parts.append(draw(st.sampled_from(["\n\n", "\n\n\n", "\n \n"])))
    return Doc("".join(parts), fence_spans, content)


def common_path(paths: list[tuple[str, ...]]) -> tuple[str, ...]:
    first = paths[0]
    size = 0
    while size < len(first) and all(len(p) > size and p[size] == first[size] for p in paths):
        size += 1
    return first[:size]


def check_exact_slices_in_order(doc: Doc, chunks: list[Chunk]) -> None:
    for n, c in enumerate(chunks):
        assert c.ordinal == n
        assert 0 <= c.start < c.end <= len(doc.body)
        assert c.text == doc.body[c.start : c.end]
        assert c.text.strip() == c.text and c.text
    assert [c.start for c in chunks] == sorted(c.start for c in chunks)


def check_each_chunk_adds_text(chunks: list[Chunk]) -> None:
    for left, right in itertools.pairwise(chunks):
        assert right.end > left.end, ("a chunk inside its neighbour", left, right)


def check_coverage(doc: Doc, chunks: list[Chunk]) -> None:
    covered = bytearray(len(doc.body))
    for c in chunks:
        covered[c.start : c.end] = b"\x01" * (c.end - c.start)
    missing = [i for i, ch in enumerate(doc.body) if not ch.isspace() and not covered[i]]
    assert missing == [], "uncovered characters"


def check_fences_whole(doc: Doc, chunks: list[Chunk]) -> None:
    for c in chunks:
        for start, end in doc.fences:
            assert not start < c.start < end, ("a chunk starts inside a fence", c)
            assert not start < c.end < end, ("a chunk ends inside a fence", c)


def check_heading_paths(doc: Doc, chunks: list[Chunk]) -> None:
    for c in chunks:
        inside = [path for start, end, path in doc.content if start < c.end and c.start < end]
        if inside:
            assert c.heading == common_path(inside), c


def check_sizes(chunks: list[Chunk], max_tokens: int, count: Callable[[str], int]) -> None:
    for c in chunks:
        if count(c.text) > max_tokens:
            blocks = scan_blocks(c.text)
            assert len(blocks) == 1 and blocks[0].kind in ("fence", "heading"), ("too big", c)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs(), st.integers(min_value=4, max_value=60), st.integers(0, 12))
def test_chunk_properties(doc: Doc, max_tokens: int, overlap: int) -> None:
    overlap = min(overlap, max_tokens - 1)
    """Exact slices in order, each adding text; every non-whitespace character covered; fences never split;
    each heading the common path of the content it holds; sizes within max_tokens unless
    the chunk is one fence (or one heading)."""
    chunks = chunk(doc.body, max_tokens, overlap)
    check_exact_slices_in_order(doc, chunks)
    check_each_chunk_adds_text(chunks)
    check_coverage(doc, chunks)
    check_fences_whole(doc, chunks)
    check_heading_paths(doc, chunks)
    check_sizes(chunks, max_tokens, words)


MARKDOWNISH = st.text(alphabet="#`~-=*> \t\n\r\u2028.!a1é", max_size=300)


@settings(max_examples=200, deadline=None)
@given(MARKDOWNISH, st.integers(1, 20), st.integers(0, 5))
def test_any_text_is_chunked_exactly(body: str, max_tokens: int, overlap: int) -> None:
    chunks = chunk(body, max_tokens, min(overlap, max_tokens - 1))
    doc = Doc(body, [], [])
    check_exact_slices_in_order(doc, chunks)
    check_each_chunk_adds_text(chunks)
    check_coverage(doc, chunks)
    fences = [(b.start, b.end) for b in scan_blocks(body) if b.kind == "fence"]
    check_fences_whole(Doc(body, fences, []), chunks)


@settings(max_examples=40, deadline=None)
@given(docs(), st.integers(20, 120), st.integers(0, 10))
def test_the_model_tokenizer_gives_the_same_chunks_by_span_or_by_text(
    doc: Doc, max_tokens: int, overlap: int
) -> None:
    by_span = chunk_markdown(doc.body, max_tokens=max_tokens, overlap_tokens=overlap)
    by_text = chunk_markdown(
        doc.body, max_tokens=max_tokens, overlap_tokens=overlap, count_tokens=token_counter()
    )
    assert by_span == by_text
    check_sizes(by_span, max_tokens, token_counter())
    check_coverage(doc, by_span)
    check_fences_whole(doc, by_span)


# -- examples ----------------------------------------------------------------------------------

PAGE = """# Page

Intro text.

## Install

### On Linux

Run this:

```bash
# a comment, not a heading
apt install tool
```

## Use

Use it.
"""


def test_heading_paths_follow_the_outline() -> None:
    chunks = chunk(PAGE, max_tokens=8)
    assert [(c.heading, c.text) for c in chunks] == [
        (("Page",), "# Page\n\nIntro text."),
        (("Page", "Install", "On Linux"), "## Install\n\n### On Linux\n\nRun this:"),
        (
            ("Page", "Install", "On Linux"),
            "```bash\n# a comment, not a heading\napt install tool\n```",
        ),
        (("Page", "Use"), "## Use\n\nUse it."),
    ]


def test_a_heading_only_section_makes_no_chunk_of_its_own() -> None:
    chunks = chunk(PAGE, max_tokens=8)
    assert not any(c.text.strip() in ("## Install", "### On Linux") for c in chunks)
    assert chunks[1].text.startswith("## Install")  # its heading opens the child's chunk


def test_small_sibling_sections_merge_under_their_common_path() -> None:
    body = "# Page\n\n## A\n\nText a.\n\n## B\n\nText b.\n"
    assert [(c.heading, c.text) for c in chunk(body)] == [(("Page",), body.strip())]


def test_a_parent_merges_with_its_child_but_not_a_grandchild() -> None:
    body = "# P\n\nIntro.\n\n## A\n\nText a.\n\n### Deep\n\nDeeper text.\n"
    chunks = chunk(body)
    assert [c.heading for c in chunks] == [("P",), ("P", "A", "Deep")]
    assert chunks[0].text == "# P\n\nIntro.\n\n## A\n\nText a."


def test_sections_do_not_merge_past_max_tokens() -> None:
    body = "## A\n\none two three\n\n## B\n\nfour five six\n"
    assert [c.heading for c in chunk(body, max_tokens=6)] == [("A",), ("B",)]
    assert [c.heading for c in chunk(body, max_tokens=10)] == [()]


def test_a_long_fence_is_a_chunk_on_its_own() -> None:
    code = "```sql\n" + "\n".join(f"SELECT {i};" for i in range(50)) + "\n```"
    body = f"# Query\n\nBefore the code.\n\n{code}\n\nAfter the code.\n"
    chunks = chunk(body, max_tokens=20, overlap_tokens=3)
    assert [c.text for c in chunks] == ["# Query\n\nBefore the code.", code, "After the code."]


def test_a_long_section_is_split_with_overlap() -> None:
    sentences = [f"Sentence number {n} is here." for n in range(40)]
    body = "# Long\n\n" + " ".join(sentences)
    chunks = chunk(body, max_tokens=30, overlap_tokens=10)
    assert len(chunks) > 3
    for left, right in itertools.pairwise(chunks):
        assert right.start < left.end  # overlap
        shared = body[right.start : left.end]
        assert 0 < words(shared) <= 10
        assert shared.startswith("Sentence") and shared.endswith(".")
    assert all(words(c.text) <= 30 for c in chunks)
    assert all(c.heading == ("Long",) for c in chunks)


def test_a_split_prefers_paragraph_ends() -> None:
    para = "word " * 9 + "end."
    body = "\n\n".join([para] * 4)
    chunks = chunk(body, max_tokens=25, overlap_tokens=0)
    assert [c.text for c in chunks] == [f"{para}\n\n{para}", f"{para}\n\n{para}"]


def test_setext_headings_are_headings() -> None:
    body = "Title\n=====\n\nText.\n\nPart\n----\n\nMore."
    assert [c.heading for c in chunk(body, max_tokens=3)] == [("Title",), ("Title", "Part")]


def test_a_dash_line_under_a_list_is_not_a_heading() -> None:
    assert [b.kind for b in scan_blocks("- item\n---\n\ntext")] == ["paragraph", "paragraph"]


def test_headings_inside_fences_are_not_headings() -> None:
    body = "~~~\n# not\n```\n## still not\n~~~\n\ntext"
    assert [b.kind for b in scan_blocks(body)] == ["fence", "paragraph"]
    assert {c.heading for c in chunk(body, max_tokens=3)} == {()}


def test_an_unclosed_fence_is_text() -> None:
    body = "```\ncode\n\n# Heading\n\ntext"
    assert [b.kind for b in scan_blocks(body)] == ["paragraph", "heading", "paragraph"]


def test_inline_triple_backticks_are_not_a_fence() -> None:
    assert [b.kind for b in scan_blocks("```code``` here\n\nmore\n```")] == [
        "paragraph",
        "paragraph",
    ]


def test_atx_closing_hashes_are_dropped() -> None:
    assert [b.text for b in scan_blocks("## Title ##\n#NotHeading")] == ["Title", ""]


def test_a_body_without_headings() -> None:
    assert [(c.heading, c.text) for c in chunk("  Just text.\n\nMore text.  \n")] == [
        ((), "Just text.\n\nMore text.")
    ]


def test_empty_bodies_and_heading_only_bodies() -> None:
    assert chunk("") == [] and chunk(" \n\n\t") == []
    assert [(c.heading, c.text) for c in chunk("# A\n\n## B\n")] == [(("A",), "# A\n\n## B")]


def test_crlf_line_endings() -> None:
    body = "# A\r\n\r\ntext\r\n\r\n```\r\ncode\r\n```\r\n"
    chunks = chunk(body, max_tokens=3)
    assert [c.text for c in chunks] == ["# A\r\n\r\ntext", "```\r\ncode\r\n```"]


@pytest.mark.parametrize(("max_tokens", "overlap"), [(0, 0), (10, 10), (10, -1)])
def test_bad_sizes_are_request_errors(max_tokens: int, overlap: int) -> None:
    with pytest.raises(InvalidRequest):
        chunk_markdown("text", max_tokens=max_tokens, overlap_tokens=overlap, count_tokens=words)


def test_the_token_counter_is_the_model_wordpiece_without_truncation() -> None:
    count = token_counter()
    assert count("hello world") == 2  # no [CLS]/[SEP]
    assert count("PostgreSQL") > 1  # word pieces
    assert count("word " * 1000) == 1000  # the tokenizer.json truncates at 128; we don't


def test_default_chunks_fit_the_model() -> None:
    body = "# Title\n\n" + "\n\n".join(
        f"Paragraph {n} " + "lorem ipsum dolor " * 30 for n in range(10)
    )
    chunks = chunk_markdown(body)
    count = token_counter()
    assert len(chunks) > 1
    assert all(count(c.text) <= 200 for c in chunks)
