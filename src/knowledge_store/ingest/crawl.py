"""Crawling a documentation site politely, and fetching almost nothing when it has not changed.

:func:`crawl` starts from a URL whose folder is the *scope* (``https://h/docs/``
for ``https://h/docs/``, ``https://h/docs/index.html`` or ``https://h/docs``):
only same-origin URLs under it are read.

- **robots.txt** is read first (protego: wildcards, longest match) and obeyed,
  its ``Crawl-delay`` / ``Request-rate`` too. A missing one (4xx) allows
  everything; one the site fails to serve (5xx, timeout) stops the crawl
  (RFC 9309: assume everything is disallowed).
- **Sitemaps**: the ones robots.txt names, else ``sitemap.xml`` in the scope
  or at the root; a sitemap index is followed. When a sitemap lists pages in
  the scope, those are the pages; else links are followed from the start page,
  breadth first, up to ``max_depth`` links away.
- **Bounds**: at most ``max_pages`` URLs, ``concurrency`` at once, request
  starts at least ``delay_s`` apart (or the site's crawl delay, if longer),
  ``timeout_s`` per request, ``max_bytes`` per body.
- **Conditional requests**: validators come from a :class:`CrawlState`;
  ``304 Not Modified`` gives :class:`Unchanged` with what the state
  remembers (uids, links) — the crawl goes on through those links.
- **Outcomes**: redirects are followed within the scope (the final URL is the
  page's); ``404``/``410`` and other client errors → :class:`Gone`;
  ``5xx``, ``408``, ``429``, timeouts and network errors → :class:`Failed`, which
  is *not* gone: what a store holds for it must be kept.
"""

from __future__ import annotations

import gzip
import math
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from posixpath import splitext
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit
from xml.etree import ElementTree

import httpx
from protego import Protego

from knowledge_store.errors import InvalidRequest
from knowledge_store.ingest.crawl_state import CrawlState, PageState
from knowledge_store.ingest.loaders.documents import format_of_type
from knowledge_store.ingest.loaders.html import HtmlPage, parse_html

__all__ = [
    "USER_AGENT",
    "Crawl",
    "CrawlLimits",
    "Failed",
    "Fetched",
    "Gone",
    "Outcome",
    "Skipped",
    "Unchanged",
    "crawl",
    "followed_links",
    "normal_url",
    "resolve",
    "scope_of",
]

USER_AGENT = "knowledge-store/0.1 (documentation crawler)"
_ROBOTS_AGENT = "knowledge-store"
_HTML_TYPES = ("text/html", "application/xhtml+xml")
#: Link targets with these extensions are not fetched: they are not pages.
# fmt: off
_NOT_PAGES = frozenset({
    "css", "js", "mjs", "map", "png", "jpg", "jpeg", "gif", "svg", "webp", "ico", "bmp",
    "zip", "gz", "tgz", "tar", "bz2", "xz", "7z", "woff", "woff2", "ttf", "otf", "eot", "mp3",
    "mp4", "webm", "ogg", "wav", "avi", "mov", "exe", "dmg", "deb", "rpm", "whl", "jar", "iso",
})
# fmt: on
_TRANSIENT = frozenset({408, 425, 429})
_MAX_SITEMAPS = 50
_SITEMAP_NS = "{http://www.sitemaps.org/schemas/sitemap/0.9}"


@dataclass(frozen=True)
class CrawlLimits:
    """How far, how fast and how much a crawl may go."""

    max_pages: int = 1000
    max_depth: int = 10
    delay_s: float = 0.5
    concurrency: int = 2
    timeout_s: float = 15.0
    max_bytes: int = 10_000_000
    max_redirects: int = 5
    user_agent: str = USER_AGENT

    def __post_init__(self) -> None:
        for name in ("max_pages", "concurrency", "max_bytes"):
            if getattr(self, name) < 1:
                raise InvalidRequest(f"{name} must be at least 1", field=name)
        for name in ("max_depth", "max_redirects"):
            if getattr(self, name) < 0:
                raise InvalidRequest(f"{name} must not be negative", field=name)
        if not (math.isfinite(self.delay_s) and self.delay_s >= 0):  # NaN passes a < 0 test
            raise InvalidRequest(
                f"delay_s must be a finite number of seconds ≥ 0, not {self.delay_s}",
                field="delay_s",
            )
        if not (math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise InvalidRequest(
                f"timeout_s must be a positive number of seconds, not {self.timeout_s}",
                field="timeout_s",
            )


@dataclass(frozen=True)
class Fetched:
    """A page read in full (``200``): ``url`` is where it ended after redirects."""

    url: str
    requested: str
    depth: int
    page: HtmlPage
    etag: str | None
    last_modified: str | None
    robots: frozenset[str] = frozenset()
    #: A document (a PDF …), not a page: its format and bytes, for the document loaders.
    document: tuple[str, bytes] | None = None


@dataclass(frozen=True)
class Unchanged:
    """``304 Not Modified``: the page is as it was; ``state`` is what was remembered of it."""

    url: str
    requested: str
    depth: int
    state: PageState


@dataclass(frozen=True)
class Gone:
    """The page is not there (``404``, ``410``, another client error): absent from the source."""

    url: str
    status: int


@dataclass(frozen=True)
class Failed:
    """The page could not be read this time (``5xx``, timeout, network): keep what is stored."""

    url: str
    message: str
    status: int | None = None
    state: PageState | None = None


@dataclass(frozen=True)
class Skipped:
    """A URL not read on purpose (robots.txt, out of scope, not HTML, ``noindex`` …)."""

    url: str
    reason: str


Outcome = Fetched | Unchanged | Gone | Failed | Skipped


@dataclass
class CrawlStats:
    """What a crawl did on the wire."""

    requests: int = 0
    pages: int = 0
    not_modified: int = 0
    redirects: int = 0
    gone: int = 0
    failed: int = 0
    skipped: int = 0
    bytes: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Crawl:
    """Everything one crawl saw, in the order it saw it; ``aliases`` maps each URL that
    redirected to the page it reached."""

    start: str
    scope: str
    source: str
    sitemap: str | None = None
    outcomes: list[Outcome] = field(default_factory=list)
    aliases: dict[str, str] = field(default_factory=dict)
    sitemaps: dict[str, PageState | None] = field(default_factory=dict)
    failed_sitemaps: list[Failed] = field(default_factory=list)
    stats: CrawlStats = field(default_factory=CrawlStats)
    truncated: bool = False
    delay_s: float = 0.0


def normal_url(url: str) -> str:
    """``url`` without its fragment, scheme and host in lower case, no default port, path at least ``/``."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    port = parts.port
    if port is not None and (scheme, port) not in (("http", 80), ("https", 443)):
        host = f"{host}:{port}"
    return urlunsplit((scheme, host, parts.path or "/", parts.query, ""))


def scope_of(url: str) -> str:
    """The folder URL a crawl from ``url`` stays under (a last segment without a dot is a folder)."""
    start = normal_url(url)
    parts = urlsplit(start)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidRequest(
            f"{url!r} is not an http(s) URL; give the site's address, e.g. https://example.com/docs/",
            url=url,
        )
    path = parts.path
    last = path.rsplit("/", 1)[-1]
    if last and "." not in last:
        path += "/"
    folder = path[: path.rfind("/") + 1]
    return urlunsplit((parts.scheme, parts.netloc, folder, "", ""))


def _in_scope(url: str, scope: str) -> bool:
    return url.startswith(scope)


def _maybe_page(url: str) -> bool:
    return splitext(urlsplit(url).path)[1].lower().lstrip(".") not in _NOT_PAGES


def resolve(base: str, href: str) -> str | None:
    """``href`` as an absolute, normal http(s) URL, or None for other schemes."""
    try:
        url = normal_url(urljoin(base, href))
    except ValueError:
        return None
    return url if url.startswith(("http://", "https://")) else None


def followed_links(page: Fetched, scope: str) -> list[str]:
    """The URLs a crawl follows from ``page``: in ``scope``, likely pages, in order, once each.

    None when the page says ``nofollow`` (``<meta name=robots>`` or ``X-Robots-Tag``).
    """
    if "nofollow" in page.robots or "none" in page.robots:
        return []
    base = urljoin(page.url, page.page.base) if page.page.base else page.url
    links = (resolve(base, href) for href in page.page.all_links)
    return list(
        dict.fromkeys(
            link for link in links if link and _in_scope(link, scope) and _maybe_page(link)
        )
    )


class _Pace:
    """Request starts at least ``interval`` seconds apart, across threads (the interval may be
    raised between requests: robots.txt is read before its crawl delay is known)."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._last: float | None = None
        self._lock = threading.Lock()

    def wait(self) -> None:
        with self._lock:
            now = time.monotonic()
            start = now if self._last is None else max(now, self._last + self.interval)
            self._last = start
        if start > now:
            time.sleep(start - now)


def _conditional(state: PageState | None) -> dict[str, str]:
    headers: dict[str, str] = {}
    if state is not None and state.etag:
        headers["If-None-Match"] = state.etag
    if state is not None and state.last_modified:
        headers["If-Modified-Since"] = state.last_modified
    return headers


def _header_robots(response: httpx.Response) -> frozenset[str]:
    values = response.headers.get_list("x-robots-tag")
    return frozenset(
        part.strip().lower() for value in values for part in value.split(",") if part.strip()
    )


class _Crawler:
    def __init__(
        self,
        start: str,
        *,
        source: str,
        state: CrawlState | None,
        limits: CrawlLimits,
        client: httpx.Client,
    ) -> None:
        self.scope = scope_of(start)
        self.start = normal_url(start)
        if not _in_scope(self.start, self.scope):
            self.start = self.scope
        self.source = source
        self.state = state
        self.limits = limits
        self.client = client
        self.result = Crawl(self.start, self.scope, source)
        self.pace = _Pace(limits.delay_s)
        self.robots = Protego.parse("")
        self._lock = threading.Lock()

    # -- the wire ---------------------------------------------------------------------------
    def _count(self, **increments: int) -> None:
        with self._lock:
            for name, value in increments.items():
                setattr(self.result.stats, name, getattr(self.result.stats, name) + value)

    def _remembered(self, url: str) -> PageState | None:
        return self.state.get(self.source, url) if self.state is not None else None

    def _get(self, url: str, headers: dict[str, str]) -> tuple[httpx.Response, bytes]:
        """One paced GET; the body is read up to ``max_bytes`` (``ValueError`` beyond)."""
        self.pace.wait()
        with self.client.stream("GET", url, headers=headers) as response:
            self._count(requests=1)
            body = bytearray()
            if not response.has_redirect_location and response.status_code == 200:
                for piece in response.iter_bytes():
                    body += piece
                    if len(body) > self.limits.max_bytes:
                        raise ValueError(f"larger than {self.limits.max_bytes:,} bytes")
            self._count(bytes=len(body))
            return response, bytes(body)

    def _allowed(self, url: str) -> bool:
        return bool(self.robots.can_fetch(url, _ROBOTS_AGENT))

    def _read_robots(self) -> None:
        parts = urlsplit(self.scope)
        url = urlunsplit((parts.scheme, parts.netloc, "/robots.txt", "", ""))
        try:
            response, body = self._get(url, {})
            hops = 0
            while response.has_redirect_location and hops < self.limits.max_redirects:
                hops += 1
                url = urljoin(url, response.headers["location"])
                response, body = self._get(url, {})
        except (httpx.HTTPError, ValueError) as exc:
            raise InvalidRequest(
                f"{url} could not be read ({exc or type(exc).__name__}): robots.txt tells what"
                " may be crawled, so nothing was crawled; try again later",
                url=url,
            ) from exc
        status = response.status_code
        if status >= 500 or status in _TRANSIENT:
            raise InvalidRequest(
                f"{url} answered HTTP {status}: robots.txt tells what may be crawled, so"
                " nothing was crawled; try again later",
                url=url,
                status=status,
            )
        if status == 200:
            self.robots = Protego.parse(body.decode("utf-8", "replace"))
        delay = self.robots.crawl_delay(_ROBOTS_AGENT) or 0.0
        rate = self.robots.request_rate(_ROBOTS_AGENT)
        if rate is not None and rate.requests:
            delay = max(delay, rate.seconds / rate.requests)
        self.pace.interval = max(self.limits.delay_s, float(delay))
        self.result.delay_s = self.pace.interval

    def _fetch(self, requested: str, depth: int) -> Outcome:
        url = requested
        for _ in range(self.limits.max_redirects + 1):
            known = self._remembered(url)
            try:
                response, body = self._get(url, _conditional(known))
            except httpx.TimeoutException:
                return Failed(url, f"timed out after {self.limits.timeout_s:g} s", None, known)
            except httpx.HTTPError as exc:
                return Failed(url, f"{type(exc).__name__}: {exc}", None, known)
            except ValueError as exc:
                return Skipped(url, str(exc))
            status = response.status_code
            if response.has_redirect_location:
                target = normal_url(urljoin(url, response.headers["location"]))
                if not _in_scope(target, self.scope):
                    return Skipped(requested, f"redirected out of {self.scope} to {target}")
                if not self._allowed(target):
                    return Skipped(requested, f"redirected to {target}, disallowed by robots.txt")
                self._count(redirects=1)
                url = target
                continue
            if status == 304:
                if known is None:
                    return Failed(url, "HTTP 304 to a request that was not conditional", 304)
                fresh = PageState(
                    response.headers.get("etag") or known.etag,
                    response.headers.get("last-modified") or known.last_modified,
                    known.uids,
                    known.links,
                )
                return Unchanged(url, requested, depth, fresh)
            if status >= 500 or status in _TRANSIENT:
                return Failed(url, f"HTTP {status}", status, known)
            if status >= 400:
                return Gone(url, status)
            if status != 200:
                return Skipped(url, f"HTTP {status}, not a page")
            kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
            document = format_of_type(kind, urlsplit(url).path)
            if kind not in _HTML_TYPES and document is not None:
                return Fetched(
                    url,
                    requested,
                    depth,
                    HtmlPage(title=None, body=""),
                    response.headers.get("etag"),
                    response.headers.get("last-modified"),
                    _header_robots(response),
                    (document, body),
                )
            if kind not in _HTML_TYPES:
                return Skipped(url, f"not HTML ({kind or 'no content type'})")
            try:
                text = body.decode(response.encoding or "utf-8")
            except (UnicodeDecodeError, LookupError) as exc:
                return Skipped(url, f"the page can't be decoded as {response.encoding}: {exc}")
            page = parse_html(text)
            return Fetched(
                url,
                requested,
                depth,
                page,
                response.headers.get("etag"),
                response.headers.get("last-modified"),
                page.robots | _header_robots(response),
            )
        return Failed(requested, f"more than {self.limits.max_redirects} redirects")

    # -- sitemaps -----------------------------------------------------------------------------
    def _sitemap(self, url: str) -> tuple[list[str], list[str]] | Failed | None:
        """``(page URLs, child sitemaps)`` of one sitemap, ``Failed``, or None when it isn't one."""
        known = self._remembered(url)
        try:
            response, body = self._get(url, _conditional(known))
        except httpx.HTTPError as exc:
            return Failed(url, f"{type(exc).__name__}: {exc}", None, known)
        except ValueError as exc:
            return Failed(url, str(exc), None, known)
        status = response.status_code
        if status == 304 and known is not None:
            self.result.sitemaps[url] = known
            return list(known.links), list(known.uids)
        if status >= 500 or status in _TRANSIENT:
            return Failed(url, f"HTTP {status}", status, known)
        if status != 200:
            return None
        if body[:2] == b"\x1f\x8b":
            try:
                body = gzip.decompress(body)
            except (OSError, EOFError):
                return None
        try:
            root = ElementTree.fromstring(body)
        except ElementTree.ParseError:
            return None
        locations = [
            (node.text or "").strip() for node in root.iter(f"{_SITEMAP_NS}loc") if node.text
        ]
        if root.tag == f"{_SITEMAP_NS}sitemapindex":
            pages, children = [], locations
        elif root.tag == f"{_SITEMAP_NS}urlset":
            pages, children = locations, []
        else:
            return None
        # A sitemap's state keeps the pages it lists as links and its child sitemaps as uids.
        self.result.sitemaps[url] = PageState(
            response.headers.get("etag"),
            response.headers.get("last-modified"),
            tuple(children),
            tuple(pages),
        )
        return pages, children

    def _sitemap_pages(self) -> list[str]:
        origin = urlunsplit((*urlsplit(self.scope)[:2], "/", "", ""))
        named = [normal_url(u) for u in self.robots.sitemaps if normal_url(u).startswith(origin)]
        candidates = named or [self.scope + "sitemap.xml", origin + "sitemap.xml"]
        for candidate in dict.fromkeys(candidates):
            pages: list[str] = []
            queue, seen = [candidate], {candidate}
            while queue and len(seen) <= _MAX_SITEMAPS:
                answer = self._sitemap(queue.pop(0))
                if answer is None:
                    continue
                if isinstance(answer, Failed):
                    self.result.failed_sitemaps.append(answer)
                    if answer.state is None:
                        continue
                    answer = list(answer.state.links), list(answer.state.uids)
                found, children = answer
                pages += [normal_url(u) for u in found]
                for child in (normal_url(u) for u in children):
                    if child.startswith(origin) and child not in seen:
                        seen.add(child)
                        queue.append(child)
            in_scope = [u for u in dict.fromkeys(pages) if _in_scope(u, self.scope)]
            if in_scope:
                self.result.sitemap = candidate
                return in_scope
        return []

    # -- the walk -----------------------------------------------------------------------------
    def _links(self, outcome: Outcome) -> Iterable[str]:
        if isinstance(outcome, Fetched):
            return followed_links(outcome, self.scope)
        if isinstance(outcome, Unchanged | Failed) and outcome.state is not None:
            return outcome.state.links
        return ()

    def run(self) -> Crawl:
        started = time.perf_counter()
        self._read_robots()
        listed = self._sitemap_pages()
        follow = not listed
        frontier = [(url, 0) for url in (listed or [self.start])]
        seen = {url for url, _ in frontier}
        reached: set[str] = set()
        budget = self.limits.max_pages
        with ThreadPoolExecutor(self.limits.concurrency, thread_name_prefix="ks-crawl") as pool:
            while frontier:
                allowed = [(u, d) for u, d in frontier if self._allowed(u)]
                for url, _ in frontier:
                    if not self._allowed(url):
                        self._record(Skipped(url, "disallowed by robots.txt"))
                if len(allowed) > budget:
                    self.result.truncated = True
                    allowed = allowed[:budget]
                budget -= len(allowed)
                frontier = []
                outcomes = pool.map(lambda item: self._fetch(*item), allowed)
                for (_, depth), outcome in zip(allowed, outcomes, strict=True):
                    final = outcome.url
                    if isinstance(outcome, Fetched | Unchanged):
                        if outcome.requested != final:
                            self.result.aliases[outcome.requested] = final
                        if final in reached:
                            continue
                        reached.add(final)
                        seen.add(final)
                    self._record(outcome)
                    if not follow or depth >= self.limits.max_depth:
                        continue
                    for link in self._links(outcome):
                        if link not in seen and _in_scope(link, self.scope):
                            seen.add(link)
                            frontier.append((link, depth + 1))
                if frontier and budget <= 0:
                    self.result.truncated = True
                    break
        self.result.stats.seconds = time.perf_counter() - started
        return self.result

    def _record(self, outcome: Outcome) -> None:
        stats = self.result.stats
        if isinstance(outcome, Fetched):
            stats.pages += 1
        elif isinstance(outcome, Unchanged):
            stats.not_modified += 1
        elif isinstance(outcome, Gone):
            stats.gone += 1
        elif isinstance(outcome, Failed):
            stats.failed += 1
        else:
            stats.skipped += 1
        self.result.outcomes.append(outcome)


def crawl(
    start: str,
    *,
    source: str,
    state: CrawlState | None = None,
    limits: CrawlLimits | None = None,
    transport: httpx.BaseTransport | None = None,
) -> Crawl:
    """Crawl the site under ``start`` (see the module docstring); ``state`` is only read.

    Raises :class:`InvalidRequest` for a URL that is not http(s) and when the
    site's robots.txt can't be read.
    """
    limits = limits or CrawlLimits()
    with httpx.Client(
        headers={"User-Agent": limits.user_agent},
        timeout=httpx.Timeout(limits.timeout_s),
        follow_redirects=False,
        limits=httpx.Limits(max_connections=limits.concurrency),
        transport=transport,
    ) as client:
        return _Crawler(start, source=source, state=state, limits=limits, client=client).run()
