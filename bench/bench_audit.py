"""What the audit log costs a request, and what it takes on disk (issue 29's figures).

* **Overhead per request**: fused search through the operation table (``perform``, what
  the CLI, REST, GraphQL and MCP run), audit off / on / on with fsync, interleaved query
  by query in one run (each query once per side, the sides' order rotating): p50/p95 ms,
  and the difference per query. Then ``--threads`` threads at once, each side for
  ``--seconds``: requests per second (group commits share an append).
* **Bytes per audited read**: the records' canonical JSON per record, and the growth of
  ``audit.sqlite`` (pages: the row, its indexes, the names table) per record.

The store is the postgres-docs eval corpus ingested with the hashing embedder (the audit
cost does not depend on the model; a real model's query embedding adds ~2-4 ms to every
search, so the relative overhead here is an upper bound). ``--engine postgres``: the same
corpus in a fresh database of the test fixtures' local server (pgserver), which is stopped
at the end; the log's bytes are then its tables' total relation size.

    .venv/bin/python bench/bench_audit.py [--engine embedded|postgres] [--store DIR] [--queries 300] [--threads 8] [--seconds 10]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import need_eval, percentiles, queries

from knowledge_store.model import Identity
from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.auth import Caller
from knowledge_store.surfaces.operations import operation, perform

SIDES = ("off", "on", "fsync")


def _settings(store: KnowledgeStore, side: str) -> None:
    current = store.auditor.settings()
    store.auditor.save_settings(
        current.model_copy(update={"enabled": side != "off", "fsync": side == "fsync"})
    )


def _store(location: str) -> str:
    corpus = need_eval() / "corpus.jsonl"
    with KnowledgeStore.open(location, embedder="hash:384") as store:
        if store.stats().entities == 0:
            print(f"building {location} from the eval corpus (hash:384 vectors)", flush=True)
            store.ingest([corpus])
        print(f"store: {store.stats().entities:,} entities, {store.stats().chunks:,} chunks")
    return location


def _postgres_store() -> str:
    """A fresh database on the test fixtures' local server (started here, stopped by main)."""
    os.environ.setdefault("KS_TEST_RUN", "bench-audit")
    from tests import postgres_support

    return postgres_support.store_url(postgres_support.fresh_database("audit"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", choices=("embedded", "postgres"), default="embedded")
    parser.add_argument("--store", type=Path, default=Path(".ks/bench-audit"))
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    if args.engine == "embedded":
        measure(_store(str(args.store)), args)
        return
    from tests import postgres_support

    try:
        measure(_store(_postgres_store()), args)
    finally:
        postgres_support.stop_server()


def measure(location: str, args: argparse.Namespace) -> None:
    texts = [text for _, text in queries(args.queries)]
    op = operation("search")
    caller = Caller(Identity("everyone"), subject="os:bench")
    print(f"load: {os.getloadavg()[0]:.2f} (1 min) on {os.cpu_count()} cores", flush=True)

    with KnowledgeStore.open(location, embedder="hash:384") as store:

        def run(text: str) -> None:
            perform(op, store, caller, {"query": text, "k": 10}, surface="bench")

        for text in texts[:30]:  # warm: caches, the log's file
            run(text)
        # -- latency, interleaved --------------------------------------------------------------
        took: dict[str, list[float]] = {side: [] for side in SIDES}
        cpu: dict[str, float] = dict.fromkeys(SIDES, 0.0)
        for i, text in enumerate(texts):
            order = SIDES[i % 3 :] + SIDES[: i % 3]
            for side in order:
                _settings(store, side)
                started, used = time.perf_counter(), time.process_time()
                run(text)
                took[side].append(time.perf_counter() - started)
                cpu[side] += time.process_time() - used
        print(f"\nfused search through perform, {len(texts)} queries, ms:")
        for side in SIDES:
            p = percentiles(took[side])
            print(f"  audit {side:>5}: p50 {p['p50']:.3f}  p95 {p['p95']:.3f}")
        for side in SIDES:
            print(f"  audit {side:>5}: CPU {cpu[side] / len(texts) * 1000:.3f} ms a request")
        for side in ("on", "fsync"):
            diffs = sorted(b - a for a, b in zip(took["off"], took[side], strict=True))
            print(
                f"  {side} − off per query: median {statistics.median(diffs) * 1e6:.0f} µs,"
                f" p95 {diffs[int(len(diffs) * 0.95)] * 1e6:.0f} µs"
            )
        # -- throughput under threads -----------------------------------------------------------
        print(f"\n{args.threads} threads × {args.seconds:.0f} s each side, requests/s:")
        for side in SIDES:
            _settings(store, side)
            done = [0] * args.threads
            stop = time.monotonic() + args.seconds

            def work(slot: int, stop: float = stop, done: list[int] = done) -> None:
                rng = random.Random(slot)
                while time.monotonic() < stop:
                    run(rng.choice(texts))
                    done[slot] += 1

            threads = [threading.Thread(target=work, args=(n,)) for n in range(args.threads)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            print(f"  audit {side:>5}: {sum(done) / args.seconds:.1f} req/s")
        # -- bytes --------------------------------------------------------------------------------
        _settings(store, "on")
        records0, text0 = store.engine.audit.bytes_used()
        size0 = store.engine.audit.disk_bytes()
        n = 500
        for i in range(n):
            run(texts[i % len(texts)])
        records1, text1 = store.engine.audit.bytes_used()
        size1 = store.engine.audit.disk_bytes()
        print(
            f"\nbytes per audited read (k=10, query text kept): {(text1 - text0) / (records1 - records0):.0f}"
            f" of record JSON; the log's storage grew {(size1 - size0) / n:.0f} bytes a record"
            f" (with its indexes and the names table; {records1:,} records in all)"
        )
        _settings(store, "on")
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
