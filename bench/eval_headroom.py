"""How much any fusion of today's lists could gain: the per-query oracle.

For each eval set: lexical, vector and fused (the default mode) nDCG@10, and the
mean of ``max(lexical, vector)`` per query — what a fusion that always picked
the better list for each query would reach — next to the 1.05× goal of issue 16.
If the goal lies above (or just below) the oracle, no weighting of these two lists
can reach it; the lists themselves must get better.

    PYTHONPATH=src .venv/bin/python bench/eval_headroom.py \
        --run STORE ../shared/eval/postgres-docs 0.819 \
        --run STORE2 ../shared/eval/sqlite-git-faq 0.513

(the third value is the set's best baseline nDCG@10 from its BASELINES.md).
"""

from __future__ import annotations

import argparse
import statistics

from knowledge_store.model import Filters
from knowledge_store.retrieval.evaluation import (
    Variant,
    collect,
    per_query_ndcg,
    read_qrels,
    read_queries,
    run_variant,
)
from knowledge_store.retrieval.search import Fusion
from knowledge_store.store import KnowledgeStore

FILTERS = Filters.build(not_type=("codeSample",))  # as both sets' READMEs ask


def headroom(store_path: str, set_dir: str, best_baseline: float) -> dict[str, float]:
    queries = read_queries(f"{set_dir}/queries.jsonl")
    qrels = read_qrels(f"{set_dir}/qrels.tsv")
    queries = [(q, t) for q, t in queries if q in qrels]
    with KnowledgeStore.open(store_path) as store:
        collected = collect(store, queries, filters=FILTERS, progress=True)
    fusion = Fusion.of(None)
    runs = {
        "lexical": run_variant(collected, Variant("lexical", single="lexical")),
        "vector": run_variant(collected, Variant("vector", single="vector")),
        "fused": run_variant(
            collected, Variant("fused", fusion=fusion, expand=fusion.weight("graph") > 0)
        ),
    }
    per = {name: per_query_ndcg(qrels, run) for name, run in runs.items()}
    ids = list(per["fused"])
    out = {name: statistics.mean(per[name][q] for q in ids) for name in per}
    out["oracle max(lexical, vector)"] = statistics.mean(
        max(per["lexical"][q], per["vector"][q]) for q in ids
    )
    out["goal (1.05 x best baseline)"] = 1.05 * best_baseline
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", nargs=3, action="append", metavar=("STORE", "SET", "BEST"))
    args = parser.parse_args()
    for store_path, set_dir, best in args.run or []:
        figures = headroom(store_path, set_dir, float(best))
        print(f"\n{set_dir}")
        for name, value in figures.items():
            print(f"  {name:32} {value:.4f}")


if __name__ == "__main__":
    main()
