"""A documentation web site → page entities, through the HTML loader (``--format web``).

:func:`load_site` crawls the site (:mod:`knowledge_store.ingest.crawl`) and turns
each page read into a record the way a folder of HTML files is: main content as
Markdown, code blocks as code samples, ``partOf`` the nearest folder index page
(``…/``, ``…/index.html``), ``xref`` to each linked page of the site.

- **uid**: the URL's path under the crawl's scope, without ``.html``/``.htm``
  (``…/docs/guide/setup.html`` → ``guide/setup``; a folder URL ``…/docs/guide/`` →
  ``guide/index``; a query string is kept: ``page?x=1``), after ``uid_prefix``
  (``uid_prefix="pg15:"`` gives ``pg15:guide/setup``) — the same uids as the
  folder loader gives the same files.
- **href**: the page's final URL (after redirects). **source**: ``--source``,
  else the site's host (with its port, if any).
- **dates**: what the page declares (``article:modified_time``, JSON-LD
  ``dateModified`` …), else ``Last-Modified`` for ``updated_at``.

What the crawl could not read completely is reported, not guessed: pages
answered ``304`` are listed as *unchanged* (with the uids they produced when last
read), pages that failed (5xx, timeouts) as *failed* — both are present in the
source and must be kept by a sync. :class:`CrawlReport` carries the crawl's
figures and the crawl-state updates to save once the batch is published.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from posixpath import splitext
from typing import Any
from urllib.parse import unquote, urlsplit

from knowledge_store.errors import InvalidRequest, Rejection
from knowledge_store.ingest.crawl import (
    Crawl,
    CrawlLimits,
    CrawlStats,
    Failed,
    Fetched,
    Gone,
    Skipped,
    Unchanged,
    crawl,
    followed_links,
    normal_url,
    resolve,
)
from knowledge_store.ingest.crawl_state import CrawlState, PageState
from knowledge_store.ingest.dates import Dates, http_date
from knowledge_store.ingest.loaders.base import FetchFailure, LoadedRecord, Options
from knowledge_store.ingest.loaders.bounded import Refused, shared_runner
from knowledge_store.ingest.loaders.documents import DOCUMENT_LIMITS, part_records, read_document
from knowledge_store.ingest.loaders.html import html_record
from knowledge_store.ingest.loaders.pages import add_structure_edges, page_entities
from knowledge_store.ingest.loaders.parts import Unreadable

__all__ = [
    "CrawlReport",
    "SiteLoad",
    "WebOptions",
    "load_site",
    "site_source",
    "url_uid",
]

_INDEX_PAGES = ("index.html", "index.htm")
_PAGE_SUFFIXES = (".html", ".htm")


@dataclass(frozen=True)
class WebOptions:
    """How to crawl: the bounds, the uid prefix and where validators are remembered."""

    limits: CrawlLimits = field(default_factory=CrawlLimits)
    uid_prefix: str = ""
    state: CrawlState | None = None


def site_source(url: str) -> str:
    """The default source of a site: its host, with the port when one is given."""
    parts = urlsplit(normal_url(url))
    return parts.netloc.rsplit("@", 1)[-1]


def url_uid(url: str, scope: str, prefix: str = "") -> str:
    """The uid of the page at ``url`` in a crawl of ``scope`` (see the module docstring)."""
    parts = urlsplit(url)
    path = unquote(parts.path[len(urlsplit(scope).path) :])
    if not path or path.endswith("/"):
        path += "index"
    stem, suffix = splitext(path)
    if suffix.lower() in _PAGE_SUFFIXES:
        path = stem
    return prefix + path + (f"?{parts.query}" if parts.query else "")


@dataclass
class CrawlReport:
    """One crawl: its figures, what it left out and why, and the state to save after publishing.

    ``complete`` is False when a page failed or the page bound cut the crawl
    short: a sync must then delete nothing that was merely not reached.
    """

    source: str
    start: str
    scope: str
    sitemap: str | None
    stats: CrawlStats
    truncated: bool
    delay_s: float
    gone: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    failed: list[FetchFailure] = field(default_factory=list)
    updates: dict[str, PageState | None] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return not self.truncated and not self.failed

    def save(self, state: CrawlState) -> None:
        """Write this crawl's validators to ``state`` — only once its batch is published."""
        for url, page in self.updates.items():
            if page is None:
                state.forget(self.source, url)
            else:
                state.put(self.source, url, page)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "start": self.start,
            "scope": self.scope,
            "sitemap": self.sitemap,
            "complete": self.complete,
            "truncated": self.truncated,
            "delay_s": self.delay_s,
            "stats": self.stats.to_dict(),
            "gone": self.gone,
            "skipped": [{"url": url, "reason": reason} for url, reason in self.skipped],
            "failed": [failure.to_dict() for failure in self.failed],
        }


@dataclass
class SiteLoad:
    """The records of one crawled site, and what was present but not read."""

    records: list[LoadedRecord] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    report: CrawlReport | None = None


def _noindex(page: Fetched) -> bool:
    return "noindex" in page.robots or "none" in page.robots


class _Site:
    """The pages a crawl reached, by URL: to resolve parents and links to uids."""

    def __init__(self, result: Crawl, prefix: str) -> None:
        self.scope = result.scope
        self.prefix = prefix
        self.uids: dict[str, str] = {}
        self.moved = result.aliases
        for outcome in result.outcomes:
            if isinstance(outcome, Unchanged) or (
                isinstance(outcome, Fetched) and not _noindex(outcome)
            ):
                self.uids[outcome.url] = self.uid(outcome.url)

    def uid(self, url: str) -> str:
        return url_uid(url, self.scope, self.prefix)

    def uid_at(self, url: str) -> str | None:
        return self.uids.get(self.moved.get(url, url))

    def parent(self, url: str) -> str | None:
        path = urlsplit(url).path
        folder = path[: path.rfind("/") + 1]
        name = path[len(folder) :]
        if not name or name.lower() in _INDEX_PAGES:
            folder = folder[: folder.rstrip("/").rfind("/") + 1]
        parts = urlsplit(url)
        base = f"{parts.scheme}://{parts.netloc}"
        scope_path = urlsplit(self.scope).path
        while len(folder) >= len(scope_path):
            for candidate in (folder, *(folder + index for index in _INDEX_PAGES)):
                found = self.uids.get(base + candidate)
                if found is not None and base + candidate != url:
                    return found
            folder = folder[: folder.rstrip("/").rfind("/") + 1]
        return None

    def links(self, page: Fetched) -> Iterator[str]:
        base = page.page.base and resolve(page.url, page.page.base)
        for href in page.page.links:
            url = resolve(base or page.url, href)
            uid = self.uid_at(url) if url else None
            if uid is not None:
                yield uid


def _page(
    outcome: Fetched, site: _Site, source: str, options: Options
) -> tuple[list[LoadedRecord | Rejection], PageState | None]:
    """A fetched page's entities (or rejections) and the state to remember for it."""
    uid = site.uid(outcome.url)
    name = unquote(urlsplit(outcome.url).path.rstrip("/").rsplit("/", 1)[-1]) or source
    if outcome.document is not None:
        return _document(outcome, site, source, options, uid, name)
    record = html_record(
        outcome.page, uid=uid, file=outcome.url, fallback_title=name, href=outcome.url
    )
    if isinstance(record, Rejection):
        return [record], None
    Dates(None, http_date(outcome.last_modified)).fill(record)
    record["source"] = source
    add_structure_edges(record, site.parent(outcome.url), site.links(outcome))
    items = list(page_entities(record, file=outcome.url, options=options))
    if any(isinstance(item, Rejection) for item in items):
        return items, None
    uids = tuple(item.entity.uid for item in items if isinstance(item, LoadedRecord))
    links = tuple(followed_links(outcome, site.scope))
    return items, PageState(outcome.etag, outcome.last_modified, uids, links)


def _document(
    outcome: Fetched, site: _Site, source: str, options: Options, uid: str, name: str
) -> tuple[list[LoadedRecord | Rejection], PageState | None]:
    """A fetched document (a PDF …) read by the document loaders, within their bounds;
    one that can't be read is a rejection naming its URL and why."""
    assert outcome.document is not None
    fmt, data = outcome.document
    answer = shared_runner().call(read_document, fmt, data, name, limits=DOCUMENT_LIMITS)
    if isinstance(answer, Refused | Unreadable):
        return [Rejection(outcome.url, None, uid, None, answer.reason)], None
    items: list[LoadedRecord | Rejection] = []
    records = part_records(answer, uid=uid, href=outcome.url, file_type=fmt, fallback_title=name)
    for record, _ in records:
        Dates(None, http_date(outcome.last_modified)).fill(record)
        record["source"] = source
        if record["uid"] == uid:
            add_structure_edges(record, site.parent(outcome.url), ())
        items.extend(page_entities(record, file=outcome.url, options=options))
    if any(isinstance(item, Rejection) for item in items):
        return items, None
    uids = tuple(item.entity.uid for item in items if isinstance(item, LoadedRecord))
    return items, PageState(outcome.etag, outcome.last_modified, uids, ())


def load_site(url: str, options: Options, web: WebOptions) -> SiteLoad:
    """Crawl the site at ``url`` into records (see the module docstring).

    Raises :class:`InvalidRequest` when ``url`` is not an http(s) URL, when the
    site's robots.txt can't be read, and when no page at all could be reached.
    """
    source = options.source or site_source(url)
    result = crawl(url, source=source, state=web.state, limits=web.limits)
    site = _Site(result, web.uid_prefix)
    report = CrawlReport(
        source,
        result.start,
        result.scope,
        result.sitemap,
        result.stats,
        result.truncated,
        result.delay_s,
    )
    report.updates.update(result.sitemaps)
    load = SiteLoad(report=report)
    read_as: dict[str, str] = {}
    for outcome in result.outcomes:
        if isinstance(outcome, Fetched):
            if _noindex(outcome):
                report.skipped.append((outcome.url, "the page says noindex"))
                report.updates[outcome.url] = None
                continue
            first = read_as.setdefault(site.uid(outcome.url), outcome.url)
            if first != outcome.url:  # …/ and …/index.html: one page, one uid
                report.skipped.append((outcome.url, f"the same uid as {first}"))
                report.updates[outcome.url] = None
                continue
            items, remembered = _page(outcome, site, source, options)
            for item in items:
                if isinstance(item, Rejection):
                    load.rejections.append(item)
                else:
                    load.records.append(item)
            report.updates[outcome.url] = remembered
        elif isinstance(outcome, Unchanged):
            load.unchanged.extend(outcome.state.uids or (site.uid(outcome.url),))
            report.updates[outcome.url] = outcome.state
        elif isinstance(outcome, Failed):
            uids = outcome.state.uids if outcome.state else (site.uid(outcome.url),)
            report.failed.append(FetchFailure(outcome.url, uids, outcome.status, outcome.message))
        elif isinstance(outcome, Gone):
            report.gone.append(outcome.url)
            report.updates[outcome.url] = None
        elif isinstance(outcome, Skipped):
            report.skipped.append((outcome.url, outcome.reason))
            report.updates[outcome.url] = None
    report.failed += [
        FetchFailure(f.url, (), f.status, f"sitemap: {f.message}") for f in result.failed_sitemaps
    ]
    if not site.uids:
        reasons = [f"{f.url}: {f.message}" for f in report.failed]
        reasons += [f"{u}: HTTP 404/410 or another client error" for u in report.gone]
        reasons += [f"{u}: {why}" for u, why in report.skipped]
        raise InvalidRequest(
            f"no page could be read from {url}"
            + (f" ({'; '.join(reasons[:3])})" if reasons else ""),
            url=url,
            stats=report.stats.to_dict(),
        )
    return load
