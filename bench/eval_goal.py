"""The issue's goal figures: each list and fused search against the dense baseline, paired.

For every shared eval set: lexical alone, vector alone, fused ``rrf`` (the
seed's default: "before") and fused ``adaptive`` (the default: "after"), each
with nDCG@10 / Recall@100 / MRR@10 and the paired bootstrap 95 % interval of
its difference from the BASELINES.md dense baseline reproduced here (exact
MiniLM over ~800-character passages, title prefixed, best passage per page:
``dense_units.baseline_units``), and "after" against "before". The store's
lists come from ``bench/eval_adaptive.py``'s cache (the planner's own
retrievers); the baseline's vectors from the content-hash cache.

    PYTHONPATH=src .venv/bin/python bench/eval_goal.py \
        --store-spec st:sentence-transformers/all-MiniLM-L6-v2 --spec onnx:int8
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from eval_adaptive import collected_lists
from eval_dense import Matrix, query_vectors, ranked
from evalsets import VectorCache, eval_sets, store_path

from knowledge_store.retrieval.compare import MEASURES, paired_bootstrap, per_query
from knowledge_store.retrieval.evaluation import Variant, run_variant
from knowledge_store.retrieval.search import Fusion
from knowledge_store.store import KnowledgeStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="*")
    parser.add_argument("--spec", default="onnx:int8", help="embedder of the baseline's vectors")
    parser.add_argument("--store-spec", default="onnx:int8", help="embedder of the stores")
    args = parser.parse_args()
    cache = VectorCache(args.spec)
    for eval_set in eval_sets(args.sets):
        with KnowledgeStore.open(store_path(eval_set, args.store_spec)) as store:
            collected = collected_lists(eval_set, store)
        runs = {
            "lexical": run_variant(collected, Variant("lexical", single="lexical")),
            "vector": run_variant(collected, Variant("vector", single="vector")),
            "fused rrf (before)": run_variant(collected, Variant("rrf", fusion=Fusion.of("rrf"))),
            "fused adaptive (after)": run_variant(
                collected, Variant("adaptive", fusion=Fusion.of("adaptive"))
            ),
        }
        qids = [q for q, _ in eval_set.queries]
        base = Matrix.of(eval_set, "baseline", cache)
        scores = base.page_max(base.unit_scores(query_vectors(eval_set, cache)))
        runs["dense baseline (reproduced)"] = dict(
            zip(qids, ranked(base.pages, scores), strict=True)
        )
        values = {name: per_query(eval_set.qrels, run) for name, run in runs.items()}
        ref = values["dense baseline (reproduced)"]
        print(f"\n{eval_set.name} ({len(qids)} queries): Δ vs the dense baseline reproduced [95%]")
        for name, v in values.items():
            cells = []
            for m in MEASURES:
                mean = sum(v[m].values()) / len(v[m])
                delta = paired_bootstrap([v[m][q] - ref[m][q] for q in ref[m]])
                cells.append(f"{m} {mean:.4f} {delta}")
            print(f"  {name:<28} " + " | ".join(cells))
        after, before = values["fused adaptive (after)"], values["fused rrf (before)"]
        print(
            "  after − before: "
            + " | ".join(
                f"{m} {paired_bootstrap([after[m][q] - before[m][q] for q in before[m]])}"
                for m in MEASURES
            )
        )


if __name__ == "__main__":
    main()
