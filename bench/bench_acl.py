"""Permissions at 100k chunks: filtered vector recall by visible share, ACL overhead, revocation.

The store is the eval corpus's real chunks replicated to ~100k (real vectors +
small noise). Every entity gets an ACL of one of 1,000 groups plus "share"
groups that make 50%, 10%, 1% and 0.1% of the estate visible to an identity.
10,000 users sit in the 1,000 groups; `user:deep` reaches `group:s50` through
5 nested groups (and user:deep10/1/01 the other share groups likewise).

    .venv/bin/python bench/bench_acl.py [--chunks 100000] [--queries 200]
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from common import ROOT, build_replicated_store, percentiles, queries, table

from knowledge_store.engines.embedded.reader import EmbeddedReader
from knowledge_store.engines.sql.dialect import SQLITE
from knowledge_store.engines.sql.filters import filter_clause
from knowledge_store.retrieval.reader import StoreReader

SHARES = {"group:s50": 0.5, "group:s10": 0.1, "group:s1": 0.01, "group:s01": 0.001}
#: The identity measured at each share, 5 nested groups below its share group.
DEEP = {
    "group:s50": "user:deep",
    "group:s10": "user:deep10",
    "group:s1": "user:deep1",
    "group:s01": "user:deep01",
}


def acl_for(copy: int, i: int) -> list[str]:
    rng = random.Random(copy * 1_000_003 + i)
    r = rng.random()
    acl = [f"group:g{rng.randrange(1000)}"]
    acl += [g for g, share in SHARES.items() if r < share]
    return acl


class PrecomputedEmbedder:
    """The query vectors computed once: fused latency without the model."""

    def __init__(self, vectors: dict[str, np.ndarray]) -> None:
        self.vectors = vectors

    def embed_query(self, text: str) -> np.ndarray:
        return self.vectors[text]


class NoAclReader(EmbeddedReader):
    """The embedded reader's lexical and vector primitives with the ACL taken out.

    The baseline of the overhead figure only: the same snapshot, index query
    (k + 10 candidates), final catalog check and hydration as the reader's own,
    minus the ACL clause in Tantivy, the visible-row bitmap and the ACL in the
    final check. The identity is still expanded when the reader opens.
    """

    def _checked(self, ids: Any, filters: Any) -> dict[int, str]:
        if not ids:
            return {}
        where, params = filter_clause(filters, SQLITE)
        params["ids"] = SQLITE.bind_array([int(c) for c in ids])
        rows = self._run(
            "SELECT c.id, e.uid FROM chunks AS c CROSS JOIN entities AS e ON e.id = c.entity"
            f" WHERE c.id IN (SELECT value FROM json_each(:ids)) AND {where}",
            params,
        )
        return {int(r[0]): str(r[1]) for r in rows}

    def lexical(self, text: str, k: int, filters: Any, *, hydrate: bool = False) -> Any:
        found = self._engine.lexical_index.search_ids(
            text, k + 10, principals=None, filters=filters, pinned=self._lexical
        )
        return self._checked_ranked(found, k, filters, hydrate)

    def vector(self, vector: Any, k: int, filters: Any, *, hydrate: bool = False) -> Any:
        assert self._dense is not None
        ids, scores, info = self._dense.search(vector, k + 10, allowed=None)
        found = list(zip(ids.tolist(), scores.tolist(), strict=True))
        return self._checked_ranked(found, k, filters, hydrate, info)

    def _checked_ranked(
        self, found: list[tuple[int, float]], k: int, filters: Any, hydrate: bool, info: Any = None
    ) -> Any:
        started = time.perf_counter()
        checked = self._checked([c for c, _ in found], filters)
        dropped = sum(1 for c, _ in found if c not in checked)
        return self._ranked(
            found,
            checked,
            k,
            {},
            started,
            hydrate=hydrate,
            dropped=dropped,
            uids=checked,
            vector=info,
        )


@contextmanager
def _acl_reader(side: Any, who: Any) -> Iterator[StoreReader]:
    """The engine's own reader (with the ACL) on ``side``'s embedder."""
    with side.store.engine.reader(who) as reader:
        yield StoreReader(reader, lambda: side.embedder)


class NoAclStore:
    """A store whose readers are :class:`NoAclReader` (lexical, vector, fused search)."""

    def __init__(self, store: Any, embedder: Any) -> None:
        self.store = store
        self.embedder = embedder

    @contextmanager
    def reader(self, who: Any) -> Iterator[StoreReader]:
        engine = self.store.engine
        conn = engine.catalog.borrow()
        try:
            publish, root, view = engine._open_snapshot(conn)
            reader = NoAclReader(engine, conn, who, publish, root, view)
            yield StoreReader(reader, lambda: self.embedder)
        finally:
            engine.catalog.give(conn)


def crossover(engine: Any, all_ids: np.ndarray, matrix: np.ndarray, vectors: list[Any]) -> None:
    """Filtered HNSW vs an exact scan per visible share: where ``exact_share`` belongs.

    Random visible sets; the bitmap is prepared once per set as the engine does.
    """
    import math

    dense = engine.dense.generation()
    owner = engine.dense
    rng = np.random.default_rng(3)
    rows = []
    for share in (0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.3, 0.5):
        pick = np.sort(rng.choice(len(all_ids), int(share * len(all_ids)), replace=False))
        allowed, sub = np.asarray(all_ids)[pick], matrix[pick]
        selection = dense._select(allowed)
        ef = min(owner.ef_max, max(owner.ef_search, math.ceil(owner.filtered_ef / share)))
        bitmap = selection.bitmap
        if bitmap is None:  # the planner scans this share exactly; build one anyway
            mask = np.zeros(len(dense.live), dtype=bool)
            mask[selection.rows] = True
            bitmap = np.packbits(mask, bitorder="little")
        recalls, hnsw_s, exact_s = [], [], []
        for q in vectors:
            q2 = q.reshape(1, -1)
            with owner.lock:
                started = time.perf_counter()
                ids, _, _ = dense._hnsw(q2, 10, bitmap, ef, "hnsw-filtered")
                hnsw_s.append(time.perf_counter() - started)
                started = time.perf_counter()
                dense._exact(q2, 10, selection.rows)
                exact_s.append(time.perf_counter() - started)
            truth = set(allowed[np.argsort(-(sub @ q))[:10]].tolist())
            recalls.append(len(truth & set(ids.tolist())) / 10)
        rows.append(
            {
                "share": f"{share:.0%}",
                "efSearch": ef,
                "hnsw-filtered p50 ms": percentiles(hnsw_s)["p50"],
                "recall@10": float(np.mean(recalls)),
                "exact p50 ms": percentiles(exact_s)["p50"],
                "planner": "exact" if selection.bitmap is None else "hnsw-filtered",
            }
        )
    table(rows, f"filtered HNSW vs exact scan (exact_share = {owner.exact_share})")


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
    # One identity per share, each 5 nested groups deep: user:deep reaches group:s50.
    for group, user in DEEP.items():
        tag = group.removeprefix("group:")
        chain = [user, *(f"group:n{i}-{tag}" for i in range(1, 6)), group]
        pairs += list(zip(chain[1:], chain[:-1], strict=True))
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
        with engine.reader(who) as reader:
            visible = reader.visible_chunk_ids(Filters())
        sub = matrix[[row_of[int(c)] for c in visible]]
        recalls, times, strategies = [], [], set()
        for q in vectors:
            started = time.perf_counter()
            answer = store.vector(q, identity=who, k=10)
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

    crossover(engine, all_ids, matrix, vectors)

    # 2. ACL overhead: identities 5 nested groups deep (1,000 groups, 10,000 users) vs no filter
    cached = {t: v for t, v in zip(texts, vectors, strict=True)}

    def measure(fn: Callable[[Any], object], inputs: list[Any]) -> float:
        for x in inputs[:20]:
            fn(x)  # warm caches alike for both sides
        samples = []
        for x in inputs:
            started = time.perf_counter()
            fn(x)
            samples.append(time.perf_counter() - started)
        return percentiles(samples)["p50"]

    def on(side: Any, method: str, who: Identity, acl: bool) -> Callable[[Any], object]:
        def call(x: Any) -> object:
            with _acl_reader(side, who) if acl else side.reader(who) as r:
                return getattr(r, method)(x, k=10)

        return call

    model = NoAclStore(store, store.embedder)
    precomputed = NoAclStore(store, PrecomputedEmbedder(cached))
    measured = [
        ("lexical", model, "lexical", texts),
        ("vector", model, "vector", vectors),
        ("fused, query embedded", model, "search", texts),
        ("fused, embedding excluded", precomputed, "search", texts),
    ]
    rows = []
    for group, user in DEEP.items():
        who = Identity(user)
        for name, side, method, inputs in measured:
            acl_fn = on(side, method, who, acl=True)
            none_fn = on(side, method, who, acl=False)
            # alternate the two sides so that machine load falls on both alike
            with_acl, without = [], []
            for _ in range(3):
                with_acl.append(measure(acl_fn, inputs))
                without.append(measure(none_fn, inputs))
            a, n = min(with_acl), min(without)
            rows.append(
                {
                    "identity": f"{user} → {group}",
                    "visible": f"{SHARES[group]:.1%}",
                    "primitive": name,
                    "with ACL p50 ms": a,
                    "no ACL p50 ms": n,
                    "ratio": a / n,
                }
            )
    table(
        rows,
        "ACL overhead, p50 (best of 3 alternating rounds). No ACL = the same reader code"
        " path with the ACL taken out (no ACL clause, no visible-row bitmap, no ACL in the"
        " final check); in fused search the graph step and hydration keep theirs.",
    )
    deep = Identity("user:deep")
    acl_ms = store.lexical(texts[0], identity=deep, explain=True).explain
    print(
        f"user:deep holds {acl_ms['held_principals']} principals; one lexical query: {acl_ms['ms']}"
    )

    # 3. revocation: the very next query no longer sees the entity
    target = store.vector(vectors[0], identity=deep, k=1).hits[0]
    started = time.perf_counter()
    store.remove_member("group:s50", "group:n5-s50")
    removed = time.perf_counter()
    after = store.vector(vectors[0], identity=deep, k=50)
    answered = time.perf_counter()
    assert target.uid not in {h.uid for h in after.hits}, "revocation did not hold"
    print(
        f"revocation: remove-member {1000 * (removed - started):.1f} ms; the next query"
        f" ({1000 * (answered - removed):.1f} ms later) no longer sees {target.uid}"
    )
    store.add_member("group:s50", "group:n5-s50")
    store.close()


if __name__ == "__main__":
    main()
