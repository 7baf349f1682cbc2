"""The audit log on every engine: what a record holds, the chain, verify against tampering.

Tampering is done the way someone with a SQL shell on the store would: the append-only
triggers dropped, rows changed, deleted, swapped, cut — and the head row and the catalog's
checkpoint rewritten to match, where the case says so.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from knowledge_store.errors import StoreError
from knowledge_store.ingest.embedding import Embedder
from knowledge_store.model.audit import GENESIS, canonical_json, chain_digest, principals_digest
from knowledge_store.requests import (
    AuditExportRequest,
    AuditListRequest,
    AuditSettingsRequest,
    AuditVerifyRequest,
)
from knowledge_store.store import KnowledgeStore
from tests.conftest import ESTATE, EngineUnderTest


def _python_on(store: KnowledgeStore, **more: str) -> None:
    store.audit_settings(AuditSettingsRequest.parse({"python": "on", **more}))


@pytest.fixture
def audited(store: KnowledgeStore) -> KnowledgeStore:
    """The conftest estate, with the Python API's calls recorded."""
    store.ingest_records(ESTATE)
    store.add_member("group:sre", "user:sam")
    _python_on(store)
    return store


@contextmanager
def sql_shell(store: KnowledgeStore) -> Iterator[Any]:
    """A connection to the store's audit tables with the append-only guard dropped."""
    engine: Any = store.engine
    if engine.name == "embedded":
        conn = sqlite3.connect(engine.path / "audit.sqlite", isolation_level=None)
        conn.execute("DROP TRIGGER IF EXISTS audit_log_no_update")
        conn.execute("DROP TRIGGER IF EXISTS audit_log_no_delete")
        try:
            yield conn
        finally:
            conn.close()
    else:
        conn = engine.db.connect()
        conn.execute("DROP TRIGGER IF EXISTS audit_log_append_only ON audit_log")
        try:
            yield conn
        finally:
            conn.close()


def _q(store: KnowledgeStore, sql: str) -> str:
    """``?`` placeholders in the engine's own style."""
    return sql if store.engine.name == "embedded" else sql.replace("?", "%s")


def _rows(store: KnowledgeStore) -> list[tuple[int, str, str]]:
    with sql_shell(store) as conn:
        return [
            (int(s), str(r), str(d))
            for s, r, d in conn.execute(
                "SELECT seq, record, digest FROM audit_log ORDER BY seq"
            ).fetchall()
        ]


def _reads(store: KnowledgeStore, n: int) -> None:
    for i in range(n):
        store.search("vacuum dead tuples", identity="user:sam" if i % 2 else "everyone", k=3)


# -- what a record holds -------------------------------------------------------------------------
def test_a_read_records_who_what_where_and_what_it_named(audited: KnowledgeStore) -> None:
    answer = audited.search("replica lag", identity="user:sam", k=3)
    (record,) = audited.audit_list(AuditListRequest(k=1)).records
    assert record.operation == "search" and record.surface == "python"
    assert record.identity == "user:sam" and record.subject and record.subject.startswith("os:")
    assert record.content_root == answer.content_root and record.publish is not None
    assert [n.uid for n in record.returned] == [r.uid for r in answer.results]
    assert [n.rank for n in record.returned] == list(range(1, len(answer.results) + 1))
    shown = {e.chunk_id for r in answer.results for e in r.evidence}
    assert {c for n in record.returned for c in n.chunks} == shown
    with audited.reader("user:sam") as r:
        assert record.principals == principals_digest(r.held)
    assert record.request == {"query": "replica lag", "k": 3}
    assert record.outcome == "ok" and record.error is None and record.us > 0
    assert record.answer is not None and len(record.answer) == 64


def test_a_content_read_names_its_entity_and_the_chunks_it_showed(
    audited: KnowledgeStore,
) -> None:
    """The most direct read of all: "who saw this document" must find it."""
    answer = audited.content("ticket:1042", identity="user:sam")
    (record,) = audited.audit_list(AuditListRequest(k=1)).records
    assert record.operation == "content" and record.returned[0].uid == "ticket:1042"
    assert record.returned[0].chunks == [c.chunk_id for c in answer.chunks]
    seen = audited.audit_list(AuditListRequest(uid="ticket:1042")).records
    assert record.seq in {r.seq for r in seen}


def test_a_record_names_only_what_its_caller_saw(audited: KnowledgeStore) -> None:
    """joe may read neither ticket: his records name neither, whatever he asked."""
    for text in ("replica lag", "payroll salary", "ERR-1042", "vacuum"):
        audited.search(text, identity="user:joe", k=10)
        audited.lexical(text, identity="user:joe", k=10)
    audited.sql(identity="user:joe", k=100)
    audited.graph(["guide:monitoring"], identity="user:joe", depth=2)
    records = audited.audit_list(AuditListRequest(identity="user:joe")).records
    assert len(records) == 10
    named = {n.uid for r in records for n in r.returned}
    assert named and not named & {"ticket:1042", "ticket:2001"}
    # and "who saw ticket:1042" lists sam's read, not joe's
    audited.search("ERR-1042 replica", identity="user:sam", k=3)
    seen = audited.audit_list(AuditListRequest(uid="ticket:1042")).records
    assert seen and {r.identity for r in seen} == {"user:sam"}


def test_an_error_is_recorded_with_its_code(audited: KnowledgeStore) -> None:
    from knowledge_store.errors import NotFound

    with pytest.raises(NotFound):
        audited.content("ticket:2001", identity="user:joe")
    (record,) = audited.audit_list(AuditListRequest(k=1)).records
    assert record.outcome == "error" and record.error is not None
    assert record.error["code"] == "not_found" and record.returned == []


@pytest.mark.parametrize("policy", ["keep", "hash", "drop"])
def test_query_text_is_kept_hashed_or_dropped(audited: KnowledgeStore, policy: str) -> None:
    audited.audit_settings(AuditSettingsRequest.parse({"query_text": policy}))
    for _ in range(2):
        audited.search("salary of ann", identity="user:sam", k=2)
    first, second = audited.audit_list(AuditListRequest(k=2)).records
    assert first.query_text == policy
    raw = json.dumps([r.to_dict() for r in (first, second)])
    assert ("salary of ann" in raw) == (policy == "keep")
    if policy == "hash":  # equal texts, equal keyed hashes: "the same question again" is seen
        assert first.request["query"] == second.request["query"]
        assert first.request["query"].startswith("hmac-sha256:")
        assert first.request["query"] != "hmac-sha256:" + chain_digest("", "salary of ann")
    if policy == "drop":
        assert "query" not in first.request


def test_a_change_records_what_it_changed(audited: KnowledgeStore) -> None:
    audited.grant("ticket:2001", "user:joe")
    audited.remove_member("group:sre", "user:sam")
    audited.delete(["guide:vacuum"])
    delete, member, grant = audited.audit_list(AuditListRequest(k=3)).records
    assert grant.operation == "acl_grant" and grant.changed is not None
    assert grant.changed["uids"] == ["ticket:2001"] and "user:joe" in grant.changed["acl"]
    assert member.operation == "principals_remove_member"
    assert member.request == {"group": "group:sre", "member": "user:sam"}
    assert delete.changed is not None and "guide:vacuum" in delete.changed["uids"]
    assert {r.seq for r in audited.audit_list(AuditListRequest(uid="ticket:2001")).records} == {
        grant.seq
    }


def test_the_python_api_is_recorded_only_when_the_settings_say_so(
    store: KnowledgeStore,
) -> None:
    store.ingest_records(ESTATE)
    store.search("vacuum", k=2)
    assert store.engine.audit.head().seq == 0
    _python_on(store)
    store.search("vacuum", k=2)
    store.revoke("guide:admin", "everyone")  # revoke reads the ACL inside: one record
    assert [r.operation for r in store.audit_list().records] == ["acl_revoke", "search"]


def test_the_log_off_records_nothing_but_the_change_that_turned_it_off(
    audited: KnowledgeStore,
) -> None:
    before = audited.engine.audit.head().seq
    audited.audit_settings(AuditSettingsRequest.parse({"enabled": "off"}))
    _reads(audited, 3)
    assert audited.engine.audit.head().seq == before + 1  # the switch off
    audited.audit_settings(AuditSettingsRequest.parse({"enabled": "on"}))
    _reads(audited, 1)
    assert audited.engine.audit.head().seq == before + 3  # the switch on, then the read
    operations = [r.operation for r in audited.audit_list(AuditListRequest(k=3)).records]
    assert operations == ["search", "audit_settings", "audit_settings"]


# -- the chain -------------------------------------------------------------------------------------
def test_every_record_follows_from_the_one_before(audited: KnowledgeStore) -> None:
    _reads(audited, 5)
    rows = _rows(audited)
    prev = GENESIS
    for seq, text, digest in rows:
        record = json.loads(text)
        assert record["seq"] == seq and record["prev"] == prev
        assert canonical_json(record) == text
        assert chain_digest(prev, text) == digest
        prev = digest
    verdict = audited.audit_verify()
    assert verdict.ok and verdict.records == len(rows) and verdict.problems == []
    assert verdict.head is not None and verdict.head.digest == prev


def test_concurrent_requests_append_one_chain(audited: KnowledgeStore) -> None:
    """Eight threads, 20 reads each: group commits, one dense chain, nothing lost."""
    errors: list[BaseException] = []

    def work() -> None:
        try:
            _reads(audited, 20)
        except BaseException as exc:
            errors.append(exc)

    start = audited.engine.audit.head().seq
    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    seqs = [s for s, _, _ in _rows(audited)]
    assert seqs == list(range(1, start + 161))
    assert audited.audit_verify().ok


def test_the_log_refuses_updates_and_deletes(audited: KnowledgeStore) -> None:
    _reads(audited, 2)
    engine: Any = audited.engine
    if engine.name == "embedded":
        conn: Any = sqlite3.connect(engine.path / "audit.sqlite", isolation_level=None)
        errors: tuple[type[BaseException], ...] = (sqlite3.DatabaseError,)
    else:
        import psycopg

        conn = engine.db.connect()
        errors = (psycopg.Error,)
    try:
        for statement in ("UPDATE audit_log SET surface = 'x'", "DELETE FROM audit_log"):
            with pytest.raises(errors, match="append-only"):
                conn.execute(statement)
    finally:
        conn.close()
    assert audited.audit_verify().ok


# -- verify against tampering ---------------------------------------------------------------------------
def _problems(
    store: KnowledgeStore, head: str | None = None, *, index: bool = False
) -> list[tuple[str, int | None]]:
    """What verify finds; ``index``: also the lookup columns that no longer agree with their
    records (every edit of a record's identity or operation is one too)."""
    verdict = store.audit_verify(AuditVerifyRequest(head=head))
    assert verdict.ok == (not verdict.problems)
    return [(p.kind, p.seq) for p in verdict.problems if index or p.kind != "index"]


def _set_row(store: KnowledgeStore, conn: Any, seq: int, text: str, digest: str) -> None:
    conn.execute(
        _q(store, "UPDATE audit_log SET record = ?, digest = ? WHERE seq = ?"), (text, digest, seq)
    )


def _rewrite_from(store: KnowledgeStore, conn: Any, seq: int, change: dict[str, Any]) -> str:
    """Change record ``seq`` and recompute every digest after it; the new last digest."""
    rows = [r for r in _rows(store) if r[0] >= seq]
    prev = next((d for s, _, d in _rows(store) if s == seq - 1), GENESIS)
    for s, text, _ in rows:
        record = json.loads(text)
        if s == seq:
            record.update(change)
        record["prev"] = prev
        new = canonical_json(record)
        prev = chain_digest(prev, new)
        _set_row(store, conn, s, new, prev)
    return prev


@pytest.fixture
def logged(audited: KnowledgeStore) -> KnowledgeStore:
    """Ten records, the last one a change (so the catalog's checkpoint names it)."""
    _reads(audited, 9 - audited.engine.audit.head().seq)
    audited.grant("guide:admin", "user:zed")
    head = audited.engine.audit.head()
    assert head.seq == 10 and audited.engine.audit.checkpoint() == (10, head.digest)
    return audited


def test_an_edited_record_is_found(logged: KnowledgeStore) -> None:
    with sql_shell(logged) as conn:
        conn.execute(
            _q(
                logged,
                "UPDATE audit_log SET record = replace(record, 'user:sam', 'user:eve')"
                " WHERE seq = ?",
            ),
            (4,),
        )
    assert _problems(logged) == [("edited", 4)]


def test_an_edited_record_with_its_digest_recomputed_is_found(logged: KnowledgeStore) -> None:
    seq, text, _ = _rows(logged)[3]
    record = json.loads(text)
    record["identity"] = "user:eve"
    new = canonical_json(record)
    with sql_shell(logged) as conn:
        _set_row(logged, conn, seq, new, chain_digest(record["prev"], new))
        conn.execute(
            _q(logged, "UPDATE audit_log SET identity = ? WHERE seq = ?"), ("user:eve", seq)
        )
    assert _problems(logged) == [("edited", 4)]


def test_a_deleted_record_is_found(logged: KnowledgeStore) -> None:
    with sql_shell(logged) as conn:
        conn.execute(_q(logged, "DELETE FROM audit_log WHERE seq = ?"), (5,))
    assert _problems(logged) == [("missing", 5)]


def test_swapped_records_are_found(logged: KnowledgeStore) -> None:
    rows = _rows(logged)
    (s3, t3, d3), (s4, t4, d4) = rows[2], rows[3]
    with sql_shell(logged) as conn:
        _set_row(logged, conn, s3, t4, d4)
        _set_row(logged, conn, s4, t3, d3)
    assert _problems(logged) == [("reordered", 3), ("reordered", 4)]


def test_a_cut_tail_is_found_by_the_head(logged: KnowledgeStore) -> None:
    with sql_shell(logged) as conn:
        conn.execute("DELETE FROM audit_log WHERE seq > 7")
    kinds = _problems(logged)
    assert ("truncated", 8) in kinds and {k for k, _ in kinds} == {"truncated"}


def test_a_cut_tail_and_a_rewritten_head_are_found_by_the_checkpoint(
    logged: KnowledgeStore,
) -> None:
    rows = _rows(logged)
    with sql_shell(logged) as conn:
        conn.execute("DELETE FROM audit_log WHERE seq > 7")
        conn.execute(
            _q(logged, "UPDATE audit_head SET seq = ?, digest = ? WHERE id = 1"), (7, rows[6][2])
        )
    assert _problems(logged) == [("truncated", 8)]


def test_a_log_rewritten_with_its_head_is_found_by_the_checkpoint(logged: KnowledgeStore) -> None:
    with sql_shell(logged) as conn:
        last = _rewrite_from(logged, conn, 2, {"identity": "user:eve"})
        conn.execute(_q(logged, "UPDATE audit_head SET digest = ? WHERE id = 1"), (last,))
    assert _problems(logged) == [("edited", 10)]


def test_only_a_head_kept_elsewhere_finds_a_rewrite_of_everything(logged: KnowledgeStore) -> None:
    """The limit: someone who rewrites the log, its head and the catalog's checkpoint
    consistently is found only against a head kept elsewhere (verify prints it)."""
    kept = logged.audit_verify().head  # (the verify is record 11)
    assert kept is not None
    with sql_shell(logged) as conn:
        last = _rewrite_from(logged, conn, 2, {"identity": "user:eve"})
        conn.execute(_q(logged, "UPDATE audit_head SET digest = ? WHERE id = 1"), (last,))
        conn.execute(_q(logged, "UPDATE audit_log SET identity = ? WHERE seq = 2"), ("user:eve",))
    checkpoint = logged.engine.audit.checkpoint()
    assert checkpoint is not None
    rewritten = f"{checkpoint[0]} {dict((s, d) for s, _, d in _rows(logged))[checkpoint[0]]}"
    engine: Any = logged.engine
    if engine.name == "embedded":
        with sqlite3.connect(engine.path / "catalog.sqlite") as cat:
            cat.execute("UPDATE meta SET value = ? WHERE key = 'audit_checkpoint'", (rewritten,))
    else:
        with engine.db.connect() as pg:
            pg.execute("UPDATE meta SET value = %s WHERE key = 'audit_checkpoint'", (rewritten,))
    assert _problems(logged) == []
    assert _problems(logged, f"{kept.seq}:{kept.digest}") == [("edited", kept.seq)]


def test_a_wrong_lookup_row_is_found(logged: KnowledgeStore) -> None:
    with sql_shell(logged) as conn:
        conn.execute(_q(logged, "DELETE FROM audit_names WHERE seq = ?"), (10,))
        conn.execute(_q(logged, "UPDATE audit_log SET operation = ? WHERE seq = ?"), ("x", 3))
    assert _problems(logged, index=True) == [("index", 3), ("index", 10)]


TAMPERING = st.sampled_from(["byte", "delete", "swap", "cut"])


@settings(max_examples=12, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kind=TAMPERING,
    where=st.integers(min_value=1, max_value=9),
    place=st.integers(min_value=0, max_value=1 << 16),
)
def test_any_single_tampering_is_found(
    engine: EngineUnderTest, embedder: Embedder, kind: str, where: int, place: int
) -> None:
    with engine.open(embedder) as store:
        store.ingest_records(ESTATE[:2])
        _python_on(store)
        _reads(store, 9)
        rows = _rows(store)
        seq, text, digest = rows[where - 1]
        with sql_shell(store) as conn:
            if kind == "byte":
                at = place % len(text)
                changed = text[:at] + ("x" if text[at] != "x" else "y") + text[at + 1 :]
                _set_row(store, conn, seq, changed, digest)
            elif kind == "delete":
                conn.execute(_q(store, "DELETE FROM audit_log WHERE seq = ?"), (seq,))
            elif kind == "swap":
                other = rows[where % len(rows)]
                _set_row(store, conn, seq, other[1], other[2])
                _set_row(store, conn, other[0], text, digest)
            else:
                conn.execute(_q(store, "DELETE FROM audit_log WHERE seq >= ?"), (seq,))
        assert not store.audit_verify().ok


# -- export ---------------------------------------------------------------------------------------------
def test_an_export_is_the_records_and_verifies_on_its_own(logged: KnowledgeStore) -> None:
    lines = list(logged.audit_export(AuditExportRequest()))
    records = [json.loads(line) for line in lines]
    assert [r["seq"] for r in records][:10] == list(range(1, 11))
    prev = GENESIS
    for record in records:  # what a SIEM can check with the records alone
        digest = record.pop("digest")
        assert chain_digest(prev, canonical_json(record)) == digest
        prev = digest
    since = records[5]["at"]
    later = list(logged.audit_export(AuditExportRequest(since=since)))
    assert json.loads(later[0])["seq"] == 6
    spans = [json.loads(line) for line in logged.audit_export(AuditExportRequest(format="otlp"))]
    span = spans[0]["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert span["name"].startswith("ks.") and len(span["traceId"]) == 32
    assert int(span["endTimeUnixNano"]) >= int(span["startTimeUnixNano"])


def test_a_record_that_cannot_be_written_fails_its_request(audited: KnowledgeStore) -> None:
    """No answer without its record: an append that fails is the request's store_error."""
    with sql_shell(audited) as conn:
        conn.execute("DROP TABLE audit_names")
    with pytest.raises(StoreError, match="audit log"):
        audited.search("vacuum", identity="user:sam", k=2)
