"""Why the vector list trails the naive dense baseline — each candidate measured alone.

Exact cosine (numpy) over the pages of each shared eval set (code samples are
never judged), so that the representation is measured apart from the index:

* ``baseline``: BASELINES.md's dense row (~800-character passages, title
  prefixed, cut at the model window), best passage per page;
* ``ours``: what the store embeds (``chunk_markdown`` at 200 tokens, title and
  heading path prefixed by ``compose_context``; long texts averaged over windows);
* one change at a time: no prefix, title only, 128-token chunks, an extra
  entity-level vector (title + purpose + first paragraph + headings), and soft
  folds of a page's chunk scores instead of the best chunk;
* the store's own vector list (faiss HNSW at the default ef, top-100 chunks
  folded to pages) against exact search over the same vectors.

Vectors come from the content-hash cache (``bench/.cache``), so each text is
embedded once across every run and every variant.

    PYTHONPATH=src .venv/bin/python bench/eval_dense.py --embed-only ours baseline
    PYTHONPATH=src .venv/bin/python bench/eval_dense.py            # the tables
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dense_units import VARIANTS
from evalsets import CACHE, EvalSet, VectorCache, eval_sets, set_torch_threads, store_path

from knowledge_store.retrieval.compare import paired_bootstrap, per_query

Run = dict[str, dict[str, float]]


def units_of(eval_set: EvalSet, variant: str) -> tuple[list[str], list[str], bool]:
    """(uids, texts, truncated) of every unit of a variant, grouped by page in page order."""
    make, truncated = VARIANTS[variant]
    units = [u for page in eval_set.pages for u in make(page)]
    return [u for u, _ in units], [t for _, t in units], truncated


def query_vectors(eval_set: EvalSet, cache: VectorCache) -> np.ndarray:
    return cache.vectors([t for _, t in eval_set.queries], label=f"{eval_set.name} queries")


def embed_only(sets: Sequence[EvalSet], variants: Sequence[str], cache: VectorCache) -> None:
    for eval_set in sets:
        query_vectors(eval_set, cache)
        for variant in variants:
            _, texts, truncated = units_of(eval_set, variant)
            cache.vectors(texts, truncated=truncated, label=f"{eval_set.name} {variant}")


@dataclass
class Matrix:
    """A variant's unit vectors, grouped by page: ``starts[i]`` is page i's first row."""

    pages: list[str]
    starts: np.ndarray
    vectors: np.ndarray

    @classmethod
    def of(cls, eval_set: EvalSet, variant: str, cache: VectorCache) -> Matrix:
        uids, texts, truncated = units_of(eval_set, variant)
        vectors = cache.vectors(texts, truncated=truncated, label=f"{eval_set.name} {variant}")
        pages: list[str] = []
        starts: list[int] = []
        for row, uid in enumerate(uids):
            if not pages or pages[-1] != uid:
                pages.append(uid)
                starts.append(row)
        return cls(pages, np.asarray(starts), vectors)

    def unit_scores(self, queries: np.ndarray) -> np.ndarray:
        return queries @ self.vectors.T

    def page_max(self, scores: np.ndarray) -> np.ndarray:
        return np.maximum.reduceat(scores, self.starts, axis=1)

    def page_second(self, scores: np.ndarray, best: np.ndarray) -> np.ndarray:
        """Each page's second-best unit score (0 for a page of one unit)."""
        owner = np.repeat(np.arange(len(self.pages)), np.diff([*self.starts, scores.shape[1]]))
        masked = np.where(scores >= best[:, owner], -np.inf, scores)
        second = np.maximum.reduceat(masked, self.starts, axis=1)
        return np.where(np.isfinite(second), second, 0.0)

    def page_lse(self, scores: np.ndarray, best: np.ndarray, tau: float) -> np.ndarray:
        owner = np.repeat(np.arange(len(self.pages)), np.diff([*self.starts, scores.shape[1]]))
        summed = np.add.reduceat(np.exp((scores - best[:, owner]) / tau), self.starts, axis=1)
        return best + tau * np.log(summed)

    def top_chunks_folded(self, scores: np.ndarray, k: int = 100) -> list[dict[str, float]]:
        """What the store's vector list does: the top ``k`` units, folded to pages (best unit)."""
        owner = np.repeat(np.arange(len(self.pages)), np.diff([*self.starts, scores.shape[1]]))
        out = []
        for row in scores:
            top = np.argpartition(-row, k)[:k]
            top = top[np.argsort(-row[top])]
            run: dict[str, float] = {}
            for unit in top:
                run.setdefault(self.pages[owner[unit]], float(row[unit]))
            out.append(run)
        return out


def ranked(pages: Sequence[str], scores: np.ndarray, depth: int = 100) -> list[dict[str, float]]:
    out = []
    for row in scores:
        top = np.argpartition(-row, depth)[:depth]
        out.append({pages[i]: float(row[i]) for i in top})
    return out


OURS = "ours (200-token chunks, title+headings, exact)"
BASELINE = "baseline (800-char passages, title, exact)"


def runs_for(
    eval_set: EvalSet, cache: VectorCache, stored: Mapping[str, list[dict[str, float]]]
) -> dict[str, Run]:
    """Every variant's run on one set (each computed from cached vectors)."""
    qids = [q for q, _ in eval_set.queries]
    queries = query_vectors(eval_set, cache)
    runs: dict[str, list[dict[str, float]]] = {}
    ours = Matrix.of(eval_set, "ours", cache)
    s = ours.unit_scores(queries)
    best = ours.page_max(s)
    runs[OURS] = ranked(ours.pages, best)
    _, texts, truncated = units_of(eval_set, "baseline")
    if cache.missing(texts, truncated=truncated) == 0:
        base = Matrix.of(eval_set, "baseline", cache)
        runs[BASELINE] = ranked(base.pages, base.page_max(base.unit_scores(queries)))
    for fetch in (100, 200, 400):
        runs[f"ours, top-{fetch} chunks folded (exact)"] = [
            dict(list(run.items())[:100]) for run in ours.top_chunks_folded(s, fetch)
        ]
    if "vector" in stored:
        runs["ours, the store's vector list (HNSW ef=192)"] = stored["vector"]
    second = ours.page_second(s, best)
    for lam in (0.1, 0.3):
        runs[f"ours, fold max + {lam:g}×second"] = ranked(ours.pages, best + lam * second)
    for tau in (0.02, 0.05):
        runs[f"ours, fold soft-max τ={tau:g}"] = ranked(ours.pages, ours.page_lse(s, best, tau))
    for variant, label in (
        ("ours-trunc", "texts over the window cut, not averaged"),
        ("ours-none", "chunk text alone (no prefix)"),
        ("ours-title", "title prefix only"),
        ("ours-128", "128-token chunks"),
        ("ours-256", "256-token chunks"),
    ):
        _, texts, truncated = units_of(eval_set, variant)
        if cache.missing(texts, truncated=truncated) == 0:
            m = Matrix.of(eval_set, variant, cache)
            other = m.page_max(m.unit_scores(queries))
            runs[f"ours, {label}"] = ranked(m.pages, other)
            if variant in (
                "ours-128",
                "ours-256",
            ):  # both granularities indexed: best unit of either
                assert m.pages == ours.pages
                runs[f"ours + {label} (best of both)"] = ranked(ours.pages, np.maximum(best, other))
    if cache.missing(units_of(eval_set, "entity")[1]) == 0:
        ent = Matrix.of(eval_set, "entity", cache)
        assert ent.pages == ours.pages
        e = ent.unit_scores(queries)  # one unit per page
        runs["ours + entity vector (max)"] = ranked(ours.pages, np.maximum(best, e))
        runs["ours + 0.3×entity vector"] = ranked(ours.pages, best + 0.3 * e)
        runs["entity vector alone"] = ranked(ours.pages, e)
    return {name: dict(zip(qids, rows, strict=True)) for name, rows in runs.items()}


def report(
    eval_set: EvalSet, runs: Mapping[str, Run]
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, dict[str, float]]]]:
    """Print one set's table; returns its means and each variant's per-query scores."""
    scores = {name: per_query(eval_set.qrels, run) for name, run in runs.items()}
    names = list(runs)
    refs = [ref for ref in (OURS, BASELINE) if ref in runs]
    width = max(len(n) for n in names)
    print(
        f"\n{eval_set.name}: {len(eval_set.queries)} queries, {len(eval_set.pages)} pages (exact cosine unless named)"
    )
    print(
        f"{'variant':<{width}}  nDCG@10 R@100   MRR@10  Δ nDCG@10 vs ours [95%]      Δ nDCG@10 vs baseline [95%]"
    )
    table = {}
    for name in names:
        m = scores[name]
        means = {k: sum(v.values()) / len(v) for k, v in m.items()}
        table[name] = means
        deltas = [
            ""
            if name == ref
            else str(
                paired_bootstrap(
                    [m["ndcg@10"][q] - scores[ref]["ndcg@10"][q] for q in m["ndcg@10"]]
                )
            )
            for ref in refs
        ] + ["(baseline not embedded)"] * (2 - len(refs))
        print(
            f"{name:<{width}}  {means['ndcg@10']:.4f}  {means['recall@100']:.4f}  {means['mrr@10']:.4f}  {deltas[0]:<28} {deltas[1]}"
        )
    return table, scores


def report_macro(scores: Mapping[str, Mapping[str, Mapping[str, Mapping[str, float]]]]) -> None:
    """Δ vs ours of every variant measured on every set: macro mean, stratified bootstrap."""
    sets = list(scores)
    if len(sets) < 2:
        return
    names = [n for n in scores[sets[0]] if all(n in scores[s] for s in sets)]
    width = max(len(n) for n in names)
    print(f"\nboth sets together (equal weight per set): Δ vs {OURS!r} [95%]")
    print(f"{'variant':<{width}}  {'nDCG@10':<28} {'R@100':<28} MRR@10")
    for name in names:
        cells = []
        for m in ("ndcg@10", "recall@100", "mrr@10"):
            deltas = {
                s: [scores[s][name][m][q] - scores[s][OURS][m][q] for q in scores[s][OURS][m]]
                for s in sets
            }
            cells.append(f"{paired_bootstrap(deltas)!s:<28}")
        print(f"{name:<{width}}  " + " ".join(cells))


def stored_lists(eval_set: EvalSet, spec: str) -> dict[str, list[dict[str, float]]]:
    """The store's own lists, if ``bench/eval_adaptive.py`` collected them."""
    path = CACHE / f"lists-{store_path(eval_set, spec).name}.pickle"
    if not path.exists():
        return {}
    with path.open("rb") as handle:
        lists = pickle.load(handle)["lists"]
    out: dict[str, list[dict[str, float]]] = {}
    for qid, _ in eval_set.queries:
        for lst in lists.get(qid, []):
            out.setdefault(lst.name, []).append({u: s for u, s in lst.items})
    return out if all(len(v) == len(eval_set.queries) for v in out.values()) else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="*", help="eval set names (default: every shared set)")
    parser.add_argument("--embed-only", nargs="*", metavar="VARIANT", help="embed and stop")
    parser.add_argument("--json", help="also write the tables here")
    parser.add_argument(
        "--spec",
        default="onnx:int8",
        help="embedder (default onnx:int8, the store's default; st:sentence-transformers/"
        "all-MiniLM-L6-v2 reads phase 1's PyTorch vectors, = onnx:fp32 to cosine 0.9999)",
    )
    parser.add_argument("--threads", type=int, default=2, help="torch threads (st: specs)")
    args = parser.parse_args()
    if args.spec.startswith("st:"):
        set_torch_threads(args.threads)
    cache = VectorCache(args.spec)
    print(f"embedder: {args.spec}")
    sets = eval_sets(args.sets)
    if args.embed_only is not None:
        embed_only(sets, args.embed_only or list(VARIANTS), cache)
        return
    tables = {}
    per_set = {}
    for eval_set in sets:
        runs = runs_for(eval_set, cache, stored_lists(eval_set, args.spec))
        tables[eval_set.name], per_set[eval_set.name] = report(eval_set, runs)
    report_macro(per_set)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(tables, indent=1))


if __name__ == "__main__":
    main()
