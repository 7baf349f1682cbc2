"""How much any fusion of today's lists could gain: the per-query oracle.

For each eval set: lexical, vector and fused (the default mode) nDCG@10, and the
mean of ``max(lexical, vector)`` per query — what a fusion that always picked
the better list for each query would reach — next to the 1.05× goal of issue 16.
If the goal lies above (or just below) the oracle, no weighting of these two lists
can reach it; the lists themselves must get better.

    PYTHONPATH=src .venv/bin/python bench/eval_headroom.py \
        --run STORE ../shared/eval/postgres-docs 0.819 \
        --run STORE2 ../shared/eval/sqlite-git-faq 0.513

(the third value is the set's best baseline nDCG@10 from its BASELINES.md;
``--worst 50`` also prints the 50 queries where fused loses most against the
better of the two lists, with each list's top 3: what docs/relevance.md §7 read).
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


def worst(
    texts: dict[str, str],
    qrels: dict[str, dict[str, int]],
    runs: dict[str, dict[str, dict[str, float]]],
    per: dict[str, dict[str, float]],
    n: int,
) -> None:
    """The ``n`` queries where fused loses most against the better list, each list's top 3."""

    def top(run: dict[str, float], k: int = 3) -> list[str]:
        return sorted(run, key=lambda uid: -run[uid])[:k]

    def gap(q: str) -> float:
        return per["fused"][q] - max(per["lexical"][q], per["vector"][q])

    for q in sorted(per["fused"], key=gap)[:n]:
        scores = " ".join(f"{name[0].upper()}={per[name][q]:.2f}" for name in per)
        relevant = [uid for uid, grade in qrels[q].items() if grade > 0][:3]
        print(f"{q} {texts[q]!r} {scores} relevant={relevant}")
        for name, run in runs.items():
            print(f"    {name:<8} {top(run.get(q, {}))}")


def headroom(
    store_path: str, set_dir: str, best_baseline: float, show_worst: int = 0
) -> dict[str, float]:
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
    if show_worst:
        worst(dict(queries), qrels, runs, per, show_worst)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", nargs=3, action="append", metavar=("STORE", "SET", "BEST"))
    parser.add_argument(
        "--worst", type=int, default=0, metavar="N", help="print the N queries fused loses most"
    )
    args = parser.parse_args()
    for store_path, set_dir, best in args.run or []:
        figures = headroom(store_path, set_dir, float(best), args.worst)
        print(f"\n{set_dir}")
        for name, value in figures.items():
            print(f"  {name:32} {value:.4f}")


if __name__ == "__main__":
    main()
