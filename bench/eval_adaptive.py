"""Query-adaptive fusion against RRF k=60 and convex 0.5/0.5, on every shared eval set together.

Each set's store is built once from the vector cache (``evalsets.build_store``);
each query's lists are computed once through the planner's own retrievers
(``evaluation.collect``, cached in ``bench/.cache``) and every variant is
scored from them with the planner's stage logic (``fuse_stages``: the graph
list seeded by the variant's own first fusion). Code samples are excluded, as
both sets' READMEs ask.

The decision is made on both sets *together*: the macro average of the
per-set means, with a stratified paired bootstrap (each set resampled within
itself, equal weight per set), so the 28 questions count as much as the
1,500 index terms. Per set and per query type are printed beside it.

    PYTHONPATH=src .venv/bin/python bench/eval_adaptive.py
    PYTHONPATH=src .venv/bin/python bench/eval_adaptive.py --json bench/results/adaptive.json
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from evalsets import (
    CACHE,
    EvalSet,
    VectorCache,
    build_store,
    eval_sets,
    scoring_key,
    set_torch_threads,
)

from knowledge_store.model import Filters
from knowledge_store.retrieval.adaptive import AdaptiveParams, adaptive_weights
from knowledge_store.retrieval.compare import paired_bootstrap, per_query
from knowledge_store.retrieval.evaluation import Collected, collect
from knowledge_store.retrieval.fusion import Fused, RankedList, agreement, convex, rrf
from knowledge_store.retrieval.retrievers import CHUNKS_PER_ENTITY
from knowledge_store.retrieval.search import fuse_stages
from knowledge_store.store import KnowledgeStore

Run = dict[str, dict[str, float]]
FILTERS = Filters.build(not_type=("codeSample",))
GRAPH = 0.05


@dataclass(frozen=True)
class Weighted:
    """A fuser with fixed weights for one query (a variant builds one per query)."""

    mode: str
    weights: Mapping[str, float]
    normalise: str = "minmax"

    def fuse(self, lists: Sequence[RankedList]) -> list[Fused]:
        w = {lst.name: float(self.weights.get(lst.name, 1.0)) for lst in lists}
        if self.mode == "rrf":
            fused = rrf(lists, weights=w)
        else:
            fused = convex(lists, weights=w, normalise=self.normalise)
        return [f for f in fused if any(r is not None and w[n] > 0 for n, r in f.ranks.items())]


#: A variant: (query text, query lists) → the fuser for that query, or a single list name.
Chooser = Callable[[str, Sequence[RankedList]], Weighted]


def fixed(mode: str, vector: float, lexical: float, normalise: str = "minmax") -> Chooser:
    weights = {"vector": vector, "lexical": lexical, "graph": GRAPH}
    return lambda text, lists: Weighted(mode, weights, normalise)


def by_query(
    mode: str, vector: float, lexical: float, params: AdaptiveParams, normalise: str = "minmax"
) -> Chooser:
    base = {"vector": vector, "lexical": lexical, "graph": GRAPH}
    return lambda text, lists: Weighted(
        mode, adaptive_weights(text, base, params).weights, normalise
    )


def by_agreement(mode: str, vector: float, lexical: float, boost: float) -> Chooser:
    """Lexical × (1 + boost × (1 − agreement of the two top-10s))."""

    def choose(text: str, lists: Sequence[RankedList]) -> Weighted:
        by = {lst.name: [u for u, _ in lst.items] for lst in lists}
        a = agreement(by.get("lexical", []), by.get("vector", []), 10)
        lex = max(0.0, lexical * (1 + boost * (1 - a)))
        return Weighted(mode, {"vector": vector, "lexical": lex, "graph": GRAPH})

    return choose


def by_margin(mode: str, vector: float, lexical: float, low: float, high: float) -> Chooser:
    """Lexical weight from its own top-score margin: ``(s1 − s2) / s1`` mapped onto [low, high]."""

    def choose(text: str, lists: Sequence[RankedList]) -> Weighted:
        lex = next((lst for lst in lists if lst.name == "lexical"), None)
        margin = 0.0
        if lex is not None and len(lex.items) >= 2 and lex.items[0][1] > 0:
            margin = (lex.items[0][1] - lex.items[1][1]) / lex.items[0][1]
        elif lex is not None and len(lex.items) == 1:
            margin = 1.0
        scale = low + (high - low) * min(1.0, margin / 0.5)
        return Weighted(mode, {"vector": vector, "lexical": lexical * scale, "graph": GRAPH})

    return choose


def variants() -> dict[str, Chooser | str]:
    out: dict[str, Chooser | str] = {"vector alone": "vector", "lexical alone": "lexical"}
    out["rrf 1/1 (seed default)"] = fixed("rrf", 1.0, 1.0)
    out["convex 0.5/0.5"] = fixed("convex", 0.5, 0.5)
    out["convex 0.6/0.4"] = fixed("convex", 0.6, 0.4)
    for norm in ("max", "zscore"):
        out[f"convex 0.5/0.5, {norm}-normalised"] = fixed("convex", 0.5, 0.5, norm)
    out["rrf v=1 l=0.5"] = fixed("rrf", 1.0, 0.5)
    for q in (0.25, 0.5, 0.75, 1.0):
        for ident in (1.0, 1.5):
            params = AdaptiveParams(question=q, identifier=ident)
            tag = f"question ×{q:g}, identifier ×{ident:g}"
            out[f"rrf 1/1, {tag}"] = by_query("rrf", 1.0, 1.0, params)
            out[f"convex 0.5/0.5, {tag}"] = by_query("convex", 0.5, 0.5, params)
            out[f"convex 0.5/0.5 max-norm, {tag}"] = by_query(
                "convex", 0.5, 0.5, params, normalise="max"
            )
    for boost in (-0.5, 0.5):
        out[f"rrf 1/1, agreement boost {boost:+g}"] = by_agreement("rrf", 1.0, 1.0, boost)
    out["convex 0.5/0.5, agreement boost +0.5"] = by_agreement("convex", 0.5, 0.5, 0.5)
    out["rrf 1/1, lexical margin → ×[0.5, 1.5]"] = by_margin("rrf", 1.0, 1.0, 0.5, 1.5)
    return out


def collected_lists(eval_set: EvalSet, store: KnowledgeStore) -> Collected:
    """The query-stage lists of every query, cached per store content root."""
    cache = CACHE / f"lists-{store.engine.path.name}.pickle"  # type: ignore[attr-defined]
    key = (
        f"{store.content_root()}:{len(eval_set.queries)}:{FILTERS}:{CHUNKS_PER_ENTITY}"
        f":{scoring_key()}"
    )
    saved = None
    if cache.exists():
        with cache.open("rb") as handle:
            data = pickle.load(handle)
        saved = data["lists"] if data.get("key") == key else None
    collected = collect(store, eval_set.queries, filters=FILTERS, progress=True, lists=saved)
    if saved is None:
        with cache.open("wb") as handle:
            pickle.dump({"key": key, "lists": collected.lists}, handle)
    return collected


def run_of(collected: Collected, texts: Mapping[str, str], chooser: Chooser | str) -> Run:
    run: Run = {}
    for qid, _ in collected.queries:
        lists = collected.lists[qid]
        if isinstance(chooser, str):
            chosen = next((lst for lst in lists if lst.name == chooser), RankedList(chooser, []))
            ranked = [uid for uid, _ in chosen.items]
        else:
            fuser = chooser(texts[qid], lists)
            fused, _, _ = fuse_stages(fuser, lists, collected.expand)
            ranked = [f.uid for f in fused]
        run[qid] = {uid: float(len(ranked) - i) for i, uid in enumerate(ranked[:100])}
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="*")
    parser.add_argument("--reference", default="rrf 1/1 (seed default)")
    parser.add_argument("--json")
    parser.add_argument(
        "--spec", default="onnx:int8", help="the stores' embedder (as bench/eval_dense.py)"
    )
    args = parser.parse_args()
    set_torch_threads(1)
    cache = VectorCache(args.spec)
    names = list(variants())
    scores: dict[str, dict[str, dict[str, dict[str, float]]]] = {}  # set → variant → measure → qid
    groups: dict[str, dict[str, str]] = {}
    for eval_set in eval_sets(args.sets):
        path = build_store(eval_set, cache)
        with KnowledgeStore.open(path) as store:
            collected = collected_lists(eval_set, store)
            texts = dict(eval_set.queries)
            scores[eval_set.name] = {
                name: per_query(eval_set.qrels, run_of(collected, texts, chooser))
                for name, chooser in variants().items()
            }
        groups[eval_set.name] = eval_set.groups
    report(scores, groups, names, args.reference)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(scores))


def mean(values: Mapping[str, float]) -> float:
    return sum(values.values()) / len(values)


def report(
    scores: Mapping[str, Mapping[str, Mapping[str, Mapping[str, float]]]],
    groups: Mapping[str, Mapping[str, str]],
    names: Sequence[str],
    reference: str,
) -> None:
    sets = list(scores)
    width = max(len(n) for n in names)
    head = "  ".join(f"{s[:14]:>14}" for s in sets)
    print(f"\nnDCG@10 per set, macro mean, Δ vs {reference!r} (stratified paired bootstrap 95%)")
    print(f"{'variant':<{width}}  {head}  {'macro':>6}  Δ macro nDCG@10 [95%]        Δ macro R@100")
    for name in names:
        per_set = [mean(scores[s][name]["ndcg@10"]) for s in sets]
        cells = "  ".join(f"{v:>14.4f}" for v in per_set)
        delta = {
            m: paired_bootstrap(
                {
                    s: [
                        scores[s][name][m][q] - scores[s][reference][m][q]
                        for q in scores[s][name][m]
                    ]
                    for s in sets
                }
            )
            for m in ("ndcg@10", "recall@100")
        }
        print(
            f"{name:<{width}}  {cells}  {sum(per_set) / len(per_set):>6.4f}"
            f"  {delta['ndcg@10']!s:<28} {delta['recall@100']}"
        )
    for s in sets:
        print(f"\n{s}: per set, Δ nDCG@10 vs {reference!r}; per query type")
        kinds = sorted(set(groups[s].values()))
        print(
            f"{'variant':<{width}}  nDCG@10 R@100  MRR@10  Δ nDCG@10 [95%]             "
            + "  ".join(f"{k[:10]:>10}" for k in kinds)
        )
        for name in names:
            m = scores[s][name]
            diffs = [m["ndcg@10"][q] - scores[s][reference]["ndcg@10"][q] for q in m["ndcg@10"]]
            by_kind = []
            for k in kinds:
                qs = [q for q in m["ndcg@10"] if groups[s].get(q) == k]
                by_kind.append(f"{sum(m['ndcg@10'][q] for q in qs) / len(qs):>10.4f}")
            print(
                f"{name:<{width}}  {mean(m['ndcg@10']):.4f}  {mean(m['recall@100']):.4f}"
                f"  {mean(m['mrr@10']):.4f}  {paired_bootstrap(diffs)!s:<28}" + "  ".join(by_kind)
            )


if __name__ == "__main__":
    main()
