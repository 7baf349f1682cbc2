"""The search page reads well: whole-token highlights, no raw Markdown, weak matches marked, HEAD.

Regressions of issue 15 (items 12–15): ``be<mark>for</mark>e`` and 17 × ``<mark>are</mark>``;
``**`` and backticks in snippets; ten confident results for a query about nothing in the
store; ``HEAD /`` answering 405; code samples titled "… › example 1".
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from knowledge_store.engines.embedded.analysis import Analyzers
from knowledge_store.ingest.embedding import Embedder
from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.http import create_app
from knowledge_store.surfaces.page import VECTOR_FLOOR
from knowledge_store.surfaces.snippets import (
    highlight_spans,
    inline_html,
    plain_text,
    snippet_html,
)
from tests.surfaces.serve_estate import BOB, LiveServer, call

#: The embedded engine's analysis (what ``KnowledgeStore.text_analysis`` gives the page).
ANALYZERS = Analyzers()
MARKS = re.compile(r"<mark>(.*?)</mark>")


def word_char(c: str) -> bool:
    return c.isascii() and c.isalnum()


def marked(html: str) -> list[str]:
    return MARKS.findall(html)


# -- the pure functions ---------------------------------------------------------------------------
def test_stop_words_and_pieces_of_words_are_never_marked() -> None:
    # A question: how, are, the, before, a are its function words (both engines drop them).
    terms = ANALYZERS.query_terms("how are the settings before a vacuum")
    text = "Before you vacuum, the Settings are read; therefore they are before us. Forever."
    html = snippet_html(text, terms, ANALYZERS)
    assert marked(html) == ["vacuum", "Settings"]
    assert "there<mark>" not in html and "<mark>for</mark>" not in html


def test_a_stem_marks_its_inflections_and_identifiers_are_marked_whole() -> None:
    terms = ANALYZERS.query_terms("vacuuming pg_hba.conf ERR-1042")
    text = "VACUUM and vacuums; edit pg_hba.conf (not pg_hba.confx); ERR-1042 ≠ ERR-10420."
    # pg_hba.confx holds the word pg_hba and ERR-10420 the word ERR, as the index sees them
    # (the body field splits at punctuation): those words match; the identifiers don't.
    assert marked(snippet_html(text, terms, ANALYZERS)) == [
        "VACUUM",
        "vacuums",
        "pg_hba.conf",
        "pg_hba",
        "ERR-1042",
        "ERR",
    ]


def test_markdown_is_stripped_from_snippets() -> None:
    body = (
        "# Title\n\n## Section\n\nRun **VACUUM** on `orders` — see the [manual](https://x.org).\n\n"
        "- one *item*\n- two\n\n| a | b |\n|---|---|\n| c | d |\n\n```sql\nVACUUM orders;\n```\n"
    )
    text = plain_text(body)
    assert text == "Run VACUUM on orders — see the manual. one item two a b c d VACUUM orders;"
    html = snippet_html(body, ANALYZERS.query_terms("vacuum"), ANALYZERS)
    for raw in ("**", "`", "](", "# ", "|", "```"):
        assert raw not in html
    assert plain_text("# Only a heading") == "Only a heading"


def test_titles_keep_code_spans_and_drop_other_markup() -> None:
    assert inline_html("`ks` — the command line") == "<code>ks</code> — the command line"
    assert inline_html("A **bold** [link](https://x.org) <b>") == "A bold link &lt;b&gt;"


def test_snippets_escape_what_they_show() -> None:
    html = snippet_html(
        "<script>alert(1)</script> vacuum &", ANALYZERS.query_terms("vacuum"), ANALYZERS
    )
    assert "<script>" not in html and "&lt;script&gt;" in html and "&amp;" in html


def test_the_window_is_the_one_with_the_most_terms() -> None:
    filler = "lorem ipsum " * 60
    text = f"{filler} vacuum alone {filler} vacuum freeze wraparound together {filler}"
    html = snippet_html(
        text, ANALYZERS.query_terms("vacuum freeze wraparound"), ANALYZERS, width=120
    )
    assert marked(html) == ["vacuum", "freeze", "wraparound"]
    assert html.startswith("…") and html.endswith("…")


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=300), query=st.text(max_size=40))
def test_marks_are_whole_tokens_the_query_matches(text: str, query: str) -> None:
    """Property: every marked span is a whole token whose analysed form is a query term."""
    terms = ANALYZERS.query_terms(query)
    allowed = set(terms.words) | set(terms.idents)
    plain = plain_text(text)
    for start, end, term in highlight_spans(plain, terms, ANALYZERS):
        assert term in allowed
        assert plain[start:end].strip() == plain[start:end] != ""
        before = plain[start - 1] if start else " "
        after = plain[end] if end < len(plain) else " "
        # never a piece of a word: no ASCII letter or digit continues it on either side
        assert not (word_char(before) and word_char(plain[start]))
        assert not (word_char(after) and word_char(plain[end - 1]))
    html = snippet_html(text, terms, ANALYZERS)
    assert "<mark>" not in re.sub(r"</?mark>", "", html)  # marks never nest or leak


# -- the page, in-process over httpx ----------------------------------------------------------------
RECORDS: list[dict[str, Any]] = [
    {
        "uid": "doc:vacuum",
        "type": "page",
        "title": "Routine vacuuming",
        "body": "# Routine vacuuming\n\nBefore you **vacuum** a table, read `pg_stat_user_tables`"
        " and check the [autovacuum](https://example.org/autovacuum) settings. How are the"
        " settings? They are fine.\n\n## Freezing\n\nVACUUM FREEZE protects against transaction"
        " ID wraparound.\n\n```sql\nVACUUM (VERBOSE, ANALYZE) orders;\n```\n",
        "acl": ["everyone"],
    },
    {
        "uid": "doc:replication",
        "type": "page",
        "title": "Streaming replication",
        "body": "# Streaming replication\n\nA *standby* replays the primary's WAL; replication"
        " lag grows during bulk loads.",
        "acl": ["everyone"],
    },
    {
        "uid": "doc:roles",
        "type": "page",
        "title": "Database roles and `GRANT`",
        "body": "# Database roles\n\nRoles own objects and hold privileges; `GRANT` and `REVOKE`"
        " change them.",
        "acl": ["everyone"],
    },
]


@pytest.fixture(scope="module")
def page_app(tmp_path_factory: pytest.TempPathFactory, embedder: Embedder) -> Iterator[Any]:
    where = tmp_path_factory.mktemp("page") / "store"
    with KnowledgeStore.open(where, embedder=embedder) as store:
        assert not store.ingest_records(RECORDS).rejected
        yield create_app(store, anonymous=True)


def results_of(html: str) -> str:
    return html.split('<ol class="results">')[1].split("</ol>")[0]


def test_page_snippets_mark_whole_terms_and_show_no_markdown(page_app: Any) -> None:
    page = call(page_app, "GET", "/", params={"q": "how are the vacuum settings before"})
    assert page.status_code == 200
    first = results_of(page.text).split('<li class="result')[1]
    snippet = first.split('<p class="snippet">')[1].split("</p>")[0]
    assert "**" not in snippet and "`" not in snippet and "](" not in snippet
    marks = [m.lower() for m in marked(snippet)]
    assert not {"how", "are", "the", "before"} & set(marks)  # stop words
    assert {"vacuum", "settings"} <= set(marks)
    assert "be<mark>" not in snippet and "<mark>for</mark>" not in snippet


def test_page_marks_weak_matches_and_says_when_no_word_matched(page_app: Any) -> None:
    page = call(page_app, "GET", "/", params={"q": "kubernetes helm chart"})
    assert page.status_code == 200
    assert "No result contains the words of your query" in page.text
    listing = results_of(page.text)
    assert listing.count("weak match") == listing.count('<li class="result')
    assert f"below {VECTOR_FLOOR:.2f}" in listing


def test_page_titles_show_code_not_backticks(page_app: Any) -> None:
    page = call(page_app, "GET", "/", params={"q": "grant privileges"})
    assert "Database roles and <code>GRANT</code></a></h3>" in page.text
    entity = call(page_app, "GET", "/entity/doc:roles")
    assert "<h1>Database roles and <code>GRANT</code>" in entity.text
    assert "<title>Database roles and GRANT · knowledge-store</title>" in entity.text


def test_page_leaves_word_matches_unmarked(page_app: Any) -> None:
    page = call(page_app, "GET", "/", params={"q": "replication lag"})
    listing = results_of(page.text)
    assert "No result contains" not in page.text
    first = listing.split('<li class="result')[1]
    assert "Streaming replication" in first and "weak match" not in first


def test_head_is_answered_like_get(page_app: Any) -> None:
    for url in ("/", "/?q=vacuum", "/entity/doc:vacuum"):
        head = call(page_app, "HEAD", url)
        assert head.status_code == 200, url
        assert head.headers["content-type"].startswith("text/html")
        assert head.content == b""
    assert call(page_app, "HEAD", "/entity/doc:nothing").status_code == 404


def test_served_estate_with_tokens_still_marks_terms(app: Any) -> None:
    page = call(app, "GET", "/", params={"q": "replica lag during bulk loads"}, headers=BOB)
    assert page.status_code == 200
    marks = {m.lower() for m in marked(page.text)}
    assert {"lag", "bulk", "loads", "during"} <= marks  # a keyword query: "during" is a term
    assert "<mark>are</mark>" not in page.text


def test_code_samples_from_a_folder_are_titled_by_heading_and_language(
    tmp_path: Path, embedder: Embedder
) -> None:
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / "failover.md").write_text(
        "# Failover\n\n## Check the lag\n\nRun:\n\n```sql\nSELECT 1;\n```\n\n"
        "```sql\nSELECT 2;\n```\n"
    )
    with KnowledgeStore.open(tmp_path / "store", embedder=embedder) as store:
        store.ingest([folder], format="markdown", acl=["everyone"])
        app = create_app(store, anonymous=True)
        page = call(app, "GET", "/", params={"q": "select", "type": "codeSample"})
    titles = re.findall(r"<h3><a [^>]*>(.*?)</a></h3>", page.text)
    assert sorted(titles) == [
        "Failover › Check the lag (sql)",
        "Failover › Check the lag (sql, sample 2)",
    ]


# -- the page in headless Chromium, over a real socket ----------------------------------------------
CHROMIUM = next(
    (p for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser") if Path(p).exists()),
    shutil.which("chromium") or shutil.which("chromium-browser"),
)
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@pytest.mark.skipif(
    CHROMIUM is None,
    reason="no chromium: install it with `apt-get install -y chromium` (.ci/run does when missing)",
)
def test_the_page_reads_well_in_chromium(page_app: Any) -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    ARTIFACTS.mkdir(exist_ok=True)
    with LiveServer(page_app) as server, sync_api.sync_playwright() as p:
        assert httpx.head(f"{server.url}/").status_code == 200  # over a real socket too
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(20000)
            page.goto(f"{server.url}/")
            page.fill("#q", "how are the vacuum settings before freezing")
            page.keyboard.press("Enter")
            page.wait_for_selector("li.result")
            marks = page.locator("li.result .snippet mark").all_inner_texts()
            assert marks and {m.lower() for m in marks} >= {"vacuum", "settings"}
            assert not {m.lower() for m in marks} & {"how", "are", "the", "a", "for", "before"}
            # whole words: the character on each side of a mark is not a letter or digit
            pieces = page.evaluate(
                """() => [...document.querySelectorAll('li.result .snippet mark')].map(m => [
                    (m.previousSibling && m.previousSibling.textContent || ' ').slice(-1),
                    (m.nextSibling && m.nextSibling.textContent || ' ').slice(0, 1)])"""
            )
            assert all(not (a.isalnum() or b.isalnum()) for a, b in pieces), pieces
            snippets = " ".join(page.locator("li.result .snippet").all_inner_texts())
            assert "**" not in snippets and "`" not in snippets
            assert page.locator(".notice").count() == 0
            page.screenshot(path=str(ARTIFACTS / "page-highlights.png"), full_page=True)

            page.fill("#q", "kubernetes helm chart")
            page.keyboard.press("Enter")
            page.wait_for_selector(".notice")
            assert "No result contains the words" in page.locator(".notice").inner_text()
            results = page.locator("li.result").count()
            assert results >= 1 and page.locator("li.result .weak").count() == results
            page.screenshot(path=str(ARTIFACTS / "page-weak-matches.png"), full_page=True)
        finally:
            browser.close()
