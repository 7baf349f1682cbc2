"""Fused search p50 with and without the graph stage, interleaved, embedding excluded.

    KS_EVAL_DIR=../shared/eval/postgres-docs .venv/bin/python bench/bench_graph_stage.py STORE [N]

The docs filter, best of 3 per query; the query vectors are made before timing.
"""

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import queries

from knowledge_store.store import KnowledgeStore

store = KnowledgeStore.open(sys.argv[1], create=False)
n = int(sys.argv[2]) if len(sys.argv) > 2 else 300
texts = [t for _, t in queries(n)]
embedder = store.embedder
vectors = {t: embedder.embed_query(t) for t in texts}
embedder.embed_query = vectors.__getitem__  # type: ignore[method-assign]
docs = {"not_type": ["codeSample"]}
for t in texts[:20]:
    store.search(t, filters=docs)
    store.search(t, filters=docs, weights={"graph": 0})
with_graph, without, graph_ms = [], [], []
for i, t in enumerate(texts):
    order = [(with_graph, None), (without, {"graph": 0.0})]
    if i % 2:
        order.reverse()
    for sink, weights in order:
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            store.search(t, filters=docs, weights=weights)
            best = min(best, time.perf_counter() - started)
        sink.append(best * 1000)
    ms = store.search(t, filters=docs, explain=True).explain
    graph_ms.append((ms or {}).get("ms", {}).get("graph", 0.0))
print(f"chunks {store.stats().chunks}  queries {len(texts)}  load {os.getloadavg()}")
print(
    f"search@10 p50 with graph {statistics.median(with_graph):.2f} ms, without {statistics.median(without):.2f} ms"
)
print(f"graph stage p50 (explain) {statistics.median(graph_ms):.2f} ms")
