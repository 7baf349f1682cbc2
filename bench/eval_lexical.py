"""Lexical (BM25) variants on every shared eval set: the lexical list alone and fused search.

Each variant is a Tantivy index built in ``bench/.cache/lexical/`` from the
store's own chunk documents (the lexical component's ``docs``), queried its own
way — a subclass of the embedded engine's :class:`LexicalIndex` whose schema,
documents, analyzers, ACL and filter clauses are the engine's (a phrase variant
adds word positions on ``body``). The store's lexical index is swapped
for the variant's, the lexical list is collected through the planner's own
retriever, and fused search is scored with the default fusion (``adaptive``,
graph stage included) over that list and the store's unchanged vector list.

Paired bootstrap intervals against the engine's current index, per set and
macro (both sets together, equal weight).

    PYTHONPATH=src .venv/bin/python bench/eval_lexical.py [--spec SPEC] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import tantivy

sys.path.insert(0, str(Path(__file__).resolve().parent))

from eval_adaptive import FILTERS, collected_lists
from eval_pagelex import print_macro, report_row
from evalsets import CACHE, VectorCache, build_store, eval_sets

from knowledge_store.engines.embedded import analysis
from knowledge_store.engines.embedded.lexical import LexicalIndex
from knowledge_store.model import relevance
from knowledge_store.retrieval.compare import per_query
from knowledge_store.retrieval.evaluation import Collected, Variant, collect, run_variant
from knowledge_store.retrieval.fusion import RankedList
from knowledge_store.retrieval.search import Fusion
from knowledge_store.store import KnowledgeStore

Scores = dict[str, dict[str, float]]  # measure → qid → value
REF = "shipped (model.relevance's boosts)"


@dataclass(frozen=True)
class Lex:
    """A lexical variant: field boosts (``model.relevance``'s), phrase and every-word bonuses."""

    title: float = relevance.TITLE_BOOST
    ident: float = relevance.IDENTIFIER_BOOST
    heading: float = relevance.HEADING_BOOST
    phrase: float = 0.0  # a phrase query of the query's words on body, this boost
    slop: int = 0
    all_words: float = 0.0  # a const bonus for chunks holding every query word (× max idf sum)

    def key(self) -> str:
        """Variants with the same key share one index (they differ only in the query)."""
        return f"ph{int(self.phrase > 0)}"


class VariantIndex(LexicalIndex):
    """The engine's index — its schema (with positions on ``body`` for phrase variants),
    documents and analyzers — queried the variant's way."""

    def __init__(self, path: Path, lex: Lex) -> None:
        self.lex = lex
        super().__init__(path)

    def _open(self) -> tantivy.Index:
        self._schema = analysis.schema(positions=self.lex.phrase > 0)
        return super()._open()

    def _text_query(self, text: str) -> tantivy.Query | None:
        return text_query(self, text)


def text_query(index: VariantIndex | LexicalIndex, text: str) -> tantivy.Query | None:
    """The engine's clauses (``analysis.text_clauses``) with the variant's boosts, plus its
    phrase and every-word clauses."""
    lex: Lex = getattr(index, "lex", Lex())
    query, should = tantivy.Query, tantivy.Occur.Should
    schema = index._schema
    terms = index._analyzers.query_terms(text)
    if not terms.words:
        return None
    shipped = relevance.TITLE_BOOST, relevance.HEADING_BOOST, relevance.IDENTIFIER_BOOST
    relevance.TITLE_BOOST, relevance.HEADING_BOOST, relevance.IDENTIFIER_BOOST = (
        lex.title,
        lex.heading,
        lex.ident,
    )
    try:
        clauses = analysis.text_clauses(schema, terms)
    finally:
        relevance.TITLE_BOOST, relevance.HEADING_BOOST, relevance.IDENTIFIER_BOOST = shipped
    if lex.phrase > 0 and len(terms.words) > 1:
        phrase = query.phrase_query(schema, "body", list(terms.words), slop=lex.slop)
        clauses.append((should, query.boost_query(phrase, lex.phrase)))
    if lex.all_words > 0 and len(terms.words) > 1:
        every = query.boolean_query(
            [(tantivy.Occur.Must, query.term_query(schema, "body", w)) for w in terms.words]
        )
        clauses.append((should, query.boost_query(every, lex.all_words)))
    return query.boolean_query(clauses)


def variants() -> dict[str, Lex]:
    """The field boosts around the shipped ones, phrase and every-word bonuses (the heading
    boost's own sweep is ``bench/eval_fields.py``'s)."""
    out = {REF: Lex()}
    for t in (0.0, 0.1, 0.5, 1.0):
        out[f"title {t:g}"] = Lex(title=t)
    for i in (0.5, 2.0):
        out[f"ident {i:g}"] = Lex(ident=i)
    for b in (0.5, 1.0, 2.0):
        out[f"+ phrase {b:g}"] = Lex(phrase=b)
    out["+ phrase 1, slop 2"] = Lex(phrase=1.0, slop=2)
    for b in (0.5, 1.0):
        out[f"+ every word {b:g}"] = Lex(all_words=b)
    return out


def variant_index(store: KnowledgeStore, lex: Lex) -> LexicalIndex:
    engine: Any = store.engine
    where = CACHE / "lexical" / engine.path.name / lex.key()
    latest, _ = engine.catalog.latest_publish()
    index = VariantIndex(where, lex)
    if index.watermark != latest:
        index.close()
        shutil.rmtree(where, ignore_errors=True)
        index = VariantIndex(where, lex)
        with engine.catalog.read() as conn:
            ids = engine.catalog.all_chunk_ids(conn)
        for i in range(0, len(ids), 5000):
            with engine.catalog.read() as conn:
                index.add(engine.lexical.docs(conn, ids[i : i + 5000]))
        index.commit(latest)
    return index


def lexical_lists(store: KnowledgeStore, base: Collected, lex: Lex) -> Collected:
    """``base`` with its lexical list replaced by the variant index's."""
    engine: Any = store.engine
    saved = engine.lexical_index
    engine.lexical_index = variant_index(store, lex)
    engine.views.reset()  # readers pin the indexes of a publish once: make them pin this one
    try:
        mine = collect(store, base.queries, filters=FILTERS, retrievers=["lexical"])
    finally:
        if engine.lexical_index is not saved:
            engine.lexical_index.close()
        engine.lexical_index = saved
        engine.views.reset()
    lists = {
        qid: [mine.lists[qid][0] if lst.name == "lexical" else lst for lst in base.lists[qid]]
        for qid, _ in base.queries
    }
    return replace(base, lists=lists)


def folds() -> dict[str, Callable[[list[float]], float]]:
    """How a page's chunk scores (best first) make its score in the lexical list."""
    return {
        "best chunk (today), 100 chunks": lambda s: s[0],
        "best chunk, 400 chunks": lambda s: s[0],
        "best + 0.1 × second, 100 chunks": lambda s: s[0] + 0.1 * (s[1] if len(s) > 1 else 0.0),
        "best + 0.1 × second": lambda s: s[0] + 0.1 * (s[1] if len(s) > 1 else 0.0),
        "best + 0.3 × second": lambda s: s[0] + 0.3 * (s[1] if len(s) > 1 else 0.0),
        "best + 0.1 × (sum of the next 4)": lambda s: s[0] + 0.1 * sum(s[1:5]),
    }


def _uids_scores(ranked: Any) -> tuple[list[str], list[float]]:
    return ranked.uids, ranked.scores


def fold_lists(store: KnowledgeStore, base: Collected) -> dict[str, Collected]:
    """``base`` with its lexical list folded from 400 chunk hits in each way of :func:`folds`."""
    from knowledge_store.model import Identity

    with store.engine.reader(Identity()) as reader:
        hits = {
            qid: list(zip(*_uids_scores(reader.lexical(text, 400, FILTERS)), strict=True))
            for qid, text in base.queries
        }
    out = {}
    for name, fold in folds().items():
        lists = {}
        for qid, _ in base.queries:
            chunks = hits[qid][:100] if "100 chunks" in name else hits[qid]
            by_page: dict[str, list[float]] = {}
            for uid, score in chunks:
                by_page.setdefault(uid, []).append(score)
            ranked = sorted(((u, fold(v)) for u, v in by_page.items()), key=lambda x: -x[1])[:100]
            lex = RankedList("lexical", ranked)
            lists[qid] = [lex if lst.name == "lexical" else lst for lst in base.lists[qid]]
        out[name] = replace(base, lists=lists)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="*")
    parser.add_argument("--spec", default="onnx:int8", help="the stores' embedder")
    parser.add_argument("--only", nargs="*", help="variant names (prefixes)")
    parser.add_argument("--folds", action="store_true", help="chunk folds instead of indexes")
    args = parser.parse_args()
    if args.folds:
        main_folds(args)
        return
    chosen = {
        n: v
        for n, v in variants().items()
        if not args.only or n == REF or any(n.startswith(o) for o in args.only)
    }
    fusion = Fusion.of(None)
    scores: dict[str, dict[str, dict[str, Scores]]] = {}  # set → variant → list → scores
    for eval_set in eval_sets(args.sets):
        path = build_store(eval_set, VectorCache(args.spec))
        with KnowledgeStore.open(path) as store:
            base = collected_lists(eval_set, store)
            scores[eval_set.name] = {}
            for name, lex in chosen.items():
                col = lexical_lists(store, base, lex)
                runs = {
                    "lexical": run_variant(col, Variant("lexical", single="lexical")),
                    "fused": run_variant(col, Variant("fused", fusion=fusion)),
                }
                scores[eval_set.name][name] = {
                    k: per_query(eval_set.qrels, r) for k, r in runs.items()
                }
                report_row(eval_set.name, name, scores[eval_set.name], REF)
    print_macro(scores, list(chosen), REF)


def main_folds(args: argparse.Namespace) -> None:
    ref = "best chunk (today), 100 chunks"
    fusion = Fusion.of(None)
    scores: dict[str, dict[str, dict[str, Scores]]] = {}
    for eval_set in eval_sets(args.sets):
        path = build_store(eval_set, VectorCache(args.spec))
        with KnowledgeStore.open(path) as store:
            base = collected_lists(eval_set, store)
            scores[eval_set.name] = {}
            for name, col in fold_lists(store, base).items():
                runs = {
                    "lexical": run_variant(col, Variant("lexical", single="lexical")),
                    "fused": run_variant(col, Variant("fused", fusion=fusion)),
                }
                scores[eval_set.name][name] = {
                    k: per_query(eval_set.qrels, r) for k, r in runs.items()
                }
                report_row(eval_set.name, name, scores[eval_set.name], ref)
    print_macro(scores, list(folds()), ref)


if __name__ == "__main__":
    main()
