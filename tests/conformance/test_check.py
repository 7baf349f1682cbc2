"""``ks check`` on every engine (issue 25, item 9): the catalog verified, and what derives from it.

A byte of a body changed in place went unseen before — SQLite's own check says ``ok``,
the row is as sound as ever, only its text is not what was published. The check
recomputes every entity's content hash from its stored fields, edges and ACL with the
publish's own function, and says which entity, what it means and what repairs it.
"""

from __future__ import annotations

import json
import random
from typing import Any

from typer.testing import CliRunner

from knowledge_store.model import DAMAGE_KINDS, Entity
from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.cli import app
from tests.engines import corruption

runner = CliRunner()


def _check(location: str, *args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["--store", location, "check", *args])
    return result.exit_code, result.stdout


def _seeded(open_store: Any) -> KnowledgeStore:
    store = open_store("store")
    corruption.seed(store)
    return store


def test_a_sound_store_checks_clean_on_every_surface(open_store: Any) -> None:
    with _seeded(open_store) as store:
        report = store.check()
        stats = store.stats()
        location = str(store.engine.path)
    assert report.ok and report.damage == [] and report.exit_status == 0
    assert report.content_root == stats.content_root
    assert report.checked["entities"] == stats.entities
    assert report.checked["chunks"] == stats.chunks == report.checked["vectors"]
    assert report.checked["edges"] == sum(stats.edges.values())
    code, out = _check(location, "--json")
    assert code == 0 and json.loads(out) == report.to_dict()
    code, out = _check(location)
    assert code == 0 and "ok: no damage found" in out


def test_every_content_hash_is_recomputed_with_the_publishs_function(open_store: Any) -> None:
    with _seeded(open_store) as store:
        stored = store.engine.writer.content_hashes([f"c:{n}" for n in range(corruption.UIDS)])
        for uid, content_hash in stored.items():
            record = corruption.record(int(uid[2:]), 1 if uid in ("c:3", "c:13", "c:21") else 0)
            assert content_hash == _entity(record).content_hash
        assert store.check().ok


def _entity(record: dict[str, Any]) -> Entity:
    from knowledge_store.ingest.records import record_to_entity

    return record_to_entity(record, file="<test>", line=1, default_acl=None, source=None)


def test_a_body_changed_behind_the_stores_back_is_found_and_named(
    open_store: Any, engine_kind: str
) -> None:
    store = _seeded(open_store)
    location = str(store.engine.path)
    store.close()
    if engine_kind == "embedded":  # a letter flipped in the file: SQLite's own check says ok
        damage = corruption._catalog_bytes("zq007qz")
    else:  # an UPDATE behind the store's back
        damage = corruption._sql(
            "UPDATE entity_bodies SET body = replace(body, 'zq007qz', 'zQ007qz')"
            " WHERE entity = :victim"
        )
    damage(location, random.Random(1))
    with KnowledgeStore.open(location, embedder=store.embedder) as reopened:
        report = reopened.check()
        body = reopened.content(corruption.VICTIM, identity="user:m").entity.body
        assert "zq007qz" not in body
    assert not report.ok and report.exit_status == 1
    (finding,) = [f for f in report.damage if f.kind == "content_hash"]
    assert finding.uids == [corruption.VICTIM] and finding.count == 1
    assert finding.message == DAMAGE_KINDS["content_hash"].meaning
    assert "ks delete" in finding.repair
    code, out = _check(location, "--json")
    assert code == 1 and json.loads(out)["damage"] == report.to_dict()["damage"]
    code, out = _check(location)
    assert code == 1 and "content_hash" in out and corruption.VICTIM in out
    # what the finding says repairs it: delete, then ingest again
    with KnowledgeStore.open(location, embedder=store.embedder) as reopened:
        reopened.ingest_records([corruption.record(7)])
        assert not reopened.check().ok  # unchanged by its hash: skipped
        reopened.delete([corruption.VICTIM])
        reopened.ingest_records([corruption.record(7)])
        assert reopened.check().ok


def test_chunks_orphans_acls_and_vectors_are_checked(open_store: Any, engine_kind: str) -> None:
    store = _seeded(open_store)
    location = str(store.engine.path)
    store.close()
    zero = corruption._ZERO_VECTOR[engine_kind]
    corruption._sql(
        "UPDATE chunks SET text = 'tampered' WHERE entity = :victim",
        zero,
        "DELETE FROM acl_set_principals WHERE acl_set ="
        " (SELECT acl_set FROM entities WHERE uid = 'c:2')",
        "DELETE FROM entities WHERE uid = 'c:5'" if engine_kind == "embedded" else "SELECT 1",
    )(location, random.Random(1))
    with KnowledgeStore.open(location, embedder=store.embedder) as reopened:
        report = reopened.check()
    kinds = {f.kind: f for f in report.damage}
    assert corruption.VICTIM in kinds["chunk_text"].uids
    assert corruption.VICTIM in kinds["vectors"].uids
    # the ACL set of c:2 (group:g, shared by every third entity) lost its principal
    assert "c:2" in kinds["content_hash"].uids
    if engine_kind == "embedded":  # no foreign keys outside the store: an entity row gone
        assert kinds["orphan_chunks"].count > 0
        assert "c:5" in kinds["orphan_edges"].uids
