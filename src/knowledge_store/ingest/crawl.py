"""Crawling a documentation site politely, and fetching almost nothing when it has not changed.

:func:`crawl` starts from a URL whose folder is the *scope* (``https://h/docs/``
for ``https://h/docs/``, ``https://h/docs/index.html`` or ``https://h/docs``):
only same-origin URLs under it are read. A URL is checked in its normal form
(:func:`normal_url`: ``.``/``..`` segments resolved, ``%2E`` read as ``.``), and
once more with every escape decoded and ``\\`` read as ``/`` (a server that decodes
``..%2F`` must not lead out of the scope either): both must lie under the scope.

- **robots.txt** is read first (protego: wildcards, longest match) and obeyed,
  its ``Crawl-delay`` / ``Request-rate`` too. A missing one (4xx) allows
  everything; one the site fails to serve (5xx, timeout) stops the crawl
  (RFC 9309: assume everything is disallowed), and so does one that redirects
  to another origin: robots.txt, sitemaps and pages are only ever requested on
  the start URL's origin, redirects included (no request to another host or
  port, whatever a site answers).
- **Sitemaps**: the ones robots.txt names, else ``sitemap.xml`` in the scope
  or at the root; a sitemap index is followed. When a sitemap lists pages in
  the scope, those are the pages; else links are followed from the start page,
  breadth first, up to ``max_depth`` links away. A sitemap is read within the
  sitemap protocol's bounds — :data:`SITEMAP_MAX_BYTES` once decompressed,
  :data:`SITEMAP_MAX_URLS` URLs — decompressing as it parses, so a gzip bomb stops
  at the bound (the sitemap then *failed*, saying why).
- **Bounds**: at most ``max_pages`` URLs, ``concurrency`` at once, request
  starts at least ``delay_s`` apart (or the site's crawl delay, if longer),
  ``timeout_s`` for any one network operation (connect, a read, a write),
  ``deadline_s`` for a whole request (connecting to the body's last byte: a
  server dripping bytes can't hold a request longer, see
  :mod:`~knowledge_store.ingest.http_deadline`), ``max_bytes`` per body *as
  decoded* (``Content-Encoding: gzip``/``deflate`` is decompressed with that bound).
- **Conditional requests**: validators come from a :class:`CrawlState`;
  ``304 Not Modified`` gives :class:`Unchanged` with what the state
  remembers (uids, links) — the crawl goes on through those links.
- **Outcomes**: redirects are followed hop by hop (at most ``max_redirects``),
  each target checked (in the scope and allowed by robots.txt for a page, on the
  origin for robots.txt and sitemaps) before it is requested; the final URL is the
  page's. ``404``/``410`` and other client errors → :class:`Gone`;
  ``5xx``, ``408``, ``429``, timeouts and network errors → :class:`Failed`, which
  is *not* gone: what a store holds for it must be kept.
"""

from __future__ import annotations

import math
import re
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from posixpath import splitext
from typing import Any, NamedTuple
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit
from xml.parsers import expat

import httpx
from protego import Protego

from knowledge_store.errors import InvalidRequest
from knowledge_store.ingest.crawl_state import CrawlState, PageState
from knowledge_store.ingest.http_deadline import DeadlinePassed, DeadlineTransport, deadline
from knowledge_store.ingest.loaders.documents import format_of_type
from knowledge_store.ingest.loaders.html import HtmlPage, parse_html

__all__ = [
    "SITEMAP_MAX_BYTES",
    "SITEMAP_MAX_URLS",
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
    "in_scope",
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
_SITEMAP_LOC = "http://www.sitemaps.org/schemas/sitemap/0.9}loc"  # as expat names it
#: The sitemap protocol's bounds (sitemaps.org): a sitemap file (or index) is at most
#: 50 MiB once decompressed and lists at most 50,000 URLs.
SITEMAP_MAX_BYTES = 52_428_800
SITEMAP_MAX_URLS = 50_000
#: Only these content codings are asked for (``Accept-Encoding``), and decoded under a bound.
_ACCEPT_ENCODING = "gzip, deflate"
_ZLIB_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": 32 + 15}
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_PIECE = 65_536


@dataclass(frozen=True)
class CrawlLimits:
    """How far, how fast and how much a crawl may go."""

    max_pages: int = 1000
    max_depth: int = 10
    delay_s: float = 0.5
    concurrency: int = 2
    timeout_s: float = 15.0
    deadline_s: float = 60.0
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
        for name in ("timeout_s", "deadline_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise InvalidRequest(
                    f"{name} must be a positive number of seconds, not {value}", field=name
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
    """``url`` in the form a crawl compares and requests (RFC 3986 §6.2.2): no fragment, scheme
    and host in lower case, no default port, path at least ``/``, escapes of unreserved
    characters decoded (``%2E`` is ``.``) and the others in upper case, ``.``/``..`` segments
    resolved (``/docs/../private/`` is ``/private/``)."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    port = parts.port
    if port is not None and (scheme, port) not in (("http", 80), ("https", 443)):
        host = f"{host}:{port}"
    path = _without_dot_segments(_ESCAPE.sub(_escape, parts.path or "/"))
    return urlunsplit((scheme, host, path, _ESCAPE.sub(_escape, parts.query), ""))


def _escape(match: re.Match[str]) -> str:
    char = chr(int(match.group(1), 16))
    return char if char in _UNRESERVED else match.group(0).upper()


def _without_dot_segments(path: str) -> str:
    """RFC 3986 §5.2.4 for an absolute path: ``.`` and ``..`` segments resolved."""
    segments = path.split("/")
    out: list[str] = []
    for segment in segments[1:]:
        if segment == "..":
            if out:
                out.pop()
        elif segment != ".":
            out.append(segment)
    if segments[-1] in (".", ".."):
        out.append("")
    return "/" + "/".join(out)


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


def origin_of(url: str) -> str:
    """``scheme://host[:port]/`` of a normal URL."""
    return urlunsplit((*urlsplit(url)[:2], "/", "", ""))


def in_scope(url: str, scope: str) -> bool:
    """Whether the normal URL ``url`` lies under ``scope`` — read as written, and read as a
    server that decodes every escape and takes ``\\`` for ``/`` would read it."""
    if not url.startswith(scope):
        return False
    decoded = unquote(urlsplit(url).path).replace("\\", "/")
    return _without_dot_segments(decoded).startswith(urlsplit(scope).path)


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
            link for link in links if link and in_scope(link, scope) and _maybe_page(link)
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


class _Unreadable(Exception):
    """A body not read: over its bound, or in a coding that can't be decoded (the message says)."""


class _HopFailed(Exception):
    """A GET of a redirect chain failed (``error``: a network error or :class:`_Unreadable`) on
    the hop ``url``, whose remembered state is ``known``."""

    def __init__(self, url: str, known: PageState | None, error: Exception) -> None:
        super().__init__(url)
        self.url = url
        self.known = known
        self.error = error


class _Inflater:
    """zlib decoding (``wbits`` as :func:`zlib.decompressobj`) in pieces of at most
    :data:`_PIECE` bytes, never more than ``limit`` in all: past it, :class:`_Unreadable`."""

    def __init__(self, wbits: int, limit: int, what: str = "max_bytes") -> None:
        self._zlib = zlib.decompressobj(wbits)
        self._limit = limit
        self._what = what
        self.size = 0

    def feed(self, data: bytes) -> Iterator[bytes]:
        while data and not self._zlib.eof:
            try:
                out = self._zlib.decompress(data, _PIECE)
            except zlib.error as exc:
                raise _Unreadable(f"its compressed body can't be decoded ({exc})") from None
            data = self._zlib.unconsumed_tail
            self.size += len(out)
            if self.size > self._limit:
                raise _Unreadable(
                    f"it decompresses to more than {self._limit:,} bytes ({self._what})"
                )
            yield out


def _sitemap_entries(body: bytes) -> tuple[str | None, list[str]]:
    """The root tag (``{namespace}name``) and the ``<loc>`` texts of a sitemap (gzip'd or not),
    decompressed and parsed a piece at a time — no tree is built, only the locations are kept
    — within the protocol's bounds (:class:`_Unreadable` beyond them)."""
    inflate = None
    if body[:2] == b"\x1f\x8b":
        inflate = _Inflater(16 + zlib.MAX_WBITS, SITEMAP_MAX_BYTES, "the sitemap protocol's limit")
    elif len(body) > SITEMAP_MAX_BYTES:
        raise _Unreadable(f"larger than {SITEMAP_MAX_BYTES:,} bytes (the sitemap protocol's limit)")
    parser = expat.ParserCreate(namespace_separator="}")
    root: list[str] = []
    locations: list[str] = []
    text: list[str] | None = None

    def start(name: str, _attributes: object) -> None:
        nonlocal text
        if not root:
            root.append("{" + name if "}" in name else name)
        if name == _SITEMAP_LOC:
            text = []

    def end(name: str) -> None:
        nonlocal text
        if name == _SITEMAP_LOC and text is not None:
            if location := "".join(text).strip():
                locations.append(location)
            text = None
            if len(locations) > SITEMAP_MAX_URLS:
                raise _Unreadable(
                    f"it lists more than {SITEMAP_MAX_URLS:,} URLs (the sitemap protocol's limit)"
                )

    def characters(data: str) -> None:
        if text is not None:
            text.append(data)

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = characters
    for at in range(0, len(body), _PIECE):
        piece = body[at : at + _PIECE]
        for part in inflate.feed(piece) if inflate is not None else (piece,):
            parser.Parse(part, False)
    parser.Parse(b"", True)
    return (root[0] if root else None), locations


class _Answer(NamedTuple):
    """Where a GET ended (after redirects), its response and body, and the state remembered
    for that URL (its conditional headers came from it)."""

    url: str
    response: httpx.Response
    body: bytes
    known: PageState | None


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
        self.origin = origin_of(self.scope)
        self.start = normal_url(start)
        if not in_scope(self.start, self.scope):
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
        """One paced GET under the request deadline; a ``200`` body is read and decoded up to
        ``max_bytes`` (:class:`_Unreadable` beyond, or for a coding it can't decode)."""
        self.pace.wait()
        with (
            deadline(self.limits.deadline_s),
            self.client.stream("GET", url, headers=headers) as response,
        ):
            self._count(requests=1)
            body = b""
            if not response.has_redirect_location and response.status_code == 200:
                body = self._body(response)
            return response, body

    def _body(self, response: httpx.Response) -> bytes:
        coding = response.headers.get("content-encoding", "identity").strip().lower()
        if coding not in ("identity", "", *_ZLIB_WBITS):
            raise _Unreadable(f"content encoding {coding!r}, which was not asked for")
        limit = self.limits.max_bytes
        inflate = _Inflater(_ZLIB_WBITS[coding], limit) if coding in _ZLIB_WBITS else None
        ends = time.monotonic() + self.limits.deadline_s  # any transport: checked between reads
        body = bytearray()
        for piece in response.iter_raw():
            self._count(bytes=len(piece))
            for part in inflate.feed(piece) if inflate is not None else (piece,):
                body += part
            if len(body) > limit:
                raise _Unreadable(f"larger than {limit:,} bytes (max_bytes)")
            if time.monotonic() > ends:
                raise DeadlinePassed(
                    f"the request's deadline of {self.limits.deadline_s:g} s passed"
                )
        return bytes(body)

    def _follow(self, url: str, stay: Callable[[str], str | None]) -> _Answer | Skipped | Failed:
        """GET ``url`` and the redirects it answers, hop by hop, each with its own conditional
        headers: a target is requested only when ``stay(target)`` is None (else the reason it
        is not, which the :class:`Skipped` gives). A network error or an unreadable body is
        :class:`_HopFailed`, naming the hop it happened on."""
        hop = url
        for _ in range(self.limits.max_redirects + 1):
            known = self._remembered(hop)
            try:
                response, body = self._get(hop, _conditional(known))
            except (httpx.HTTPError, _Unreadable) as exc:
                raise _HopFailed(hop, known, exc) from exc
            if not response.has_redirect_location:
                return _Answer(hop, response, body, known)
            target = normal_url(urljoin(hop, response.headers["location"]))
            if (why := stay(target)) is not None:
                return Skipped(url, why)
            self._count(redirects=1)
            hop = target
        return Failed(url, f"more than {self.limits.max_redirects} redirects")

    def _on_origin(self, target: str) -> str | None:
        if origin_of(target) == self.origin:
            return None
        return f"redirected to {target}, another origin than {self.origin}: not followed"

    def _page_hop(self, target: str) -> str | None:
        if not in_scope(target, self.scope):
            return f"redirected out of {self.scope} to {target}"
        if not self._allowed(target):
            return f"redirected to {target}, disallowed by robots.txt"
        return None

    def _allowed(self, url: str) -> bool:
        return bool(self.robots.can_fetch(url, _ROBOTS_AGENT))

    def _read_robots(self) -> None:
        url = self.origin + "robots.txt"
        try:
            answer = self._follow(url, self._on_origin)
        except _HopFailed as failed:
            error = failed.error
            raise InvalidRequest(
                f"{failed.url} could not be read ({error or type(error).__name__}): robots.txt"
                " tells what may be crawled, so nothing was crawled; try again later",
                url=failed.url,
            ) from error
        if isinstance(answer, Skipped):
            raise InvalidRequest(
                f"{url} {answer.reason}; a crawl requests robots.txt, sitemaps and pages only on"
                " its start URL's origin, so nothing was crawled; if the site moved, start the"
                " crawl at its new address",
                url=url,
            )
        if isinstance(answer, _Answer):  # too many redirects: unavailable (RFC 9309 §2.3.1.2)
            status = answer.response.status_code
            if status >= 500 or status in _TRANSIENT:
                raise InvalidRequest(
                    f"{url} answered HTTP {status}: robots.txt tells what may be crawled, so"
                    " nothing was crawled; try again later",
                    url=url,
                    status=status,
                )
            if status == 200:
                self.robots = Protego.parse(answer.body.decode("utf-8", "replace"))
        delay = self.robots.crawl_delay(_ROBOTS_AGENT) or 0.0
        rate = self.robots.request_rate(_ROBOTS_AGENT)
        if rate is not None and rate.requests:
            delay = max(delay, rate.seconds / rate.requests)
        self.pace.interval = max(self.limits.delay_s, float(delay))
        self.result.delay_s = self.pace.interval

    def _fetch(self, requested: str, depth: int) -> Outcome:
        try:
            answer = self._follow(requested, self._page_hop)
        except _HopFailed as failed:  # on the hop it happened, with what is kept of that page
            error = failed.error
            if isinstance(error, _Unreadable):
                return Skipped(failed.url, str(error))
            if isinstance(error, DeadlinePassed):
                message = str(error)
            elif isinstance(error, httpx.TimeoutException):
                message = f"timed out after {self.limits.timeout_s:g} s"
            else:
                message = f"{type(error).__name__}: {error}"
            return Failed(failed.url, message, None, failed.known)
        if not isinstance(answer, _Answer):
            return answer
        url, response, body, known = answer
        status = response.status_code
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

    # -- sitemaps -----------------------------------------------------------------------------
    def _sitemap(self, url: str) -> tuple[list[str], list[str]] | Failed | None:
        """``(page URLs, child sitemaps)`` of one sitemap, ``Failed``, or None when it isn't one."""
        known = self._remembered(url)
        try:
            answer = self._follow(url, self._on_origin)
        except _HopFailed as failed:
            error = failed.error
            message = (
                str(error) if isinstance(error, _Unreadable) else f"{type(error).__name__}: {error}"
            )
            return Failed(failed.url, message, None, failed.known)
        if isinstance(answer, Skipped):
            self._record(Skipped(url, f"sitemap {answer.reason}"))
            return None
        if isinstance(answer, Failed):
            return Failed(url, answer.message, None, known)
        final, response, body, known = answer
        status = response.status_code
        if status == 304 and known is not None:
            self.result.sitemaps[final] = known
            return list(known.links), list(known.uids)
        if status >= 500 or status in _TRANSIENT:
            return Failed(url, f"HTTP {status}", status, known)
        if status != 200:
            return None
        try:
            tag, locations = _sitemap_entries(body)
        except _Unreadable as exc:
            return Failed(url, f"{exc}; not read", None, known)
        except expat.ExpatError:
            return None
        if tag == f"{_SITEMAP_NS}sitemapindex":
            pages, children = [], locations
        elif tag == f"{_SITEMAP_NS}urlset":
            pages, children = locations, []
        else:
            return None
        # A sitemap's state keeps the pages it lists as links and its child sitemaps as uids.
        self.result.sitemaps[final] = PageState(
            response.headers.get("etag"),
            response.headers.get("last-modified"),
            tuple(children),
            tuple(pages),
        )
        return pages, children

    def _sitemap_pages(self) -> list[str]:
        origin = self.origin
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
            listed = [u for u in dict.fromkeys(pages) if in_scope(u, self.scope)]
            if listed:
                self.result.sitemap = candidate
                return listed
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
                    for link in map(normal_url, self._links(outcome)):  # state of older crawls
                        if link not in seen and in_scope(link, self.scope):
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
    site's robots.txt can't be read. ``transport`` replaces the one that enforces
    ``deadline_s`` within each read (bodies are still cut off at the deadline between reads).
    """
    limits = limits or CrawlLimits()
    with httpx.Client(
        headers={"User-Agent": limits.user_agent, "Accept-Encoding": _ACCEPT_ENCODING},
        timeout=httpx.Timeout(limits.timeout_s),
        follow_redirects=False,
        transport=transport or DeadlineTransport(max_connections=limits.concurrency),
    ) as client:
        return _Crawler(start, source=source, state=state, limits=limits, client=client).run()
