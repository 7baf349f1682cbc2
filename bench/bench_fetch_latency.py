"""Fused-search latency, embedding excluded: chunk over-fetch ×1 vs ×4, rrf vs adaptive.

On a store built by ``bench/eval_adaptive.py`` (default: the postgres-docs one,
~15k chunks), the first N eval queries, code samples excluded; the four
configurations interleaved per query so that a loaded machine slows all alike.
``total_without_embed`` from ``--explain``'s timings; p50/p95 in ms.

    PYTHONPATH=src .venv/bin/python bench/bench_fetch_latency.py --queries 200
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from evalsets import SETS, set_torch_threads

from knowledge_store.model import Filters
from knowledge_store.retrieval import retrievers
from knowledge_store.store import KnowledgeStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", default="postgres-docs")
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    set_torch_threads(1)
    eval_set = SETS[args.set]
    filters = Filters.build(not_type=("codeSample",))
    configs = [(fetch, mode) for fetch in (1, 4) for mode in ("rrf", "adaptive")]
    samples: dict[tuple[int, str], list[float]] = {c: [] for c in configs}
    with KnowledgeStore.open(eval_set.store) as store:
        for _, text in eval_set.queries[: args.queries]:
            for fetch, mode in configs:
                retrievers.CHUNKS_PER_ENTITY = fetch
                answer = store.search(text, k=10, filters=filters, mode=mode, explain=True)
                assert answer.explain is not None
                samples[(fetch, mode)].append(answer.explain["ms"]["total_without_embed"])
    print(f"{eval_set.name}: {args.queries} queries, ms without embedding")
    for (fetch, mode), values in samples.items():
        ordered = sorted(values)
        p95 = ordered[int(0.95 * (len(ordered) - 1))]
        print(
            f"  over-fetch ×{fetch}, {mode:<8}  p50 {statistics.median(values):6.2f}  p95 {p95:6.2f}"
        )


if __name__ == "__main__":
    main()
