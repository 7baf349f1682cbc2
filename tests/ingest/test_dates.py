"""Dates from where the content lives (git history, mtime, the page, HTTP) and default sources."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from selectolax.lexbor import LexborHTMLParser

from knowledge_store.ingest import dates as dates_module
from knowledge_store.ingest.dates import Dates, declared_dates, folder_dates, http_date
from knowledge_store.ingest.loaders import load_paths
from knowledge_store.model import Entity

JAN = "2024-01-10T09:00:00Z"
FEB = "2024-02-20T12:30:00Z"
MTIME = 1_700_000_000  # 2023-11-14T22:13:20Z
MTIME_ISO = "2023-11-14T22:13:20Z"


def git(repo: Path, *args: str, when: str | None = None) -> None:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    if when:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = when
    subprocess.run(["git", "-C", str(repo), *args], check=True, env=env, capture_output=True)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    os.utime(path, (MTIME, MTIME))
    return path


def load(*paths: Path, **options: Any) -> dict[str, Entity]:
    result = load_paths(
        list(paths),
        format=options.get("format"),
        source=options.get("source"),
        default_acl=["everyone"],
    )
    assert result.rejections == []
    return {record.entity.uid: record.entity for record in result.records}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository whose docs/ folder has history: two commits a month apart."""
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    write(root / "docs" / "old.md", "# Old\n\nWritten in January.\n")
    write(root / "docs" / "sub dir" / "été.md", "# Summer\n\nA name git would quote.\n")
    write(
        root / "docs" / "page.html", "<html><body><main><p>An HTML page.</p></main></body></html>"
    )
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "one", when="2024-01-10T10:00:00+01:00")
    write(root / "docs" / "old.md", "# Old\n\nWritten in January, edited in February.\n")
    git(root, "commit", "-q", "-am", "two", when="2024-02-20T12:30:00Z")
    return root


def test_committed_files_take_their_first_and_last_commit(repo: Path) -> None:
    found = load(repo / "docs")
    assert (found["old"].created_at, found["old"].updated_at) == (JAN, FEB)
    assert (found["sub dir/été"].created_at, found["sub dir/été"].updated_at) == (JAN, JAN)
    assert (found["page"].created_at, found["page"].updated_at) == (JAN, JAN)


def test_one_git_log_serves_the_whole_folder(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for n in range(20):
        write(repo / "docs" / "many" / f"p{n}.md", f"# Page {n}\n\nText {n}.\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "many", when="2024-03-01T00:00:00Z")
    calls: list[list[str]] = []
    real_run = subprocess.run

    def counting_run(args: list[str], **kw: Any) -> Any:
        calls.append(args)
        return real_run(args, **kw)

    monkeypatch.setattr(dates_module.subprocess, "run", counting_run)
    found = load(repo / "docs")
    assert found["many/p7"].updated_at == "2024-03-01T00:00:00Z"
    assert [args[3] for args in calls] == ["rev-parse", "log", "status"]


def test_uncommitted_and_untracked_files_fall_back_to_mtime(repo: Path) -> None:
    write(repo / "docs" / "old.md", "# Old\n\nEdited, not committed.\n")
    write(repo / "docs" / "new.md", "# New\n\nNever committed.\n")
    found = load(repo / "docs")
    assert found["old"].updated_at == MTIME_ISO and found["new"].updated_at == MTIME_ISO
    assert found["new"].created_at == MTIME_ISO
    assert found["sub dir/été"].updated_at == JAN  # the others keep their history


def test_front_matter_dates_win(repo: Path) -> None:
    write(
        repo / "docs" / "old.md",
        "---\ndate: 2020-05-01\n---\n# Old\n\nDated by hand, in its front matter.\n",
    )
    git(repo, "commit", "-q", "-am", "three", when="2024-04-01T00:00:00Z")
    old = load(repo / "docs")["old"]
    assert old.created_at == "2020-05-01T00:00:00Z"  # front matter
    assert old.updated_at == "2024-04-01T00:00:00Z"  # still from git: not given


def test_outside_git_files_take_their_mtime(tmp_path: Path) -> None:
    write(tmp_path / "notes" / "a.md", "# A\n\nText.\n")
    found = load(tmp_path / "notes")
    assert (found["a"].created_at, found["a"].updated_at) == (MTIME_ISO, MTIME_ISO)


def test_without_git_on_the_path_files_take_their_mtime(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert folder_dates(repo / "docs", [repo / "docs" / "old.md"])[repo / "docs" / "old.md"] == (
        Dates(MTIME_ISO, MTIME_ISO)
    )


def test_code_samples_share_their_page_dates(repo: Path) -> None:
    write(repo / "docs" / "code.md", "# Code\n\n```sh\necho hi\n```\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "code", when="2024-05-05T05:05:05Z")
    found = load(repo / "docs")
    assert found["code#code-1"].updated_at == found["code"].updated_at == "2024-05-05T05:05:05Z"


# -- sources ------------------------------------------------------------------------------------


def test_pages_take_their_folder_name_as_source(tmp_path: Path) -> None:
    write(tmp_path / "handbook" / "a.md", "# A\n\nText.\n")
    write(tmp_path / "handbook" / "b.md", "---\nsource: wiki\n---\n# B\n\nText.\n")
    found = load(tmp_path / "handbook")
    assert found["a"].source == "handbook"
    assert found["b"].source == "wiki"  # front matter wins
    assert {e.source for e in load(tmp_path / "handbook", source="docs").values()} == {"docs"}
    assert load(tmp_path / "handbook" / "a.md")["a"].source == "handbook"  # a single file


def test_the_current_folder_has_a_name_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "site" / "a.md", "# A\n\nText.\n")
    monkeypatch.chdir(tmp_path / "site")
    assert load(Path("."))["a"].source == "site"


def test_the_load_says_where_each_path_came_from(tmp_path: Path) -> None:
    write(tmp_path / "handbook" / "a.md", "# A\n\nText.\n")
    result = load_paths([tmp_path / "handbook"], format=None, source=None, default_acl=["everyone"])
    (info,) = result.sources
    assert (info.name, info.loader, info.location) == (
        "handbook",
        "markdown",
        str(tmp_path / "handbook"),
    )


# -- what a page declares; HTTP dates -----------------------------------------------------------


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (
            '<meta property="article:modified_time" content="2024-03-05T10:00:00+01:00">'
            '<meta property="article:published_time" content="2024-01-02">',
            Dates("2024-01-02T00:00:00Z", "2024-03-05T09:00:00Z"),
        ),
        (
            '<script type="application/ld+json">{"@context": "https://schema.org", "@graph":'
            ' [{"@type": "WebPage", "dateModified": "2024-06-01T00:00:00Z",'
            ' "datePublished": "2023-06-01"}]}</script>',
            Dates("2023-06-01T00:00:00Z", "2024-06-01T00:00:00Z"),
        ),
        ('<script type="application/ld+json">{not json</script>', Dates()),
        ('<meta property="article:modified_time" content="last tuesday">', Dates()),
    ],
)
def test_the_dates_a_page_declares_in_its_head(head: str, expected: Dates) -> None:
    html = f"<html><head>{head}</head><body><p>x</p></body></html>"
    assert declared_dates(LexborHTMLParser(html)) == expected


def test_time_elements_date_a_page_when_they_say_what_they_are() -> None:
    itemprop = '<time itemprop="dateModified" datetime="2024-02-02">Feb 2</time>'
    lone = '<p>Updated <time datetime="2024-03-03T03:03:03Z">March 3</time></p>'
    two = '<time datetime="2024-01-01">a</time><time datetime="2024-02-01">b</time>'
    assert declared_dates(LexborHTMLParser(itemprop)).updated_at == "2024-02-02T00:00:00Z"
    assert declared_dates(LexborHTMLParser(lone)).updated_at == "2024-03-03T03:03:03Z"
    assert declared_dates(LexborHTMLParser(two)).updated_at is None  # which one? neither


def test_an_html_file_declaring_a_date_keeps_it_over_its_file_dates(tmp_path: Path) -> None:
    write(
        tmp_path / "site" / "p.html",
        '<html><head><meta property="article:modified_time" content="2022-02-02"></head>'
        "<body><main><p>Dated.</p></main></body></html>",
    )
    page = load(tmp_path / "site")["p"]
    assert (page.created_at, page.updated_at) == (MTIME_ISO, "2022-02-02T00:00:00Z")


def test_http_dates() -> None:
    assert http_date("Tue, 02 Apr 2024 08:00:00 GMT") == "2024-04-02T08:00:00Z"
    assert http_date("not a date") is None and http_date(None) is None
