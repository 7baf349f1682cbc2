"""Replay fidelity and history growth (issue 29's figures), on each engine.

**Fidelity.** A scripted history (tests/audit_history.py): 36 entities with mixed ACLs,
then ``--steps`` changes — grants, revocations, membership additions and removals,
deletions, re-ingests of changed records — each followed by ``--reads`` reads of every
kind (search, docs_search, lexical, vector, sql, graph, content, aggregate, query_graph,
get_related) by users, groups and everyone, made through the operation table. Then every
recorded read is replayed (``ks audit replay``): its content root rebuilt in a replica
under the memberships of its moment and compared with the record (``then``), the same
read now compared with the record (``now``). Counts: identical, byte-identical answers,
explained, and **unexplained** (the figure that must be 0).

**Growth.** ``--entities`` pages of the postgres-docs corpus (real bodies), then each
updated once (its body changed: a content update keeps the old version, its chunks and
vectors) and then granted to a group once each (an ACL-only publish keeps the old
version's record, not its chunks): history bytes per 1,000 updates of each kind — the rows' own bytes, and
what the catalog grew (embedded: pages; PostgreSQL: the tables' total relation size).

    .venv/bin/python bench/bench_replay.py [--engines embedded,postgres] [--steps 70] [--reads 8] [--entities 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import need_eval

from knowledge_store.store import KnowledgeStore
from tests.audit_history import replay_all, run_history


def _location(engine: str, tmp: Path, name: str) -> str:
    if engine == "embedded":
        return str(tmp / name)
    from tests import postgres_support

    return postgres_support.store_url(_DATABASE[0])


_DATABASE: list[str] = []


def fidelity(engine: str, tmp: Path, steps: int, reads: int, seed: int) -> None:
    with KnowledgeStore.open(_location(engine, tmp, "fidelity"), embedder="hash:384") as store:
        started = time.perf_counter()
        played = run_history(store, steps, reads, random.Random(seed))
        took = time.perf_counter() - started
        got = replay_all(store, played.reads)
        print(
            f"\n[{engine}] scripted history: {played.publishes} publishes, changes"
            f" {dict(played.changes)}, {len(played.reads)} reads recorded ({took:.0f} s)"
        )
        replayed = got.replayed
        print(
            f"  replayed {replayed} reads in {got.seconds:.0f} s"
            f" ({got.seconds / max(replayed, 1) * 1000:.0f} ms each; not replayed:"
            f" {dict(got.not_replayed)})"
        )
        print(
            f"  then (record vs its root rebuilt): identical {got.then_identical}/{replayed},"
            f" byte-identical answers {got.then_same_answer}/{replayed},"
            f" differences all explained in {got.then_explained}/{replayed}"
        )
        print(
            f"  now (record vs the same read now): identical {got.now_identical}/{replayed},"
            f" differences all explained in {got.now_explained}/{replayed}"
        )
        print(f"  causes named: {dict(got.causes.most_common(8))}")
        print(f"  UNEXPLAINED: {len(got.unexplained)}")
        for line in got.unexplained[:10]:
            print("   ", line[:600])


def _history_bytes(store: KnowledgeStore) -> dict[str, int]:
    sql = {
        "entity_history": "SELECT coalesce(sum(length(record) + length(chunks) + length(uid)"
        " + length(content_hash) + 16), 0) FROM entity_history",
        "chunk_history": "SELECT coalesce(sum(length(text) + length(heading) + length(uid)"
        " + coalesce(length(embedding), 0) + coalesce(length(location), 0) + 32), 0)"
        " FROM chunk_history",
    }
    out = {}
    with store.engine.history() as history:
        conn = history._conn
        for table, statement in sql.items():
            (n,) = conn.execute(statement).fetchone()
            out[table] = int(n)
    return out


def _disk(store: KnowledgeStore) -> int:
    engine = store.engine
    if engine.name == "embedded":
        import sqlite3

        path = engine.path / "catalog.sqlite"  # type: ignore[attr-defined]
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            (pages,) = conn.execute("PRAGMA page_count").fetchone()
            (free,) = conn.execute("PRAGMA freelist_count").fetchone()
            (size,) = conn.execute("PRAGMA page_size").fetchone()
        return int(pages - free) * int(size)
    with engine.db.read() as conn:  # type: ignore[attr-defined]
        (n,) = conn.execute(
            "SELECT pg_total_relation_size('entity_history') + pg_total_relation_size('chunk_history')"
        ).fetchone()
    return int(n)


def growth(engine: str, tmp: Path, entities: int) -> None:
    records = []
    with (need_eval() / "corpus.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            record = json.loads(line)
            if record.get("type") != "codeSample" and len(record.get("body", "")) > 200:
                records.append(record)
            if len(records) == entities:
                break
    for r in records:
        r["acl"] = ["everyone"]
        r.pop("edges", None)
    with KnowledgeStore.open(_location(engine, tmp, "growth"), embedder="hash:384") as store:
        store.ingest_records(records)
        chunks = store.stats().chunks
        base_bytes, base_disk = _history_bytes(store), _disk(store)
        changed = [dict(r, body=r["body"] + "\n\nRevised.") for r in records]
        for start in range(0, len(changed), 100):
            store.ingest_records(changed[start : start + 100])
        after_update, disk_update = _history_bytes(store), _disk(store)
        for r in records:  # a grant: an ACL-only publish, the chunks kept live
            store.grant(r["uid"], "group:readers")
        after_acl, disk_acl = _history_bytes(store), _disk(store)
    k = 1000 / len(records)

    def mib(n: float) -> str:
        return f"{n / 2**20:.2f} MiB"

    content = sum(after_update.values()) - sum(base_bytes.values())
    acl = sum(after_acl.values()) - sum(after_update.values())
    print(
        f"\n[{engine}] history growth, {len(records)} postgres-docs pages ({chunks} chunks,"
        f" {chunks / len(records):.1f} a page; 384-dimension vectors):"
    )
    print(
        f"  per 1,000 content updates: {mib(content * k)} of rows"
        f" (versions {mib((after_update['entity_history'] - base_bytes['entity_history']) * k)},"
        f" chunks with vectors {mib((after_update['chunk_history'] - base_bytes['chunk_history']) * k)});"
        f" the catalog grew {mib((disk_update - base_disk) * k)}"
    )
    print(
        f"  per 1,000 ACL-only updates: {mib(acl * k)} of rows (the old version's record; its"
        f" chunks stay live); the catalog grew {mib((disk_acl - disk_update) * k)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engines", default="embedded,postgres")
    parser.add_argument("--steps", type=int, default=70)
    parser.add_argument("--reads", type=int, default=8)
    parser.add_argument("--entities", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=29)
    parser.add_argument("--skip-growth", action="store_true")
    args = parser.parse_args()
    print(f"load: {os.getloadavg()[0]:.2f} (1 min) on {os.cpu_count()} cores", flush=True)
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    try:
        if "postgres" in engines:
            os.environ.setdefault("KS_TEST_RUN", "bench-replay")
            from tests import postgres_support

            _DATABASE.append(postgres_support.fresh_database("replay"))
        with tempfile.TemporaryDirectory(prefix="ks-bench-replay-") as root:
            for engine in engines:
                fidelity(engine, Path(root), args.steps, args.reads, args.seed)
                if not args.skip_growth:
                    growth(engine, Path(root), args.entities)
    finally:
        if _DATABASE:
            from tests import postgres_support

            postgres_support.stop_server()
    print(f"\nload after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
