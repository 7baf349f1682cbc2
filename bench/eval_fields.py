"""Chunk-level BM25 fields (issue 16, stop 20): a heading field, and BM25's k1/b.

The engine's chunk document has ``body`` = title + heading path + text, ``title``
(× TITLE_BOOST), ``heading`` (the last heading below the title, × HEADING_BOOST; added
by this stop) and ``ident``. This script builds a side Tantivy index over the store's
own chunks (the catalog's rows; the engine's analyzers, fields and query via
``analysis.text_clauses``; ``codeSample`` excluded in the query, as the engine's
filter does, so BM25's statistics are the store's) and measures:

* the ``heading`` field at boosts 0 (the engine before it) to 2, and instead of it
  ``hpath``, the whole heading path below the title, each queried with every word;
* with ``--ideas``: query words on more than a share of the chunks left out of the
  BM25 query, and fixed floors for the lexical and vector lists in the fusion;
* with ``--k1b``: BM25 with other k1/b, computed in numpy over the same analyzed
  tokens (Tantivy fixes k1 = 1.2, b = 0.75), the control being the same numpy
  BM25 at 1.2 / 0.75.

Each variant's chunk hits fold to pages by the best chunk (100 chunks asked; a
short answer holds every match: floor 0), replace the store's lexical list, and
fused search is the default fusion (``adaptive``, graph stage included) — the
same code as ``ks eval``. Δ nDCG@10 with paired bootstrap intervals per set and
macro (both sets, equal weight, stratified), against the store's own lists ("today";
docs/relevance.md §8 ran on stores built before the heading field, so "today" there is
boost 0, which the side index reproduces exactly).

    PYTHONPATH=$PWD/src:$PWD/bench .venv/bin/python bench/eval_fields.py \
        --set /tmp/h20/pg15 /work/shared/eval/postgres-docs \
        --set /tmp/h20/faq /work/shared/eval/sqlite-git-faq [--k1b | --ideas] [--heading-boost 0]
    # through the engine, on stores built with the heading field (either engine):
    PYTHONPATH=$PWD/src:$PWD/bench .venv/bin/python bench/eval_fields.py --engine \
        --set pg:/tmp/h20/pgdb /work/shared/eval/postgres-docs
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager as ContextManager
from pathlib import Path

import numpy as np
import tantivy
from eval_pagelex import (
    FILTERS,
    Floored,
    Scores,
    add_all,
    fused_run,
    listed,
    print_macro,
    report_row,
    side_index,
    store_lists,
    swap,
    with_lists,
)

from knowledge_store.engines.embedded import analysis
from knowledge_store.engines.embedded.analysis import Analyzers
from knowledge_store.model import compose_context, last_heading, relevance
from knowledge_store.model.queries import QueryFeatures
from knowledge_store.retrieval.compare import per_query
from knowledge_store.retrieval.evaluation import (
    Collected,
    Variant,
    collect,
    read_qrels,
    read_queries,
    run_variant,
)

EXCLUDED = "codeSample"
ASKED = 100  # LexicalRetriever asks k × CHUNKS_PER_ENTITY = 100 chunks
Hits = list[tuple[str, float]]  # (uid, chunk score), best first


def chunk_rows(store_path: str) -> list[tuple[str, str, str, list[str], str]]:
    """``(uid, type, title, heading path, text)`` of every chunk in the catalog."""
    conn = sqlite3.connect(f"file:{store_path}/catalog.sqlite?mode=ro", uri=True)
    rows = conn.execute(
        "SELECT e.uid, e.type, e.title, c.heading, c.text FROM chunks c"
        " JOIN entities e ON e.id = c.entity ORDER BY c.id"
    ).fetchall()
    conn.close()
    return [(u, ty, ti, json.loads(h), tx) for u, ty, ti, h, tx in rows]


def below_title(title: str, heading: Sequence[str]) -> list[str]:
    """The heading path as ``compose_context`` writes it: the headings other than the title."""
    return [h for h in heading if h and h != title]


class FieldIndex:
    """The engine's chunk document plus ``hpath`` / ``hlast`` heading fields."""

    def __init__(self, rows: Sequence[tuple[str, str, str, list[str], str]], where: Path) -> None:
        self.schema, self.index, self.analyzers = side_index(
            where, ("body", "title", "heading", "hpath"), keywords=("type",)
        )
        add_all(
            self.index,
            (
                {
                    "uid": uid,
                    "type": type_,
                    "body": compose_context(title, heading, text),
                    "title": title,
                    "ident": compose_context(title, heading, text),
                    "heading": last_heading(title, heading),
                    "hpath": " \n".join(below_title(title, heading)),
                }
                for uid, type_, title, heading, text in rows
            ),
        )
        self.searcher = self.index.searcher()

    def search(
        self,
        text: str,
        heading: float | None = None,
        path: float = 0.0,
        max_df: float = 1.0,
    ) -> Hits:
        """The engine's query, with the ``heading`` field × ``heading`` (None: the engine's
        HEADING_BOOST) and the ``hpath`` field × ``path``; words on more than ``max_df`` of
        the chunks' bodies are left out of it (the rarest word always stays)."""
        q, should = tantivy.Query, tantivy.Occur.Should
        terms = self.analyzers.query_terms(text)
        if not terms.words:
            return []
        if max_df < 1.0:
            n = self.searcher.num_docs
            df = {w: self.searcher.doc_freq("body", w) for w in terms.words}
            rarest = min(terms.words, key=lambda w: df[w])
            kept = tuple(w for w in terms.words if w == rarest or df[w] <= max_df * n)
            terms = analysis.QueryTerms(kept, terms.idents)
        shipped = relevance.HEADING_BOOST
        relevance.HEADING_BOOST = shipped if heading is None else heading
        try:
            clauses = analysis.text_clauses(self.schema, terms)
        finally:
            relevance.HEADING_BOOST = shipped
        if path > 0:
            clauses += [
                (should, q.boost_query(q.term_query(self.schema, "hpath", w), path))
                for w in terms.words
            ]
        query = q.boolean_query(
            [
                (tantivy.Occur.Must, q.boolean_query(clauses)),
                (tantivy.Occur.MustNot, q.term_query(self.schema, "type", EXCLUDED)),
            ]
        )
        hits = self.searcher.search(query, limit=ASKED, count=False).hits
        return [(str(self.searcher.doc(a).get_first("uid")), float(s)) for s, a in hits]


class NumpyBM25:
    """The engine's query (body, title × TITLE_BOOST, heading × HEADING_BOOST, ident ×
    IDENTIFIER_BOOST) scored in numpy with any k1/b, over the tokens the engine's analyzers
    give (Tantivy's idf; exact lengths, where Tantivy quantises them to a byte)."""

    def __init__(self, rows: Sequence[tuple[str, str, str, list[str], str]]) -> None:
        self.analyzers = Analyzers()
        self.uids = np.array([r[0] for r in rows], dtype=object)
        self.excluded = np.array([r[1] == EXCLUDED for r in rows])
        self.fields: dict[str, tuple[dict[str, dict[int, int]], np.ndarray]] = {}
        texts = {
            "body": [compose_context(ti, h, tx) for _, _, ti, h, tx in rows],
            "title": [ti for _, _, ti, _, _ in rows],
            "heading": [last_heading(ti, h) for _, _, ti, h, _ in rows],
        }
        texts["ident"] = texts["body"]
        for name, column in texts.items():
            analyzer = self.analyzers.ident if name == "ident" else self.analyzers.words
            postings: dict[str, dict[int, int]] = {}
            lengths = np.zeros(len(rows))
            for i, t in enumerate(column):
                tokens = analyzer.analyze(t)
                lengths[i] = len(tokens)
                for tok in tokens:
                    row = postings.setdefault(tok, {})
                    row[i] = row.get(i, 0) + 1
            self.fields[name] = (postings, lengths)

    def _field(self, name: str, terms: Sequence[str], k1: float, b: float) -> np.ndarray:
        postings, lengths = self.fields[name]
        n, avg = len(lengths), float(lengths.mean())
        out = np.zeros(n)
        norm = k1 * (1 - b + b * lengths / avg)
        for term in terms:
            row = postings.get(term)
            if not row:
                continue
            idx = np.fromiter(row.keys(), dtype=np.int64, count=len(row))
            tf = np.fromiter(row.values(), dtype=np.float64, count=len(row))
            idf = np.log(1 + (n - len(row) + 0.5) / (len(row) + 0.5))
            out[idx] += idf * tf * (k1 + 1) / (tf + norm[idx])
        return out

    def search(self, text: str, k1: float, b: float) -> Hits:
        terms = self.analyzers.query_terms(text)
        if not terms.words:
            return []
        score = self._field("body", terms.words, k1, b)
        for name, boost in (("title", relevance.TITLE_BOOST), ("heading", relevance.HEADING_BOOST)):
            if boost > 0:
                score += boost * self._field(name, terms.words, k1, b)
        if terms.idents:
            score += relevance.IDENTIFIER_BOOST * self._field("ident", terms.idents, k1, b)
        score[self.excluded] = 0.0
        matched = np.flatnonzero(score > 0)
        top = matched[np.argsort(-score[matched], kind="stable")[:ASKED]]
        return [(str(self.uids[i]), float(score[i])) for i in top]


def fold(hits: Hits) -> tuple[Hits, bool]:
    """Best chunk per page, and whether the answer held every match (fewer than asked)."""
    pages: dict[str, float] = {}
    for uid, score in hits:
        pages.setdefault(uid, score)
    return list(pages.items()), len(hits) < ASKED


def measure(
    store_path: str, set_dir: str, work: Path, k1b: bool, ideas: bool
) -> dict[str, dict[str, Scores]]:
    name = Path(set_dir).name
    from knowledge_store.store import KnowledgeStore

    out: dict[str, dict[str, Scores]] = {}
    with KnowledgeStore.open(store_path) as store:
        base, queries, qrels = store_lists(store, store_path, set_dir, work)

        def score(label: str, col: Collected) -> None:
            out[label] = {
                "lexical": per_query(qrels, run_variant(col, Variant("l", single="lexical"))),
                "fused": per_query(qrels, fused_run(col)),
            }
            report_row(name, label, out)

        def lexical_from(search: Callable[[str], Hits]) -> Collected:
            text = dict(queries)
            lists = {}
            for q, ls in base.lists.items():
                pages, whole = fold(search(text[q]))
                lists[q] = swap(ls, "lexical", listed("lexical", pages, whole))
            return with_lists(base, lists)

        score("today", base)
        rows = chunk_rows(store_path)
        if k1b:
            bm25 = NumpyBM25(rows)
            print(f"{name}: numpy BM25 over {len(rows)} chunks", flush=True)
            score(
                "numpy BM25 k1=1.2 b=0.75 (control)",
                lexical_from(lambda t: bm25.search(t, 1.2, 0.75)),
            )
            for k1, b in (
                (0.9, 0.4),
                (0.9, 0.75),
                (1.2, 0.5),
                (1.2, 0.9),
                (1.5, 0.75),
                (2.0, 0.75),
            ):
                col = lexical_from(lambda t, k1=k1, b=b: bm25.search(t, k1, b))
                score(f"numpy BM25 k1={k1:g} b={b:g}", col)
            return out
        index = FieldIndex(rows, work / f"{name}-fields")
        score("side index, engine query (control)", lexical_from(index.search))
        score("side index, heading boost 0 (before)", lexical_from(lambda t: index.search(t, 0)))
        if ideas:
            for share in (0.02, 0.05, 0.1, 0.2):
                col = lexical_from(lambda t, m=share: index.search(t, 0, max_df=m))
                score(f"query words on > {share:g} of the chunks left out", col)
            for label, floors in (
                ("lexical floor 0 always", {"lexical": 0.0}),
                ("vector floor 0 (cosine)", {"vector": 0.0}),
                ("vector floor 0.2 (cosine)", {"vector": 0.2}),
                ("lexical and vector floor 0", {"lexical": 0.0, "vector": 0.0}),
            ):
                run = fused_run(base, lambda t, f=floors: Floored(t, floors=f))
                out[label] = {"lexical": out["today"]["lexical"], "fused": per_query(qrels, run)}
                report_row(name, label, out)
            return out
        boosts = (0.05, 0.1, 0.15, 0.25, 0.5, 1.0, 2.0)
        for boost in boosts:
            col = lexical_from(lambda t, w=boost: index.search(t, 0, path=w))
            score(f"+ heading path field × {boost:g}", col)
        for boost in boosts:
            col = lexical_from(lambda t, w=boost: index.search(t, w))
            score(f"+ last heading field × {boost:g}", col)
    return out


BEFORE = "before"


@contextlib.contextmanager
def without_heading_field() -> Iterator[None]:
    """Both engines' heading boost at 0 (they read it at query time): before stop 20."""
    shipped = relevance.HEADING_BOOST
    relevance.HEADING_BOOST = 0.0
    try:
        yield
    finally:
        relevance.HEADING_BOOST = shipped


@contextlib.contextmanager
def with_function_words() -> Iterator[None]:
    """Every query analysed as a keyword query — a question keeps its function words (the
    embedded engine before stop 21; PostgreSQL's index drops them anyway)."""
    shipped = analysis.query_features
    analysis.query_features = lambda text: QueryFeatures(1, False, ())
    try:
        yield
    finally:
        analysis.query_features = shipped


def engine_before_after(
    store_path: str, set_dir: str, before: Callable[[], ContextManager[None]]
) -> dict[str, dict[str, Scores]]:
    """The store's own lists (any engine; ``pg:`` for PostgreSQL) inside ``before`` and as
    shipped: the through-the-engine Δ, paired per query."""
    from knowledge_store.store import KnowledgeStore

    name = Path(set_dir).name
    qrels = read_qrels(f"{set_dir}/qrels.tsv")
    queries = [(q, t) for q, t in read_queries(f"{set_dir}/queries.jsonl") if q in qrels]
    out: dict[str, dict[str, Scores]] = {}

    def lists() -> dict[str, Scores]:
        col = collect(store, queries, filters=FILTERS)
        return {
            "lexical": per_query(qrels, run_variant(col, Variant("l", single="lexical"))),
            "fused": per_query(qrels, fused_run(col)),
        }

    with KnowledgeStore.open(store_path) as store:
        with before():
            out[BEFORE] = lists()
        out["today"] = lists()
    report_row(name, "today", out, BEFORE)  # Δ = shipped − before
    return out


def latency(store_path: str, set_dir: str, rounds: int = 2) -> None:
    """The embedded lexical primitive's time per query (k = 100, ``codeSample`` excluded) with
    the heading boost at 0 and as shipped, interleaved query by query over the set."""
    from knowledge_store.engines.embedded.lexical import LexicalIndex

    texts = [t for _, t in read_queries(f"{set_dir}/queries.jsonl")]
    shipped = relevance.HEADING_BOOST
    times: dict[float, list[float]] = {0.0: [], shipped: []}
    index = LexicalIndex(Path(store_path) / "lexical")
    try:
        for _ in range(rounds):
            for text in texts:
                for boost, spent in times.items():
                    relevance.HEADING_BOOST = boost
                    started = time.perf_counter()
                    index.search(text, 100, principals=None, filters=FILTERS)
                    spent.append((time.perf_counter() - started) * 1000)
    finally:
        relevance.HEADING_BOOST = shipped
        index.close()
    for boost, spent in times.items():
        spent.sort()
        p50, p95 = spent[len(spent) // 2], spent[int(len(spent) * 0.95)]
        print(f"{Path(set_dir).name}: heading boost {boost:g}: p50 {p50:.3f} ms, p95 {p95:.3f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--set", nargs=2, action="append", metavar=("STORE", "SET_DIR"), required=True
    )
    parser.add_argument("--work", type=Path, default=Path("/tmp/eval_fields"))
    parser.add_argument("--k1b", action="store_true", help="BM25 k1/b in numpy instead")
    parser.add_argument("--ideas", action="store_true", help="query-word df cutoff; list floors")
    parser.add_argument(
        "--heading-boost",
        type=float,
        default=relevance.HEADING_BOOST,
        help="the engine's heading boost for this run (0: the engine before the field)",
    )
    parser.add_argument(
        "--engine",
        action="store_true",
        help="only the store's own lists, heading boost 0 vs shipped (either engine)",
    )
    parser.add_argument(
        "--function-words",
        action="store_true",
        help="only the store's own lists, questions with their function words vs shipped",
    )
    parser.add_argument(
        "--latency", action="store_true", help="the embedded lexical primitive's time per query"
    )
    args = parser.parse_args()
    if args.latency:
        for store_path, set_dir in args.set:
            latency(store_path, set_dir)
        return
    if args.engine or args.function_words:
        before = with_function_words if args.function_words else without_heading_field
        print_macro(
            {Path(d).name: engine_before_after(s, d, before) for s, d in args.set}, ref=BEFORE
        )
        return
    relevance.HEADING_BOOST = args.heading_boost
    args.work.mkdir(parents=True, exist_ok=True)
    scores = {Path(d).name: measure(s, d, args.work, args.k1b, args.ideas) for s, d in args.set}
    print_macro(scores)


if __name__ == "__main__":
    main()
