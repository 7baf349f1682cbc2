"""``ingest --sync``, the sources view and ``delete --source``, on both engines (real files)."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import psycopg
import pytest

from knowledge_store.errors import InvalidRequest, MassDeleteRefused, NotFound
from knowledge_store.model import Filters
from knowledge_store.store import KnowledgeStore
from tests.conformance.sync_support import by_source, docs, open_at, where, write_pages

__all__ = ["docs", "where"]  # fixtures

#: A folder ingested under the new source "docs" gets uids "docs:PATH" (docs/sources.md).
PAGE_B = ["docs:b", "docs:b#code-1"]


def seen_anywhere(store: KnowledgeStore, uids: list[str], *, text: str = "beavers") -> set[str]:
    """Which of ``uids`` any primitive or surface still gives: lexical, vector, sql, graph,
    aggregate, query_graph, content."""
    found: set[str] = set()
    found |= {h.uid for h in store.lexical(text, k=100).hits}
    found |= {h.uid for h in store.lexical("print", k=100).hits}
    found |= {h.uid for h in store.vector(text, k=100).hits}
    found |= {h.uid for h in store.sql(Filters.build(uid=uids), k=100).hits}
    found |= {h.uid for h in store.search(text, k=50).results}
    starts = [h.uid for h in store.sql(k=100).hits]
    if starts:
        found |= {h.uid for h in store.graph(starts[:50], depth=2, k=100).hits}
    rows = store.query_graph("MATCH (a)-[r]->(b) RETURN a.uid, b.uid LIMIT 1000").rows
    found |= {str(v) for row in rows for v in row}
    for uid in uids:
        try:
            store.content(uid)
            found.add(uid)
        except NotFound:
            pass
    return found & set(uids)


def test_a_sync_deletes_what_the_folder_no_longer_holds_in_one_publish(
    where: str, docs: Path
) -> None:
    with open_at(where) as store:
        first = store.ingest([docs], source="docs", acl=["everyone"], sync=True)
        assert (first.added, first.deleted) == (8, 0)
        assert seen_anywhere(store, PAGE_B) == set(PAGE_B)
        (docs / "b.md").unlink()
        report = store.ingest([docs], source="docs", acl=["everyone"], sync=True)
        assert (report.added, report.updated, report.deleted) == (0, 1, 2)  # a's link to b
        assert report.deleted_uids == PAGE_B  # the page and its code sample
        assert report.to_dict()["deleted_uids"] == PAGE_B
        assert seen_anywhere(store, PAGE_B) == set()
        assert by_source(store) == [("docs", 6)]
        # Edges to the deleted page dangle: stored, invisible, and alive again with it.
        assert store.content("docs:a").to_dict()["edges"]["out"] == [] or all(
            e["uid"] not in PAGE_B for e in store.content("docs:a").to_dict()["edges"]["out"]
        )
        write_pages(docs, ["b"])
        back = store.ingest([docs], source="docs", acl=["everyone"], sync=True)
        assert (back.added, back.deleted) == (2, 0)


def test_without_sync_an_ingest_upserts_and_deletes_nothing(where: str, docs: Path) -> None:
    with open_at(where) as store:
        store.ingest([docs], source="docs", acl=["everyone"])
        (docs / "b.md").unlink()
        report = store.ingest([docs], source="docs", acl=["everyone"])
        assert report.deleted == 0 and report.deleted_uids == []
        assert seen_anywhere(store, PAGE_B) == set(PAGE_B)


def test_a_sync_touches_only_its_own_source(where: str, docs: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    write_pages(other, ["x", "y"])
    with open_at(where) as store:
        store.ingest([docs], source="docs", acl=["everyone"], sync=True)
        store.ingest([other], source="other", acl=["everyone"], sync=True)
        (docs / "c.md").unlink()
        report = store.ingest([docs], source="docs", acl=["everyone"], sync=True)
        assert report.deleted_uids == ["docs:c", "docs:c#code-1"]
        assert dict(by_source(store)) == {"docs": 6, "other": 4}


def test_a_mass_delete_is_refused_with_the_numbers_and_publishes_nothing(
    where: str, docs: Path
) -> None:
    with open_at(where) as store:
        store.ingest([docs], source="docs", acl=["everyone"], sync=True)
        root = store.content_root()
        for name in "abc":
            (docs / f"{name}.md").unlink()
        with pytest.raises(MassDeleteRefused) as refused:
            store.ingest([docs], source="docs", acl=["everyone"], sync=True)
        details = refused.value.details
        assert (details["stored"], details["deleting"], details["limit"]) == (8, 6, 0.5)
        assert "6 of its 8 entities (75%)" in refused.value.message
        assert store.content_root() == root
        assert by_source(store) == [("docs", 8)]
        allowed = store.ingest(
            [docs], source="docs", acl=["everyone"], sync=True, allow_mass_delete=True
        )
        assert allowed.deleted == 6
        assert by_source(store) == [("docs", 2)]


def test_half_of_a_source_may_go_without_allowing_a_mass_delete(where: str, docs: Path) -> None:
    with open_at(where) as store:
        store.ingest([docs], source="docs", acl=["everyone"], sync=True)
        (docs / "a.md").unlink()
        (docs / "b.md").unlink()
        assert store.ingest([docs], source="docs", acl=["everyone"], sync=True).deleted == 4


def test_a_sync_needs_a_source_name(where: str, docs: Path) -> None:
    with open_at(where) as store, pytest.raises(InvalidRequest, match="name it"):
        store.ingest([docs], acl=["everyone"], sync=True)


def test_a_rejected_page_keeps_its_stored_version(where: str, docs: Path) -> None:
    with open_at(where) as store:
        store.ingest([docs], source="docs", acl=["everyone"], sync=True)
        (docs / "c.md").write_bytes(b"# Page c\n\nnot UTF-8 \xff\n")
        report = store.ingest([docs], source="docs", acl=["everyone"], sync=True, skip_invalid=True)
        assert [r.uid for r in report.rejected] == ["docs:c"]
        assert report.deleted == 0
        kept = ["docs:c", "docs:c#code-1"]
        assert seen_anywhere(store, kept) == set(kept)


def test_records_sync_into_a_source(where: str) -> None:
    records = [
        {"uid": f"r{i}", "type": "doc", "title": f"R {i}", "body": f"beavers {i}"} for i in range(4)
    ]
    with open_at(where) as store:
        store.ingest_records(records, acl=["everyone"], source="api", sync=True)
        report = store.ingest_records(records[1:], acl=["everyone"], source="api", sync=True)
        assert report.deleted_uids == ["r0"]
        (view,) = store.sources()
        assert (view.source, view.entities, view.loader) == ("api", 3, "records")
        assert view.last_sync is not None and view.last_sync.deleted == 1


def test_the_sources_view(where: str, docs: Path, tmp_path: Path) -> None:
    with open_at(where) as store:
        store.ingest_records(
            [{"uid": "loose", "type": "doc", "title": "L", "body": "x", "source": "legacy"}],
            acl=["everyone"],
        )
        store.ingest([docs], source="docs", acl=["everyone"], sync=True)
        (docs / "d.md").unlink()
        report = store.ingest([docs], source="docs", acl=["everyone"], sync=True)
        views = {view.source: view.to_dict() for view in store.sources()}
        assert set(views) == {"docs", "legacy"}
        assert views["legacy"] == {
            "source": "legacy",
            "entities": 1,
            "chunks": 1,
            "loader": None,
            "locations": [],
            "last_sync": None,
        }
        row = views["docs"]
        assert (row["entities"], row["chunks"], row["loader"]) == (6, 6, "markdown")
        assert row["locations"] == [str(docs)]
        last = row["last_sync"]
        assert (last["mode"], last["added"], last["updated"], last["deleted"]) == (
            "sync",
            0,
            1,
            2,
        )
        assert last["unchanged"] == 5 and last["content_root"] == report.content_root
        assert last["at"].endswith("Z")
        # A sync that changes nothing still records when it ran.
        again = store.ingest([docs], source="docs", acl=["everyone"], sync=True)
        (view,) = [v for v in store.sources() if v.source == "docs"]
        assert view.last_sync is not None and view.last_sync.at >= last["at"]
        assert (view.last_sync.added, view.last_sync.deleted, view.last_sync.unchanged) == (0, 0, 6)
        assert again.content_root == report.content_root
        plain = store.ingest([docs], source="docs", acl=["everyone"])
        (view,) = [v for v in store.sources() if v.source == "docs"]
        assert view.last_sync is not None and view.last_sync.mode == "upsert"
        assert plain.deleted == 0


def test_delete_source_removes_everything_of_it_in_one_publish(
    where: str, docs: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    write_pages(other, ["x"])
    with open_at(where) as store:
        store.ingest([docs], source="docs", acl=["everyone"], sync=True)
        store.ingest([other], source="other", acl=["everyone"], sync=True)
        result = store.delete_source("docs")
        assert result.deleted == 8 and "docs:a#code-1" in result.deleted_uids
        assert [v.source for v in store.sources()] == ["other"]
        assert seen_anywhere(store, [f"docs:{name}" for name in "abcd"]) == set()
        assert by_source(store) == [("other", 2)]
        with pytest.raises(NotFound):
            store.delete_source("docs")


def test_the_source_dimension_counts_only_what_the_caller_may_read(where: str, docs: Path) -> None:
    (docs / "secret.md").write_text("---\nacl: [group:sre]\n---\n# Secret\n\nbeavers\n")
    with open_at(where) as store:
        store.ingest([docs], source="docs", acl=["everyone"], sync=True)
        assert by_source(store, "everyone") == [("docs", 8)]
        assert by_source(store, "group:sre") == [("docs", 9)]
        (view,) = store.sources()
        assert view.entities == 9  # the administration view counts every entity


def test_readers_never_see_half_a_sync(where: str, tmp_path: Path) -> None:
    folder = tmp_path / "many"
    write_pages(folder, [f"p{i:03d}" for i in range(60)])
    with open_at(where) as store:
        store.ingest([folder], source="many", acl=["everyone"], sync=True)
        for i in range(0, 20):
            (folder / f"p{i:03d}.md").unlink()
        write_pages(folder / "new", [f"n{i:03d}" for i in range(30)])
        seen: set[int] = set()
        done = threading.Event()

        def read() -> None:
            with open_at(where) as reader:
                while not done.is_set():
                    rows = by_source(reader)
                    seen.add(rows[0][1] if rows else 0)

        thread = threading.Thread(target=read)
        thread.start()
        try:
            report = store.ingest([folder], source="many", acl=["everyone"], sync=True)
        finally:
            done.set()
            thread.join()
        assert (report.added, report.deleted) == (60, 40)
        assert seen <= {120, 140}, seen


def test_an_existing_store_gets_the_sources_table(engine_kind: str, where: str, docs: Path) -> None:
    """A store made before the sources table existed: the table appears on open."""
    with open_at(where) as store:  # then, a folder's uids were its paths
        store.ingest([docs], source="docs", acl=["everyone"], uid_prefix="")
    if engine_kind == "embedded":
        with sqlite3.connect(Path(where) / "catalog.sqlite") as conn:
            conn.execute("DROP TABLE sources")
            conn.execute("DROP TABLE crawl_pages")
    else:
        url, _, schema = where.rpartition("schema=")
        url = url.rstrip("?&")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP TABLE "{schema}".sources, "{schema}".crawl_pages')
            conn.execute(f"UPDATE \"{schema}\".meta SET value = '2' WHERE key = 'schema_version'")
    with open_at(where) as store:
        assert [v.to_dict()["last_sync"] for v in store.sources()] == [None]
        (docs / "a.md").unlink()
        assert store.ingest([docs], source="docs", acl=["everyone"], sync=True).deleted == 2
        assert store.sources()[0].last_sync is not None
