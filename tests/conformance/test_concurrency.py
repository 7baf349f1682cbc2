"""Several writers and readers at once, on both engines.

* no deadlock: every thread finishes within a bound;
* every reader sees a consistent content root: the entities an answer lists are
  exactly those the publish log says existed at the root the answer reports
  (replayed afterwards from what each writer published, in publish order);
* no lost update: grants by every writer on one shared entity all survive, and
  every entity a writer added and did not delete is there at the end;
* an ingest reports what its publish did (counted under the write lock), however
  the uids it read before taking the lock changed meanwhile.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest

from knowledge_store.engines.base import PreparedEntity
from knowledge_store.engines.sql.publish import EMPTY_ROOT
from knowledge_store.model import Entity
from knowledge_store.store import KnowledgeStore

WRITERS = 3
READERS = 3
PUBLISHES_PER_WRITER = 12
BOUND_S = 90.0


def _entity(uid: str, *, acl: tuple[str, ...] = ("everyone",)) -> PreparedEntity:
    # chunkless: the test is about publishes and snapshots, not ranking
    body = f"entity {uid}"
    return PreparedEntity(Entity(uid, "page", uid, body, acl=acl), (), np.zeros((0, 1), np.float32))


@dataclass
class Log:
    lock: threading.Lock = field(default_factory=threading.Lock)
    changes: dict[str, tuple[set[str], set[str]]] = field(default_factory=dict)  # root → (+, -)
    observed: list[tuple[str, frozenset[str]]] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)


def _writer(store: KnowledgeStore, n: int, log: Log, shared: str) -> Callable[[], None]:
    def run() -> None:
        rng = random.Random(n)
        mine: list[str] = []
        try:
            for i in range(PUBLISHES_PER_WRITER):
                choice = rng.random()
                if i % 4 == 3:
                    root = store.grant(
                        shared, f"user:w{n}-{i}"
                    ).content_root  # read-modify-write of one ACL
                    added: set[str] = set()
                    removed: set[str] = set()
                elif choice < 0.25 and mine:
                    gone = mine.pop(rng.randrange(len(mine)))
                    root = store.engine.writer.publish([], [gone], kind="delete").root
                    added, removed = set(), {gone}
                else:
                    uids = [f"w{n}:{i}:{j}" for j in range(rng.randint(1, 3))]
                    root = store.engine.writer.publish(
                        [_entity(u) for u in uids], [], kind="ingest"
                    ).root
                    mine.extend(uids)
                    added, removed = set(uids), set()
                with log.lock:
                    log.changes[root] = (added, removed)
        except BaseException as exc:  # reported by the test
            log.errors.append(exc)

    return run


def _reader(store: KnowledgeStore, log: Log, stop: threading.Event) -> Callable[[], None]:
    def run() -> None:
        try:
            while not stop.is_set():
                answer = store.sql(k=1000)
                with log.lock:
                    log.observed.append(
                        (answer.content_root, frozenset(h.uid for h in answer.hits))
                    )
        except BaseException as exc:
            log.errors.append(exc)

    return run


def _roots_in_order(store: KnowledgeStore) -> list[str]:
    """The publish chain, oldest first, followed from the latest root through parents."""
    engine = store.engine
    if hasattr(engine, "catalog"):
        rows = engine.catalog.execute("SELECT root, parent FROM publishes ORDER BY id")
    else:
        with engine.db.read() as conn:  # type: ignore[attr-defined]
            rows = conn.execute("SELECT root, parent FROM publishes ORDER BY id").fetchall()
    chain = [str(r[0]) for r in rows]
    parents = [str(r[1]) for r in rows]
    assert parents == [EMPTY_ROOT, *chain[:-1]], "every publish's parent is the one before it"
    return chain


def test_writers_and_readers_at_once(store: KnowledgeStore) -> None:
    shared = "shared"
    base = store.engine.writer.publish([_entity(shared)], [], kind="ingest").root
    log = Log()
    log.changes[base] = ({shared}, set())
    stop = threading.Event()
    writers = [threading.Thread(target=_writer(store, n, log, shared)) for n in range(WRITERS)]
    readers = [threading.Thread(target=_reader(store, log, stop)) for _ in range(READERS)]
    started = time.monotonic()
    for t in readers + writers:
        t.start()
    for t in writers:
        t.join(timeout=max(0.1, BOUND_S - (time.monotonic() - started)))
    stop.set()
    for t in readers:
        t.join(timeout=10)
    assert not any(t.is_alive() for t in writers + readers), "a thread is stuck (deadlock?)"
    assert not log.errors, log.errors

    # replay the publish log: the entity set at every root
    expected: dict[str, frozenset[str]] = {EMPTY_ROOT: frozenset()}
    current: set[str] = set()
    chain = _roots_in_order(store)
    assert len(chain) == 1 + WRITERS * PUBLISHES_PER_WRITER
    for root in chain:
        added, removed = log.changes[root]
        current = (current | added) - removed
        expected[root] = frozenset(current)
    assert log.observed, "the readers read nothing"
    seen_roots = set()
    for root, uids in log.observed:
        assert uids == expected[root], f"an answer at {root[:12]} lists another snapshot's entities"
        seen_roots.add(root)
    assert len(seen_roots) > 1, "the readers never saw a publish land"

    # no lost update
    acl = set(store.acl_show(shared))
    assert {
        f"user:w{n}-{i}" for n in range(WRITERS) for i in range(3, PUBLISHES_PER_WRITER, 4)
    } <= acl
    final = {h.uid for h in store.sql(k=1000).hits}
    assert final == set(expected[chain[-1]])


@pytest.mark.parametrize("engine", ["postgres"], indirect=True)  # the embedded: one writer lock
def test_a_long_write_never_blocks_a_read(store: KnowledgeStore) -> None:
    """A reader answers at the old root while a big publish is still uncommitted."""
    store.engine.writer.publish([_entity("before")], [], kind="ingest")
    old = store.content_root()
    release = threading.Event()
    inside = threading.Event()
    engine = store.engine

    def slow_publish() -> None:
        with engine.db.write() as conn:  # type: ignore[attr-defined]
            from knowledge_store.engines.sql.dialect import POSTGRES
            from knowledge_store.engines.sql.write import Batch, publish_batch

            chunks = engine.chunk_store  # type: ignore[attr-defined]
            publish_batch(conn, POSTGRES, chunks, Batch([_entity("during")]))
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=slow_publish)
    thread.start()
    assert inside.wait(10)
    started = time.monotonic()
    answer = store.sql(k=10)
    assert time.monotonic() - started < 2.0
    assert answer.content_root == old and {h.uid for h in answer.hits} == {"before"}
    release.set()
    thread.join(10)
    assert {h.uid for h in store.sql(k=10).hits} == {
        "before",
        "during",
    }


def _records(n: int, body: str = "kiwi") -> list[dict[str, object]]:
    return [
        {"uid": f"n:{i}", "type": "page", "title": f"N {i}", "body": f"{body} {i}", "acl": []}
        for i in range(n)
    ]


def test_an_ingest_reports_what_its_publish_did_not_what_it_read_before(
    store: KnowledgeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer published these uids between this ingest's read and its publish."""
    store.ingest_records(_records(40))
    monkeypatch.setattr(store.engine.writer, "content_hashes", lambda uids: {})  # the stale read
    changed = store.ingest_records(_records(40, "kiwi changed"))
    assert (changed.added, changed.updated, changed.unchanged) == (0, 40, 0)
    again = store.ingest_records(_records(40, "kiwi changed"))
    assert (again.added, again.updated, again.unchanged) == (0, 0, 40)
    assert again.content_root == changed.content_root  # nothing was rewritten
    monkeypatch.undo()
    assert store.stats().entities == 40


def test_concurrent_ingests_of_overlapping_uids_count_each_uid_once(
    store: KnowledgeStore,
) -> None:
    batches = [
        [r for r in _records(80, "kiwi overlap") if lo <= int(str(r["uid"])[2:]) < lo + 60]
        for lo in (0, 20)
    ]
    store.ingest_records(_records(1, "warm up the model"))
    reports: list[object] = []
    errors: list[BaseException] = []

    def run(batch: list[dict[str, object]]) -> None:
        try:
            reports.append(store.ingest_records(batch))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(batch,)) for batch in batches]
    for t in threads:
        t.start()
    for t in threads:
        t.join(BOUND_S)
    assert not errors, errors
    assert sum(r.added for r in reports) == 79  # type: ignore[attr-defined]  # n:0 was there
    assert sum(r.added + r.updated + r.unchanged for r in reports) == 120  # type: ignore[attr-defined]
    assert store.stats().entities == 80
