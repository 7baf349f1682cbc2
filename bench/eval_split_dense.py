"""Dense granularity by query form (issue 16): 128-token units for index terms, 200 for questions.

docs/relevance.md §6.1 measured 128-token chunks alone: +0.025 nDCG@10 on the
dense list for postgres-docs (index terms), −0.077 on sqlite-git-faq (questions).
The adaptive fusion already tells the two apart (``query_features(text)
.natural_language``). This script measures, in fused search (the default fusion,
graph stage included, over the store's lexical list with its floor):

* the store's vector list replaced by exact cosine over our 200-token chunks (control);
* replaced by exact cosine over 128-token chunks for every query;
* 128-token units for keyword-style queries only, 200 for questions;
* the 128-token list as a third list beside the store's vector list.

Vectors come from ``bench/.cache/vectors.sqlite`` (``bench/eval_dense.py
--embed-only ours ours-128`` fills it); the store's lists from the cache
``bench/eval_pagelex.py`` writes (run it first).

    PYTHONPATH=src:bench .venv/bin/python bench/eval_split_dense.py \
        --set /tmp/ev/pg15 postgres-docs --set /tmp/ev/sqlite-git-faq sqlite-git-faq
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from dense_units import VARIANTS
from eval_dense import Matrix, query_vectors
from eval_pagelex import (
    ThirdList,
    add_all,
    fused_run,
    report_row,
    side_index,
    store_lists,
    with_lists,
)
from evalsets import SHARED_EVAL, VectorCache, eval_sets

from knowledge_store.retrieval.adaptive import query_features
from knowledge_store.retrieval.compare import paired_bootstrap, per_query
from knowledge_store.retrieval.fusion import RankedList
from knowledge_store.store import KnowledgeStore

Scores = dict[str, dict[str, float]]


def folded(matrix: Matrix, queries: np.ndarray, k: int = 100) -> list[list[tuple[str, float]]]:
    """Each query's top ``k`` units folded to pages (best unit): what the store's list does."""
    runs = matrix.top_chunks_folded(matrix.unit_scores(queries), k)
    return [sorted(r.items(), key=lambda x: -x[1]) for r in runs]


class UnitIndex:
    """BM25 over units ``(uid, title, text)`` with the engine's analyzers, fields and query."""

    def __init__(self, units: Sequence[tuple[str, str, str]], where: Path) -> None:
        import tantivy

        self.tantivy = tantivy
        self.schema, self.index, self.analyzers = side_index(where, ("body", "title"))
        add_all(
            self.index,
            (
                {"uid": uid, "body": text, "title": title, "ident": text}
                for uid, title, text in units
            ),
        )
        self.searcher = self.index.searcher()

    def folded(self, text: str, k: int = 100) -> tuple[list[tuple[str, float]], bool]:
        """The top ``k`` units folded to pages (best unit), and whether they were every match."""
        from knowledge_store.engines.embedded import analysis

        terms = self.analyzers.query_terms(text)
        if not terms.words:
            return [], True
        clauses = analysis.text_clauses(self.schema, terms, heading=False)  # units: no headings
        query = self.tantivy.Query.boolean_query(clauses)
        hits = self.searcher.search(query, limit=k, count=False).hits
        pages: dict[str, float] = {}
        for score, address in hits:
            pages.setdefault(str(self.searcher.doc(address).get_first("uid")), float(score))
        return list(pages.items()), len(hits) < k


def measure(store_path: str, set_name: str, work: Path) -> dict[str, dict[str, Scores]]:
    (eval_set,) = eval_sets([set_name])
    cache = VectorCache()
    qrels = eval_set.qrels
    queries = [(q, t) for q, t in eval_set.queries if q in qrels]
    vectors = query_vectors(eval_set, cache)
    row = {q: i for i, (q, _) in enumerate(eval_set.queries)}
    dense = {
        variant: folded(Matrix.of(eval_set, variant, cache), vectors)
        for variant in ("ours", "ours-128")
    }
    out: dict[str, dict[str, Scores]] = {}
    with KnowledgeStore.open(store_path) as store:
        base, _, _ = store_lists(store, store_path, str(SHARED_EVAL / set_name), work)
        keyword = {q for q, t in queries if not query_features(t).natural_language}
        print(f"{set_name}: {len(keyword)} of {len(queries)} queries keyword-style", flush=True)

        def vector_of(q: str, variant: str) -> RankedList:
            return RankedList("vector", dense[variant][row[q]])

        def swapped(pick: Mapping[str, str]) -> Any:
            """``pick[q]``: a cached variant's exact list for query q; "store": the store's."""
            return with_lists(
                base,
                {
                    q: [
                        vector_of(q, pick[q]) if x.name == "vector" and pick[q] != "store" else x
                        for x in ls
                    ]
                    for q, ls in base.lists.items()
                },
            )

        def score(label: str, col: Any, fused: Any) -> None:
            from knowledge_store.retrieval.evaluation import Variant, run_variant

            out[label] = {
                "lexical": per_query(qrels, run_variant(col, Variant("l", single="lexical"))),
                "fused": per_query(qrels, fused),
            }
            report_row(set_name, label, out)

        score("today", base, fused_run(base))
        make, _ = VARIANTS["ours-128"]
        units = [(u, page["title"], t) for page in eval_set.pages for u, t in make(page)]
        lex128 = UnitIndex(units, work / f"{set_name}-lex128")
        found = {q: lex128.folded(t) for q, t in queries}

        def lexical_128(pick: Collection[str]) -> Any:
            return with_lists(
                base,
                {
                    q: [
                        RankedList("lexical", found[q][0], 0.0 if found[q][1] else None)
                        if x.name == "lexical" and q in pick
                        else x
                        for x in ls
                    ]
                    for q, ls in base.lists.items()
                },
            )

        col = lexical_128({q for q, _ in queries})
        score("lexical = 128-token units", col, fused_run(col))
        col = lexical_128(keyword)
        score("lexical = 128-token units for keyword queries", col, fused_run(col))
        col = swapped({q: "ours" for q, _ in queries})
        score("vector = exact 200-token chunks", col, fused_run(col))
        col = swapped({q: "ours-128" for q, _ in queries})
        score("vector = exact 128-token chunks", col, fused_run(col))
        col = swapped({q: "ours-128" if q in keyword else "ours" for q, _ in queries})
        score("vector = 128 for keyword queries, 200 else", col, fused_run(col))
        col = swapped({q: "ours-128" if q in keyword else "store" for q, _ in queries})
        score("vector = 128 for keyword queries, the store's else", col, fused_run(col))
        third = with_lists(
            base,
            {
                q: [*ls, RankedList("vector128", dense["ours-128"][row[q]])]
                for q, ls in base.lists.items()
            },
        )
        for w in (0.5, 1.0):
            score(
                f"+ 128-token list, weight {w:g} × vector",
                third,
                fused_run(third, lambda t, w=w: ThirdList(t, w, "vector128", "vector")),
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", nargs=2, action="append", metavar=("STORE", "SET"), required=True)
    parser.add_argument("--work", type=Path, default=Path("/tmp/eval_pagelex"))
    args = parser.parse_args()
    scores = {name: measure(store, name, args.work) for store, name in args.set}
    if len(scores) < 2:
        return
    print("\nmacro (both sets, equal weight), Δ fused nDCG@10 vs today:")
    for label in next(iter(scores.values())):
        deltas: dict[str, Sequence[float]] = {
            s: [
                t[label]["fused"]["ndcg@10"][q] - t["today"]["fused"]["ndcg@10"][q]
                for q in t["today"]["fused"]["ndcg@10"]
            ]
            for s, t in scores.items()
        }
        means = {
            s: statistics.mean(t[label]["fused"]["ndcg@10"].values()) for s, t in scores.items()
        }
        shown = " ".join(f"{s} {m:.4f}" for s, m in means.items())
        print(f"  {label:<48} {shown} macro Δ {paired_bootstrap(deltas)}", flush=True)


if __name__ == "__main__":
    main()
