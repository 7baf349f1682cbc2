"""Fusion comparison on the postgres-docs eval set — the measurement behind search's defaults.

Each query's lists are computed once (``retrieval.evaluation.collect``: the
planner's own retrievers, FILTERS inside every list); every variant is then
scored from them with the planner's own stage logic (``fuse_stages``). The
graph list is seeded by each variant's first fusion and memoised per seed set.

    make eval                                   # builds .ks/pg15 once (the lead's store)
    HF_HUB_OFFLINE=1 .venv/bin/python bench/eval_fusion.py --store .ks/pg15
    HF_HUB_OFFLINE=1 .venv/bin/python bench/eval_fusion.py --store .ks/pg15 --json out.json

Code samples are excluded (``--not-type codeSample``), as the set's README asks:
its judgements are page level.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import random
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from common import EVAL  # $KS_EVAL_DIR, else ../shared/eval/postgres-docs beside the repo

from knowledge_store.model import Filters
from knowledge_store.retrieval.evaluation import (
    Collected,
    Variant,
    collect,
    per_query_ndcg,
    read_qrels,
    read_queries,
    run_variant,
    score_runs,
)
from knowledge_store.retrieval.fusion import Fused, RankedList, agreement, convex, rrf
from knowledge_store.retrieval.search import Fusion
from knowledge_store.store import KnowledgeStore

BASELINES = {"BM25 (bm25s)": 0.740, "dense (MiniLM, exact)": 0.728, "RRF of the two": 0.819}


@dataclass(frozen=True)
class AgreementFusion:
    """Per-query weights from how much the lexical and dense tops agree (``fusion.agreement``).

    ``a`` = average overlap of the two top-10 lists. The lexical weight is
    ``lexical × (1 + boost × (1 − a))``: where the lists disagree, the exact-word
    list is trusted more (or less, with a negative ``boost``).
    """

    mode: str
    weights: Mapping[str, float]
    boost: float

    def fuse(self, lists: Sequence[RankedList]) -> list[Fused]:
        by = {lst.name: lst for lst in lists}
        w = {lst.name: float(self.weights.get(lst.name, 1.0)) for lst in lists}
        if "lexical" in by and "vector" in by:
            a = agreement(
                [u for u, _ in by["lexical"].items], [u for u, _ in by["vector"].items], 10
            )
            w["lexical"] = max(0.0, w["lexical"] * (1.0 + self.boost * (1.0 - a)))
        fused = (rrf if self.mode == "rrf" else convex)(lists, weights=w)
        return [f for f in fused if any(r is not None and w[n] > 0 for n, r in f.ranks.items())]


def variants() -> list[Variant]:
    out = [
        Variant("vector alone", single="vector"),
        Variant("lexical alone", single="lexical"),
        Variant("graph alone (seeded by rrf)", single="graph"),
    ]
    for wg in (0.0, 0.05, 0.1, 0.25, 0.5, 1.0):
        name = "rrf v=1 l=1" + (f" + graph {wg:g}" if wg else " (no graph)")
        out.append(
            Variant(
                name,
                fusion=Fusion("rrf", {"vector": 1.0, "lexical": 1.0, "graph": wg}),
                expand=wg > 0,
            )
        )
    for wv, wl in ((0.8, 1.0), (1.0, 0.8), (0.6, 1.0), (1.0, 1.2), (1.0, 1.5)):
        out.append(
            Variant(
                f"rrf v={wv:g} l={wl:g} (no graph)",
                fusion=Fusion("rrf", {"vector": wv, "lexical": wl, "graph": 0.0}),
                expand=False,
            )
        )
    out.append(
        Variant(
            "rrf v=0.8 l=1 + graph 0.1",
            fusion=Fusion("rrf", {"vector": 0.8, "lexical": 1.0, "graph": 0.1}),
        )
    )
    for alpha in (0.3, 0.4, 0.5, 0.6, 0.7):
        out.append(
            Variant(
                f"convex v={alpha:g} l={1 - alpha:g} (no graph)",
                fusion=Fusion("convex", {"vector": alpha, "lexical": 1 - alpha, "graph": 0.0}),
                expand=False,
            )
        )
    for wg in (0.05, 0.1, 0.2):
        out.append(
            Variant(
                f"convex v=0.5 l=0.5 + graph {wg:g}",
                fusion=Fusion("convex", {"vector": 0.5, "lexical": 0.5, "graph": wg}),
            )
        )
    for boost in (-0.5, 0.5, 1.0):
        out.append(
            Variant(
                f"rrf, agreement-weighted lexical (boost {boost:+g})",
                fusion=AgreementFusion("rrf", {"vector": 1.0, "lexical": 1.0}, boost),
                expand=False,
            )
        )
        out.append(
            Variant(
                f"convex 0.5/0.5, agreement-weighted lexical (boost {boost:+g})",
                fusion=AgreementFusion("convex", {"vector": 0.5, "lexical": 0.5}, boost),
                expand=False,
            )
        )
    default = Fusion.of(None)
    out.append(
        Variant(
            f"DEFAULT ({default.mode} {dict(default.weights)})",
            fusion=default,
            expand=default.weight("graph") > 0,
        )
    )
    return out


REFERENCE = "rrf v=1 l=1 (no graph)"


def per_query_recall(
    qrels: Mapping[str, Mapping[str, int]], run: Mapping[str, Mapping[str, float]]
) -> dict[str, float]:
    """Recall@100 of each query."""
    out = {}
    for qid, judged in qrels.items():
        ranked = sorted(run.get(qid, {}).items(), key=lambda kv: -kv[1])[:100]
        relevant = {d for d, rel in judged.items() if rel > 0}
        out[qid] = len(relevant & {d for d, _ in ranked}) / len(relevant) if relevant else 0.0
    return out


def paired_ci(
    a: Mapping[str, float], b: Mapping[str, float], rounds: int = 2000
) -> tuple[float, float, float]:
    """Mean of a − b over queries and its 95 % bootstrap interval (seeded)."""
    qids = sorted(a)
    diffs = [a[q] - b.get(q, 0.0) for q in qids]
    rng = random.Random(15)
    means = []
    for _ in range(rounds):
        sample = [diffs[rng.randrange(len(diffs))] for _ in diffs]
        means.append(sum(sample) / len(sample))
    means.sort()
    return sum(diffs) / len(diffs), means[int(0.025 * rounds)], means[int(0.975 * rounds)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=".ks/pg15")
    parser.add_argument("--eval", default=str(EVAL))
    parser.add_argument("--limit", type=int, default=0, help="first N queries only")
    parser.add_argument("--json", help="also write the table as JSON here")
    parser.add_argument(
        "--cache", help="keep the query-stage lists here (a pickle) to re-score without re-running"
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

    queries = read_queries(Path(args.eval) / "queries.jsonl")
    qrels = read_qrels(Path(args.eval) / "qrels.tsv")
    queries = [(q, t) for q, t in queries if q in qrels]
    if args.limit:
        queries = queries[: args.limit]
        qrels = {q: qrels[q] for q, _ in queries}
    filters = Filters.build(not_type=("codeSample",))
    with KnowledgeStore.open(args.store) as store:
        stats = store.stats()
        print(
            f"store {args.store}: {stats.entities} entities, {stats.chunks} chunks;"
            f" {len(queries)} queries; code samples excluded",
            file=sys.stderr,
        )
        t0 = time.perf_counter()
        cache = Path(args.cache) if args.cache else None
        key = f"{store.content_root()}:{len(queries)}:{filters}"
        cached = None
        if cache is not None and cache.exists():
            with cache.open("rb") as handle:
                saved = pickle.load(handle)
            cached = saved["lists"] if saved.get("key") == key else None
        collected: Collected = collect(store, queries, filters=filters, progress=True, lists=cached)
        if cache is not None and cached is None:
            with cache.open("wb") as handle:
                pickle.dump({"key": key, "lists": collected.lists}, handle)
        t1 = time.perf_counter()
        rows = []
        runs = {}
        for variant in variants():
            runs[variant.name] = run_variant(collected, variant)
        t2 = time.perf_counter()
        scores = score_runs(qrels, runs)
    print(
        f"lists computed once in {t1 - t0:.0f} s; {len(runs)} variants scored in {t2 - t1:.1f} s"
        f" (graph lists: {collected.expand_calls['computed']} computed,"
        f" {collected.expand_calls['reused']} reused)",
        file=sys.stderr,
    )
    best_single = max(("vector alone", "lexical alone"), key=lambda n: scores[n]["ndcg@10"])
    single = per_query_ndcg(qrels, runs[best_single])
    reference = per_query_ndcg(qrels, runs[REFERENCE])
    ref_recall = per_query_recall(qrels, runs[REFERENCE])
    width = max(len(n) for n in runs)
    print(
        f"\n{'variant':<{width}}  nDCG@10  R@100   MRR@10  Δ nDCG vs {best_single:<17}"
        f"  Δ nDCG vs {REFERENCE:<18}  Δ R@100 vs it  [95% bootstrap CIs]"
    )
    for name, run in runs.items():
        m = scores[name]
        deltas = ["", "", ""]
        if "alone" not in name:
            per_query = per_query_ndcg(qrels, run)
            deltas[0] = "{:+.4f} [{:+.4f}, {:+.4f}]".format(*paired_ci(per_query, single))
            if name != REFERENCE:
                deltas[1] = "{:+.4f} [{:+.4f}, {:+.4f}]".format(*paired_ci(per_query, reference))
                deltas[2] = "{:+.4f} [{:+.4f}, {:+.4f}]".format(
                    *paired_ci(per_query_recall(qrels, run), ref_recall)
                )
        print(
            f"{name:<{width}}  {m['ndcg@10']:.4f}   {m['recall@100']:.4f}  {m['mrr@10']:.4f}"
            f"  {deltas[0]:<28} {deltas[1]:<28} {deltas[2]}"
        )
        rows.append({"variant": name, **m})
    print(
        "\nbaselines (BASELINES.md, pages only): "
        + ", ".join(f"{k} {v:.3f}" for k, v in BASELINES.items())
    )
    if args.json:
        Path(args.json).write_text(json.dumps({"queries": len(queries), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
