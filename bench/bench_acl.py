"""Permissions at 100k chunks: filtered vector recall by visible share, ACL overhead, revocation.

The store is the eval corpus's real chunks replicated to ~100k (real vectors +
small noise). Every entity gets an ACL of one of 1,000 groups plus "share"
groups that make 50%, 10%, 1% and 0.1% of the estate visible to an identity.
10,000 users sit in the 1,000 groups; `user:deep` reaches `group:s50` through
5 nested groups.

    .venv/bin/python bench/bench_acl.py [--chunks 100000] [--queries 200]
"""

from __future__ import annotations

import argparse
import random
import time

import numpy as np
from common import ROOT, build_replicated_store, percentiles, queries, table

SHARES = {"group:s50": 0.5, "group:s10": 0.1, "group:s1": 0.01, "group:s01": 0.001}


def acl_for(copy: int, i: int) -> list[str]:
    rng = random.Random(copy * 1_000_003 + i)
    r = rng.random()
    acl = [f"group:g{rng.randrange(1000)}"]
    acl += [g for g, share in SHARES.items() if r < share]
    return acl


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()

    from knowledge_store.engines.embedded.engine import EmbeddedEngine
    from knowledge_store.model import Filters, Identity
    from knowledge_store.store import KnowledgeStore

    path = ROOT / ".ks" / f"bench-acl-{args.chunks}"
    print(f"store {path}")
    build_replicated_store(path, args.chunks, acl=acl_for)
    store = KnowledgeStore.open(path)
    engine = store.engine
    assert isinstance(engine, EmbeddedEngine)

    pairs = [(f"group:g{j % 1000}", f"user:u{j}") for j in range(10_000)]
    pairs += [(f"group:h{n // 10}", f"group:g{n}") for n in range(1000)]
    pairs += [
        ("group:n1", "user:deep"),
        ("group:n2", "group:n1"),
        ("group:n3", "group:n2"),
        ("group:n4", "group:n3"),
        ("group:n5", "group:n4"),
        ("group:s50", "group:n5"),
    ]
    store.load_memberships(pairs)
    texts = [t for _, t in queries(args.queries)]
    vectors = [store.embedder.embed_query(t) for t in texts]
    total = store.stats().chunks
    print(f"{total:,} chunks, {len(texts)} queries")

    # 1. filtered vector recall@10 vs exact, by visible share
    with engine.catalog.read() as conn:
        all_ids, matrix = engine.catalog.chunk_vectors(conn, engine.catalog.all_chunk_ids(conn))
    row_of = {int(c): i for i, c in enumerate(all_ids)}
    rows = []
    for group, share in SHARES.items():
        who = Identity(group)
        with engine.catalog.read() as conn:
            sets = engine.catalog.visible_acl_sets(conn, group)
            visible = engine.catalog.visible_chunk_ids(conn, sets, Filters())
        sub = matrix[[row_of[int(c)] for c in visible]]
        recalls, times, strategies = [], [], set()
        for q in vectors:
            started = time.perf_counter()
            answer = engine.vector(who, q, 10, Filters())
            times.append(time.perf_counter() - started)
            strategies.add(answer.vector.strategy if answer.vector else "?")
            truth = visible[np.argsort(-(sub @ q))[:10]]
            got = {h.chunk_id for h in answer.hits}
            recalls.append(len(got & {int(t) for t in truth}) / max(1, min(10, len(visible))))
        rows.append(
            {
                "identity": group,
                "target share": f"{share:.1%}",
                "visible chunks": len(visible),
                "strategy": ",".join(sorted(strategies)),
                "recall@10": float(np.mean(recalls)),
                "p50 ms": percentiles(times)["p50"],
                "p95 ms": percentiles(times)["p95"],
            }
        )
    table(rows, "filtered vector search vs exact (recall@10)")

    # 2. ACL overhead: user:deep (5 nested groups, 1,000 groups, 10,000 users) vs no filter
    deep = Identity("user:deep")

    def no_acl_lexical(text: str) -> None:
        found = engine.lexical_index.search(text, 20, acl_sets=None, filters=Filters())
        with engine.catalog.read() as conn:
            engine.catalog.checked_chunks(conn, [c for c, _, _ in found], None, Filters())

    def no_acl_vector(q: np.ndarray) -> None:
        dense = engine.dense
        assert dense is not None
        ids, _, _ = dense.search(q, 20, allowed=None)
        with engine.catalog.read() as conn:
            engine.catalog.checked_chunks(conn, [int(i) for i in ids], None, Filters())

    def measure(fn: object, inputs: list[object]) -> float:
        samples = []
        for x in inputs:
            started = time.perf_counter()
            fn(x)  # type: ignore[operator]
            samples.append(time.perf_counter() - started)
        return percentiles(samples)["p50"]

    lex_acl = measure(lambda t: engine.lexical(deep, t, 10, Filters()), texts)
    lex_none = measure(no_acl_lexical, texts)
    vec_acl = measure(lambda q: engine.vector(deep, q, 10, Filters()), vectors)
    vec_none = measure(no_acl_vector, vectors)
    everyone_all = measure(lambda q: engine.vector(Identity("everyone"), q, 10, Filters()), vectors)
    fused_acl = measure(lambda t: store.search(t, identity=deep, k=10), texts[:100])
    fused_everyone = measure(lambda t: store.search(t, identity="everyone", k=10), texts[:100])
    table(
        [
            {
                "primitive": "lexical",
                "user:deep p50 ms": lex_acl,
                "no ACL p50 ms": lex_none,
                "ratio": lex_acl / lex_none,
            },
            {
                "primitive": "vector",
                "user:deep p50 ms": vec_acl,
                "no ACL p50 ms": vec_none,
                "ratio": vec_acl / vec_none,
            },
            {
                "primitive": "fused (incl. embedding)",
                "user:deep p50 ms": fused_acl,
                "no ACL p50 ms": fused_everyone,
                "ratio": fused_acl / fused_everyone,
            },
        ],
        "ACL overhead at 50% visible (no-ACL = the index searched without a filter;"
        f" fused baseline = everyone; everyone vector p50 {everyone_all:.2f} ms)",
    )

    # 3. revocation: the very next query no longer sees the entity
    target = engine.vector(deep, vectors[0], 1, Filters()).hits[0]
    started = time.perf_counter()
    store.remove_member("group:s50", "group:n5")
    removed = time.perf_counter()
    after = engine.vector(deep, vectors[0], 50, Filters())
    answered = time.perf_counter()
    assert target.uid not in {h.uid for h in after.hits}, "revocation did not hold"
    print(
        f"revocation: remove-member {1000 * (removed - started):.1f} ms; the next query"
        f" ({1000 * (answered - removed):.1f} ms later) no longer sees {target.uid}"
    )
    store.add_member("group:s50", "group:n5")
    store.close()


if __name__ == "__main__":
    main()
