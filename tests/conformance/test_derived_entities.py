"""A page's derived entities (its code samples) on every publish, on both engines (issue 25).

A page written again — upsert, sync, JSON Lines record — leaves exactly the samples its
new version derives, each with its ACL; the rest go in the same publish. Before, a page
re-ingested with one code block instead of two under a narrower ACL left ``plan#code-2``
readable by everyone, "inherited from plan", and a grant on the page reached it too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from knowledge_store.errors import BatchRejected, InvalidRequest, NotFound
from knowledge_store.store import KnowledgeStore

TWO_BLOCKS = (
    "# Plan\n\nThe plan, for everyone.\n\n```bash\necho one\n```\n\n"
    "Then the launch.\n\n```bash\necho launch codes alpha\n```\n"
)
ONE_BLOCK = "# Plan\n\nThe plan, now private.\n\n```bash\necho one\n```\n"


def _page(folder: Path, text: str) -> Path:
    folder.mkdir(exist_ok=True)
    (folder / "plan.md").write_text(text, encoding="utf-8")
    return folder


def _reads(store: KnowledgeStore, who: str, text: str) -> set[str]:
    found = {h.uid for h in store.lexical(text, identity=who, k=50).hits}
    found |= {h.uid for h in store.vector(text, identity=who, k=50).hits}
    found |= {r.uid for r in store.search(text, identity=who, k=50).results}
    found |= {h.uid for h in store.sql(identity=who, k=100).hits}
    return found


def test_a_page_ingested_again_with_fewer_samples_leaves_no_orphan(
    store: KnowledgeStore, tmp_path: Path
) -> None:
    folder = _page(tmp_path / "docs", TWO_BLOCKS)
    first = store.ingest([folder], format="markdown", acl=["everyone"])
    assert first.added == 3
    assert "plan#code-2" in _reads(store, "everyone", "launch codes alpha")
    _page(folder, ONE_BLOCK)
    again = store.ingest([folder], format="markdown", acl=["group:teamB"])
    assert (again.updated, again.deleted, again.deleted_uids) == (2, 1, ["plan#code-2"])
    for who in ("everyone", "group:teamB", "user:anyone"):
        assert _reads(store, who, "launch codes alpha") & {"plan#code-2"} == set()
        with pytest.raises(NotFound):
            store.content("plan#code-2", identity=who)
    with pytest.raises(NotFound):
        store.acl_show("plan#code-2")
    assert store.acl_show("plan#code-1") == ("group:teamB",)
    assert store.acl_inherited_from("plan#code-1") == "plan"
    # the anonymous caller sees neither the private page nor its remaining sample
    assert _reads(store, "everyone", "plan") & {"plan", "plan#code-1"} == set()
    # a grant on the page reaches its one sample, and nothing else
    store.grant("plan", "user:x")
    assert store.acl_show("plan#code-1") == ("group:teamB", "user:x")
    assert sum(view.entities for view in store.sources()) == 2


def test_a_sync_and_a_plain_upsert_agree(store: KnowledgeStore, tmp_path: Path) -> None:
    folder = _page(tmp_path / "docs", TWO_BLOCKS)
    store.ingest([folder], format="markdown", acl=["everyone"], source="docs", sync=True)
    _page(folder, ONE_BLOCK)
    report = store.ingest(
        [folder], format="markdown", acl=["group:teamB"], source="docs", sync=True
    )
    assert report.deleted_uids == ["docs:plan#code-2"]
    assert store.acl_show("docs:plan#code-1") == ("group:teamB",)


def test_a_page_as_a_record_is_never_split_and_leaves_no_sample(
    store: KnowledgeStore, tmp_path: Path
) -> None:
    folder = _page(tmp_path / "docs", TWO_BLOCKS)
    store.ingest([folder], format="markdown", acl=["everyone"])
    record = {"uid": "plan", "type": "page", "title": "Plan", "body": "The plan, as a record."}
    report = store.ingest_records([{**record, "source": "docs", "acl": ["group:teamB"]}])
    assert report.deleted_uids == ["plan#code-1", "plan#code-2"]
    assert _reads(store, "everyone", "echo one launch codes") == set()


def test_a_derived_record_takes_its_parents_acl(store: KnowledgeStore) -> None:
    page = {"uid": "p", "type": "page", "title": "P", "body": "page body", "acl": ["group:g1"]}
    sample = {
        "uid": "p#s",
        "type": "codeSample",
        "title": "P sample",
        "body": "sample body",
        "attributes": {"acl_from": "p"},
        "edges": [{"label": "partOf", "to": "p"}],
        "acl": ["everyone"],  # what the record says; its parent's ACL is what it gets
    }
    store.ingest_records([page, sample])
    assert store.acl_show("p#s") == ("group:g1",)
    assert "p#s" not in _reads(store, "everyone", "sample body")
    # the page's ACL changes; the batch holds the sample as stored: it follows the page
    stored = {**sample, "acl": ["group:g1"]}
    report = store.ingest_records([{**page, "acl": ["group:g2"]}, stored])
    assert (report.updated, report.deleted) == (2, 0)
    assert store.acl_show("p#s") == ("group:g2",)
    # alone, the sample takes the stored page's ACL
    store.ingest_records([{**sample, "body": "sample body, edited"}])
    assert store.acl_show("p#s") == ("group:g2",)


def test_a_derived_record_whose_parent_is_missing_is_refused(store: KnowledgeStore) -> None:
    store.ingest_records([{"uid": "x", "type": "page", "title": "X", "body": "x", "acl": []}])
    root = store.content_root()
    orphan = {
        "uid": "nope#s",
        "type": "codeSample",
        "title": "S",
        "body": "s",
        "attributes": {"acl_from": "nope"},
        "edges": [{"label": "partOf", "to": "nope"}],
        "acl": ["everyone"],
    }
    with pytest.raises(InvalidRequest, match="neither this batch nor the store holds"):
        store.ingest_records([orphan])
    assert store.content_root() == root
    without_edge = {**orphan, "uid": "x#s", "attributes": {"acl_from": "x"}, "edges": []}
    with pytest.raises(BatchRejected, match="add the edge that says it is part of it"):
        store.ingest_records([without_edge])
    assert store.content_root() == root


def test_what_is_split_off_a_derived_entity_follows_its_page_too(store: KnowledgeStore) -> None:
    """A chain: C shares S's ACL, S shares P's. A grant on P reaches C; P written again
    without S takes C with it."""
    page = {"uid": "p", "type": "page", "title": "P", "body": "page", "acl": ["group:g1"]}

    def derived(uid: str, parent: str) -> dict[str, object]:
        return {
            "uid": uid,
            "type": "codeSample",
            "title": uid,
            "body": f"body of {uid}",
            "attributes": {"acl_from": parent},
            "edges": [{"label": "partOf", "to": parent}],
            "acl": ["group:g1"],
        }

    store.ingest_records([page, derived("s", "p"), derived("c", "s")])
    store.grant("p", "user:u")
    assert store.acl_show("c") == store.acl_show("s") == ("group:g1", "user:u")
    store.revoke("p", "group:g1")
    assert store.acl_show("c") == ("user:u",)
    report = store.ingest_records([{**page, "body": "page, again"}])
    assert sorted(report.deleted_uids) == ["c", "s"]
