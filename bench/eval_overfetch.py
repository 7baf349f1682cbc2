"""Over-fetch: ``ks eval`` at ``CHUNKS_PER_ENTITY`` 1 against 4, on both shared sets, either engine.

``ks eval``'s own path (``evaluation.collect`` + ``run_variant``: lexical alone,
vector alone, fused as the planner runs it), code samples excluded as both
sets' READMEs ask, once with each over-fetch. Prints the three rows of each
and the paired bootstrap 95 % interval of ×4 − ×1 for every measure
(``retrieval.compare.compare_runs``), plus the macro nDCG@10 interval over
both sets. The embedded stores are ``evalsets.build_store``'s (``.ks/pg15``,
``.ks/sqlite-git-faq``); ``--engine postgres`` builds the same corpus, from the
same cached vectors, into ``pg:.ks/pg-NAME`` (pgserver in that folder).

    PYTHONPATH=$PWD/src .venv/bin/python bench/eval_overfetch.py
    PYTHONPATH=$PWD/src .venv/bin/python bench/eval_overfetch.py --engine postgres
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from evalsets import ROOT, EvalSet, VectorCache, build_store, eval_sets, set_torch_threads

from knowledge_store.model import Filters
from knowledge_store.retrieval import retrievers
from knowledge_store.retrieval.compare import compare_runs, paired_bootstrap, per_query
from knowledge_store.retrieval.evaluation import Variant, collect, run_variant, score_runs
from knowledge_store.retrieval.search import Fusion
from knowledge_store.store import KnowledgeStore

FILTERS = Filters.build(not_type=["codeSample"])
Run = dict[str, dict[str, float]]


def runs_at(store: KnowledgeStore, eval_set: EvalSet, per_entity: int) -> dict[str, Run]:
    """``ks eval``'s three runs with ``per_entity`` chunks asked per entity candidate."""
    retrievers.CHUNKS_PER_ENTITY = per_entity
    collected = collect(store, eval_set.queries, filters=FILTERS)
    fusion = Fusion.of(None)
    return {
        "lexical": run_variant(collected, Variant("lexical", single="lexical")),
        "vector": run_variant(collected, Variant("vector", single="vector")),
        "fused": run_variant(collected, Variant("fused", fusion=fusion)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=("embedded", "postgres"), default="embedded")
    parser.add_argument("--sets", nargs="*")
    parser.add_argument("--factors", type=int, nargs=2, default=(1, 4), metavar=("A", "B"))
    args = parser.parse_args()
    set_torch_threads(1)
    cache = VectorCache()
    a, b = args.factors
    macro: dict[str, list[float]] = {}
    for eval_set in eval_sets(args.sets):
        if args.engine == "postgres":
            location = f"pg:{ROOT / '.ks' / ('pg-' + eval_set.name)}"
            eval_set = dataclasses.replace(eval_set, store=Path(location))
        started = time.perf_counter()
        with KnowledgeStore.open(build_store(eval_set, cache)) as store:
            built = time.perf_counter()
            runs = {f: runs_at(store, eval_set, f) for f in (a, b)}
        print(
            f"\n{eval_set.name} ({args.engine}, {len(eval_set.queries)} queries;"
            f" store ready in {built - started:.0f} s, eval {time.perf_counter() - built:.0f} s)"
        )
        print(f"  {'list':<8} {'×':>2}  {'nDCG@10':>8} {'R@100':>8} {'MRR@10':>8}")
        for name in ("lexical", "vector", "fused"):
            for f in (a, b):
                s = score_runs(eval_set.qrels, {name: runs[f][name]})[name]
                print(
                    f"  {name:<8} {f:>2}  {s['ndcg@10']:>8.4f} {s['recall@100']:>8.4f}"
                    f" {s['mrr@10']:>8.4f}"
                )
        for name in ("lexical", "vector", "fused"):
            c = compare_runs(eval_set.qrels, runs[a][name], runs[b][name], moved=0)
            print(f"  {name}: ×{b} − ×{a} [95 % paired bootstrap]")
            for m in c.measures:
                print(f"    {m.measure:<11} {m.a:.4f} → {m.b:.4f}  {m.delta}")
        pa = per_query(eval_set.qrels, runs[a]["fused"])
        pb = per_query(eval_set.qrels, runs[b]["fused"])
        macro[eval_set.name] = [pb["ndcg@10"][q] - pa["ndcg@10"][q] for q in pa["ndcg@10"]]
    if len(macro) > 1:
        print(f"\nboth sets (equal weight), fused Δ nDCG@10: {paired_bootstrap(macro)}")


if __name__ == "__main__":
    main()
