"""What an in-memory chunk-card cache would buy the primitives (issue 12's ≤ 2× raw figure).

The primitives rank ids, then read the cards (text, heading, entity title…) of what
they return from the catalog in one statement. This measures, in one process on one
store, ``lexical`` and ``vector`` at top-10 and top-100 with the cards read from the
catalog as shipped, and with every card (its row of the hydration statement) held in a
dict built beforehand — the most
such a cache could give — alternating the two in rounds. It prints the p50s and the
cache's resident memory. Not shipped: at 1M chunks the cache would hold ~1.2 GB.

    KS_EVAL_DIR=../shared/eval/postgres-docs .venv/bin/python bench/bench_card_cache.py STORE
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from knowledge_store.engines.sql.reader import SqlReader
from knowledge_store.retrieval.evaluation import read_queries
from knowledge_store.store import KnowledgeStore


def _rss_mib() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", type=Path)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    eval_dir = Path(os.environ.get("KS_EVAL_DIR", "../shared/eval/postgres-docs"))
    texts = [t for _, t in read_queries(eval_dir / "queries.jsonl")][: args.queries]
    store = KnowledgeStore.open(args.store)
    vectors = {t: store.embedder.embed_query(t) for t in texts}  # embedding excluded
    shipped = SqlReader._cards

    def run(kind: str, k: int, repeat: int = 3) -> float:
        samples = []
        for _ in range(repeat):
            for text in texts:
                started = time.perf_counter()
                if kind == "vector":
                    store.vector(vectors[text], k=k)
                else:
                    store.lexical(text, k=k)
                samples.append(time.perf_counter() - started)
        samples.sort()
        return samples[len(samples) // 2] * 1000

    figures = [(kind, k) for kind in ("lexical", "vector") for k in (10, 100)]
    for kind, k in figures:
        run(kind, k, 1)  # warm
    before = _rss_mib()
    cards: dict[int, Any] = {}
    started = time.perf_counter()
    with store.reader() as r:
        engine = r.engine
        assert isinstance(engine, SqlReader)
        ids = [int(i) for (i,) in engine._run("SELECT id FROM chunks", {})]
        for at in range(0, len(ids), 5000):
            cards.update((row[0], row) for row in shipped(engine, ids[at : at + 5000]))
    print(
        f"cache: {len(cards)} cards, built in {time.perf_counter() - started:.1f} s,"
        f" RSS +{_rss_mib() - before:.0f} MiB"
    )

    def cached(self: SqlReader, chunk_ids: Sequence[int]) -> list[Any]:
        return [cards[c] for c in chunk_ids if c in cards]

    for _ in range(args.rounds):
        for kind, k in figures:
            SqlReader._cards = shipped  # type: ignore[method-assign]
            catalog = run(kind, k)
            SqlReader._cards = cached  # type: ignore[method-assign]
            memory = run(kind, k)
            print(
                f"{kind}@{k}: cards from the catalog p50 {catalog:.3f} ms, in memory {memory:.3f} ms"
            )
    SqlReader._cards = shipped  # type: ignore[method-assign]


if __name__ == "__main__":
    main()
