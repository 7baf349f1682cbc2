"""HTML files: the main content, without navigation, as Markdown.

Main content is ``<main>``, else ``<article>``, else ``[role=main]``, else
``<body>``. Navigation, headers, footers, asides, scripts, styles, forms and
elements whose class or id names navigation, breadcrumbs, sidebars, tables of
contents or cookie banners are dropped (a ``<header>`` inside the main content
that holds its ``<h1>`` is kept). Converted with markdownify: ATX headings,
fenced code keeping the language of ``class="language-x"`` / ``lang-x``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from markdownify import markdownify
from selectolax.lexbor import LexborHTMLParser, LexborNode

from knowledge_store.errors import Rejection
from knowledge_store.ingest.loaders.base import decode_utf8
from knowledge_store.ingest.loaders.pages import Page, default_uid

__all__ = ["html_to_markdown", "read_html_page"]

DEFAULT_TYPE = "page"
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
    return any(word.lower() in _CHROME_WORDS for word in _WORD_SPLIT.split(names) if word)


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


def html_to_markdown(html: str) -> tuple[str | None, str, list[str]]:
    """``(title, markdown body, link targets)`` of an HTML page's main content."""
    tree = LexborHTMLParser(html)
    title_node = tree.css_first("title")
    title = title_node.text(strip=True) if title_node is not None else ""
    if not title:
        h1 = tree.css_first("h1")
        title = h1.text(separator=" ", strip=True) if h1 is not None else ""
    main = _main_content(tree)
    if main is None:
        return title or None, "", []
    _strip_chrome(main, is_body=main.tag in ("body", "html", "-undef"))
    links = [node.attributes.get("href") or "" for node in main.css("a[href]")]
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
    return title or None, body, [link for link in links if link]


def read_html_page(data: bytes, path: Path, root: Path, file: str) -> Page | Rejection:
    """One HTML file (its bytes, read from ``path``) as a :class:`Page`, or a rejection."""
    uid = default_uid(path, root)
    text = decode_utf8(data, file=file)
    if isinstance(text, Rejection):
        return Rejection(text.file, None, uid, None, text.message)
    title, body, links = html_to_markdown(text)
    if not body:
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
        "title": title or path.stem,
        "body": body,
        "href": path.relative_to(root).as_posix(),
    }
    return Page(file, path, root, record, links)
