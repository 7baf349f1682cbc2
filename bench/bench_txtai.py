"""Fused search against txtai's hybrid search on the same chunks and vectors, interleaved.

    KS_EVAL_DIR=/work/shared/eval/postgres-docs .venv/bin/python bench/bench_txtai.py STORE \\
        [--queries 1500] [--k 100] [--repeat 3]

txtai (``hybrid``: BM25 plus dense, its defaults otherwise) indexes the store's own chunks
(code samples excluded, as the store's searches exclude them here) with the store's own
vectors (``method: external``), so neither side embeds anything while timed: the query
vectors are made once, before timing, by the store's embedder. Per query, each side runs
best of ``--repeat``, the order rotating: knowledge-store's fused search with its graph
stage, without it (``--weights graph=0``), and txtai's hybrid search, all at top ``--k``.
Printed: p50 and p95 of each, nDCG@10 of each (txtai's chunks folded to their entity, best
first), and the load average. txtai is a bench dependency (the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import need_eval, queries

from knowledge_store.retrieval.evaluation import read_qrels, score_runs
from knowledge_store.store import KnowledgeStore

DOCS = {"not_type": ["codeSample"]}


def chunks_of(store_dir: Path) -> tuple[list[tuple[int, str]], dict[int, str], np.ndarray]:
    """The store's chunks outside code samples: ``(id, text)``, id → entity uid, vectors."""
    conn = sqlite3.connect(f"file:{store_dir / 'catalog.sqlite'}?mode=ro", uri=True)
    rows = conn.execute(
        "SELECT c.id, c.text, e.uid, v.embedding FROM chunks AS c"
        " JOIN entities AS e ON e.id = c.entity JOIN chunk_vectors AS v ON v.id = c.id"
        " WHERE e.type <> 'codeSample' ORDER BY c.id"
    ).fetchall()
    conn.close()
    vectors = np.stack([np.frombuffer(r[3], dtype=np.float32) for r in rows])
    return [(r[0], r[1]) for r in rows], {r[0]: r[2] for r in rows}, vectors


def txtai_index(chunks: list[tuple[int, str]], vectors: np.ndarray, query_vectors: dict) -> Any:
    from txtai import Embeddings

    by_text = {text: vectors[i] for i, (_, text) in enumerate(chunks)}

    def transform(texts: list[str]) -> np.ndarray:
        return np.stack([query_vectors[t] if t in query_vectors else by_text[t] for t in texts])

    embeddings = Embeddings(method="external", transform=transform, hybrid=True, content=False)
    embeddings.index([(cid, text, None) for cid, text in chunks])
    return embeddings


def scores(runs: dict[str, list[str]], qrels: Path) -> dict[str, float]:
    """nDCG@10, Recall@100, MRR@10 of one side's rankings (``evaluation.score_runs``)."""
    run = {
        qid: {uid: float(len(uids) - i) for i, uid in enumerate(uids)} for qid, uids in runs.items()
    }
    judged = {q: d for q, d in read_qrels(qrels).items() if q in runs}  # the queries asked
    return score_runs(judged, {"side": run})["side"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("store", type=Path)
    parser.add_argument("--queries", type=int, default=1500)
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    asked = queries(args.queries)
    store = KnowledgeStore.open(args.store, create=False)
    vectors_of = {t: store.embedder.embed_query(t) for _, t in asked}
    store.embedder.embed_query = vectors_of.__getitem__  # type: ignore[method-assign]
    chunks, uid_of, vectors = chunks_of(args.store)
    started = time.perf_counter()
    txtai = txtai_index(chunks, vectors, vectors_of)
    print(f"txtai indexed {len(chunks):,} chunks in {time.perf_counter() - started:.0f} s")

    sides: dict[str, Any] = {
        "ks fused, graph": lambda t: [
            r.uid for r in store.search(t, k=args.k, filters=DOCS).results
        ],
        "ks fused, no graph": lambda t: [
            r.uid for r in store.search(t, k=args.k, filters=DOCS, weights={"graph": 0.0}).results
        ],
        "txtai hybrid": lambda t: list(
            dict.fromkeys(uid_of[int(cid)] for cid, _ in txtai.search(t, limit=args.k))
        ),
    }
    for _, t in asked[:20]:  # warm
        for run in sides.values():
            run(t)
    times: dict[str, list[float]] = {name: [] for name in sides}
    runs: dict[str, dict[str, list[str]]] = {name: {} for name in sides}
    names = list(sides)
    for n, (qid, t) in enumerate(asked):
        for name in names[n % len(names) :] + names[: n % len(names)]:
            best = float("inf")
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                runs[name][qid] = sides[name](t)
                best = min(best, time.perf_counter() - t0)
            times[name].append(best * 1000)
    qrels = need_eval() / "qrels.tsv"
    print(
        f"chunks {store.stats().chunks:,} (txtai {len(chunks):,} without code samples)"
        f"  queries {len(asked)}  top {args.k}  best of {args.repeat}  load {os.getloadavg()}"
    )
    for name in names:
        ms = sorted(times[name])
        p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
        print(
            f"  {name:<20} p50 {statistics.median(ms):6.2f} ms  p95 {p95:6.2f} ms"
            f"  {'  '.join(f'{m} {v:.4f}' for m, v in scores(runs[name], qrels).items())}"
        )
    store.close()


if __name__ == "__main__":
    main()
