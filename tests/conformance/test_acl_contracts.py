"""Permissions on both engines: engine-neutral ACL tests and the hypothesis state machine.

``tests/test_acl.py`` runs on both engines through the ``engine`` fixture; its
state machine runs here on PostgreSQL (its own module runs it on the embedded
engine), with the same rules, the same plain-Python oracle and the same
settings; only the store factory differs.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import settings

from knowledge_store.model import Filters
from knowledge_store.store import KnowledgeStore
from tests import postgres_support, test_acl
from tests.conftest import HASH_SPEC


def _chunk_ids(store: KnowledgeStore, who: str) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for hit in store.lexical("payroll ERR-1042 vacuum monitoring server", identity=who, k=100).hits:
        out.setdefault(hit.uid, set()).add(hit.chunk_id)
    return out


def test_grant_and_revoke_are_immediate_and_touch_only_that_entity(
    estate_store: KnowledgeStore,
) -> None:
    store = estate_store
    store.add_member("group:finance", "user:fin")
    before = _chunk_ids(store, "user:fin")
    hashes = store.engine.writer.content_hashes(["guide:vacuum", "guide:admin", "ticket:1042"])
    assert "ticket:2001" not in {h.uid for h in store.lexical("payroll", identity="user:pat").hits}
    root = store.grant("ticket:2001", "user:pat").content_root
    assert root == store.content_root()
    assert "ticket:2001" in {h.uid for h in store.lexical("payroll", identity="user:pat").hits}
    assert "ticket:2001" in {
        h.uid for h in store.vector("payroll salary", identity="user:pat").hits
    }
    # an ACL change re-points the entity; its chunks and every other entity stay as they were
    assert _chunk_ids(store, "user:fin") == before
    assert store.engine.writer.content_hashes(list(hashes)) == hashes
    store.revoke("ticket:2001", "user:pat")
    assert "ticket:2001" not in {h.uid for h in store.lexical("payroll", identity="user:pat").hits}
    assert "ticket:2001" not in {
        r.uid for r in store.search("payroll", identity="user:pat").results
    }
    assert store.acl_show("ticket:2001") == ("group:finance",)
    assert (
        store.grant("ticket:2001", "group:finance").content_root == store.content_root()
    )  # no change


def test_filters_only_narrow_what_the_acl_allows(estate_store: KnowledgeStore) -> None:
    store = estate_store
    for who in ("everyone", "user:sam", "user:nobody"):
        allowed = {
            h.uid for h in store.lexical("the a replica payroll vacuum", identity=who, k=100).hits
        }
        for filters in (
            Filters.build(type=["ticket"]),
            Filters.build(uid=["ticket:2001", "ticket:1042"]),
            Filters.build(source=["tickets", "docs"]),
        ):
            narrowed = {
                h.uid
                for h in store.lexical(
                    "the a replica payroll vacuum", identity=who, k=100, filters=filters
                ).hits
            }
            assert narrowed <= allowed


_database: str | None = None


class PostgresAclMachine(test_acl.AclMachine):
    """The permissions state machine, on a PostgreSQL store (a fresh schema per example)."""

    def open_store(self) -> KnowledgeStore:
        global _database
        if _database is None:
            _database = postgres_support.fresh_database("acl_machine")
        return KnowledgeStore.open(postgres_support.store_url(_database), embedder=HASH_SPEC)


#: Fewer examples than the embedded run (each example opens a new schema); a long run:
#: KS_ACL_EXAMPLES=200 pytest tests/conformance/test_acl_contracts.py -k machine
PostgresAclMachine.TestCase.settings = settings(
    test_acl.AclMachine.TestCase.settings,
    max_examples=int(os.environ.get("KS_ACL_EXAMPLES", "6")),
)
test_acl_state_machine_postgres = PostgresAclMachine.TestCase


@pytest.mark.parametrize("steps", test_acl.ORPHAN_SEQUENCES)
def test_re_ingested_pages_leave_no_orphaned_sample_postgres(
    steps: list[tuple[str, tuple[Any, ...]]],
) -> None:
    test_acl.run_sequence(PostgresAclMachine(), steps)


def test_a_grant_or_revoke_that_changes_nothing_says_so(estate_store: KnowledgeStore) -> None:
    store = estate_store
    store.add_member("group:finance", "user:fin")
    assert store.grant("ticket:2001", "user:pat").warnings == ()
    root = store.content_root()
    again = store.grant("ticket:2001", "user:pat")
    assert again.content_root == root
    assert again.warnings == ("user:pat was already in ticket:2001's ACL: nothing changed",)
    assert store.revoke("ticket:2001", "user:pat").warnings == ()
    missing = store.revoke("ticket:2001", "user:nobdy")  # a typo: nothing was revoked
    assert missing.acl == ("group:finance",)
    assert missing.warnings == ("user:nobdy was not in ticket:2001's ACL: nothing changed",)
    # revoking a member's own entry does not stop it reading through its group
    store.grant("ticket:2001", "user:fin")
    through = store.revoke("ticket:2001", "user:fin")
    assert through.acl == ("group:finance",)
    assert through.warnings == ("user:fin still reads ticket:2001: user:fin → group:finance",)
    assert "warnings" not in store.grant("ticket:2001", "user:pat").to_dict()
