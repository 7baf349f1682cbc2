"""The two engines on one eval set, query by query: where their fused lists differ, and why.

For each ``--pair EMBEDDED_STORE PG_STORE SET_DIR`` (the same corpus ingested into an
embedded store and a PostgreSQL one), the lists ``ks eval`` collects (``codeSample``
excluded) are read from both stores, and:

* each store's model id — two stores on different embedders (ONNX fp32 vs int8) are
  not an engine comparison, and the script says so first;
* lexical, vector and fused nDCG@10 / R@100 / MRR@10 per engine, and the paired
  Δ PostgreSQL − embedded with its 95 % bootstrap interval;
* the attribution: fused search recomputed with one list taken from the other engine
  (lexical, vector, or the graph stage's expansion), the rest kept — the default
  fusion, as ``ks eval`` runs it; whichever swap moves a query is why it differs;
* for each query whose fused nDCG@10 differs, the lexical query terms each engine
  analyses (Tantivy's analyzer; PostgreSQL's ``ks_query_words`` / ``ks_query_idents``) and how many
  of each list's top 10 entities the other list shares.

    PYTHONPATH=$PWD/src:$PWD/bench .venv/bin/python bench/eval_engines.py \\
        --pair /tmp/h21/faq pg:/tmp/h21/pgfaq ../shared/eval/sqlite-git-faq \\
        --pair /tmp/h21/pg15 pg:/tmp/h21/pgdb ../shared/eval/postgres-docs

docs/relevance.md §9 has the figures this printed.
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from eval_pagelex import FILTERS, judged_queries

from knowledge_store.engines.embedded.analysis import Analyzers
from knowledge_store.engines.postgres.lexical import lexical_statement
from knowledge_store.model import Filters
from knowledge_store.retrieval.compare import paired_bootstrap, per_query
from knowledge_store.retrieval.evaluation import collect
from knowledge_store.retrieval.fusion import RankedList
from knowledge_store.retrieval.search import Fusion, fuse_stages
from knowledge_store.store import KnowledgeStore

ENGINES = ("embedded", "postgres")
Expand = Callable[[tuple[str, ...]], Sequence[RankedList]]
Scores = dict[str, dict[str, float]]  # measure → qid → value


def _run(uids: Sequence[str]) -> dict[str, float]:
    return {uid: float(len(uids) - i) for i, uid in enumerate(uids)}


def _list(lists: Sequence[RankedList], name: str) -> RankedList:
    return next((lst for lst in lists if lst.name == name), RankedList(name, []))


def _fused(
    queries: Sequence[tuple[str, str]],
    lexical: Mapping[str, Sequence[RankedList]],
    vector: Mapping[str, Sequence[RankedList]],
    expand: Expand,
) -> dict[str, dict[str, float]]:
    """The default fusion over the query lists taken from two (or one) engines."""
    run = {}
    for qid, text in queries:
        fusion, _ = Fusion.of(None).for_query(text)
        lists = [_list(vector[qid], "vector"), _list(lexical[qid], "lexical")]
        fused, _, _ = fuse_stages(fusion, lists, expand)
        run[qid] = _run([f.uid for f in fused[:100]])
    return run


def _model(store: KnowledgeStore) -> str:
    model = store.engine.writer.model()
    return "none" if model is None else str(model[0])


def _query_terms(pg: KnowledgeStore, text: str) -> tuple[list[str], list[str]]:
    """PostgreSQL's analysis of a query, as its BM25 statement makes it: its
    ``ks_query_words`` and ``ks_query_idents`` terms."""
    params = lexical_statement("bm25", (), text, 1, Filters()).params
    with pg.reader() as reader:
        run: Any = reader.engine._run  # the reader's one-statement helper, as its methods use
        words = [str(r[0]) for r in run(_TERMS.format("ks_query_words"), params)]
        idents = [str(r[0]) for r in run(_TERMS.format("ks_query_idents"), params)]
    return words, idents


_TERMS = "SELECT term FROM {}(%(text)s, %(question)s)"


def _overlap(a: RankedList, b: RankedList, depth: int = 10) -> int:
    return len({u for u, _ in a.items[:depth]} & {u for u, _ in b.items[:depth]})


def compare_pair(embedded_path: str, pg_path: str, set_dir: str) -> None:
    name = Path(set_dir).name
    queries, qrels = judged_queries(set_dir)
    stores = {
        e: KnowledgeStore.open(p) for e, p in zip(ENGINES, (embedded_path, pg_path), strict=True)
    }
    try:
        models = {e: _model(s) for e, s in stores.items()}
        print(f"\n== {name}: {len(queries)} queries; models {models}")
        if len(set(models.values())) > 1:
            print("   ! the stores hold different embedders: the vector lists differ by model")
        collected = {e: collect(s, queries, filters=FILTERS) for e, s in stores.items()}
        lists = {e: c.lists for e, c in collected.items()}
        expand = {e: c.expand for e, c in collected.items()}
        scores: dict[tuple[str, str], Scores] = {}
        for e in ENGINES:
            for lst in ("lexical", "vector"):
                run = {q: _run([u for u, _ in _list(lists[e][q], lst).items]) for q, _ in queries}
                scores[(e, lst)] = per_query(qrels, run)
            scores[(e, "fused")] = per_query(qrels, _fused(queries, lists[e], lists[e], expand[e]))
        print("list     measure     embedded  postgres  Δ postgres − embedded [95 %]")
        for lst, measure in itertools.product(
            ("lexical", "vector", "fused"), scores[ENGINES[0], "fused"]
        ):
            a, b = scores[("embedded", lst)][measure], scores[("postgres", lst)][measure]
            delta = paired_bootstrap([b[q] - a[q] for q in a])
            mean_a, mean_b = sum(a.values()) / len(a), sum(b.values()) / len(b)
            print(f"{lst:<8} {measure:<11} {mean_a:8.4f}  {mean_b:8.4f}  {delta}")
        _attribute(queries, qrels, lists, expand, stores["postgres"])
    finally:
        for store in stores.values():
            store.close()


def _attribute(
    queries: Sequence[tuple[str, str]],
    qrels: Mapping[str, Any],
    lists: Mapping[str, Mapping[str, Sequence[RankedList]]],
    expand: Mapping[str, Expand],
    pg: KnowledgeStore,
) -> None:
    """Fused nDCG@10 with each list from the other engine, and the queries that move."""
    ndcg: dict[tuple[str, str, str], dict[str, float]] = {}
    for lex, vec, graph in itertools.product(ENGINES, repeat=3):
        run = _fused(queries, lists[lex], lists[vec], expand[graph])
        ndcg[(lex, vec, graph)] = per_query(qrels, run, ("ndcg@10",))["ndcg@10"]
    e, p = ENGINES
    base, other = ndcg[(e, e, e)], ndcg[(p, p, p)]
    print("\nfused nDCG@10 with lists from (lexical, vector, graph):")
    for combo, values in ndcg.items():
        print(f"  {'/'.join(combo):<29} {sum(values.values()) / len(values):.4f}")
    moved = [q for q, _ in queries if any(abs(v[q] - base[q]) > 1e-9 for v in ndcg.values())]
    print(f"\n{len(moved)} queries move; Δ fused from swapping in PostgreSQL's list alone:")
    print("qid               lexical   vector    graph     all       lexical top-10 shared")
    analyzers = Analyzers()
    text = dict(queries)
    for q in moved:
        swaps = [ndcg[c][q] - base[q] for c in ((p, e, e), (e, p, e), (e, e, p), (p, p, p))]
        shared = _overlap(_list(lists[e][q], "lexical"), _list(lists[p][q], "lexical"))
        print(f"{q:<17} " + " ".join(f"{d:+.3f}   " for d in swaps) + f"{shared}/10")
        if abs(other[q] - base[q]) > 1e-9:
            terms = analyzers.query_terms(text[q])
            words, idents = _query_terms(pg, text[q])
            print(f"    {text[q][:100]!r}")
            print(f"    tantivy: {list(terms.words)} {list(terms.idents)}")
            print(f"    postgres: {sorted(words)} {sorted(idents)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--pair",
        nargs=3,
        action="append",
        required=True,
        metavar=("EMBEDDED_STORE", "PG_STORE", "SET_DIR"),
    )
    args = parser.parse_args()
    for embedded_path, pg_path, set_dir in args.pair:
        compare_pair(embedded_path, pg_path, set_dir)


if __name__ == "__main__":
    main()
