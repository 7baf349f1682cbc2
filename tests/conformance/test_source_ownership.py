"""Sources own their entities, on both engines (issue 25 item 2; docs/sources.md).

Folder page uids are paths (``README``, ``index``): two sources' folders held the same
uids, and the second ingest silently replaced the first's page, content and ACL. Now a
batch never takes over another source's entity (refused, naming both sources and the
uids, unless it allows a move); a folder ingested under a new source gets its name as a
uid prefix, recorded in the source's row; a source the store knows keeps its uids.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest
from typer.testing import CliRunner

from knowledge_store.errors import SourceTakeoverRefused
from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.cli import app
from tests.conformance.sync_support import open_at, where

__all__ = ["where"]  # fixtures


def _team(root: Path, name: str, words: str) -> Path:
    folder = root / name
    (folder / "guide").mkdir(parents=True)
    (folder / "README.md").write_text(f"# {name}\n\n{words}\n", encoding="utf-8")
    (folder / "guide" / "setup.md").write_text(
        f"# Setup of {name}\n\n{words}, set up.\n\n```bash\necho {name}\n```\n", encoding="utf-8"
    )
    return folder


def _uids(store: KnowledgeStore) -> dict[str, str]:
    """uid → source of everything the store holds (read as a member of both teams)."""
    hits = store.sql(identity="group:all", k=100).hits
    return {h.uid: h.source for h in hits}


def test_two_new_sources_folders_never_collide(store: KnowledgeStore, tmp_path: Path) -> None:
    a = _team(tmp_path, "a", "alpha secrets")
    b = _team(tmp_path, "b", "bravo notes")
    store.ingest([a], source="a", acl=["group:teamA"])
    report = store.ingest([b], source="b", acl=["group:teamB"])
    assert (report.added, report.updated) == (3, 0)
    store.add_member("group:teamA", "group:all")  # group:all reads both teams' entities
    store.add_member("group:teamB", "group:all")
    assert _uids(store) == {
        "a:README": "a",
        "a:guide/setup": "a",
        "a:guide/setup#code-1": "a",
        "b:README": "b",
        "b:guide/setup": "b",
        "b:guide/setup#code-1": "b",
    }
    # the edges name the prefixed uids: the folder's index is the parent
    parents = {e.uid for e in store.content("b:guide/setup", identity="group:teamB").edges.out}
    assert parents == {"b:README", "b:guide/setup#code-1"}
    assert {h.uid for h in store.lexical("alpha", identity="group:teamB").hits} == set()
    # the prefix is the source's: a sync later gives the same uids (nothing deleted)
    again = store.ingest([b], source="b", acl=["group:teamB"], sync=True)
    assert (again.unchanged, again.deleted) == (3, 0)


def test_a_takeover_is_refused_naming_both_sources_and_the_uids(
    store: KnowledgeStore, tmp_path: Path
) -> None:
    a = _team(tmp_path, "a", "alpha secrets")
    b = _team(tmp_path, "b", "bravo notes")
    store.ingest([a], source="a", acl=["group:teamA"], uid_prefix="")
    root = store.content_root()
    with pytest.raises(SourceTakeoverRefused) as refused:
        store.ingest([b], source="b", acl=["group:teamB"], uid_prefix="")
    error = refused.value
    assert error.code == "invalid_request"
    assert "source 'b' would take over 3 entities of source 'a'" in error.message
    assert "'README'" in error.message and "--allow-move" in error.message
    assert sorted(error.details["uids"]) == ["README", "guide/setup", "guide/setup#code-1"]
    assert {(m["from"], m["to"]) for m in error.details["moves"]} == {("a", "b")}
    assert store.content_root() == root  # nothing published
    assert "alpha secrets" in store.content("README", identity="group:teamA").entity.body
    moved = store.ingest([b], source="b", acl=["group:teamB"], uid_prefix="", allow_move=True)
    assert moved.updated == 3
    assert store.content("README", identity="group:teamB").entity.source == "b"
    with pytest.raises(Exception, match="no entity"):
        store.content("README", identity="group:teamA")


def test_records_of_another_source_are_the_same_takeover(store: KnowledgeStore) -> None:
    record = {"uid": "doc:1", "type": "doc", "title": "One", "body": "alpha", "acl": ["everyone"]}
    store.ingest_records([record], source="a")
    for attempt in (
        {"records": [record], "source": "b"},  # --source b
        {"records": [{**record, "source": "b"}]},  # the record's own source
    ):
        with pytest.raises(SourceTakeoverRefused, match="source 'b' would take over 1 entity"):
            store.ingest_records(**attempt)  # type: ignore[arg-type]
    assert store.content("doc:1").entity.source == "a"
    # the same source may update it; records keep the uids they give (no prefix)
    assert store.ingest_records([{**record, "body": "beta"}], source="a").updated == 1
    store.ingest_records([{**record, "uid": "doc:2"}], source="fresh")
    assert store.content("doc:2").entity.source == "fresh"


def test_a_uid_prefix_given_once_is_kept(store: KnowledgeStore, tmp_path: Path) -> None:
    folder = _team(tmp_path, "handbook", "charlie rules")
    store.ingest([folder], source="hb", acl=["everyone"], uid_prefix="kb/")
    assert {h.uid for h in store.sql(k=10).hits} == {
        "kb/README",
        "kb/guide/setup",
        "kb/guide/setup#code-1",
    }
    again = store.ingest([folder], source="hb", acl=["everyone"], sync=True)
    assert (again.unchanged, again.deleted) == (3, 0)


def test_a_source_holding_entities_keeps_its_uids(store: KnowledgeStore, tmp_path: Path) -> None:
    """A source with entities but no row (ingested without a source name): its folder pages
    get no prefix — the uids it has."""
    store.ingest_records(
        [{"uid": "README", "type": "page", "title": "Old", "body": "old", "source": "legacy"}],
        acl=["everyone"],
    )
    folder = _team(tmp_path, "legacy", "delta words")
    report = store.ingest([folder], source="legacy", acl=["everyone"])
    assert (report.added, report.updated) == (2, 1)  # README updated in place
    assert store.content("README").entity.title == "legacy"


def test_a_source_with_a_row_and_no_prefix_keeps_its_uids(
    store: KnowledgeStore, tmp_path: Path
) -> None:
    """A source first ingested from records (its row records no prefix) keeps the uids it
    has: its folder pages get none either."""
    store.ingest_records(
        [{"uid": "r1", "type": "doc", "title": "R", "body": "r"}], acl=["everyone"], source="api"
    )
    folder = _team(tmp_path, "api", "echo words")
    assert store.ingest([folder], source="api", acl=["everyone"]).added == 3
    assert {h.uid for h in store.sql({"source": ["api"]}, k=100).hits} == {
        "r1",
        "README",
        "guide/setup",
        "guide/setup#code-1",
    }


def test_a_store_from_before_prefixes_keeps_its_uids_on_open(
    engine_kind: str, where: str, tmp_path: Path
) -> None:
    """The ``sources`` table of a store made before ``uid_prefix`` gets the column (empty) on
    open, and its folder sources sync on their old uids."""
    folder = _team(tmp_path, "docs", "echo words")
    with open_at(where) as store:
        store.ingest([folder], source="docs", acl=["everyone"], uid_prefix="")
    if engine_kind == "embedded":
        with sqlite3.connect(Path(where) / "catalog.sqlite") as conn:
            conn.execute("ALTER TABLE sources DROP COLUMN uid_prefix")
    else:
        url, _, schema = where.rpartition("schema=")
        with psycopg.connect(url.rstrip("?&"), autocommit=True) as conn:
            conn.execute(f'ALTER TABLE "{schema}".sources DROP COLUMN uid_prefix')
    with open_at(where) as store:
        report = store.ingest([folder], source="docs", acl=["everyone"], sync=True)
        assert (report.unchanged, report.deleted) == (3, 0)
        assert "README" in {h.uid for h in store.sql(k=10).hits}


def test_the_cli_refuses_a_takeover_and_moves_on_purpose(tmp_path: Path) -> None:
    runner = CliRunner()
    a = _team(tmp_path, "a", "alpha")
    b = _team(tmp_path, "b", "bravo")
    at = ["--store", str(tmp_path / "s")]
    ingest = [*at, "ingest", "--uid-prefix", ""]
    assert (
        runner.invoke(app, [*ingest, str(a), "--source", "a", "--acl", "group:teamA"]).exit_code
        == 0
    )
    refused = runner.invoke(
        app, [*ingest, str(b), "--source", "b", "--acl", "group:teamB", "--json"]
    )
    assert refused.exit_code == 2 and '"code": "invalid_request"' in refused.stdout
    assert "source 'b' would take over 3 entities of source 'a'" in refused.stdout
    moved = runner.invoke(
        app, [*ingest, str(b), "--source", "b", "--acl", "group:teamB", "--allow-move", "--json"]
    )
    assert moved.exit_code == 0 and '"updated": 3' in moved.stdout
