"""The web-site connector against a real HTTP site on 127.0.0.1 (tests/ingest/site_server.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from knowledge_store.errors import InvalidRequest
from knowledge_store.ingest.crawl import CrawlLimits, in_scope, normal_url, scope_of
from knowledge_store.ingest.crawl_state import JsonFileCrawlState, MemoryCrawlState, PageState
from knowledge_store.ingest.loaders import LoadResult, load_paths
from knowledge_store.ingest.loaders.pages import default_uid
from knowledge_store.ingest.loaders.web import WebOptions, url_uid
from knowledge_store.model import Entity
from knowledge_store.store import KnowledgeStore
from tests.ingest.site_server import Route, Site, page, serve

FAST = CrawlLimits(delay_s=0, concurrency=4, timeout_s=2)
ROBOTS = "User-agent: *\nDisallow: /docs/private/\n"
SETUP = page(
    "Setup",
    '<p>Install the <a href="../api.html">API</a> first.</p>'
    '<pre><code class="language-sh">pip install thing</code></pre>',
    links=("../",),
    head='<meta property="article:modified_time" content="2024-03-05T10:00:00Z">',
)


def docs_site(site: Site) -> None:
    """/docs/: an index, a guide folder, a redirect, a 404, a robots-disallowed page, links out."""
    site.routes.update(
        {
            "/robots.txt": Route(ROBOTS, content_type="text/plain"),
            "/docs/": Route(
                page(
                    "Docs",
                    '<p>Start with the <a href="guide/">guide</a>; see <a href="old.html">the'
                    ' old page</a>, <a href="missing.html">a broken link</a>, <a href="private/'
                    'secret.html">secrets</a>, <a href="../blog/post.html">the blog</a>,'
                    ' <a href="https://elsewhere.example/x">elsewhere</a> and'
                    ' <a href="style.css">the style</a>.</p>',
                    links=("api.html",),
                )
            ),
            "/docs/guide/": Route(
                page("Guide", '<p>The guide has a <a href="setup.html">setup</a>.</p>')
            ),
            "/docs/guide/setup.html": Route(SETUP),
            "/docs/api.html": Route(
                page("API", "<p>The API reference.</p>"),
                last_modified="Tue, 02 Apr 2024 08:00:00 GMT",
            ),
            "/docs/old.html": Route(
                "", status=301, headers={"Location": "/docs/new.html"}, etag=False
            ),
            "/docs/new.html": Route(page("New", "<p>The page moved here.</p>")),
            "/docs/private/secret.html": Route(page("Secret", "<p>Keep out.</p>")),
            "/docs/style.css": Route("body {}", content_type="text/css"),
            "/blog/post.html": Route(page("Blog", "<p>Off topic.</p>")),
        }
    )


@pytest.fixture
def site() -> Iterator[Site]:
    with serve() as running:
        docs_site(running)
        yield running


def crawl(
    site: Site,
    state: Any = None,
    limits: CrawlLimits = FAST,
    start: str = "/docs/",
    **web: Any,
) -> LoadResult:
    options = WebOptions(limits=limits, state=state, **web)
    return load_paths(
        [site.url(start)], format="web", source=None, default_acl=["everyone"], web=options
    )


def entities(result: LoadResult) -> dict[str, Entity]:
    return {record.entity.uid: record.entity for record in result.records}


def edges(entity: Entity, label: str) -> set[str]:
    return {edge.dst for edge in entity.edges if edge.label == label}


def crawled_and_saved(site: Site) -> MemoryCrawlState:
    state = MemoryCrawlState()
    crawl(site, state).crawls[0].save(state)
    site.reset_log()
    return state


# -- one crawl ------------------------------------------------------------------------------------


def test_a_site_is_crawled_through_its_links_into_pages(site: Site) -> None:
    result = crawl(site)
    found = entities(result)
    assert set(found) == {"index", "guide/index", "guide/setup", "guide/setup#code-1", "api", "new"}
    setup = found["guide/setup"]
    assert setup.href == site.url("/docs/guide/setup.html")
    assert setup.source == site.origin.removeprefix("http://")
    assert setup.body.startswith("# Setup") and "© the site" not in setup.body
    assert edges(setup, "partOf") == {"guide/index"}
    assert edges(found["guide/index"], "partOf") == {"index"}
    assert edges(found["api"], "partOf") == {"index"}
    assert edges(setup, "xref") == {"api"}  # the navigation link to the index is not a xref
    assert edges(found["index"], "xref") == {"guide/index", "new"}  # old.html → new.html
    assert found["guide/setup#code-1"].body.endswith("```sh\npip install thing\n```")
    derived = {r.entity.uid: r.derived_from for r in result.records if r.derived_from}
    assert derived == {"guide/setup#code-1": "guide/setup"}
    assert result.rejections == [] and result.unchanged == [] and result.failed == []
    report = result.crawls[0]
    assert report.complete and report.scope == site.url("/docs/")
    assert result.sources[0].loader == "web" and result.sources[0].location == site.url("/docs/")


def test_the_crawl_stays_in_scope_obeys_robots_and_skips_what_is_not_a_page(site: Site) -> None:
    result = crawl(site)
    requested = {hit.path for hit in site.log}
    assert "/docs/private/secret.html" not in requested
    assert not {"/blog/post.html", "/docs/style.css"} & requested
    skipped = dict(result.crawls[0].skipped)
    assert skipped[site.url("/docs/private/secret.html")] == "disallowed by robots.txt"
    assert {s.path: s.reason for s in result.skipped} == skipped  # in the ingest answer too


def test_a_redirect_is_followed_and_the_final_url_recorded(site: Site) -> None:
    new = entities(crawl(site))["new"]
    assert new.href == site.url("/docs/new.html")
    assert [hit.status for hit in site.requested("/docs/old.html")] == [301]
    assert len(site.requested("/docs/new.html")) == 1  # reached once, by the redirect


def test_a_link_through_a_redirect_to_a_page_also_linked_directly_is_a_xref(site: Site) -> None:
    index = site.routes["/docs/"]
    index.body = index.body.replace('href="old.html"', 'href="new.html"')  # read first, directly
    site.routes["/docs/guide/"].body = page("Guide", '<p>See <a href="../old.html">old</a>.</p>')
    found = entities(crawl(site))
    assert edges(found["guide/index"], "xref") == {"new"}  # old.html redirected to it


def test_a_redirect_out_of_the_site_is_not_followed(site: Site) -> None:
    site.routes["/docs/old.html"].headers["Location"] = "/blog/post.html"
    result = crawl(site)
    assert "new" not in entities(result) and not site.requested("/blog/post.html")
    assert "redirected out of" in dict(result.crawls[0].skipped)[site.url("/docs/old.html")]


def test_a_folder_and_its_index_page_are_one_page(site: Site) -> None:
    site.routes["/docs/index.html"] = site.routes["/docs/"]
    site.routes["/docs/api.html"].body = page("API", '<p>See <a href="index.html">home</a>.</p>')
    result = crawl(site)
    assert result.rejections == [] and edges(entities(result)["api"], "xref") == {"index"}
    skipped = dict(result.crawls[0].skipped)
    assert skipped[site.url("/docs/index.html")] == f"the same uid as {site.url('/docs/')}"


def test_a_404_is_gone(site: Site) -> None:
    report = crawl(site).crawls[0]
    assert report.gone == [site.url("/docs/missing.html")]


def test_pages_are_dated_by_what_they_declare_else_by_last_modified(site: Site) -> None:
    site.routes["/docs/guide/setup.html"].last_modified = "Mon, 01 Jan 2024 00:00:00 GMT"
    found = entities(crawl(site))
    assert found["guide/setup"].updated_at == "2024-03-05T10:00:00Z"  # the page's own date
    assert found["guide/setup#code-1"].updated_at == "2024-03-05T10:00:00Z"
    assert found["api"].updated_at == "2024-04-02T08:00:00Z"  # Last-Modified
    assert found["new"].updated_at is None


def test_the_uid_prefix_names_every_page_and_its_edges(site: Site) -> None:
    found = entities(crawl(site, uid_prefix="site:"))
    assert edges(found["site:guide/setup"], "partOf") == {"site:guide/index"}
    assert "site:guide/setup#code-1" in found


def test_a_page_that_says_noindex_is_not_loaded_but_its_links_are_followed(site: Site) -> None:
    site.routes["/docs/guide/"].body = site.routes["/docs/guide/"].body.replace(
        "<head>", '<head><meta name="robots" content="noindex">'
    )
    found = entities(crawl(site))
    assert "guide/index" not in found and "guide/setup" in found
    assert edges(found["guide/setup"], "partOf") == {"index"}


def test_a_slow_page_fails_within_the_timeout_and_is_not_gone(site: Site) -> None:
    site.routes["/docs/api.html"].delay_s = 3
    result = crawl(site, limits=CrawlLimits(delay_s=0, concurrency=4, timeout_s=0.5))
    report = result.crawls[0]
    assert "api" not in entities(result) and "guide/setup" in entities(result)
    (failure,) = result.failed
    assert failure.url == site.url("/docs/api.html") and "timed out" in failure.message
    assert failure.uids == ("api",) and "api" in result.kept()
    assert site.url("/docs/api.html") not in report.gone and not report.complete


def test_an_empty_page_is_rejected_and_fetched_in_full_next_time(site: Site) -> None:
    site.routes["/docs/new.html"].body = "<html><body><nav>menu</nav></body></html>"
    state = MemoryCrawlState()
    result = crawl(site, state)
    assert [r.uid for r in result.rejections] == ["new"]
    result.crawls[0].save(state)
    assert state.get(site.origin.removeprefix("http://"), site.url("/docs/new.html")) is None
    site.reset_log()
    crawl(site, state)
    assert [hit.conditional for hit in site.requested("/docs/new.html")] == [False]


def test_a_page_nesting_200000_deep_is_one_rejection_and_the_rest_loads(site: Site) -> None:
    """Issue 25 item 6: 5 min of CPU then RecursionError, and nothing published."""
    deep = "<main><h1>Deep</h1>" + "<div>" * 200_000 + "x" + "</div>" * 200_000 + "</main>"
    site.routes["/docs/new.html"].body = deep
    result = crawl(site)
    (rejection,) = result.rejections
    assert rejection.uid == "new" and rejection.file == site.url("/docs/new.html")
    assert "nest more than" in rejection.message
    assert {"index", "api", "guide/setup"} <= set(entities(result))


def test_a_pdf_linked_from_a_page_is_read_within_the_same_bounds(site: Site) -> None:
    """Issue 30 item 5: a PDF on the site is fetched and loaded, a page a location; a hostile
    one (100,000 pages) is one rejection naming its URL, and the rest loads."""
    from tests.ingest import document_files as files

    site.routes["/docs/api.html"].body = page(
        "API", '<p>The <a href="spec.pdf">spec</a> and <a href="huge.pdf">the big one</a>.</p>'
    )
    site.routes["/docs/spec.pdf"] = Route(
        files.pdf([[("The spec", 18), ("Promote the replica with one command.", 11)]]),
        content_type="application/pdf",
    )
    site.routes["/docs/huge.pdf"] = Route(
        files.pdf_of_many_pages(100_000), content_type="application/pdf"
    )
    result = crawl(
        site, limits=CrawlLimits(delay_s=0, concurrency=4, timeout_s=5, max_bytes=50_000_000)
    )
    found = entities(result)
    spec = found["spec.pdf"]
    assert spec.href == site.url("/docs/spec.pdf") and spec.type == "document"
    assert '<!-- ks:location {"page":1} -->' in spec.body and "Promote the replica" in spec.body
    assert edges(found["api"], "xref") >= {"spec.pdf"}
    (rejection,) = result.rejections
    assert rejection.file == site.url("/docs/huge.pdf") and "100,000 pages" in rejection.message


# -- bounds and politeness ---------------------------------------------------------------------


def test_the_page_bound_truncates_the_crawl(site: Site) -> None:
    result = crawl(site, limits=CrawlLimits(delay_s=0, max_pages=2))
    report = result.crawls[0]
    assert report.truncated and not report.complete and not result.complete
    pages = [hit for hit in site.log if hit.path.startswith("/docs/") and "sitemap" not in hit.path]
    assert len(pages) == 2


def test_the_depth_bound_stops_following_links(site: Site) -> None:
    found = entities(crawl(site, limits=CrawlLimits(delay_s=0, max_depth=1)))
    assert "guide/index" in found and "guide/setup" not in found


def assert_spaced(site: Site, delay: float) -> None:
    """Request arrivals are paced over the whole crawl. The client spaces its request starts
    exactly, but on a loaded machine two arrivals may bunch up, so no single gap is checked;
    unpaced, the same crawl takes a fraction of this span."""
    starts = sorted(hit.at for hit in site.log)
    assert starts[-1] - starts[0] >= (len(starts) - 1) * delay * 0.8


def test_requests_are_spaced_by_the_delay_and_bounded_by_the_concurrency(site: Site) -> None:
    for route in site.routes.values():
        route.delay_s = 0.1
    crawl(site, limits=CrawlLimits(delay_s=0.15, concurrency=2))
    assert_spaced(site, 0.15)
    assert site.max_in_flight <= 2


def test_the_crawl_delay_of_robots_txt_is_obeyed(site: Site) -> None:
    site.routes["/robots.txt"].body = ROBOTS + "Crawl-delay: 0.3\n"
    report = crawl(site).crawls[0]
    assert report.delay_s == pytest.approx(0.3)
    assert_spaced(site, 0.3)


def test_a_robots_txt_the_site_fails_to_serve_stops_the_crawl(site: Site) -> None:
    site.routes["/robots.txt"] = Route("busy", status=503, content_type="text/plain")
    with pytest.raises(InvalidRequest, match=r"robots\.txt.*503.*nothing was crawled"):
        crawl(site)
    assert [hit.path for hit in site.log] == ["/robots.txt"]


def test_robots_txt_rules_for_our_user_agent_and_wildcards_are_obeyed(site: Site) -> None:
    site.routes["/robots.txt"].body = (
        "User-agent: *\nDisallow: /\n\n"
        "User-agent: knowledge-store\nDisallow: /docs/api\nDisallow: /docs/*new$\n"
    )
    site.routes["/docs/guide/"].body = page(
        "Guide", '<p><a href="setup.html">setup</a>, <a href="../new">new</a></p>'
    )
    found = entities(crawl(site))
    assert "api" not in found and "guide/setup" in found and "new" in found  # new.html, not new
    assert not site.requested("/docs/api.html") and not site.requested("/docs/new")


def test_a_missing_robots_txt_allows_everything(site: Site) -> None:
    del site.routes["/robots.txt"]
    assert "private/secret" in entities(crawl(site))


def test_a_site_with_nothing_readable_is_a_request_error(site: Site) -> None:
    site.routes["/docs/"] = Route("down", status=500, content_type="text/plain")
    with pytest.raises(InvalidRequest, match=r"no page could be read.*HTTP 500"):
        crawl(site)


# -- sitemaps --------------------------------------------------------------------------------------


def urlset(site: Site, *paths: str) -> str:
    urls = "".join(f"<url><loc>{site.url(path)}</loc></url>" for path in paths)
    return f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{urls}</urlset>'


def test_a_sitemap_lists_the_pages_and_links_are_not_followed(site: Site) -> None:
    site.routes["/docs/orphan.html"] = Route(page("Orphan", "<p>Linked from nowhere.</p>"))
    site.routes["/docs/sitemap.xml"] = Route(
        urlset(site, "/docs/", "/docs/orphan.html", "/docs/api.html", "/blog/post.html"),
        content_type="application/xml",
    )
    result = crawl(site)
    assert set(entities(result)) == {"index", "orphan", "api"}
    assert result.crawls[0].sitemap == site.url("/docs/sitemap.xml")
    assert not site.requested("/docs/guide/") and not site.requested("/blog/post.html")


def test_a_sitemap_index_named_by_robots_txt_is_followed(site: Site) -> None:
    site.routes["/robots.txt"].body = ROBOTS + f"Sitemap: {site.url('/maps/index.xml')}\n"
    site.routes["/maps/index.xml"] = Route(
        '<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        f"<sitemap><loc>{site.url('/maps/docs.xml')}</loc></sitemap></sitemapindex>",
        content_type="application/xml",
    )
    site.routes["/maps/docs.xml"] = Route(
        urlset(site, "/docs/guide/setup.html", "/docs/new.html"), content_type="text/xml"
    )
    state = MemoryCrawlState()
    result = crawl(site, state)
    assert set(entities(result)) == {"guide/setup", "guide/setup#code-1", "new"}
    result.crawls[0].save(state)
    site.reset_log()
    again = crawl(site, state)
    assert sorted(again.unchanged) == ["guide/setup", "guide/setup#code-1", "new"]
    assert {hit.path: hit.status for hit in site.log if hit.path.startswith("/maps/")} == {
        "/maps/index.xml": 304,
        "/maps/docs.xml": 304,
    }


# -- re-crawls ----------------------------------------------------------------------------------


def test_a_recrawl_of_an_unchanged_site_is_answered_with_304s(site: Site) -> None:
    first = crawl(site)
    state = crawled_and_saved(site)
    again = crawl(site, state)
    assert again.records == []
    assert sorted(again.unchanged) == sorted(entities(first))
    pages = [hit for hit in site.log if hit.status in (200, 304)]
    assert [hit.path for hit in pages if hit.status == 200] == ["/robots.txt"]
    assert all(hit.conditional for hit in pages if hit.status == 304)
    stats = again.crawls[0].stats
    assert (stats.not_modified, stats.pages) == (5, 0)
    # robots.txt, two sitemap probes, the redirect and the broken link are all that is left.
    assert stats.requests == stats.not_modified + 5


def test_a_page_that_disappears_is_gone_and_a_changed_page_is_read_again(site: Site) -> None:
    state = crawled_and_saved(site)
    del site.routes["/docs/guide/setup.html"]
    site.routes["/docs/api.html"].body = page("API", "<p>The API reference, version 2.</p>")
    again = crawl(site, state)
    assert set(entities(again)) == {"api"} and "version 2" in entities(again)["api"].body
    assert sorted(again.unchanged) == ["guide/index", "index", "new"]
    report = again.crawls[0]
    assert site.url("/docs/guide/setup.html") in report.gone and report.complete
    report.save(state)
    source = site.origin.removeprefix("http://")
    assert state.get(source, site.url("/docs/guide/setup.html")) is None


def test_a_server_error_on_recrawl_keeps_the_page_and_its_links(site: Site) -> None:
    state = crawled_and_saved(site)
    site.routes["/docs/guide/"] = Route("oops", status=503, content_type="text/plain")
    again = crawl(site, state)
    (failure,) = again.failed
    assert failure.status == 503 and failure.uids == ("guide/index",)
    assert "guide/setup" in again.unchanged  # still reached through the links remembered
    assert again.kept() >= {"guide/index", "guide/setup", "guide/setup#code-1"}
    assert not again.crawls[0].complete and again.crawls[0].gone == [site.url("/docs/missing.html")]


def test_a_page_reached_through_a_redirect_that_fails_keeps_its_own_uids(site: Site) -> None:
    """Redirects are followed hop by hop: a failure on the last hop is that page's failure,
    and what a sync keeps is that page (``new``), not the redirecting URL's uid."""
    state = crawled_and_saved(site)
    index = site.routes["/docs/"]
    index.body = index.body.replace('href="old.html"', 'href="gone.html"')  # only via a redirect
    site.routes["/docs/gone.html"] = Route(
        "", status=301, headers={"Location": "/docs/new.html"}, etag=False
    )
    site.routes["/docs/new.html"].delay_s = 3  # a timeout on the second hop
    again = crawl(site, state, limits=CrawlLimits(delay_s=0, concurrency=4, timeout_s=0.5))
    (failure,) = again.failed
    assert failure.url == site.url("/docs/new.html") and failure.uids == ("new",)
    assert "timed out" in failure.message
    assert "new" in again.kept()


def test_the_links_remembered_for_a_failed_page_keep_their_depth(site: Site) -> None:
    state = crawled_and_saved(site)
    site.routes["/docs/guide/"] = Route("oops", status=503, content_type="text/plain")
    crawl(site, state, limits=CrawlLimits(delay_s=0, max_depth=1))
    assert site.requested("/docs/guide/") and not site.requested("/docs/guide/setup.html")


def test_the_json_file_state_carries_validators_to_the_next_run(site: Site, tmp_path: Path) -> None:
    with JsonFileCrawlState(tmp_path / "state.json") as state:
        crawl(site, state).crawls[0].save(state)
    site.reset_log()
    again = crawl(site, JsonFileCrawlState(tmp_path / "state.json"))
    assert again.records == [] and again.crawls[0].stats.not_modified == 5


def test_a_corrupt_state_file_is_a_request_error(tmp_path: Path) -> None:
    (tmp_path / "state.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(InvalidRequest, match=r"can't be read.*delete it"):
        JsonFileCrawlState(tmp_path / "state.json")


def test_page_state_round_trips() -> None:
    state = PageState('"abc"', "Tue, 02 Apr 2024 08:00:00 GMT", ("a", "a#code-1"), ("http://x/",))
    assert PageState.from_dict(state.to_dict()) == state


# -- addresses -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "scope"),
    [
        ("https://h/docs/", "https://h/docs/"),
        ("https://h/docs", "https://h/docs/"),
        ("https://h/docs/index.html", "https://h/docs/"),
        ("HTTPS://H:443/docs/a.html#top", "https://h/docs/"),
        ("http://h:8080", "http://h:8080/"),
    ],
)
def test_the_scope_is_the_start_folder(start: str, scope: str) -> None:
    assert scope_of(start) == scope


@pytest.mark.parametrize(
    ("url", "uid"),
    [
        ("https://h/docs/", "index"),
        ("https://h/docs/guide/", "guide/index"),
        ("https://h/docs/guide/setup.html", "guide/setup"),
        ("https://h/docs/a%20b.htm", "a b"),
        ("https://h/docs/page?lang=en", "page?lang=en"),
        ("https://h/docs/data.json", "data.json"),
    ],
)
def test_urls_map_to_uids_as_files_do(url: str, uid: str) -> None:
    assert url_uid(url, "https://h/docs/") == uid
    assert url_uid(url, "https://h/docs/", "pg15:") == "pg15:" + uid


@given(
    st.lists(
        st.text(alphabet="abcé -_%0", min_size=1, max_size=8),
        min_size=1,
        max_size=3,
    ),
    st.sampled_from([".html", ".htm"]),
)
def test_a_page_has_the_uid_its_file_would_have(parts: list[str], suffix: str) -> None:
    relative = "/".join(parts) + suffix
    url = "https://h/docs/" + quote(relative)
    assert url_uid(normal_url(url), "https://h/docs/") == default_uid(
        Path("/root") / relative, Path("/root")
    )


@given(
    st.sampled_from(["http", "https", "HTTP"]),
    st.sampled_from(["h", "H.example", "127.0.0.1:8000", "h:80", "h:443"]),
    st.text(alphabet="abc/._-%20", max_size=20),
    st.text(alphabet="ab=&", max_size=6),
    st.text(alphabet="ab", max_size=4),
)
def test_normal_urls_are_stable(scheme: str, host: str, path: str, query: str, frag: str) -> None:
    url = (
        f"{scheme}://{host}/{path}" + (f"?{query}" if query else "") + (f"#{frag}" if frag else "")
    )
    once = normal_url(url)
    assert normal_url(once) == once and "#" not in once


@pytest.mark.parametrize(
    ("url", "normal"),
    [
        ("http://h/docs/../private/s.html", "http://h/private/s.html"),
        ("http://h/docs/./a/../../x", "http://h/x"),
        ("http://h/docs/%2e%2E/x", "http://h/x"),
        ("http://h/docs/.%2e/x", "http://h/x"),
        ("http://h/docs/a/..", "http://h/docs/"),
        ("http://h/../../x", "http://h/x"),
        ("http://h/docs/%7euser/%41", "http://h/docs/~user/A"),
        ("http://h/docs/a%2fb%3f", "http://h/docs/a%2Fb%3F"),
        ("http://h/docs/page?q=%7e", "http://h/docs/page?q=~"),
    ],
)
def test_normal_urls_resolve_dot_segments_and_unreserved_escapes(url: str, normal: str) -> None:
    assert normal_url(url) == normal


@pytest.mark.parametrize(
    "path",
    ["/docs/..%2Fprivate/x", "/docs/..%5Cprivate/x", "/docs/..\\private/x", "/docs/a/..%2f..%2fx"],
)
def test_a_path_that_climbs_out_once_decoded_is_out_of_scope(path: str) -> None:
    assert not in_scope(normal_url("http://h" + path), "http://h/docs/")


@given(
    st.lists(st.sampled_from(["a", "/", ".", "..", "%2e", "%2E", "%2f", "%5c", "\\", "docs"])).map(
        "".join
    )
)
def test_what_is_in_scope_is_requested_in_scope(tail: str) -> None:
    """Whatever a link says, a URL taken as in scope is requested (httpx's own view of the path)
    under the scope, and stays there when a server decodes its escapes."""
    url = normal_url("http://h/docs/" + tail)
    if in_scope(url, "http://h/docs/"):
        sent = httpx.URL(url).raw_path.decode()
        assert sent.startswith("/docs/")
        assert normal_url("http://h" + sent.replace("%5C", "/").replace("%2F", "/")).startswith(
            "http://h/docs/"
        )


def test_a_non_http_start_is_a_request_error() -> None:
    with pytest.raises(InvalidRequest, match="not an http"):
        scope_of("ftp://h/docs/")


def test_format_web_reads_urls_and_urls_need_format_web(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest, match="format 'web' reads web sites"):
        load_paths([tmp_path], format="web", source=None, default_acl=None)
    with pytest.raises(InvalidRequest, match="read it with the format 'web'"):
        load_paths(["https://h/docs/"], format="markdown", source=None, default_acl=None)


def test_bad_limits_are_request_errors() -> None:
    with pytest.raises(InvalidRequest, match="max_pages"):
        CrawlLimits(max_pages=0)
    with pytest.raises(InvalidRequest, match="timeout_s"):
        CrawlLimits(timeout_s=0)
    with pytest.raises(InvalidRequest, match="deadline_s"):
        CrawlLimits(deadline_s=float("nan"))


# -- into a store ---------------------------------------------------------------------------------


def test_crawled_pages_publish_and_a_recrawl_publishes_nothing(
    site: Site, store: KnowledgeStore
) -> None:
    state = MemoryCrawlState()
    first = crawl(site, state)
    report = store.ingest_records([record.entity for record in first.records])
    first.crawls[0].save(state)  # after the publish, as a sync must
    assert report.added == 6
    hits = store.lexical("pip install thing", identity="everyone", k=3).hits
    assert hits[0].uid in ("guide/setup", "guide/setup#code-1")
    again = crawl(site, state)
    assert store.ingest_records([record.entity for record in again.records]).added == 0
    assert set(again.unchanged) == set(entities(first))


def test_a_recrawl_answered_with_304s_reports_the_pages_unchanged(
    site: Site, store: KnowledgeStore
) -> None:
    """docs/sources.md: a 304 page is reported unchanged — in the answer and the source's row."""
    url = site.url("/docs/")
    first = store.ingest([url], acl=["everyone"], source="docs", web=WebOptions(limits=FAST))
    assert (first.added, first.unchanged) == (6, 0)
    again = store.ingest([url], acl=["everyone"], source="docs", web=WebOptions(limits=FAST))
    assert again.crawls and again.crawls[0]["stats"]["not_modified"] == 5
    assert (again.added, again.updated, again.unchanged, again.deleted) == (0, 0, 6, 0)
    (row,) = [s for s in store.sources() if s.source == "docs"]
    assert row.last_sync is not None and row.last_sync.unchanged == 6
    site.routes["/docs/api.html"].body = page("API", "<p>The API reference, version 2.</p>")
    third = store.ingest([url], acl=["everyone"], source="docs", web=WebOptions(limits=FAST))
    assert (third.added, third.updated, third.unchanged) == (0, 1, 5)


def test_a_web_ingest_without_acl_names_the_flag(site: Site, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from knowledge_store.surfaces.cli import app

    args = ["--store", str(tmp_path / "s"), "ingest", site.url("/docs/"), "--delay", "0"]
    shown = CliRunner().invoke(app, args)
    assert shown.exit_code == 2
    assert "--acl everyone" in " ".join(shown.stderr.split())
    answer = CliRunner().invoke(app, [*args, "--json"])
    error = json.loads(answer.stdout)["error"]
    assert error["code"] == "invalid_record" and "--acl everyone" in error["message"]
    assert len(error["details"]["rejected"]) == 5  # every page, each named (samples follow them)
