"""Permissions: identity expansion, ACL pre-filters in every primitive, zero leaks.

The state machine checks every answer against an oracle written in plain
Python (sets and dicts), not the store's SQL.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)

from knowledge_store.engines.embedded.engine import EmbeddedEngine
from knowledge_store.errors import InputError, InvalidRequest, KnowledgeStoreError, NotFound
from knowledge_store.model import Filters
from knowledge_store.store import KnowledgeStore
from tests.conftest import HASH_SPEC


def _uids(answer: Any) -> set[str]:
    if hasattr(answer, "results"):
        return {r.uid for r in answer.results}
    return {h.uid for h in answer.hits}


# -- examples ---------------------------------------------------------------------------------


def test_nested_groups_grant_and_removal_is_seen_by_the_next_query(
    estate_store: KnowledgeStore,
) -> None:
    store = estate_store
    store.add_member("group:oncall", "user:olga")
    store.add_member("group:sre", "group:oncall")  # olga → oncall → sre
    assert "ticket:1042" in _uids(store.lexical("ERR-1042", identity="user:olga"))
    info = store.principal_show("user:olga")
    assert info.direct_groups == ("group:oncall",) and "group:sre" in info.inherited_groups
    explained = store.acl_explain("user:olga", "ticket:1042")
    assert explained.allowed and explained.chain == ("user:olga", "group:oncall", "group:sre")
    store.remove_member("group:sre", "group:oncall")
    assert "ticket:1042" not in _uids(store.lexical("ERR-1042", identity="user:olga"))
    assert "ticket:1042" not in _uids(store.vector("standby replica lag", identity="user:olga"))
    assert "ticket:1042" not in _uids(store.search("replica lag", identity="user:olga"))
    denied = store.acl_explain("user:olga", "ticket:1042")
    assert not denied.allowed and "group:sre" in denied.reason


def test_everyone_and_anonymous_never_see_group_entities(estate_store: KnowledgeStore) -> None:
    for who in (None, "everyone", "user:nobody"):
        got = _uids(estate_store.lexical("ERR-1042 payroll", identity=who, k=50))
        assert got.isdisjoint({"ticket:1042", "ticket:2001"})
        got = _uids(estate_store.vector("payroll salary figures", identity=who, k=50))
        assert got.isdisjoint({"ticket:1042", "ticket:2001"})


def test_membership_cycles_are_rejected_naming_the_cycle(store: KnowledgeStore) -> None:
    store.add_member("group:a", "group:b")
    store.add_member("group:b", "group:c")
    with pytest.raises(InvalidRequest) as info:
        store.add_member("group:c", "group:a")
    # read "→" as "is a member of": a would be in c, c is in b, b is in a
    assert "group:a → group:c → group:b → group:a" in info.value.message
    assert info.value.details["cycle"][0] == info.value.details["cycle"][-1]
    with pytest.raises(InvalidRequest):
        store.add_member("group:a", "group:a")
    with pytest.raises(InvalidRequest):
        store.load_memberships([("group:c", "group:a")])
    # the failed load changed nothing
    assert store.principal_show("group:c").members == ()


def test_principals_load_replaces_the_named_groups_only(store: KnowledgeStore) -> None:
    store.add_member("group:x", "user:old")
    store.add_member("group:y", "user:keep")
    store.load_memberships([("group:x", "user:new"), ("group:x", "user:new2")])
    assert store.principal_show("group:x").members == ("user:new", "user:new2")
    assert store.principal_show("group:y").members == ("user:keep",)


@pytest.mark.embedded_only(
    reason="reads the embedded catalog's publish log; tests/conformance/test_acl_contracts.py"
    " has the engine-neutral version"
)
def test_grant_and_revoke_are_immediate_and_touch_only_that_entity(
    estate_store: KnowledgeStore,
) -> None:
    store = estate_store
    engine = store.engine
    assert isinstance(engine, EmbeddedEngine)
    assert "ticket:2001" not in _uids(store.lexical("payroll", identity="user:pat"))
    root = store.grant("ticket:2001", "user:pat").content_root
    assert root == store.content_root()
    assert "ticket:2001" in _uids(store.lexical("payroll", identity="user:pat"))
    assert "ticket:2001" in _uids(store.vector("payroll salary", identity="user:pat"))
    publish = engine.catalog.latest_publish()[0]
    touched = engine.catalog.execute(
        "SELECT DISTINCT e.uid FROM publish_ops o JOIN chunks c ON c.id = o.chunk"
        " JOIN entities e ON e.id = c.entity WHERE o.publish = ?",
        (publish,),
    )
    assert [t[0] for t in touched] == ["ticket:2001"]
    assert {
        op
        for (op,) in engine.catalog.execute(
            "SELECT op FROM publish_ops WHERE publish = ?", (publish,)
        )
    } == {"acl"}
    store.revoke("ticket:2001", "user:pat")
    assert "ticket:2001" not in _uids(store.lexical("payroll", identity="user:pat"))
    assert "ticket:2001" not in _uids(store.search("payroll", identity="user:pat"))
    assert store.acl_show("ticket:2001") == ("group:finance",)


def test_an_empty_acl_is_visible_to_nobody(store: KnowledgeStore) -> None:
    report = store.ingest_records(
        [
            {
                "uid": "dark",
                "type": "page",
                "title": "Dark",
                "body": "Nobody reads this.",
                "acl": [],
            },
            {
                "uid": "lit",
                "type": "page",
                "title": "Lit",
                "body": "All read this.",
                "acl": ["everyone"],
            },
        ]
    )
    # allowed (an embargo), but said: an empty list is an easy slip for a default ACL
    assert report.warnings == (
        "1 entity has an empty ACL ([]), so no one can read it until a grant: dark",
    )
    again = store.ingest_records(
        [{"uid": "lit", "type": "page", "title": "Lit", "body": "x", "acl": ["everyone"]}]
    )
    assert again.warnings == () and "warnings" not in again.to_dict()
    for who in ("everyone", "user:a", "group:admins"):
        assert "dark" not in {h.uid for h in store.lexical("nobody reads", identity=who).hits}
        assert "dark" not in {h.uid for h in store.vector("nobody reads", identity=who).hits}
    assert not store.acl_explain("user:a", "dark").allowed


def test_unknown_entities_and_unreadable_ones_look_alike_in_acl_free_reads(
    estate_store: KnowledgeStore,
) -> None:
    hidden = estate_store.lexical(
        "payroll", identity="user:x", filters=Filters.build(uid=["ticket:2001"])
    )
    missing = estate_store.lexical(
        "payroll", identity="user:x", filters=Filters.build(uid=["nope"])
    )
    assert hidden.hits == missing.hits == []


def test_vector_answers_say_how_they_were_computed(estate_store: KnowledgeStore) -> None:
    everyone = estate_store.vector("database", identity="everyone", k=3)
    assert everyone.vector is not None and everyone.vector.strategy in ("hnsw", "exact")
    few = estate_store.vector(
        "payroll", identity="group:finance", k=3, filters=Filters.build(type=["ticket"])
    )
    assert few.vector is not None
    assert few.vector.strategy == "exact" and few.vector.exhaustive
    assert few.vector.scanned == len(few.hits) == 1


INJECTIONS = [
    "' OR 1=1 --",
    '"; DROP TABLE entities; --',
    "uid:* OR acl_set:*",
    "type:ticket OR *",
    "*",
    "a\x00b",
    "x" * 5000,
    "group:finance' OR '1'='1",
    ") OR (1=1",
]


@pytest.mark.parametrize("value", INJECTIONS)
def test_injection_strings_never_widen_a_result(estate_store: KnowledgeStore, value: str) -> None:
    store = estate_store
    hidden = {"ticket:1042", "ticket:2001"}
    for text in (value, f"payroll {value}"):
        for run in (store.lexical, store.vector, store.search):
            try:
                found = _uids(run(text, k=100))  # type: ignore[operator]
            except InputError:
                continue  # a clear error (NUL, over-long text) is an acceptable answer
            assert found.isdisjoint(hidden)
    for make in (
        lambda v: Filters.build(uid=[v]),
        lambda v: Filters.build(type=[v]),
        lambda v: Filters.build(source=[v]),
    ):
        try:
            filters = make(value)
        except InvalidRequest:
            continue  # a clear error is an acceptable answer
        assert store.lexical("payroll", filters=filters).hits == []
        assert store.vector("payroll", filters=filters).hits == []
    for principal in (value, f"user:{value}", f"group:{value}"):
        try:
            got = _uids(store.lexical("payroll ERR-1042", identity=principal, k=100))
        except InvalidRequest:
            continue
        assert got.isdisjoint(hidden)
    for principal in (value, f"user:{value}", f"group:{value}"):
        with contextlib.suppress(InvalidRequest):
            assert not store.acl_explain(principal, "ticket:2001").allowed


# -- the state machine ---------------------------------------------------------------------------

GROUPS = ["group:g1", "group:g2", "group:g3"]
USERS = ["user:u1", "user:u2"]
PRINCIPALS = [*USERS, *GROUPS]
ACL_CHOICES = ["everyone", *PRINCIPALS]
UIDS = ["e1", "e2", "e3", "e4"]
BODIES = [
    "zeta alpha storage notes",
    "zeta bravo network notes",
    "zeta charlie security notes",
]
IDENTITIES = ["everyone", *PRINCIPALS]
#: Markdown pages, each with 0–3 code samples the loader splits off (``PAGE#code-N``).
PAGES = ["doc-a", "doc-b"]
#: The source the pages are ingested under (their folder's name): a record of the same page
#: must name it, or it would take over another source's entity.
PAGE_SOURCE = "md"


class AclMachine(RuleBasedStateMachine):
    """Random memberships, ACLs, grants, revocations, deletes and re-ingests vs an oracle."""

    #: Random sequences, or the fixed ones of the tests below (``check`` after each step).
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="ks-acl-"))
        self.store = self.open_store()
        self.members: set[tuple[str, str]] = set()  # (group, member)
        self.acl: dict[str, set[str]] = {}  # uid → principals
        self.types: dict[str, str] = {}
        self.links: dict[str, set[str]] = {}  # uid → dependsOn targets (may dangle)
        self.parent: dict[str, str] = {}  # code sample → the page whose ACL it shares
        self.structure: set[tuple[str, str]] = set()  # (src, dst): partOf / implementedBy

    def open_store(self) -> KnowledgeStore:
        """The store under test (tests/conformance runs this machine on every engine), embedded
        by feature hashing: the oracle checks who sees what, not how near the vectors are."""
        return KnowledgeStore.open(self.dir / "s", embedder=HASH_SPEC)

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # the oracle ---------------------------------------------------------------
    def held(self, principal: str) -> set[str]:
        held = {principal, "everyone"}
        changed = True
        while changed:
            changed = False
            for group, member in self.members:
                if member in held and group not in held:
                    held.add(group)
                    changed = True
        return held

    def visible(self, principal: str) -> set[str]:
        held = self.held(principal)
        return {uid for uid, acl in self.acl.items() if acl & held}

    def reachable(self, who: str, start: str, depth: int) -> set[str]:
        """Entities within ``depth`` hops of ``start`` (either direction), only through visible ones."""
        visible = self.visible(who)
        if start not in visible:
            return set()
        frontier, seen = {start}, {start}
        for _ in range(depth):
            step = set()
            pairs = [(s, d) for s, targets in self.links.items() for d in targets]
            for src, dst in [*pairs, *self.structure]:
                if src in frontier and dst in visible:
                    step.add(dst)
                if dst in frontier and src in visible:
                    step.add(src)
            frontier = step - seen
            seen |= step
        return seen - {start}

    def reaches(self, start: str, goal: str) -> bool:
        return goal in self.held(start) and goal != "everyone"

    # rules --------------------------------------------------------------------
    @rule(
        uid=st.sampled_from(UIDS),
        body=st.sampled_from(BODIES),
        acl=st.sets(st.sampled_from(ACL_CHOICES), max_size=2),
        kind=st.sampled_from(["page", "ticket"]),
        links=st.sets(st.sampled_from(UIDS), max_size=2),
    )
    def ingest(self, uid: str, body: str, acl: set[str], kind: str, links: set[str]) -> None:
        links.discard(uid)
        edges = [{"label": "dependsOn", "to": to} for to in sorted(links)]
        self.store.ingest_records(
            [
                {
                    "uid": uid,
                    "type": kind,
                    "title": uid,
                    "body": body,
                    "acl": sorted(acl),
                    "edges": edges,
                }
            ]
        )
        self.acl[uid] = set(acl)
        self.types[uid] = kind
        self.links[uid] = set(links)

    @rule(
        page=st.sampled_from(PAGES),
        acl=st.sets(st.sampled_from(ACL_CHOICES), min_size=1, max_size=2),
        samples=st.integers(min_value=0, max_value=3),
    )
    def ingest_page_with_samples(self, page: str, acl: set[str], samples: int) -> None:
        """A page whose code samples the loader splits off: they share its ACL. Ingested again
        with fewer samples (under another ACL), the ones it no longer has go in the same
        publish — none is left behind with the page's old ACL (issue 25)."""
        folder = self.dir / PAGE_SOURCE
        folder.mkdir(exist_ok=True)
        path = folder / f"{page}.md"
        blocks = "".join(f"```bash\necho zeta notes {n}\n```\n\n" for n in range(1, samples + 1))
        path.write_text(f"# {page}\n\nzeta notes of {page}.\n\n{blocks}", encoding="utf-8")
        gone = {s for s, p in self.parent.items() if p == page} - self.samples_of(page, samples)
        report = self.store.ingest([path], format="markdown", acl=sorted(acl))
        assert report.deleted == len(gone) and set(report.deleted_uids) == gone
        self.forget(gone)
        self.structure = {(s, d) for s, d in self.structure if s != page}  # its edges, anew
        self.acl[page] = set(acl)
        self.types[page] = "page"
        self.links[page] = set()
        for sample in self.samples_of(page, samples):
            self.acl[sample] = set(acl)
            self.types[sample] = "codeSample"
            self.links[sample] = set()
            self.parent[sample] = page
            self.structure |= {(page, sample), (sample, page)}

    @precondition(lambda self: any(page in self.acl for page in PAGES))
    @rule(data=st.data(), acl=st.sets(st.sampled_from(ACL_CHOICES), max_size=2))
    def ingest_page_as_a_record(self, data: st.DataObject, acl: set[str]) -> None:
        """The same page as a JSON record, which is never split: its samples go with the
        publish, whatever ACL the record gives."""
        page = data.draw(st.sampled_from([p for p in PAGES if p in self.acl]))
        self.ingest_record_page(page, acl)

    def ingest_record_page(self, page: str, acl: set[str]) -> None:
        gone = {s for s, p in self.parent.items() if p == page}
        record = {
            "uid": page,
            "type": "page",
            "title": page,
            "body": f"zeta notes of {page}, as a record.",
            "source": PAGE_SOURCE,
            "acl": sorted(acl),
        }
        report = self.store.ingest_records([record])
        assert report.deleted == len(gone)
        self.forget(gone)
        self.acl[page] = set(acl)
        self.structure = {(s, d) for s, d in self.structure if s != page}  # its edges went

    @staticmethod
    def samples_of(page: str, samples: int) -> set[str]:
        return {f"{page}#code-{n}" for n in range(1, samples + 1)}

    def forget(self, gone: set[str]) -> None:
        """The oracle without ``gone`` (deleted entities: their edges go too)."""
        for uid in gone:
            del self.acl[uid]
            del self.types[uid]
            del self.links[uid]
            self.parent.pop(uid, None)
        self.structure = {(s, d) for s, d in self.structure if s not in gone and d not in gone}

    @rule(group=st.sampled_from(GROUPS), member=st.sampled_from(PRINCIPALS))
    def add_member(self, group: str, member: str) -> None:
        cycle = member == group or (member.startswith("group:") and self.reaches(group, member))
        if cycle:
            with pytest.raises(InvalidRequest):
                self.store.add_member(group, member)
        else:
            self.store.add_member(group, member)
            self.members.add((group, member))

    @precondition(lambda self: bool(self.members))
    @rule(data=st.data())
    def remove_member(self, data: st.DataObject) -> None:
        group, member = data.draw(st.sampled_from(sorted(self.members)))
        self.store.remove_member(group, member)
        self.members.discard((group, member))

    @precondition(lambda self: bool(self.acl))
    @rule(data=st.data(), principal=st.sampled_from(ACL_CHOICES), grant=st.booleans())
    def change_acl(self, data: st.DataObject, principal: str, grant: bool) -> None:
        self.change(data.draw(st.sampled_from(sorted(self.acl))), principal, grant)

    def change(self, uid: str, principal: str, grant: bool) -> None:
        if uid in self.parent:  # a code sample: its ACL is its page's
            with pytest.raises(InvalidRequest, match="shares the ACL of"):
                (self.store.grant if grant else self.store.revoke)(uid, principal)
            assert self.store.acl_inherited_from(uid) == self.parent[uid]
            return
        if grant:
            self.store.grant(uid, principal)
            self.acl[uid].add(principal)
        else:
            self.store.revoke(uid, principal)
            self.acl[uid].discard(principal)
        for child, parent in self.parent.items():  # the same publish: its samples follow
            if parent == uid and child in self.acl:
                self.acl[child] = set(self.acl[uid])

    @precondition(lambda self: bool(self.acl))
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        uid = data.draw(st.sampled_from(sorted(self.acl)))
        # a page's code samples go with it: no record of theirs could bring them back, and
        # only their page could change their ACL
        doomed = {uid} | {s for s, page in self.parent.items() if page == uid and s in self.acl}
        report = self.store.delete([uid])
        assert report.deleted == len(doomed)
        assert report.deleted_uids == (sorted(doomed) if len(doomed) > 1 else None)
        self.forget(doomed)

    # checks after every step -----------------------------------------------------
    def check(self) -> None:
        """Every invariant (for the fixed sequences, which call the rules themselves)."""
        self.samples_share_their_page_acl()
        self.every_answer_is_readable()

    @invariant()
    def samples_share_their_page_acl(self) -> None:
        """No entity the oracle doesn't know (an orphaned sample readable by no identity tried
        is still a leak), and each sample has its page's ACL, said to be inherited."""
        assert sum(view.entities for view in self.store.sources()) == len(self.acl)
        for sample, page in self.parent.items():
            assert set(self.store.acl_show(sample)) == self.acl[page] == self.acl[sample]
            assert self.store.acl_inherited_from(sample) == page

    @invariant()
    def every_answer_is_readable(self) -> None:
        for who in IDENTITIES:
            visible = self.visible(who)
            lexical = _uids(self.store.lexical("zeta notes", identity=who, k=100))
            assert lexical == visible, (who, lexical, visible)
            vector = self.store.vector("zeta notes", identity=who, k=100)
            assert _uids(vector) <= visible
            if vector.vector is not None and vector.vector.exhaustive:
                assert _uids(vector) == visible
            assert _uids(self.store.search("zeta notes", identity=who, k=100)) <= visible
            tickets = Filters.build(type=["ticket"])
            expect = {u for u in visible if self.types[u] == "ticket"}
            assert _uids(self.store.lexical("zeta", identity=who, k=100, filters=tickets)) == expect
            for uid in self.acl:
                explained = self.store.acl_explain(who, uid)
                assert explained.allowed == (uid in visible)
            self.check_fields_and_graph(who, visible)

    def check_fields_and_graph(self, who: str, visible: set[str]) -> None:
        """sql, aggregate, graph, query_graph and content equal the oracle exactly."""
        assert {h.uid for h in self.store.sql(identity=who, k=100).hits} == visible
        tickets = {h.uid for h in self.store.sql({"type": ["ticket"]}, identity=who, k=100).hits}
        assert tickets == {u for u in visible if self.types[u] == "ticket"}
        by_type = self.store.aggregate("count", "type", identity=who).pairs()
        expect_types = Counter(self.types[u] for u in visible)
        assert {key: n for key, n in by_type if n} == dict(expect_types), (who, by_type)
        assert self.store.aggregate("count", identity=who).pairs() == [(None, len(visible))]
        for uid in UIDS:
            for depth in (1, 2):
                if uid not in visible:  # a start the caller can't read: as if missing
                    with pytest.raises(NotFound):
                        self.store.graph([uid], identity=who, depth=depth, k=100)
                    continue
                reached = self.store.graph([uid], identity=who, depth=depth, k=100)
                assert {h.uid for h in reached.hits} == self.reachable(who, uid, depth), (
                    who,
                    uid,
                    depth,
                )
            rows = self.store.query_graph(
                "MATCH (a {uid: $u})-[:dependsOn]->(b) RETURN b.uid", {"u": uid}, identity=who
            ).rows
            targets = self.links.get(uid, set()) & visible if uid in visible else set()
            assert sorted(r[0] for r in rows) == sorted(targets)
            if uid not in visible:
                with pytest.raises(NotFound):
                    self.store.content(uid, identity=who)
                continue
            edges = self.store.content(uid, identity=who).to_dict()["edges"]
            made = {d for s, d in self.structure if s == uid and d in visible}
            assert {e["uid"] for e in edges["out"]} == targets | made
            sources = {src for src, to in self.links.items() if uid in to and src in visible}
            sources |= {s for s, d in self.structure if d == uid and s in visible}
            assert {e["uid"] for e in edges["in"]} == sources


AclMachine.TestCase.settings = settings(
    max_examples=12,
    stateful_step_count=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_acl_state_machine = AclMachine.TestCase


#: The sequences of issue 25 item 1, run as they are (the random runs may not draw them):
#: (rule, arguments) steps; ``check`` runs after each.
ORPHAN_SEQUENCES: list[list[tuple[str, tuple[Any, ...]]]] = [
    [  # fewer samples, under a narrower ACL: the orphan must not keep `everyone`
        ("ingest_page_with_samples", ("doc-a", {"everyone"}, 2)),
        ("ingest_page_with_samples", ("doc-a", {"group:g1"}, 1)),
        ("change", ("doc-a", "user:u1", True)),  # a grant reaches its sample, no orphan
        ("change", ("doc-a", "group:g1", False)),
        ("ingest_page_with_samples", ("doc-a", {"everyone"}, 3)),
        ("ingest_page_with_samples", ("doc-a", {"group:g2"}, 0)),
    ],
    [  # the page as a record (never split), then split again, under other ACLs
        ("ingest_page_with_samples", ("doc-b", {"everyone", "group:g1"}, 3)),
        ("ingest_record_page", ("doc-b", {"group:g2"})),
        ("ingest_page_with_samples", ("doc-b", {"user:u2"}, 2)),
        ("change", ("doc-b", "everyone", True)),
        ("ingest_page_with_samples", ("doc-b", {"user:u2"}, 1)),
        ("change", ("doc-b", "user:u2", False)),
    ],
]


@pytest.mark.parametrize("steps", ORPHAN_SEQUENCES)
def test_re_ingested_pages_leave_no_orphaned_sample(
    steps: list[tuple[str, tuple[Any, ...]]],
) -> None:
    run_sequence(AclMachine(), steps)


def run_sequence(machine: AclMachine, steps: list[tuple[str, tuple[Any, ...]]]) -> None:
    """Run ``steps`` on ``machine`` (a fresh store), checking every invariant after each."""
    try:
        for name, args in steps:
            getattr(machine, name)(*args)
            machine.check()
    finally:
        machine.teardown()


def test_errors_from_admin_ops_are_typed(store: KnowledgeStore) -> None:
    with pytest.raises(NotFound):
        store.grant("missing", "user:a")
    with pytest.raises(NotFound):
        store.remove_member("group:a", "user:a")
    for bad in ("user:", "admin", "group", "user:\x00x"):
        with pytest.raises(KnowledgeStoreError):
            store.add_member("group:a", bad)
    with pytest.raises(InvalidRequest):
        store.add_member("user:a", "user:b")
