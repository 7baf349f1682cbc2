"""``ks backup``, ``ks restore``, ``ks export``, ``ks principals export`` and paging on the
command line (issue 31): their JSON shapes, their files written whole, their refusals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.cli import app
from tests.conftest import ESTATE

pytestmark = pytest.mark.embedded_only(
    reason="the CLI over the store: the engines are tested apart"
)


def _ks(*args: str, code: int = 0) -> Any:
    done = CliRunner().invoke(app, [*args, "--json"])
    assert done.exit_code == code, done.stdout
    return json.loads(done.stdout)


@pytest.fixture
def where(tmp_path: Path, embedder: Any) -> str:
    path = str(tmp_path / "store")
    with KnowledgeStore.open(path, embedder=embedder) as store:
        store.ingest_records(ESTATE)
        store.add_member("group:sre", "user:sam")
    return path


def test_backup_and_restore(where: str, tmp_path: Path) -> None:
    report = _ks("--store", where, "backup", str(tmp_path / "b"))
    assert set(report) == {
        "location",
        "engine",
        "publish",
        "content_root",
        "entities",
        "chunks",
        "files",
        "bytes",
        "seconds",
    }
    assert {f["path"] for f in report["files"]} >= {"catalog.sqlite", "dense.hnsw"}
    restored = _ks("restore", str(tmp_path / "b"), "--store", str(tmp_path / "new"))
    assert restored["content_root"] == report["content_root"]
    assert restored["verified_files"] == len(report["files"]) and restored["caught_up"] == []
    again = _ks("restore", str(tmp_path / "b"), "--store", str(tmp_path / "new"), code=2)
    assert again["error"]["code"] == "invalid_request"
    missing = _ks("restore", str(tmp_path / "nothing"), "--store", str(tmp_path / "x"), code=2)
    assert missing["error"]["code"] == "not_found"


def test_export_and_principals_export(where: str, tmp_path: Path) -> None:
    out = tmp_path / "records.jsonl"
    report = _ks("--store", where, "export", "--output", str(out), "--type", "ticket")
    assert report["entities"] == 2 == len(out.read_text().splitlines())
    assert not list(tmp_path.glob(".records.jsonl.partial-*"))
    refused = _ks("--store", where, "export", code=2)  # --json without --output
    assert refused["error"]["details"]["field"] == "--json"
    members = tmp_path / "members.jsonl"
    assert _ks("--store", where, "principals", "export", "-o", str(members)) == {"memberships": 1}
    assert json.loads(members.read_text()) == {"group": "group:sre", "member": "user:sam"}


def test_a_cursor_on_the_command_line(where: str) -> None:
    first = _ks("--store", where, "sql", "--k", "2", "--cursor", "*")
    second = _ks("--store", where, "sql", "--k", "2", "--cursor", first["next"])
    assert [h["rank"] for h in second["hits"]] == [3]  # everyone reads three entities
    assert "next" not in second
    assert {h["uid"] for h in first["hits"]}.isdisjoint(h["uid"] for h in second["hits"])
    other = _ks(
        "--store", where, "sql", "--k", "2", "--cursor", first["next"], "--type", "page", code=2
    )
    assert other["error"]["code"] == "invalid_request" and "cursor" in other["error"]["message"]
    human = CliRunner().invoke(app, ["--store", where, "sql", "--k", "1", "--cursor", "*"])
    assert "next page: --cursor c1." in human.stdout
