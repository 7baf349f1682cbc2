"""The hostile-site corpus: web sites that try to lead a crawl astray, and how it must answer.

Each case arranges a site (tests/ingest/site_server.py) around a docs folder ``/docs/`` — with
a secret page beside it at ``/private/secret.html`` and, on *another origin* (another port),
an ``/internal-admin`` — then crawls ``/docs/`` and checks what the crawl did. Every case must
also keep the crawl's invariants: no request to the other origin, none on the site outside
the scope but robots.txt and sitemaps (under any spelling of the path), no uid that climbs
out of the scope. ``tests/ingest/test_crawl_abuse.py`` runs every case;
``bench/bench_crawl.py --abuse`` counts them (tried / failed safely / misbehaved) with each
case's seconds and the process's peak memory.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from urllib.parse import unquote

from knowledge_store.errors import KnowledgeStoreError
from knowledge_store.ingest.crawl import SITEMAP_MAX_BYTES, SITEMAP_MAX_URLS, CrawlLimits
from knowledge_store.ingest.loaders import LoadResult, load_paths
from knowledge_store.ingest.loaders.web import WebOptions
from tests.ingest.site_server import Route, Site, page, serve

FAST = CrawlLimits(delay_s=0, concurrency=4, timeout_s=5)
#: A short deadline for the slow-drip cases (the default is 60 s).
DEADLINE = CrawlLimits(delay_s=0, concurrency=4, timeout_s=5, deadline_s=1.0)
_URLSET = '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'


@dataclass
class CrawlRun:
    """One case's crawl: the two servers, what the load gave (or the error) and how long."""

    site: Site
    other: Site
    result: LoadResult | None = None
    error: KnowledgeStoreError | None = None
    seconds: float = 0.0

    def uids(self) -> set[str]:
        return {r.entity.uid for r in self.result.records} if self.result else set()

    def skipped(self) -> dict[str, str]:
        return {s.path: s.reason for s in self.result.skipped} if self.result else {}

    def failed(self) -> dict[str, str]:
        if self.result is None:
            return {}
        return {f.url: f.message for f in self.result.failed}


@dataclass(frozen=True)
class CrawlCase:
    name: str
    setup: Callable[[Site, Site], None]
    #: None when the run is as it must be; else what went wrong
    check: Callable[[CrawlRun], str | None]
    limits: CrawlLimits = FAST
    tags: tuple[str, ...] = field(default=())


def _docs(site: Site, other: Site) -> None:
    site.routes.update(
        {
            "/robots.txt": Route("User-agent: *\nAllow: /\n", content_type="text/plain"),
            "/docs/": Route(page("Docs", '<p>See <a href="guide.html">the guide</a>.</p>')),
            "/docs/guide.html": Route(page("Guide", "<p>The guide.</p>")),
            "/private/secret.html": Route(page("Secret", "<p>Keep out.</p>")),
        }
    )
    other.routes["/internal-admin"] = Route("admin", content_type="text/plain")


def _linking(href: Callable[[Site, Site], str]) -> Callable[[Site, Site], None]:
    """The docs index links to ``href(site, other)``."""

    def setup(site: Site, other: Site) -> None:
        site.routes["/docs/"] = Route(
            page(
                "Docs", f'<p><a href="guide.html">guide</a> <a href="{href(site, other)}">x</a></p>'
            )
        )

    return setup


def _redirecting(location: Callable[[Site, Site], str]) -> Callable[[Site, Site], None]:
    """The docs index links to ``moved.html``, which redirects to ``location(site, other)``."""

    def setup(site: Site, other: Site) -> None:
        _linking(lambda s, o: "moved.html")(site, other)
        site.routes["/docs/moved.html"] = Route(
            "", status=302, headers={"Location": location(site, other)}, etag=False
        )

    return setup


def _robots(extra: str) -> Callable[[Site, Site], None]:
    def setup(site: Site, other: Site) -> None:
        site.routes["/robots.txt"] = Route(
            "User-agent: *\nAllow: /\n" + extra.format(site=site.origin, other=other.origin),
            content_type="text/plain",
        )

    return setup


def _gzip_bomb(expands_to: int) -> bytes:
    """A gzip'd sitemap that expands to ``expands_to`` bytes (mostly spaces), made a piece at a
    time: the test never holds the expansion."""
    pack = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    out = [pack.compress(_URLSET.encode())]
    chunk = b" " * 1_048_576
    for _ in range(expands_to // len(chunk) + 1):
        out.append(pack.compress(chunk))
    out.append(pack.compress(b"</urlset>") + pack.flush())
    return b"".join(out)


# -- checks -----------------------------------------------------------------------------------


def _only(*uids: str) -> Callable[[CrawlRun], str | None]:
    def check(run: CrawlRun) -> str | None:
        if run.error is not None:
            return f"{run.error.code}: {run.error.message[:200]}"
        return None if run.uids() == set(uids) else f"published {sorted(run.uids())}"

    return check


def _skipped_saying(
    path: str, words: str, uids: tuple[str, ...] = ("index", "guide")
) -> Callable[[CrawlRun], str | None]:
    def check(run: CrawlRun) -> str | None:
        reason = run.skipped().get(run.site.url(path), "")
        if words not in reason:
            return f"{path} skipped as {reason!r}, expected words {words!r}"
        return _only(*uids)(run)

    return check


def _failed_saying(url: str, words: str, *uids: str) -> Callable[[CrawlRun], str | None]:
    def check(run: CrawlRun) -> str | None:
        message = run.failed().get(url.format(site=run.site.origin), "")
        if words not in message:
            return f"{url} failed as {message!r}, expected words {words!r}; {run.failed()}"
        return _only(*uids)(run)

    return check


def _refused_saying(words: str) -> Callable[[CrawlRun], str | None]:
    def check(run: CrawlRun) -> str | None:
        if run.error is None:
            return f"not refused: published {sorted(run.uids())}"
        if run.error.code != "invalid_request" or words not in run.error.message:
            return f"{run.error.code}: {run.error.message[:300]!r} does not say {words!r}"
        return None

    return check


def _within(
    seconds: float, then: Callable[[CrawlRun], str | None]
) -> Callable[[CrawlRun], str | None]:
    def check(run: CrawlRun) -> str | None:
        if run.seconds > seconds:
            return f"took {run.seconds:.1f} s, more than {seconds} s"
        return then(run)

    return check


def _drip(headers: bool) -> Callable[[Site, Site], None]:
    def setup(site: Site, other: Site) -> None:
        route = site.routes["/docs/guide.html"]
        route.drip_s, route.drip_headers = 0.2, headers  # ~200 bytes: 40 s if undeadlined

    return setup


def _many_urls(site: Site, other: Site) -> None:
    urls = "".join(
        f"<url><loc>{site.url(f'/docs/p{i}.html')}</loc></url>" for i in range(SITEMAP_MAX_URLS + 1)
    )
    site.routes["/docs/sitemap.xml"] = Route(
        _URLSET + urls + "</urlset>", content_type="application/xml"
    )


def _bomb_sitemap(site: Site, other: Site) -> None:
    site.routes["/robots.txt"].body += f"Sitemap: {site.url('/sitemap.xml.gz')}\n"
    site.routes["/sitemap.xml.gz"] = Route(
        _gzip_bomb(2 * SITEMAP_MAX_BYTES), content_type="application/gzip"
    )


def _bomb_page(site: Site, other: Site) -> None:
    body = zlib.compress(b" " * (FAST.max_bytes * 3), 9)  # zlib-wrapped: Content-Encoding deflate
    site.routes["/docs/guide.html"] = Route(body, headers={"Content-Encoding": "deflate"})


def _gzip_page(site: Site, other: Site) -> None:
    pack = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    html = page("Guide", "<p>The guide, sent compressed.</p>").encode()
    site.routes["/docs/guide.html"] = Route(
        pack.compress(html) + pack.flush(), headers={"Content-Encoding": "gzip"}
    )


def _brotli_page(site: Site, other: Site) -> None:
    site.routes["/docs/guide.html"].headers["Content-Encoding"] = "br"


CASES: tuple[CrawlCase, ...] = (
    # -- scope, after normalisation --------------------------------------------------------------
    CrawlCase(
        "link-dotdot-absolute",  # the case: published as ../private/secret
        _linking(lambda s, o: s.url("/docs/../private/secret.html")),
        _only("index", "guide"),
    ),
    CrawlCase(
        "link-dotdot-escaped",
        _linking(lambda s, o: "/docs/%2e%2E/private/secret.html"),
        _only("index", "guide"),
    ),
    CrawlCase(
        "link-dotdot-dot-escaped",
        _linking(lambda s, o: "/docs/.%2e/private/secret.html"),
        _only("index", "guide"),
    ),
    CrawlCase(
        "link-encoded-slash",
        _linking(lambda s, o: "/docs/..%2Fprivate/secret.html"),
        _only("index", "guide"),
    ),
    CrawlCase(
        "link-encoded-backslash",
        _linking(lambda s, o: "/docs/..%5Cprivate/secret.html"),
        _only("index", "guide"),
    ),
    CrawlCase(
        "link-backslash",
        _linking(lambda s, o: "/docs/..\\private/secret.html"),
        _only("index", "guide"),
    ),
    CrawlCase(
        "link-other-origin",
        _linking(lambda s, o: o.url("/internal-admin")),
        _only("index", "guide"),
    ),
    CrawlCase(
        "link-userinfo-other-origin",  # http://site@other/: the host is the other one
        _linking(
            lambda s, o: (
                o.origin.replace("http://", "http://" + s.origin[7:] + "@") + "/internal-admin"
            )
        ),
        _only("index", "guide"),
    ),
    # -- redirects, hop by hop ------------------------------------------------------------------
    CrawlCase(
        "redirect-dotdot-absolute",
        _redirecting(lambda s, o: s.url("/docs/../private/secret.html")),
        _skipped_saying("/docs/moved.html", "redirected out of"),
    ),
    CrawlCase(
        "redirect-dotdot-path",
        _redirecting(lambda s, o: "/docs/../private/secret.html"),
        _skipped_saying("/docs/moved.html", "redirected out of"),
    ),
    CrawlCase(
        "redirect-dotdot-escaped",
        _redirecting(lambda s, o: "/docs/%2e%2e/private/secret.html"),
        _skipped_saying("/docs/moved.html", "redirected out of"),
    ),
    CrawlCase(
        "redirect-other-origin",
        _redirecting(lambda s, o: o.url("/internal-admin")),
        _skipped_saying("/docs/moved.html", "redirected out of"),
    ),
    CrawlCase(
        "redirect-chain-leaving-late",  # in scope, in scope, then out: the third hop is checked
        lambda site, other: (
            _redirecting(lambda s, o: "/docs/hop1.html")(site, other),
            site.routes.update(
                {
                    "/docs/hop1.html": Route(
                        "", status=301, headers={"Location": "hop2.html"}, etag=False
                    ),
                    "/docs/hop2.html": Route(
                        "",
                        status=307,
                        headers={"Location": other.url("/internal-admin")},
                        etag=False,
                    ),
                }
            ),
        ),
        _skipped_saying("/docs/moved.html", "redirected out of"),
    ),
    CrawlCase(
        "redirect-loop",
        _redirecting(lambda s, o: "/docs/moved.html"),
        _failed_saying("{site}/docs/moved.html", "redirects", "index", "guide"),
    ),
    # -- robots.txt and sitemaps stay on the origin (no blind requests elsewhere) ---------------
    CrawlCase(
        "robots-redirect-other-origin",  # the SSRF: a blind GET to /internal-admin
        lambda site, other: site.routes.update(
            {
                "/robots.txt": Route(
                    "", status=302, headers={"Location": other.url("/internal-admin")}, etag=False
                )
            }
        ),
        _refused_saying("another origin"),
    ),
    CrawlCase(
        "robots-redirect-same-origin",  # followed: it stays on the origin
        lambda site, other: site.routes.update(
            {
                "/robots.txt": Route(
                    "", status=301, headers={"Location": "/robots-real.txt"}, etag=False
                ),
                "/robots-real.txt": Route(
                    "User-agent: *\nDisallow: /docs/guide.html\n", content_type="text/plain"
                ),
            }
        ),
        _only("index"),
    ),
    CrawlCase(
        "robots-sitemap-other-origin",
        _robots("Sitemap: {other}/internal-admin\n"),
        _only("index", "guide"),
    ),
    CrawlCase(
        "sitemap-redirect-other-origin",
        lambda site, other: site.routes.update(
            {
                "/docs/sitemap.xml": Route(
                    "", status=302, headers={"Location": other.url("/internal-admin")}, etag=False
                )
            }
        ),
        _only("index", "guide"),
    ),
    CrawlCase(
        "sitemap-lists-other-origin",
        lambda site, other: site.routes.update(
            {
                "/docs/sitemap.xml": Route(
                    '<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
                    f"<sitemap><loc>{other.url('/internal-admin')}</loc></sitemap></sitemapindex>",
                    content_type="application/xml",
                )
            }
        ),
        _only("index", "guide"),
    ),
    # -- bombs: decompressed within a bound ---------------------------------------------------
    CrawlCase(
        "sitemap-gzip-bomb",  # the 1.5 MB → 1.5 GB, at 100 MiB here
        _bomb_sitemap,
        _failed_saying("{site}/sitemap.xml.gz", "sitemap protocol's limit", "index", "guide"),
    ),
    CrawlCase(
        "sitemap-too-many-urls",
        _many_urls,
        _failed_saying(
            "{site}/docs/sitemap.xml", f"more than {SITEMAP_MAX_URLS:,} URLs", "index", "guide"
        ),
    ),
    CrawlCase(
        "page-deflate-bomb",  # Content-Encoding: decoded within max_bytes
        _bomb_page,
        _skipped_saying("/docs/guide.html", "decompresses to more than", ("index",)),
    ),
    CrawlCase("page-gzip-within-bounds", _gzip_page, _only("index", "guide")),
    CrawlCase(
        "page-unasked-encoding",
        _brotli_page,
        _skipped_saying("/docs/guide.html", "content encoding 'br'", ("index",)),
    ),
    # -- slow drips: one deadline per request ---------------------------------------------------
    CrawlCase(
        "page-body-drip",
        _drip(headers=False),
        _within(8, _failed_saying("{site}/docs/guide.html", "deadline of 1 s", "index")),
        limits=DEADLINE,
    ),
    CrawlCase(
        "page-header-drip",
        _drip(headers=True),
        _within(8, _failed_saying("{site}/docs/guide.html", "deadline of 1 s", "index")),
        limits=DEADLINE,
    ),
)


# -- running the corpus ------------------------------------------------------------------------


@contextmanager
def sites() -> Iterator[tuple[Site, Site]]:
    with serve() as site, serve() as other:
        yield site, other


def run(case: CrawlCase, site: Site, other: Site) -> CrawlRun:
    """Arrange ``case`` on the two (fresh) servers and crawl ``/docs/``."""
    _docs(site, other)
    case.setup(site, other)
    outcome = CrawlRun(site, other)
    started = time.monotonic()
    try:
        outcome.result = load_paths(
            [site.url("/docs/")],
            format="web",
            source=None,
            default_acl=["everyone"],
            web=WebOptions(limits=case.limits),
        )
    except KnowledgeStoreError as exc:
        outcome.error = exc
    outcome.seconds = time.monotonic() - started
    return outcome


def _resolved(path: str) -> str:
    out: list[str] = []
    for segment in unquote(path.split("?")[0]).replace("\\", "/").split("/")[1:]:
        if segment == "..":
            out = out[:-1]
        elif segment != ".":
            out.append(segment)
    return "/" + "/".join(out)


def problem(case: CrawlCase, outcome: CrawlRun) -> str | None:
    """None when ``outcome`` keeps the crawl's invariants and the case's own check."""
    if outcome.other.log:
        return f"requested on the other origin: {[hit.path for hit in outcome.other.log]}"
    for hit in outcome.site.log:
        where = _resolved(hit.path)
        if not where.startswith(("/docs/", "/robots", "/sitemap")):
            return f"requested {hit.path} ({where}), outside the scope"
    if climbing := [uid for uid in outcome.uids() if ".." in uid]:
        return f"uids out of the scope: {climbing}"
    return case.check(outcome)
