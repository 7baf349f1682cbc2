"""The HTML loader's bounds: the nesting estimate (ingest/loaders/nesting.py) against the
tree lexbor builds, deep pages refused or flattened, big pages parsed in a bounded worker."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from selectolax.lexbor import LexborHTMLParser

from knowledge_store.ingest.loaders import html as html_loader
from knowledge_store.ingest.loaders.html import FLAT_DEPTH, MAX_HTML_DEPTH, parse_html
from knowledge_store.ingest.loaders.nesting import nesting_depth

_CONTAINERS = [
    "div",
    "span",
    "section",
    "blockquote",
    "b",
    "i",
    "a",
    "em",
    "font",
    "code",
    "pre",
    "ul",
    "ol",
    "svg",
    "g",
]


def _tree_depth(html: str) -> int:
    """The deepest element of lexbor's tree (html, head and body not counted)."""
    root = LexborHTMLParser(html).root
    deepest = 0
    todo = [(root, 0)] if root is not None else []
    while todo:
        node, depth = todo.pop()
        for child in node.iter(include_text=False):
            if not child.is_element_node:
                continue
            here = depth + (child.tag not in ("html", "head", "body"))
            deepest = max(deepest, here)
            todo.append((child, here))
    return deepest


def _element(children: list[str]) -> st.SearchStrategy[str]:
    return st.sampled_from(_CONTAINERS).map(lambda n: f"<{n}>{''.join(children)}</{n}>")


_LEAVES = st.sampled_from(["text", "<br>", "<img src=x>", "<p>para</p>", "<li>item", "<p>open"])
_TREES = st.recursive(
    _LEAVES,
    lambda inner: st.lists(inner, min_size=1, max_size=4).flatmap(_element),
    max_leaves=40,
)
_TABLES = st.integers(1, 12).map(lambda n: "<table><tr><td>" * n + "cell")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_TREES, _TABLES), min_size=1, max_size=5))
def test_the_estimate_is_not_below_the_parsed_depth_of_pages_as_people_write_them(
    parts: list[str],
) -> None:
    html = "<!doctype html><html><body>" + "".join(parts) + "</body></html>"
    assert nesting_depth(html) >= _tree_depth(html), html


def test_the_usual_sloppy_html_is_counted_flat() -> None:
    rows = "<table>" + "<tr><td>a<td>b" * 5000 + "</table>"
    items = "<ul>" + "<li>item" * 5000 + "</ul>"
    paragraphs = "<div><p>one<p>two</div>" * 5000
    assert nesting_depth(rows + items + paragraphs) <= 5


def test_deep_nesting_is_told_without_reading_it_all() -> None:
    assert nesting_depth("<div>" * 200_000, stop_above=1000) == 1001
    assert nesting_depth("<div>" * 3000 + "</div>" * 3000) == 3000
    assert nesting_depth("<script>" + "<div>" * 5000 + "</script><p>x") == 1


def _nested(levels: int, open_tag: str = "<div>", close_tag: str = "</div>") -> str:
    return (
        "<html><body><main><h1>Deep</h1>"
        + open_tag * levels
        + "the deepest words"
        + close_tag * levels
        + "</main></body></html>"
    )


def test_a_page_nesting_past_the_bound_is_refused_unparsed() -> None:
    page = parse_html(_nested(200_000))
    assert page.problem is not None and f"{MAX_HTML_DEPTH:,} deep" in page.problem
    assert page.body == ""


def test_a_deep_page_within_the_bound_keeps_its_text_flattened() -> None:
    for opening, closing in (
        ("<div>", "</div>"),
        ("<ul><li>", "</li></ul>"),
        ("<table><tr><td>", "</td></tr></table>"),
        ("<blockquote><p>q</p>", "</blockquote>"),
    ):
        page = parse_html(_nested(MAX_HTML_DEPTH // 5 - 10, opening, closing))
        assert page.problem is None
        assert "the deepest words" in page.body


def test_flattening_starts_below_the_flat_depth() -> None:
    shallow = parse_html(_nested(FLAT_DEPTH // 2, "<blockquote>", "</blockquote>"))
    deep = parse_html(_nested(FLAT_DEPTH * 2, "<blockquote>", "</blockquote>"))
    assert shallow.body.count(">") >= FLAT_DEPTH // 2  # quoted to its full depth
    assert FLAT_DEPTH - 5 <= deep.body.split("the deepest")[0].count(">") < FLAT_DEPTH + 5


def test_a_page_with_many_tags_is_parsed_in_the_bounded_worker(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(html_loader, "BOUNDED_TAGS", 50)
    page = parse_html("<main><h1>Many</h1>" + "<p><span>word</span></p>" * 100 + "</main>")
    assert page.problem is None
    assert page.body.count("word") == 100
