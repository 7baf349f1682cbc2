"""A load reads only regular files inside the folder given (issue 11 §3).

Links out of the folder (to a file or a folder), link loops, FIFOs, sockets
and devices are skipped and reported — path and reason — never read; every
loader (JSON Lines, Learn, Markdown, HTML) goes through the same check.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from knowledge_store.ingest.embedding import Embedder
from knowledge_store.ingest.loaders import LoadResult, Skipped, load_paths
from knowledge_store.ingest.loaders.files import open_regular
from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.cli import app as cli

SECRET = "s3cret-outside-the-folder"

#: A file of each format that the loader accepts, and its extension.
GOOD = {
    "markdown": ("md", "# Public page\n\nNothing secret here.\n"),
    "html": (
        "html",
        "<html><body><main><h1>Public</h1><p>Nothing secret.</p></main></body></html>",
    ),
    "jsonl": (
        "jsonl",
        json.dumps({"uid": "ok:1", "type": "page", "title": "Ok", "body": "Nothing secret."})
        + "\n",
    ),
    "learn": (
        "json",
        json.dumps({"uid": "unit:1", "kind": "unit", "title": "Ok", "source": "Nothing secret."}),
    ),
}


def _secret_for(format: str) -> str:
    """A file of ``format`` whose text is SECRET (so that a leak is visible in the records)."""
    return {
        "markdown": f"# Secret\n\n{SECRET}\n",
        "html": f"<html><body><main><p>{SECRET}</p></main></body></html>",
        "jsonl": json.dumps({"uid": "leak:1", "type": "page", "title": "x", "body": SECRET}) + "\n",
        "learn": json.dumps({"uid": "leak:2", "kind": "unit", "title": "x", "source": SECRET}),
    }[format]


def load(*paths: Path, format: str | None = None) -> LoadResult:
    return load_paths(list(paths), format=format, source=None, default_acl=["everyone"])


def texts(result: LoadResult) -> str:
    return "\n".join(r.entity.body + r.entity.title for r in result.records)


def skipped(result: LoadResult) -> dict[str, str]:
    return {Path(s.path).name: s.reason for s in result.skipped}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    return docs


@pytest.mark.parametrize("format", sorted(GOOD))
def test_a_link_to_a_file_outside_the_folder_is_skipped_and_reported(
    tmp_path: Path, folder: Path, format: str
) -> None:
    ext, good = GOOD[format]
    (folder / f"good.{ext}").write_text(good, encoding="utf-8")
    outside = tmp_path / f"secret.{ext}"
    outside.write_text(_secret_for(format), encoding="utf-8")
    (folder / f"passwd.{ext}").symlink_to(outside)
    result = load(folder, format=format)
    assert SECRET not in texts(result)
    assert "Nothing secret" in texts(result)
    assert list(skipped(result)) == [f"passwd.{ext}"]
    assert "outside" in skipped(result)[f"passwd.{ext}"]
    assert str(outside) in skipped(result)[f"passwd.{ext}"]
    assert not result.rejections


def test_the_issue_reproduction_etc_passwd_is_not_published(folder: Path) -> None:
    (folder / "index.md").write_text("# Docs\n\nWelcome.\n", encoding="utf-8")
    (folder / "passwd.md").symlink_to("/etc/passwd")
    result = load(folder, format="markdown")
    assert [r.entity.uid for r in result.records] == ["index"]
    assert "root:" not in texts(result)
    assert [s.path for s in result.skipped] == [str(folder / "passwd.md")]


def test_a_link_to_a_file_inside_the_folder_is_read(folder: Path) -> None:
    (folder / "real.md").write_text("# Real\n\nShared text.\n", encoding="utf-8")
    (folder / "alias.md").symlink_to(folder / "real.md")
    result = load(folder, format="markdown")
    assert sorted(r.entity.uid for r in result.records) == ["alias", "real"]
    assert result.skipped == []


def test_a_named_file_that_links_out_of_its_folder_is_skipped(tmp_path: Path, folder: Path) -> None:
    """``ks ingest docs/*.md`` names the link itself: the rule is the same."""
    outside = tmp_path / "secret.md"
    outside.write_text(_secret_for("markdown"), encoding="utf-8")
    (folder / "passwd.md").symlink_to(outside)
    (folder / "ok.md").write_text("# Ok\n\nfine\n", encoding="utf-8")
    result = load(folder / "passwd.md", folder / "ok.md")
    assert [r.entity.uid for r in result.records] == ["ok"]
    assert list(skipped(result)) == ["passwd.md"]


def test_a_linked_folder_outside_is_skipped_and_inside_is_read_once(
    tmp_path: Path, folder: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "secret.md").write_text(_secret_for("markdown"), encoding="utf-8")
    (folder / "out").symlink_to(elsewhere, target_is_directory=True)
    inner = folder / "guides"
    inner.mkdir()
    (inner / "a.md").write_text("# A\n\ntext a\n", encoding="utf-8")
    (folder / "zz-again").symlink_to(inner, target_is_directory=True)
    result = load(folder, format="markdown")
    assert SECRET not in texts(result)
    assert [r.entity.uid for r in result.records] == ["guides/a"]
    reasons = skipped(result)
    assert set(reasons) == {"out", "zz-again"}
    assert "outside" in reasons["out"] and "already" in reasons["zz-again"]


def test_a_link_loop_ends_and_is_reported(folder: Path) -> None:
    sub = folder / "sub"
    sub.mkdir()
    (sub / "page.md").write_text("# Page\n\ntext\n", encoding="utf-8")
    (sub / "up").symlink_to(folder, target_is_directory=True)  # sub/up/sub/up/…
    (sub / "self").symlink_to(sub, target_is_directory=True)
    result = load(folder, format="markdown")
    assert [r.entity.uid for r in result.records] == ["sub/page"]
    assert set(skipped(result)) == {"up", "self"}


def test_a_dangling_link_is_skipped(folder: Path) -> None:
    (folder / "ok.md").write_text("# Ok\n\nfine\n", encoding="utf-8")
    (folder / "gone.md").symlink_to(folder / "missing.md")
    result = load(folder, format="markdown")
    assert "does not exist" in skipped(result)["gone.md"]


def _load_within(seconds: float, *paths: Path, format: str | None = None) -> LoadResult:
    """Load in a thread, so that a reader blocked on a FIFO fails the test instead of hanging it."""
    out: list[Any] = []
    worker = threading.Thread(target=lambda: out.append(load(*paths, format=format)), daemon=True)
    worker.start()
    worker.join(seconds)
    assert out, "the load blocked (it opened a FIFO and waited for a writer)"
    result: LoadResult = out[0]
    return result


@pytest.mark.parametrize("format", sorted(GOOD))
def test_a_fifo_is_skipped_without_blocking(folder: Path, format: str) -> None:
    ext, good = GOOD[format]
    (folder / f"good.{ext}").write_text(good, encoding="utf-8")
    os.mkfifo(folder / f"pipe.{ext}")
    result = _load_within(10, folder, format=format)
    assert "FIFO" in skipped(result)[f"pipe.{ext}"]
    assert len(result.records) >= 1


def test_a_named_fifo_is_skipped_too(folder: Path) -> None:
    os.mkfifo(folder / "pipe.jsonl")
    result = _load_within(10, folder / "pipe.jsonl")
    assert result.records == [] and "FIFO" in skipped(result)["pipe.jsonl"]


def test_a_socket_is_skipped(folder: Path) -> None:
    path = folder / "s.jsonl"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(path))
        result = _load_within(10, folder, format="jsonl")
    assert "socket" in skipped(result)["s.jsonl"]


def test_a_device_is_skipped() -> None:
    result = _load_within(10, Path("/dev/zero"), format="jsonl")
    assert result.records == [] and "character device" in skipped(result)["zero"]


def test_a_link_to_a_device_is_skipped(folder: Path) -> None:
    (folder / "zero.jsonl").symlink_to("/dev/zero")
    (folder / "ok.jsonl").write_text(GOOD["jsonl"][1], encoding="utf-8")
    result = _load_within(10, folder, format="jsonl")
    assert "outside" in skipped(result)["zero.jsonl"] and len(result.records) == 1


def test_a_file_swapped_for_a_link_after_the_check_is_not_read(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The descriptor read is the file that was checked: a swap in between is caught."""
    victim = folder / "page.md"
    victim.write_text("# Page\n\nfine\n", encoding="utf-8")
    outside = tmp_path / "secret.md"
    outside.write_text(SECRET, encoding="utf-8")
    real_stat = os.stat

    def stat_then_swap(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        checked = real_stat(path, *args, **kwargs)
        if str(path) == str(victim):
            victim.unlink()
            victim.symlink_to(outside)
        return checked

    monkeypatch.setattr(os, "stat", stat_then_swap)
    opened = open_regular(victim, folder)
    assert isinstance(opened, Skipped) and "between the check and the read" in opened.reason


def test_the_ingest_answer_reports_skipped_paths_next_to_the_design_keys(
    tmp_path: Path, folder: Path, embedder: Embedder
) -> None:
    (folder / "index.md").write_text("# Docs\n\nWelcome to the docs.\n", encoding="utf-8")
    (folder / "passwd.md").symlink_to("/etc/passwd")
    runner = CliRunner()
    store = tmp_path / "store"
    result = runner.invoke(
        cli,
        [
            "--store",
            str(store),
            "ingest",
            str(folder),
            "--format",
            "markdown",
            "--acl",
            "everyone",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    design = {"content_root", "added", "updated", "unchanged", "deleted", "rejected"}
    assert design <= set(answer)
    assert answer["added"] == 1
    assert answer["skipped"] == [
        {
            "path": str(folder / "passwd.md"),
            "reason": "a link to /etc/passwd, outside " + str(folder),
        }
    ]
    with KnowledgeStore.open(store, embedder=embedder) as opened:
        assert opened.lexical("root", k=5).hits == []
        assert opened.stats().entities == 1
