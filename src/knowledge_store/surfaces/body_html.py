"""An entity's body on its page: Markdown as HTML, where each link and each place leads.

- A relative link (``records.md#acls``, ``../guide/intro.html``) is resolved against
  the entity's own href and opens the entity it names (``/entity/records#acls``), found
  among the entities it links to; one that names no entity in the store is shown as
  its text, not as a link that would answer 404.
- A location marker of a paged document (a page, a slide, a sheet's rows) is shown as
  the place it starts; for a document on the web, a page is a link that opens it there
  (``…/spec.pdf#page=3``, which PDF viewers follow).

Pure functions over the body and the entity's links; the page calls :func:`body_html`.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, unquote, urljoin, urlsplit

from markdown_it import MarkdownIt
from markdown_it.renderer import RendererHTML
from markdown_it.token import Token

from knowledge_store.ingest.chunking import location_segments

__all__ = ["body_html", "location_label", "location_link", "resolve_link"]

_PAGE_SUFFIXES = ("", ".md", ".markdown", ".html", ".htm")


def location_label(location: Mapping[str, Any]) -> str:
    """``page 3``, ``slide 2``, ``sheet Budget, rows 2-31``, ``chapter 4``."""
    shown = []
    for key in ("page", "slide", "chapter"):
        if key in location:
            shown.append(f"{key} {location[key]}")
    if "sheet" in location:
        shown.append(f"sheet {location['sheet']}")
    if "rows" in location:
        shown.append(f"rows {location['rows']}")
    return ", ".join(shown)


def location_link(href: str | None, location: Mapping[str, Any]) -> str | None:
    """A URL that opens the document at ``location``, where its format allows (a PDF page
    on the web: ``#page=N``), else None."""
    if not href or "page" not in location or not href.startswith(("http://", "https://")):
        return None
    if not urlsplit(href).path.lower().endswith(".pdf"):
        return None
    return f"{href.split('#', 1)[0]}#page={location['page']}"


def _is_relative(link: str) -> bool:
    parts = urlsplit(link)
    return not parts.scheme and not parts.netloc and not link.startswith(("/", "#"))


def resolve_link(link: str, base: str | None, targets: Mapping[str, str]) -> str | None:
    """The uid a relative ``link`` in an entity whose href is ``base`` names, among
    ``targets`` (href → uid), else None."""
    if not _is_relative(link) or not base:
        return None
    path = unquote(urlsplit(link).path)
    if not path:
        return None
    if urlsplit(base).scheme:
        joined = urljoin(base, path)
    else:
        joined = posixpath.normpath(posixpath.join(posixpath.dirname(base), path))
    stem, suffix = posixpath.splitext(joined)
    candidates = [joined]
    if suffix.lower() in _PAGE_SUFFIXES:
        candidates += [stem + other for other in _PAGE_SUFFIXES]
    candidates += [posixpath.join(joined, name) for name in ("index.md", "index.html", "README.md")]
    found = next((targets[c] for c in candidates if c in targets), None)
    if found is not None:
        return found
    # Loaded from another folder (README.md beside docs/, linking docs/records.md, whose href
    # is records.md): the one target whose href ends the path.
    tails = {uid for href, uid in targets.items() for c in candidates if c.endswith("/" + href)}
    return tails.pop() if len(tails) == 1 else None


def _renderer() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False}).enable("table")

    def link_open(
        renderer: RendererHTML, tokens: Sequence[Token], idx: int, options: Any, env: Any
    ) -> str:
        token = tokens[idx]
        href = str(token.attrGet("href") or "")
        if _is_relative(href):
            uid = resolve_link(href, env.get("base"), env.get("targets", {}))
            if uid is None:
                token.attrs.pop("href", None)  # text, not a link to nowhere
                token.attrSet("class", "unresolved")
                token.attrSet("title", "not in the store")
            else:
                fragment = urlsplit(href).fragment
                token.attrSet(
                    "href", f"/entity/{quote(uid, safe='')}" + (f"#{fragment}" if fragment else "")
                )
        return renderer.renderToken(tokens, idx, options, env)

    md.add_render_rule("link_open", link_open)
    return md


_MD = _renderer()


def _with_places(body: str, href: str | None) -> str:
    """``body`` with each location marker replaced by a line naming (and linking) its place."""
    out: list[str] = []
    for start, end, location in location_segments(body):
        if location is not None:
            label = location_label(location)
            link = location_link(href, location)
            out.append(f"*[{label}]({link})*" if link else f"*{label}*")
        out.append(body[start:end].strip("\n"))
    return "\n\n".join(part for part in out if part)


def body_html(body: str, *, href: str | None, targets: Mapping[str, str]) -> str:
    """The body as HTML (see the module docstring); ``targets``: href → uid of the
    entities it links to."""
    return str(_MD.render(_with_places(body, href), {"base": href, "targets": dict(targets)}))
