"""HTML files: the main content, without navigation, as Markdown.

Main content is ``<main>``, else ``<article>``, else ``[role=main]``, else
``<body>``. Navigation, headers, footers, asides, scripts, styles, forms and
elements whose class or id names navigation, breadcrumbs, sidebars, tables of
contents or cookie banners are dropped (a ``<header>`` inside the main content
that holds its ``<h1>`` is kept). Converted with markdownify: ATX headings,
fenced code keeping the language of ``class="language-x"`` / ``lang-x``.
The dates a page declares (``article:modified_time``, JSON-LD ``dateModified``
…, see :func:`~knowledge_store.ingest.dates.declared_dates`) become its
``created_at`` / ``updated_at``.

Bounds (a page is input nobody checked): a page whose elements nest deeper than
:data:`MAX_HTML_DEPTH` (told from its tags, :mod:`.nesting`, before any parse) is
refused; a page with more than :data:`BOUNDED_TAGS` tags is parsed in a bounded
worker (:mod:`.bounded`: :data:`HTML_LIMITS`), since its parse time may grow with
the square of its depth; below the main content, what nests deeper than
:data:`FLAT_DEPTH` is kept as its text (the conversion to Markdown walks the tree
recursively). A refused page is one rejection naming it; the rest of the load goes on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from markdownify import markdownify
from selectolax.lexbor import LexborHTMLParser, LexborNode

from knowledge_store.errors import Rejection
from knowledge_store.ingest.dates import Dates, declared_dates
from knowledge_store.ingest.loaders.base import decode_utf8
from knowledge_store.ingest.loaders.bounded import Limits, Refused, shared_runner
from knowledge_store.ingest.loaders.nesting import nesting_depth
from knowledge_store.ingest.loaders.pages import Page, default_uid

__all__ = [
    "BOUNDED_TAGS",
    "DEFAULT_TYPE",
    "FLAT_DEPTH",
    "HTML_LIMITS",
    "MAX_HTML_DEPTH",
    "HtmlPage",
    "html_record",
    "parse_html",
    "read_html_page",
]

DEFAULT_TYPE = "page"
#: A page nesting deeper than this is refused unparsed (the PostgreSQL manual's deepest
#: page nests 17 deep).
MAX_HTML_DEPTH = 10_000
#: Below the main content, elements deeper than this are kept as their text.
FLAT_DEPTH = 100
#: A page with more start tags than this is parsed in a bounded worker (the PostgreSQL
#: manual's largest page has 7,321; lexbor parses 20,000 nested ones in 0.4 s).
BOUNDED_TAGS = 20_000
#: The bounds of that worker's parse.
HTML_LIMITS = Limits(seconds=30.0, cpu_seconds=30, memory_bytes=2 * 1024**3)
_START_TAG = re.compile(r"<[A-Za-z]")
_DROPPED_TAGS = ("nav", "aside", "script", "style", "form", "noscript", "template", "footer")
_CHROME_WORDS = frozenset(
    {
        "nav",
        "navbar",
        "navigation",
        "menu",
        "breadcrumb",
        "breadcrumbs",
        "sidebar",
        "toc",
        "cookie",
        "cookies",
        "consent",
        "skip",
        "pagination",
    }
)
_WORD_SPLIT = re.compile(r"[-_\s]+")
_LANGUAGE = re.compile(r"^(?:language|lang)-([\w+#.-]+)$")
_BLANK_LINES = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)+")


def _is_chrome(node: LexborNode) -> bool:
    names = " ".join(filter(None, (node.attributes.get("class"), node.attributes.get("id"))))
    words = (word.lower() for word in _WORD_SPLIT.split(names) if word)
    # "nav…" also covers run-together names such as DocBook's navheader / navfooter.
    return any(word in _CHROME_WORDS or word.startswith("nav") for word in words)


def _main_content(tree: LexborHTMLParser) -> LexborNode | None:
    for selector in ("main", "article", "[role=main]", "body"):
        node = tree.css_first(selector)
        if node is not None:
            return node
    return tree.root


def _strip_chrome(main: LexborNode, is_body: bool) -> None:
    doomed = list(main.css(", ".join(_DROPPED_TAGS)))
    doomed += [n for n in main.css("header") if is_body or n.css_first("h1") is None]
    doomed += [n for n in main.css("[class], [id]") if _is_chrome(n)]
    doomed = [node for node in doomed if node.mem_id != main.mem_id]
    ids = {node.mem_id for node in doomed}
    outermost: dict[int, LexborNode] = {}
    for node in doomed:
        parent = node.parent
        while parent is not None and parent.mem_id not in ids:
            parent = parent.parent
        if parent is None:
            outermost[node.mem_id] = node
    for node in outermost.values():
        node.decompose()


def _code_language(element: Any) -> str | None:
    """The language named by ``language-x`` / ``lang-x`` on a ``<pre>`` or its ``<code>``."""
    nodes = [element, *element.find_all("code", limit=1)]
    for node in nodes:
        for name in node.get("class") or []:
            match = _LANGUAGE.match(name)
            if match:
                return match.group(1)
    return None


@dataclass(frozen=True)
class HtmlPage:
    """What an HTML page holds: its main content as Markdown, its links and its declared dates.

    ``links`` are the link targets in the main content (the page's cross
    references); ``all_links`` every ``<a href>`` of the page, navigation
    included (what a crawler follows). ``robots`` holds the directives of
    ``<meta name="robots">`` (``noindex``, ``nofollow`` …), lower case.
    """

    title: str | None
    body: str
    links: list[str] = field(default_factory=list)
    all_links: list[str] = field(default_factory=list)
    base: str | None = None
    dates: Dates = field(default_factory=Dates)
    robots: frozenset[str] = frozenset()
    #: Why the page was not read (too deep, its parse passed a bound); None when it was.
    problem: str | None = None


def _robots(tree: LexborHTMLParser) -> frozenset[str]:
    directives: set[str] = set()
    for node in tree.css("meta[name][content]"):
        if (node.attributes.get("name") or "").lower() == "robots":
            content = node.attributes.get("content") or ""
            directives.update(part.strip().lower() for part in content.split(",") if part.strip())
    return frozenset(directives)


def parse_html(html: str) -> HtmlPage:
    """The :class:`HtmlPage` of an HTML document, read within the bounds of the module
    docstring (a page past one has only its ``problem``)."""
    depth = nesting_depth(html, stop_above=MAX_HTML_DEPTH)
    if depth > MAX_HTML_DEPTH:
        return HtmlPage(
            title=None,
            body="",
            problem=f"its elements nest more than {MAX_HTML_DEPTH:,} deep (the limit);"
            " it is not read",
        )
    tags = sum(1 for _ in _START_TAG.finditer(html))
    if tags <= BOUNDED_TAGS:
        return _parse(html, depth)
    page = shared_runner().call(_parse, html, depth, limits=HTML_LIMITS)
    if isinstance(page, Refused):
        return HtmlPage(title=None, body="", problem=f"{page.reason} ({tags:,} tags)")
    assert isinstance(page, HtmlPage)
    return page


def _flatten_deep(main: LexborNode) -> None:
    """Elements more than :data:`FLAT_DEPTH` below ``main`` become their text."""
    todo = [(main, 0)]
    while todo:
        node, depth = todo.pop()
        for child in list(node.iter(include_text=False)):
            if not child.is_element_node:
                continue
            if depth + 1 >= FLAT_DEPTH:
                child.replace_with(child.text(separator="\n"))
            else:
                todo.append((child, depth + 1))


def _parse(html: str, depth: int) -> HtmlPage:
    """The page, parsed (``depth``: its nesting, estimated)."""
    tree = LexborHTMLParser(html)
    title_node = tree.css_first("title")
    title = title_node.text(strip=True) if title_node is not None else ""
    if not title:
        h1 = tree.css_first("h1")
        title = h1.text(separator=" ", strip=True) if h1 is not None else ""
    all_links = [node.attributes.get("href") or "" for node in tree.css("a[href]")]
    base_node = tree.css_first("base[href]")
    base = base_node.attributes.get("href") if base_node is not None else None
    dates = declared_dates(tree)
    robots = _robots(tree)
    main = _main_content(tree)
    body = ""
    links: list[str] = []
    if main is not None:
        if depth >= FLAT_DEPTH:
            _flatten_deep(main)
        _strip_chrome(main, is_body=main.tag in ("body", "html", "-undef"))
        links = [node.attributes.get("href") or "" for node in main.css("a[href]")]
        for node in main.css("a[title]"):  # a tooltip, not content: `[text](href)` is enough
            del node.attrs["title"]
        body = markdownify(
            main.html or "",
            heading_style="ATX",
            bullets="-",
            code_language_callback=_code_language,
            escape_underscores=False,
            escape_asterisks=False,
            escape_misc=False,
        )
        body = _BLANK_LINES.sub("\n\n", body).strip()
    return HtmlPage(
        title=title or None,
        body=body,
        links=[link for link in links if link],
        all_links=[link for link in all_links if link],
        base=base or None,
        dates=dates,
        robots=robots,
    )


def html_record(
    page: HtmlPage, *, uid: str, file: str, fallback_title: str, href: str
) -> dict[str, Any] | Rejection:
    """The canonical record of a parsed page, or a rejection when it was not read (its
    ``problem``) or its main content is empty."""
    if page.problem is not None:
        return Rejection(file, None, uid, None, page.problem)
    if not page.body:
        return Rejection(
            file,
            None,
            uid,
            "body",
            "the page holds no text in its main content (<main>, <article> or <body>,"
            " navigation removed)",
        )
    record: dict[str, Any] = {
        "uid": uid,
        "type": DEFAULT_TYPE,
        "title": page.title or fallback_title,
        "body": page.body,
        "href": href,
    }
    page.dates.fill(record)
    return record


def read_html_page(data: bytes, path: Path, root: Path, file: str) -> Page | Rejection:
    """One HTML file (its bytes, read from ``path``) as a :class:`Page`, or a rejection."""
    uid = default_uid(path, root)
    text = decode_utf8(data, file=file)
    if isinstance(text, Rejection):
        return Rejection(text.file, None, uid, None, text.message)
    page = parse_html(text)
    record = html_record(
        page, uid=uid, file=file, fallback_title=path.stem, href=path.relative_to(root).as_posix()
    )
    if isinstance(record, Rejection):
        return record
    return Page(file, path, root, record, page.links)
