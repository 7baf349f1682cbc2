"""A store's ranked lists, saved per query, and two saved runs compared query by query.

For a change no single process can run both sides of — a schema migration rewrites the
store it opens, so "before" is the old code on one copy and "after" the new code on
another — save each side's lists, then compare them paired:

    # the old code (e.g. PYTHONPATH=/work/main/src:/work/main/bench) on a copy of the store
    python bench/eval_lists.py save pg:/tmp/before ../shared/eval/postgres-docs before.json
    # the new code on another copy
    python bench/eval_lists.py save pg:/tmp/after ../shared/eval/postgres-docs after.json
    python bench/eval_lists.py compare ../shared/eval/postgres-docs before.json after.json

``save`` keeps, per judged query, the top 100 entities of the lexical and vector lists
and of fused search (default fusion, graph stage included — as ``ks eval`` collects
them, code samples excluded; ``eval_engines._fused``). ``compare`` prints nDCG@10,
Recall@100 and MRR@10 per list, and with two runs the paired Δ B − A with its 95 %
bootstrap interval and how many queries' top 10 changed. docs/relevance.md §9.5 has
the figures it printed.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from eval_engines import _fused, _list
from eval_pagelex import FILTERS, judged_queries

from knowledge_store.retrieval.compare import paired_bootstrap, per_query
from knowledge_store.retrieval.evaluation import collect
from knowledge_store.store import KnowledgeStore

LISTS = ("lexical", "vector", "fused")
Saved = dict[str, dict[str, list[str]]]  # qid → list → uids, best first


def save(store_path: str, set_dir: str, out: Path) -> None:
    queries, _ = judged_queries(set_dir)
    with KnowledgeStore.open(store_path) as store:
        collected = collect(store, queries, filters=FILTERS)
        fused = _fused(queries, collected.lists, collected.lists, collected.expand)
        saved: Saved = {
            q: {
                "lexical": [u for u, _ in _list(collected.lists[q], "lexical").items[:100]],
                "vector": [u for u, _ in _list(collected.lists[q], "vector").items[:100]],
                "fused": sorted(fused[q], key=lambda u: -fused[q][u]),
            }
            for q, _ in queries
        }
    out.write_text(json.dumps(saved), encoding="utf-8")
    print(f"saved {len(saved)} queries' lists of {store_path} to {out}")


def _run(saved: Saved, name: str) -> dict[str, dict[str, float]]:
    return {
        q: {u: float(len(v[name]) - i) for i, u in enumerate(v[name])} for q, v in saved.items()
    }


def compare(set_dir: str, runs: Sequence[Saved]) -> None:
    _, qrels = judged_queries(set_dir)
    for name in LISTS:
        scores = [per_query(qrels, _run(saved, name)) for saved in runs]
        line = f"{name:<8}"
        for measure in ("ndcg@10", "recall@100", "mrr@10"):
            means = [sum(s[measure].values()) / len(s[measure]) for s in scores]
            line += f"  {measure} " + " → ".join(f"{m:.4f}" for m in means)
            if len(runs) == 2:
                a, b = scores[0][measure], scores[1][measure]
                line += f" Δ {paired_bootstrap([b[q] - a[q] for q in a])}"
        print(line)
        if len(runs) == 2:
            _changed(runs[0], runs[1], name, scores[0]["ndcg@10"], scores[1]["ndcg@10"])


def _changed(
    a: Saved, b: Saved, name: str, before: Mapping[str, float], after: Mapping[str, float]
) -> None:
    order = sum(1 for q in a if a[q][name][:10] != b[q][name][:10])
    members = sum(1 for q in a if set(a[q][name][:10]) != set(b[q][name][:10]))
    moved = [q for q in before if abs(after[q] - before[q]) > 1e-9]
    up = sum(1 for q in moved if after[q] > before[q])
    print(
        f"    top 10 changed: {members} in members, {order} in order;"
        f" nDCG@10 moved on {len(moved)} (up {up}, down {len(moved) - up})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    saving = sub.add_parser("save", help="save a store's lists for a shared set")
    saving.add_argument("store")
    saving.add_argument("set_dir")
    saving.add_argument("out", type=Path)
    comparing = sub.add_parser("compare", help="one saved run's figures, or two paired")
    comparing.add_argument("set_dir")
    comparing.add_argument("runs", nargs="+", type=Path)
    args = parser.parse_args()
    if args.command == "save":
        save(args.store, args.set_dir, args.out)
    else:
        if len(args.runs) > 2:
            parser.error("compare takes one saved run or two")
        compare(args.set_dir, [json.loads(p.read_text(encoding="utf-8")) for p in args.runs])


if __name__ == "__main__":
    main()
