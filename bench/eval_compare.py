"""Compare two search configurations on every shared eval set (what ``ks eval --compare`` will print).

A configuration is ``MODE`` or ``MODE:NAME=W,...`` (the planner's modes and
``--weights`` syntax), e.g. ``rrf``, ``convex:vector=0.7,lexical=0.3``,
``adaptive``. For each set: nDCG@10, Recall@100 and MRR@10 of both with the
paired bootstrap 95 % interval of B − A, the queries that moved most, and the
breakdown per query type (``queries-meta.jsonl``: postgres-docs by word-count
stratum, sqlite-git-faq by source). Lists come from each set's store through
the planner's own retrievers (cached, see ``bench/eval_adaptive.py``).

    PYTHONPATH=src .venv/bin/python bench/eval_compare.py rrf adaptive
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from eval_adaptive import collected_lists
from evalsets import VectorCache, build_store, eval_sets, set_torch_threads

from knowledge_store.retrieval.compare import Comparison, compare_runs, paired_bootstrap, per_query
from knowledge_store.retrieval.evaluation import Variant, run_variant
from knowledge_store.retrieval.fusion import parse_weights
from knowledge_store.retrieval.search import Fusion
from knowledge_store.store import KnowledgeStore


def config(text: str) -> Fusion:
    mode, _, weights = text.partition(":")
    return Fusion.of(mode, parse_weights(weights) if weights else None)


def show(name: str, comparison: Comparison, a: str, b: str, queries: dict[str, str]) -> None:
    print(f"\n{name}: B = {b}  vs  A = {a}")
    print(f"  {'measure':<11} {'A':>7} {'B':>7}  B − A [95% paired bootstrap]")
    for m in comparison.measures:
        print(f"  {m.measure:<11} {m.a:>7.4f} {m.b:>7.4f}  {m.delta}")
    if comparison.by_group:
        print("  per query type (nDCG@10):")
        for group, deltas in comparison.by_group.items():
            d = next(x for x in deltas if x.measure == "ndcg@10")
            print(f"    {group:<14} n={d.queries:<5} A {d.a:.4f}  B {d.b:.4f}  {d.delta}")
    print("  moved most (nDCG@10):")
    for moved in comparison.moved:
        print(
            f"    {moved.delta:+.3f}  {moved.a:.3f} → {moved.b:.3f}  {moved.qid}  {queries[moved.qid]!r}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", help="configuration A, e.g. rrf")
    parser.add_argument("b", help="configuration B, e.g. adaptive")
    parser.add_argument("--sets", nargs="*")
    parser.add_argument("--moved", type=int, default=8)
    parser.add_argument(
        "--spec", default="onnx:int8", help="the stores' embedder (as bench/eval_dense.py)"
    )
    args = parser.parse_args()
    set_torch_threads(1)
    fusion_a, fusion_b = config(args.a), config(args.b)
    cache = VectorCache(args.spec)
    macro: dict[str, list[float]] = {}
    for eval_set in eval_sets(args.sets):
        with KnowledgeStore.open(build_store(eval_set, cache)) as store:
            collected = collected_lists(eval_set, store)
            run_a = run_variant(collected, Variant("a", fusion=fusion_a))
            run_b = run_variant(collected, Variant("b", fusion=fusion_b))
        comparison = compare_runs(
            eval_set.qrels, run_a, run_b, groups=eval_set.groups, moved=args.moved
        )
        show(eval_set.name, comparison, args.a, args.b, dict(eval_set.queries))
        pa, pb = per_query(eval_set.qrels, run_a), per_query(eval_set.qrels, run_b)
        macro[eval_set.name] = [pb["ndcg@10"][q] - pa["ndcg@10"][q] for q in pa["ndcg@10"]]
    if len(macro) > 1:
        print(f"\nevery set together (equal weight per set), Δ nDCG@10: {paired_bootstrap(macro)}")


if __name__ == "__main__":
    main()
