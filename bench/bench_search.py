"""Fused search latency per stage: p50/p95 with and without the query embedding.

Stages (``search(..., explain=True)``'s own timings): embed, vector, lexical,
graph, fuse (both fusions), supersede (successor lookup), total, and
total_without_embed = total − embed. Queries: the postgres-docs eval queries,
run as everyone with the docs filter (``--not-type codeSample``) and without.

    # at the eval corpus size (the lead's store)
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_search.py --store .ks/pg15
    # a 100k-chunk store made from it: every entity replicated under distinct
    # uids (edges remapped to the copy), its cached vectors plus small Gaussian
    # noise (σ=0.015 per dimension, renormalised — never random vectors)
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_search.py --store .ks/pg15 \
        --replicate-to .ks/pg15-100k --chunks 100000
    # fusion modes side by side (each query in every mode, back to back)
    ... --only-replicated --modes rrf adaptive
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from common import EVAL  # $KS_EVAL_DIR, else ../shared/eval/postgres-docs beside the repo

from knowledge_store.engines.base import PreparedEntity
from knowledge_store.engines.embedded.engine import EmbeddedEngine
from knowledge_store.model import Chunk, Edge, Filters
from knowledge_store.retrieval.evaluation import read_queries
from knowledge_store.store import KnowledgeStore

STAGES = (
    "embed",
    "vector",
    "lexical",
    "graph",
    "fuse",
    "supersede",
    "total",
    "total_without_embed",
)
SIGMA = 0.015


def replicate(source: Path, target: Path, chunks_wanted: int, *, batch: int = 5000) -> None:
    """Build ``target`` from ``source``: copies of every entity until ``chunks_wanted`` chunks."""
    src = EmbeddedEngine(source)
    model = src.model()
    spec = src.model_spec() or "default"
    assert model is not None, "the source store has no model"
    with src.catalog.read() as conn:
        uids = [u for (u,) in conn.execute("SELECT uid FROM entities ORDER BY id")]
        entities = [src.catalog.load_entity(conn, u) for u in uids]
        rows = conn.execute(  # the engine opened it: schema 3, vectors in chunk_vectors
            'SELECT e.uid, c.ordinal, c.text, c.heading, c.start, c."end", v.embedding'
            " FROM chunks c JOIN entities e ON e.id = c.entity"
            " JOIN chunk_vectors v ON v.id = c.id ORDER BY e.id, c.ordinal"
        ).fetchall()
    by_uid: dict[str, list[Any]] = {}
    for r in rows:
        by_uid.setdefault(r[0], []).append(r)
    per_copy = len(rows)
    copies = -(-chunks_wanted // per_copy)
    print(f"replicating {len(uids)} entities / {per_copy} chunks × {copies}", file=sys.stderr)
    dst = EmbeddedEngine(target)
    dst.writer.set_model(model[0], model[1], spec)
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    made = 0
    pending: list[PreparedEntity] = []

    def flush() -> None:
        if pending:
            dst.writer.publish(pending, [], kind="ingest")
            pending.clear()

    for copy in range(copies):
        suffix = "" if copy == 0 else f"~{copy}"
        for entity in entities:
            assert entity is not None
            crow = by_uid.get(entity.uid, [])
            if not crow:
                continue
            if made >= chunks_wanted:
                break
            vectors = np.stack([np.frombuffer(r[6], dtype=np.float32) for r in crow])
            if copy:
                vectors = vectors + rng.normal(0, SIGMA, vectors.shape).astype(np.float32)
                vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            chunks = tuple(
                Chunk(int(r[1]), r[2], tuple(json.loads(r[3])), int(r[4]), int(r[5])) for r in crow
            )
            from dataclasses import replace

            copied = replace(
                entity,
                uid=entity.uid + suffix,
                edges=tuple(
                    Edge(entity.uid + suffix, e.label, e.dst + suffix, e.position)
                    for e in entity.edges
                ),
            )
            pending.append(PreparedEntity(copied, chunks, vectors.astype(np.float32)))
            made += len(chunks)
            if len(pending) >= batch:
                flush()
        flush()
        print(f"  copy {copy}: {made} chunks, {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    dst.close()
    src.close()


def bench(
    store_path: str,
    n: int,
    filters: Filters,
    label: str,
    modes: tuple[str | None, ...] = (None,),
) -> dict[str, dict[str, float]]:
    """Per-stage p50/p95 of ``n`` queries; with several ``modes`` (fusion modes), each query
    runs in every mode back to back, so a loaded machine slows all modes alike."""
    queries = [t for _, t in read_queries(EVAL / "queries.jsonl")][:n]
    stages = {m: {s: [] for s in STAGES} for m in modes}
    with KnowledgeStore.open(store_path) as store:
        stats = store.stats()
        store.search("warm up the model and the caches", filters=filters)
        for text in queries[:20]:  # warm the page cache
            store.search(text, filters=filters)
        for text in queries:
            for mode in modes:
                answer = store.search(text, filters=filters, mode=mode, explain=True)
                assert answer.explain is not None
                ms = answer.explain["ms"]
                for stage in STAGES:
                    stages[mode][stage].append(float(ms.get(stage, 0.0)))
    out = {}
    print(f"\n{label}: {stats.chunks} chunks, {stats.entities} entities, {len(queries)} queries")
    for mode in modes:
        name = mode or "default"
        if len(modes) > 1:
            print(f"  mode {name}")
        print(f"  {'stage':<20} {'p50 ms':>8} {'p95 ms':>8} {'mean':>8}")
        for stage, values in stages[mode].items():
            p50 = float(np.percentile(values, 50))
            p95 = float(np.percentile(values, 95))
            key = stage if len(modes) == 1 else f"{name}.{stage}"
            out[key] = {
                "p50": round(p50, 2),
                "p95": round(p95, 2),
                "mean": round(statistics.fmean(values), 2),
            }
            print(f"  {stage:<20} {p50:8.2f} {p95:8.2f} {statistics.fmean(values):8.2f}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=".ks/pg15")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--replicate-to", help="build (once) and bench a replicated store here")
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--only-replicated", action="store_true", help="skip the eval-size store")
    parser.add_argument(
        "--modes", nargs="*", help="fusion modes to interleave per query (e.g. rrf adaptive)"
    )
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="threads for the query embedding (1: steady on a shared machine)",
    )
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.torch_threads)
    docs = Filters.build(not_type=("codeSample",))
    modes: tuple[str | None, ...] = tuple(args.modes) if args.modes else (None,)
    results: dict[str, Any] = {}
    if not args.only_replicated:
        results["eval"] = bench(
            args.store, args.queries, Filters(), f"{args.store}, no filter", modes
        )
        results["eval_docs"] = bench(
            args.store,
            args.queries,
            docs,
            f"{args.store}, --not-type codeSample",
            modes,
        )
    if args.replicate_to:
        if not Path(args.replicate_to).exists():
            replicate(Path(args.store), Path(args.replicate_to), args.chunks)
        results["replicated"] = bench(
            args.replicate_to,
            args.queries,
            Filters(),
            f"{args.replicate_to}, no filter",
            modes,
        )
        results["replicated_docs"] = bench(
            args.replicate_to,
            args.queries,
            docs,
            f"{args.replicate_to}, --not-type codeSample",
            modes,
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
