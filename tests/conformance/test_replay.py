"""History and replay on every engine: what a publish keeps, a read run again at its root
under its moment's memberships, each difference with now explained by its change.

The reads are made through the operation table (``perform``, what every surface runs); the
changes through the store's own methods, recorded as a CLI's would be.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from knowledge_store.errors import NotFound
from knowledge_store.model import Identity
from knowledge_store.model.audit import AuditName, AuditReplay
from knowledge_store.requests import AuditSettingsRequest, GcRequest
from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.auth import Caller
from knowledge_store.surfaces.operations import operation, perform
from tests.audit_history import replay_all, run_history
from tests.conftest import ESTATE

ADMIN = Caller(Identity("user:root"), admin=True, subject="token:root")


@pytest.fixture
def estate(store: KnowledgeStore) -> KnowledgeStore:
    perform(operation("ingest"), store, ADMIN, {"records": ESTATE}, surface="rest")
    perform(
        operation("principals_add_member"),
        store,
        ADMIN,
        {"group": "group:sre", "member": "user:sam"},
        surface="rest",
    )
    return store


def _read(store: KnowledgeStore, name: str, who: str, **fields: Any) -> int:
    caller = Caller(Identity(who), subject=f"token:{who}")
    perform(operation(name), store, caller, fields, surface="rest")
    return store.engine.audit.head().seq


def _change(store: KnowledgeStore, name: str, **fields: Any) -> None:
    perform(operation(name), store, ADMIN, fields, surface="rest")


def _replay(store: KnowledgeStore, seq: int) -> AuditReplay:
    got = store.audit_replay(seq)
    assert got.replayed, got.note
    assert got.principals_match is True
    assert got.then is not None and got.then.identical, got.then
    return got


def _causes(got: AuditReplay, uid: str) -> list[str]:
    assert got.now is not None
    found = [d for d in got.now.differences if d.uid == uid]
    assert found, f"{uid} is not among the differences: {got.now.differences}"
    assert all(d.explained for d in found)
    return found[0].causes


def test_a_read_replays_identically_with_the_proof_of_access(estate: KnowledgeStore) -> None:
    seq = _read(estate, "search", "user:sam", query="replica falls behind", k=3)
    got = _replay(estate, seq)
    assert got.explained and got.now is not None and got.now.identical
    assert got.then is not None and got.then.same_answer is True
    access = {a.uid: a for a in got.access}
    assert (
        access["ticket:1042"].readable and access["ticket:1042"].through == "user:sam → group:sre"
    )


def test_a_revocation_explains_what_left(estate: KnowledgeStore) -> None:
    seq = _read(estate, "lexical", "user:sam", query="ERR-1042 standby replica", k=5)
    _change(estate, "acl_revoke", uid="ticket:1042", principal="group:sre")
    causes = _causes(_replay(estate, seq), "ticket:1042")
    assert any(
        c.startswith("group:sre revoked from its ACL") and "by token:root as user:root" in c
        for c in causes
    )


def test_a_membership_removal_explains_what_left(estate: KnowledgeStore) -> None:
    seq = _read(estate, "sql", "user:sam", filters={"type": ["ticket"]})
    _change(estate, "principals_remove_member", group="group:sre", member="user:sam")
    causes = _causes(_replay(estate, seq), "ticket:1042")
    assert any(
        c.startswith("user:sam removed from group:sre at") and "by token:root" in c for c in causes
    ), causes


def test_a_grant_and_a_membership_explain_what_came(estate: KnowledgeStore) -> None:
    seq = _read(estate, "sql", "user:joe", filters={"type": ["ticket"]})
    _change(estate, "acl_grant", uid="ticket:2001", principal="user:joe")
    _change(estate, "principals_add_member", group="group:sre", member="user:joe")
    got = _replay(estate, seq)
    assert any(c.startswith("user:joe granted") for c in _causes(got, "ticket:2001"))
    assert any(c.startswith("user:joe added to group:sre") for c in _causes(got, "ticket:1042"))


def test_a_deletion_and_an_update_explain_themselves(estate: KnowledgeStore) -> None:
    seq = _read(estate, "graph", "everyone", starts=["guide:admin"], depth=1)
    _change(estate, "delete", uids=["guide:vacuum"])
    got = _replay(estate, seq)
    assert any(c.startswith("deleted at") for c in _causes(got, "guide:vacuum"))
    seq = _read(estate, "search", "everyone", query="pg_stat_activity server process", k=2)
    changed = dict(ESTATE[2], body="# Monitoring\n\nNothing about processes any more.")
    _change(estate, "ingest", records=[changed])
    got = _replay(estate, seq)
    assert got.explained and got.now is not None
    assert any(
        c.startswith("guide:monitoring updated") for d in got.now.differences for c in d.causes
    )


def test_a_record_naming_what_its_identity_could_not_read_is_not_explained(
    estate: KnowledgeStore,
) -> None:
    """A leak: the record says joe's answer held the payroll ticket. The replay checks it."""
    seq = _read(estate, "sql", "user:joe", filters={"type": ["ticket"]})
    record = estate.audit_show(seq)
    extra = AuditName(uid="ticket:2001", rank=len(record.returned) + 1)
    leaked = record.model_copy(update={"returned": [*record.returned, extra]})
    from knowledge_store.store.replay import Replayer

    with Replayer(estate) as replayer:
        got = replayer.replay(leaked)
    assert not got.explained
    assert {a.uid: a.readable for a in got.access}["ticket:2001"] is False


def test_a_refused_read_replays_refused_and_a_grant_explains_it_now(
    estate: KnowledgeStore,
) -> None:
    """joe asked for the payroll ticket and got not_found: at its root it is not_found too
    (the refusal was right); after a grant, the read now answers, and the grant says why."""
    caller = Caller(Identity("user:joe"), subject="token:user:joe")
    with pytest.raises(NotFound):
        perform(operation("content"), estate, caller, {"uid": "ticket:2001"}, surface="rest")
    seq = estate.engine.audit.head().seq
    got = _replay(estate, seq)
    assert got.explained and got.now is not None and got.now.identical
    assert got.note and "not_found" in got.note
    _change(estate, "acl_grant", uid="ticket:2001", principal="user:joe")
    got = _replay(estate, seq)
    causes = _causes(got, "ticket:2001")
    assert any(c.startswith("user:joe granted") for c in causes), causes


def test_a_record_of_a_refusal_that_was_not_one_is_not_explained(estate: KnowledgeStore) -> None:
    seq = _read(estate, "content", "user:sam", uid="ticket:1042")
    record = estate.audit_show(seq)
    forged = record.model_copy(
        update={"outcome": "error", "error": {"code": "not_found"}, "returned": []}
    )
    from knowledge_store.store.replay import Replayer

    with Replayer(estate) as replayer:
        got = replayer.replay(forged)
    assert got.replayed and not got.explained
    assert got.then is not None and not got.then.identical
    assert any("at its root it answers" in c for d in got.then.differences for c in d.causes), (
        got.then
    )


def test_a_read_without_its_text_checks_access_only(estate: KnowledgeStore) -> None:
    estate.audit_settings(AuditSettingsRequest.parse({"query_text": "hash"}))
    seq = _read(estate, "search", "user:sam", query="replica", k=3)
    got = estate.audit_replay(seq)
    assert not got.replayed and got.note and "hash" in got.note
    assert got.access and all(a.readable for a in got.access) and got.explained


def test_the_history_rebuilds_each_publish_exactly(estate: KnowledgeStore) -> None:
    """entities_at(P) is what the store held at P: every content hash of every publish."""
    snapshots = {}
    for step in range(4):
        with estate.engine.history() as history:
            publish = history.latest()
        with estate.reader("everyone") as r:
            snapshots[publish] = r.content_root
        uids = [e["uid"] for e in ESTATE]
        snapshots[publish] = dict(estate.engine.writer.content_hashes(uids))
        if step == 0:
            estate.grant("guide:admin", "user:x")
        elif step == 1:
            estate.delete(["ticket:2001"])
        elif step == 2:
            estate.ingest_records([dict(ESTATE[0], body=ESTATE[0]["body"] + "\nMore.")])
    with estate.engine.history() as history:
        for publish, hashes in snapshots.items():
            rebuilt = {
                v.entity.uid: v.entity.content_hash for b in history.entities_at(publish) for v in b
            }
            assert rebuilt == hashes, publish


def test_acl_explain_at_a_root_and_a_moment(estate: KnowledgeStore) -> None:
    root = estate.content_root()
    at = estate.audit_show(_read(estate, "sql", "user:sam")).at  # sam in group:sre then
    estate.remove_member("group:sre", "user:sam")
    estate.revoke("ticket:1042", "group:sre")
    now = estate.acl_explain("user:sam", "ticket:1042")
    assert not now.allowed
    then = estate.acl_explain("user:sam", "ticket:1042", at=at)
    assert then.allowed and then.chain == ("user:sam", "group:sre") and then.at == at
    assert then.content_root == root
    at_root = estate.acl_explain("everyone", "guide:admin", at=root)
    assert at_root.content_root == root and at_root.allowed
    with pytest.raises(NotFound):
        estate.acl_explain("user:sam", "ticket:1042", at="2001-01-01")


def test_gc_removes_what_no_retained_moment_needs(store: KnowledgeStore) -> None:
    # a store that has run for years: its first records are old
    store.engine.audit.append(
        [
            {
                "at": f"20{year}-01-01T00:00:00.000000Z",
                "surface": "cli",
                "operation": "sql",
                "identity": "everyone",
                "outcome": "ok",
                "returned": [{"uid": "guide:admin"}],
            }
            for year in (19, 20)
        ]
    )
    estate = store
    perform(operation("ingest"), estate, ADMIN, {"records": ESTATE}, surface="rest")
    _read(estate, "sql", "user:sam", filters={"type": ["ticket"]})
    estate.grant("guide:admin", "user:x")
    estate.delete(["guide:vacuum"])
    with estate.engine.history() as history:
        latest = history.latest()
        sizes = history.sizes()
    assert sizes["entity_history"] >= 2 and sizes["chunk_history"] >= 1
    planned = estate.gc(GcRequest(retain="30d", dry_run=True))
    assert planned.records == 2 and planned.dry_run
    assert estate.engine.audit.head().base_seq == 0
    done = estate.gc(GcRequest(retain="30d"))
    assert done.records == 2 and estate.engine.audit.record(1) is None
    verdict = estate.audit_verify()
    assert verdict.ok and verdict.first is not None and verdict.first.seq == 2
    # the history of publishes no retained moment reads (here: all but the latest)
    removed = estate.engine.prune_history(latest, "2999-01-01T00:00:00.000000Z")
    assert removed["versions"] >= 2 and removed["chunks"] >= 1
    with estate.engine.history() as history:
        assert history.sizes()["entity_history"] == 0
        rebuilt = {v.entity.uid for b in history.entities_at(latest) for v in b}
    assert "guide:vacuum" not in rebuilt and "guide:admin" in rebuilt


def test_a_scripted_history_replays_with_nothing_unexplained(store: KnowledgeStore) -> None:
    played = run_history(store, 10, 5, random.Random(29))
    assert played.publishes >= 6 and len(played.reads) == 50  # memberships: no publishes
    got = replay_all(store, played.reads)
    assert got.replayed >= 30
    assert got.unexplained == [], "\n".join(got.unexplained)
