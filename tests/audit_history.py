"""A scripted history for replay: publishes, grants, revocations, membership changes,
deletions and re-ingests, with reads of every kind recorded between them.

``run_history(store, steps, reads_per_step, rng)`` plays it on a store (through the
operation table's ``perform``, as the surfaces do) and returns the seqs of the recorded
reads; ``replay_all`` replays them with one :class:`~knowledge_store.store.replay.Replayer`
(records in publish order, so that a replica serves every read of its publish) and counts
what came back. tests/conformance/test_replay.py plays a short one on each engine;
bench/bench_replay.py the long one (≥ 50 publishes, ≥ 500 reads).
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from knowledge_store.model import Identity
from knowledge_store.requests import AuditSettingsRequest
from knowledge_store.store import KnowledgeStore
from knowledge_store.store.auditing import parsed
from knowledge_store.store.replay import Replayer
from knowledge_store.surfaces.auth import Caller
from knowledge_store.surfaces.operations import operation, perform

WORDS = [
    "replica",
    "failover",
    "vacuum",
    "index",
    "backup",
    "restore",
    "latency",
    "query",
    "planner",
    "lock",
    "deadlock",
    "checkpoint",
    "wal",
    "archive",
    "tuning",
    "memory",
    "cache",
    "partition",
    "shard",
    "replication",
    "monitor",
    "alert",
]
GROUPS = ("group:sre", "group:dba", "group:support", "group:finance")
USERS = ("user:ann", "user:bob", "user:cy", "user:dee", "user:eve", "user:fay")
IDENTITIES = (*USERS, "everyone", "group:sre")
UIDS = 36


def _body(rng: random.Random, n: int, version: int) -> str:
    words = " ".join(rng.choice(WORDS) for _ in range(40))
    more = " ".join(rng.choice(WORDS) for _ in range(30))
    return f"# Page {n} v{version}\n\n{words}.\n\n## Details\n\n{more}.\n"


def record(rng: random.Random, n: int, version: int = 0) -> dict[str, Any]:
    acl = rng.sample([*GROUPS, *USERS, "everyone"], rng.choice((1, 1, 2)))
    target = (n * 7 + version + 1) % UIDS
    edges = [{"label": "xref", "to": f"h:{target}"}] if target != n else []
    if n % 4:
        edges.append({"label": "partOf", "to": f"h:{n - n % 4}", "position": n % 4})
    return {
        "uid": f"h:{n}",
        "type": ("page", "ticket", "runbook")[n % 3],
        "title": f"Page {n} {rng.choice(WORDS)} {rng.choice(WORDS)}",
        "body": _body(rng, n, version),
        "source": "history",
        "status": ("open", "closed")[version % 2],
        "created_at": f"2024-0{1 + n % 9}-1{n % 9}",
        "updated_at": f"2025-0{1 + version % 9}-0{1 + n % 9}",
        "acl": acl,
        "edges": edges,
    }


def _read(rng: random.Random) -> tuple[str, dict[str, Any]]:
    text = " ".join(rng.sample(WORDS, rng.choice((1, 2, 3))))
    uid = f"h:{rng.randrange(UIDS)}"
    kind = rng.choice(
        (
            "search",
            "search",
            "lexical",
            "vector",
            "sql",
            "graph",
            "content",
            "aggregate",
            "query_graph",
            "get_related",
            "docs_search",
        )
    )
    if kind in ("search", "docs_search"):
        return kind, {"query": text, "k": rng.choice((5, 10))}
    if kind in ("lexical", "vector"):
        return kind, {"query": text, "k": 8}
    if kind == "sql":
        return kind, {"filters": {"type": [rng.choice(("page", "ticket", "runbook"))]}, "k": 10}
    if kind == "graph":
        return kind, {"starts": [uid], "depth": 2, "k": 10}
    if kind == "content":
        return kind, {"uid": uid}
    if kind == "aggregate":
        return kind, {"metric": "count", "dimension": "type"}
    if kind == "get_related":
        return kind, {"uid": uid, "k": 6}
    return kind, {
        "query": "MATCH (n) WHERE n.type = $t RETURN n.uid ORDER BY n.uid",
        "params": {"t": "page"},
    }


def _change(store: KnowledgeStore, rng: random.Random, step: int, versions: dict[int, int]) -> str:
    """One change: most are publishes; some memberships (not publishes)."""
    kind = rng.choice(
        ("grant", "revoke", "member+", "member-", "delete", "reingest", "reingest", "update-acl")
    )
    uid_n = rng.randrange(UIDS)
    uid = f"h:{uid_n}"
    try:
        if kind == "grant":
            store.grant(uid, rng.choice([*GROUPS, *USERS]))
        elif kind == "revoke":
            acl = store.acl_show(uid)
            if acl:
                store.revoke(uid, rng.choice(acl))
        elif kind == "member+":
            store.add_member(rng.choice(GROUPS), rng.choice(USERS))
        elif kind == "member-":
            group = rng.choice(GROUPS)
            members = store.principal_show(group).members
            if members:
                store.remove_member(group, rng.choice(members))
        elif kind == "delete":
            store.delete([uid])
        elif kind == "reingest":
            picked = rng.sample(range(UIDS), 3)
            for n in picked:
                versions[n] = versions.get(n, 0) + 1
            store.ingest_records([record(rng, n, versions[n]) for n in picked])
        else:
            store.ingest_records([record(rng, uid_n, versions.get(uid_n, 0))])
    except Exception as exc:  # a change the state refuses (an unknown uid, a cycle): skip it
        from knowledge_store.errors import KnowledgeStoreError

        if not isinstance(exc, KnowledgeStoreError):
            raise
        return f"{kind} refused"
    return kind


@dataclass
class Played:
    reads: list[int] = field(default_factory=list)
    changes: Counter[str] = field(default_factory=Counter)
    publishes: int = 0


def run_history(
    store: KnowledgeStore, steps: int, reads_per_step: int, rng: random.Random
) -> Played:
    store.audit_settings(AuditSettingsRequest.parse({"enabled": "on", "query_text": "keep"}))
    store.ingest_records([record(rng, n) for n in range(UIDS)])
    store.load_memberships(
        [("group:sre", "user:ann"), ("group:dba", "group:sre"), ("group:support", "user:bob")]
    )
    played = Played()
    versions: dict[int, int] = {}
    for step in range(steps):
        played.changes[_change(store, rng, step, versions)] += 1
        for _ in range(reads_per_step):
            name, fields = _read(rng)
            who = rng.choice(IDENTITIES)
            caller = Caller(Identity(who), subject=f"test:{who}")
            try:
                perform(operation(name), store, caller, fields, surface="rest")
            except Exception as exc:  # a read of a uid the identity can't read: recorded too
                from knowledge_store.errors import KnowledgeStoreError

                if not isinstance(exc, KnowledgeStoreError):
                    raise
            played.reads.append(store.engine.audit.head().seq)
    with store.engine.history() as history:
        played.publishes = history.latest()
    return played


@dataclass
class Replayed:
    replayed: int = 0
    not_replayed: Counter[str] = field(default_factory=Counter)
    then_identical: int = 0
    then_same_answer: int = 0
    then_explained: int = 0
    now_identical: int = 0
    now_explained: int = 0
    unexplained: list[str] = field(default_factory=list)
    causes: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0


#: What a cause says, by the words that say it (the first that fits).
_CAUSES = (
    (" revoked from its ACL", "revoked"),
    (" granted ", "granted"),
    (" removed from ", "membership removed"),
    (" added to ", "membership added"),
    ("deleted ", "deleted"),
    ("added ", "added"),
    (" updated ", "updated"),
    ("readable and unchanged; moved", "moved by others"),
    ("the content changed", "publishes since"),
    ("the read now answers", "fails now"),
)


def _kind(cause: str) -> str:
    return next((kind for words, kind in _CAUSES if words in f" {cause}"), "other")


def replay_all(store: KnowledgeStore, seqs: list[int]) -> Replayed:
    out = Replayed()
    started = time.perf_counter()
    records = [parsed(r) for r in (store.engine.audit.record(s) for s in seqs) if r is not None]
    records.sort(key=lambda r: (r.publish or 0, r.seq))
    with Replayer(store) as replayer:
        for rec in records:
            got = replayer.replay(rec)
            if not got.replayed:
                out.not_replayed[(got.note or "").split(":")[0]] += 1
                if not got.explained:
                    out.unexplained.append(f"{rec.seq} {rec.operation}: {got.note} {got.access}")
                continue
            out.replayed += 1
            assert got.then is not None and got.now is not None
            out.then_identical += got.then.identical
            out.then_same_answer += bool(got.then.same_answer)
            out.then_explained += all(d.explained for d in got.then.differences)
            out.now_identical += got.now.identical
            out.now_explained += all(d.explained for d in got.now.differences)
            for d in got.now.differences:
                for cause in d.causes:
                    out.causes[_kind(cause)] += 1
            if not got.explained:
                out.unexplained.append(
                    f"{rec.seq} {rec.operation} {rec.identity} {rec.request}: principals"
                    f" {got.principals_match}; then {got.then.differences}; now"
                    f" {[d for d in got.now.differences if not d.explained]}; access"
                    f" {[a for a in got.access if not a.readable]}"
                )
    out.seconds = time.perf_counter() - started
    return out
