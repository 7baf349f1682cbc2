"""Page-level lexical lists (issue 16): BM25 over whole pages beside the chunk-level BM25.

The store's lexical list ranks *chunks* and folds them to pages by the best
chunk, so a chunk that repeats a term beats the page the term is about. This
script builds a second Tantivy index with **one document per entity** (title +
the whole body; the engine's analyzers and the engine's query: every word on
``body``, ``title`` × TITLE_BOOST, identifiers on ``ident``) and measures, on
both shared sets, against the store's lists as ``ks eval`` collects them:

* ``page`` alone, and ``page`` in place of the chunk-level lexical list;
* the lexical list as a fold of both (``norm(chunk) + β × norm(page)``);
* ``page`` as a third list in the default fusion (weight ``w ×`` the lexical weight
  the adaptive fusion chose for the query);
* the lexical fold "best + 0.1 × second chunk" over 400 chunk hits (idea 2 of the brief).

Each variant's lexical and fused nDCG@10 / R@100 / MRR@10, and the paired
bootstrap interval of its Δ against today's lists, per set and macro (both sets,
equal weight, stratified). The stores are only read; the page indexes live
under ``--work``.

    PYTHONPATH=src .venv/bin/python bench/eval_pagelex.py \
        --set /tmp/ev/pg15 /work/shared/eval/postgres-docs \
        --set /tmp/ev/sqlite-git-faq /work/shared/eval/sqlite-git-faq
    # the floor's before/after alone, on any engine's store:
    PYTHONPATH=src .venv/bin/python bench/eval_pagelex.py --floor-only \
        --set pg:/tmp/pg-eval /work/shared/eval/postgres-docs
"""

from __future__ import annotations

import argparse
import pickle
import re
import shutil
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import tantivy
from evalsets import scoring_key

from knowledge_store.engines.embedded import analysis
from knowledge_store.engines.embedded.analysis import Analyzers
from knowledge_store.model import Filters, Identity
from knowledge_store.retrieval.compare import paired_bootstrap, per_query
from knowledge_store.retrieval.evaluation import (
    Collected,
    Variant,
    collect,
    read_qrels,
    read_queries,
    run_variant,
)
from knowledge_store.retrieval.fusion import RankedList
from knowledge_store.retrieval.search import Fusion, fuse_stages
from knowledge_store.store import KnowledgeStore

FILTERS = Filters.build(not_type=("codeSample",))  # as both sets' READMEs ask
EXCLUDED_TYPES = ("codeSample",)
_HEADING = re.compile(r"^#{1,6}\s+(.*)$", re.M)
Lists = dict[str, list[RankedList]]
Scores = dict[str, dict[str, float]]  # measure → qid → value


def side_index(
    where: Path, words: Sequence[str], *, keywords: Sequence[str] = (), reuse: bool = False
) -> tuple[tantivy.Schema, tantivy.Index, Analyzers]:
    """A Tantivy index at ``where`` with the engine's analyzers: ``uid`` (stored), the
    ``keywords`` fields (raw), the ``words`` fields (the engine's English analyzer) and
    ``ident``. Wiped first unless ``reuse`` (and built: ``meta.json``)."""
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("uid", stored=True, tokenizer_name="raw", index_option="basic")
    for field in keywords:
        builder.add_text_field(field, tokenizer_name="raw", index_option="basic")
    for field in words:
        builder.add_text_field(field, tokenizer_name="ks_words", index_option="freq")
    builder.add_text_field("ident", tokenizer_name="ks_ident", index_option="freq")
    schema = builder.build()
    kept = reuse and (where / "meta.json").exists()
    if not kept:
        shutil.rmtree(where, ignore_errors=True)
        where.mkdir(parents=True)
    index = tantivy.Index(schema, str(where), reuse=kept)
    analyzers = Analyzers()
    index.register_tokenizer("ks_words", analyzers.words)
    index.register_tokenizer("ks_ident", analyzers.ident)
    return schema, index, analyzers


def add_all(index: tantivy.Index, docs: Iterable[Mapping[str, str]]) -> None:
    """Index ``docs`` (field → text) in one commit, merged."""
    writer = index.writer(heap_size=96_000_000, num_threads=1)
    for fields in docs:
        doc = tantivy.Document()
        for name, text in fields.items():
            doc.add_text(name, text)
        writer.add_document(doc)
    writer.commit()
    writer.wait_merging_threads()
    index.reload()


def judged_queries(set_dir: str) -> tuple[list[tuple[str, str]], dict[str, Any]]:
    """A shared set's queries that have judgements, and its qrels."""
    qrels = read_qrels(f"{set_dir}/qrels.tsv")
    return [(q, t) for q, t in read_queries(f"{set_dir}/queries.jsonl") if q in qrels], qrels


def store_lists(
    store: KnowledgeStore, store_path: str, set_dir: str, work: Path
) -> tuple[Collected, list[tuple[str, str]], dict[str, Any]]:
    """The store's lists for a shared set as ``ks eval`` collects them (kept under ``work``
    for the next run, keyed by the lexical boosts a script may have changed), its judged
    queries and qrels."""
    name = Path(set_dir).name
    queries, qrels = judged_queries(set_dir)
    cache = work / f"{name}-{Path(store_path).name}-{scoring_key()}-lists.pkl"
    cached: Lists | None = pickle.loads(cache.read_bytes()) if cache.exists() else None
    started = time.perf_counter()
    base = collect(store, queries, filters=FILTERS, lists=cached)
    if cached is None:
        cache.write_bytes(pickle.dumps(base.lists))
    print(f"{name}: the store's lists in {time.perf_counter() - started:.1f} s", flush=True)
    return base, queries, qrels


# -- the page index ------------------------------------------------------------------------


class PageIndex:
    """One Tantivy document per entity: title + body, headings, identifiers."""

    def __init__(self, store_path: str, where: Path) -> None:
        fresh = not (where / "meta.json").exists()
        self.schema, self.index, self.analyzers = side_index(
            where, ("body", "title", "heads"), keywords=("type",), reuse=True
        )
        if fresh:
            add_all(self.index, self._pages(store_path))
        self.index.reload()
        self.searcher = self.index.searcher()

    @staticmethod
    def _pages(store_path: str) -> Iterator[dict[str, str]]:
        import sqlite3

        conn = sqlite3.connect(f"file:{store_path}/catalog.sqlite?mode=ro", uri=True)
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        rows = (  # catalog schema 2 keeps bodies in entity_bodies
            "SELECT e.uid, e.type, e.title, b.body FROM entities e"
            " JOIN entity_bodies b ON b.entity = e.id"
            if "entity_bodies" in tables
            else "SELECT uid, type, title, body FROM entities"
        )
        for uid, type_, title, body in conn.execute(rows):
            full = f"{title}\n{body or ''}"
            heads = "\n".join([title, *_HEADING.findall(body or "")])
            yield {"uid": uid, "type": type_, "body": full, "title": title, "heads": heads}
        conn.close()

    def search(self, text: str, k: int, *, fields: str = "engine") -> list[tuple[str, float]]:
        q, should = tantivy.Query, tantivy.Occur.Should
        terms = self.analyzers.query_terms(text)
        if not terms.words:
            return []
        if fields == "heads":
            clauses = [(should, q.term_query(self.schema, "heads", w)) for w in terms.words]
        else:  # the engine's query, on this index's fields of the same names
            clauses = analysis.text_clauses(self.schema, terms, heading=False)
        excluded = [
            (tantivy.Occur.MustNot, q.term_query(self.schema, "type", t)) for t in EXCLUDED_TYPES
        ]
        query = q.boolean_query([(tantivy.Occur.Must, q.boolean_query(clauses)), *excluded])
        hits = self.searcher.search(query, limit=k, count=False).hits
        out = [(str(self.searcher.doc(a).get_first("uid")), float(s)) for s, a in hits]
        return sorted(out, key=lambda h: (-h[1], h[0]))


# -- lists ---------------------------------------------------------------------------------


def _norm(items: Sequence[tuple[str, float]]) -> dict[str, float]:
    if not items:
        return {}
    scores = [s for _, s in items]
    lo, hi = min(scores), max(scores)
    span = hi - lo
    return {u: (s - lo) / span if span > 0 else 1.0 for u, s in items}


def blend(
    chunk: Sequence[tuple[str, float]], page: Sequence[tuple[str, float]], beta: float, k: int = 100
) -> list[tuple[str, float]]:
    """``norm(chunk) + β × norm(page)`` over the union (absent = 0), the top ``k``."""
    a, b = _norm(chunk), _norm(page)
    both = {u: a.get(u, 0.0) + beta * b.get(u, 0.0) for u in {*a, *b}}
    return sorted(both.items(), key=lambda x: (-x[1], x[0]))[:k]


def second_fold(
    hits: Sequence[tuple[str, float]], w: float, k: int = 100
) -> list[tuple[str, float]]:
    by_page: dict[str, list[float]] = {}
    for uid, score in hits:
        by_page.setdefault(uid, []).append(score)
    folded = {u: s[0] + w * (s[1] if len(s) > 1 else 0.0) for u, s in by_page.items()}
    return sorted(folded.items(), key=lambda x: (-x[1], x[0]))[:k]


class ThirdList:
    """The default fusion for the query, with list ``name`` at ``w ×`` the weight it chose
    for ``relative_to``."""

    def __init__(
        self, text: str, w: float, name: str = "page", relative_to: str = "lexical"
    ) -> None:
        chosen, _ = Fusion.of(None).for_query(text)
        self.fusion = Fusion(chosen.mode, {**chosen.weights, name: w * chosen.weight(relative_to)})

    def fuse(self, lists: Sequence[RankedList]) -> Any:
        return self.fusion.fuse(lists)


class Floored:
    """The default fusion for the query, over lists as the store's retrievers gave them, except:
    lists named in ``floors`` get that floor, lists named in ``no_floor`` lose theirs, and the
    lexical weight is × ``boost`` when the lexical list holds every match (its floor is 0)."""

    def __init__(
        self,
        text: str,
        *,
        floors: Mapping[str, float] | None = None,
        no_floor: Collection[str] = (),
        boost: float = 1.0,
    ) -> None:
        self.fusion, _ = Fusion.of(None).for_query(text)
        self.floors = floors or {}
        self.no_floor = no_floor
        self.boost = boost

    def fuse(self, lists: Sequence[RankedList]) -> Any:
        lists = [
            RankedList(lst.name, lst.items, None)
            if lst.name in self.no_floor
            else RankedList(lst.name, lst.items, self.floors.get(lst.name, lst.floor))
            for lst in lists
        ]
        weights = dict(self.fusion.weights)
        lexical = next((lst for lst in lists if lst.name == "lexical"), None)
        if lexical is not None and lexical.floor is not None and self.boost != 1.0:
            weights["lexical"] = self.boost * self.fusion.weight("lexical")
        return Fusion(self.fusion.mode, weights).fuse(lists)


def fused_run(collected: Collected, make: Callable[[str], Any] | None = None) -> dict[str, Any]:
    if make is None:
        return run_variant(collected, Variant("fused", fusion=Fusion.of(None)))
    run: dict[str, dict[str, float]] = {}
    for qid, text in collected.queries:
        fused, _, _ = fuse_stages(make(text), collected.lists[qid], collected.expand)
        run[qid] = {f.uid: float(100 - i) for i, f in enumerate(fused[:100])}
    return run


def with_lists(base: Collected, lists: Mapping[str, list[RankedList]]) -> Collected:
    return replace(base, lists=dict(lists))


def listed(name: str, items: Sequence[tuple[str, float]], whole: bool) -> RankedList:
    """A list; floor 0 when it holds every match (``whole``: fewer hits than asked)."""
    return RankedList(name, items, 0.0 if whole else None)


def swap(lists: list[RankedList], name: str, new: RankedList) -> list[RankedList]:
    return [new if lst.name == name else lst for lst in lists]


# -- the experiment ------------------------------------------------------------------------


def measure(
    store_path: str, set_dir: str, work: Path, *, floor_only: bool = False
) -> dict[str, dict[str, Scores]]:
    """variant → {"lexical", "vector", "fused": scores} on one set."""
    name = Path(set_dir).name
    out: dict[str, dict[str, Scores]] = {}
    with KnowledgeStore.open(store_path) as store:
        base, queries, qrels = store_lists(store, store_path, set_dir, work)

        def score(label: str, col: Collected, fused: dict[str, Any]) -> None:
            out[label] = {
                "lexical": per_query(qrels, run_variant(col, Variant("l", single="lexical"))),
                "vector": per_query(qrels, run_variant(col, Variant("v", single="vector"))),
                "fused": per_query(qrels, fused),
            }
            report_row(name, label, out)

        score("today", base, fused_run(base))
        score(
            "lexical without its floor (before)",
            base,
            fused_run(base, lambda t: Floored(t, no_floor=("lexical",))),
        )
        if floor_only:  # any engine (the page index below reads an embedded catalog)
            return out
        with store.engine.reader(Identity()) as reader:
            deep = {}
            for qid, text in queries:
                hits = reader.lexical(text, 400, FILTERS)
                deep[qid] = list(zip(hits.uids, hits.scores, strict=True))
        index = PageIndex(store_path, work / f"{name}-pages")
        started = time.perf_counter()
        page = {qid: index.search(text, 100) for qid, text in queries}
        per_q = (time.perf_counter() - started) / len(queries) * 1000
        print(f"{name}: page list {per_q:.2f} ms/query", flush=True)
        heads = {qid: index.search(text, 100, fields="heads") for qid, text in queries}
        lists_of = base.lists
        complete = sum(
            1 for ls in lists_of.values() for x in ls if x.name == "lexical" and x.floor is not None
        )
        print(f"{name}: {complete} of {len(lists_of)} lexical lists hold every match", flush=True)

        def lexical_as(make: Callable[[str, list[RankedList]], RankedList]) -> Collected:
            return with_lists(
                base, {q: swap(ls, "lexical", make(q, ls)) for q, ls in lists_of.items()}
            )

        def plus(lists: Mapping[str, Sequence[tuple[str, float]]]) -> Collected:
            return with_lists(
                base,
                {
                    q: [*ls, listed("page", lists[q], len(lists[q]) < 100)]
                    for q, ls in lists_of.items()
                },
            )

        for m in (1.5, 2.0):
            score(
                f"lexical × {m:g} when it holds every match",
                base,
                fused_run(base, lambda t, m=m: Floored(t, boost=m)),
            )
        score("+ graph floor 0", base, fused_run(base, lambda t: Floored(t, floors={"graph": 0.0})))
        for label, pages in (("page", page), ("page headings", heads)):
            col = lexical_as(lambda q, _, p=pages: listed("lexical", p[q], len(p[q]) < 100))
            score(f"{label} list instead of chunk BM25", col, fused_run(col))
        for beta in (0.25, 0.5, 1.0):
            col = lexical_as(
                lambda q, ls, b=beta: listed("lexical", blend(_items(ls), page[q], b), False)
            )
            score(f"lexical = chunk + {beta:g} × page", col, fused_run(col))
        for label, pages, weights in (
            ("page", page, (0.1, 0.25, 0.5)),
            ("headings", heads, (0.25, 0.5)),
        ):
            col = plus(pages)
            for w in weights:
                score(
                    f"+ {label} list, weight {w:g} × lexical",
                    col,
                    fused_run(col, lambda t, w=w: ThirdList(t, w)),
                )
        for label, w in (("best chunk", 0.0), ("best + 0.1 × second", 0.1)):
            col = lexical_as(
                lambda q, _, w=w: listed("lexical", second_fold(deep[q], w), len(deep[q]) < 400)
            )
            score(f"lexical fold {label}, 400 hits", col, fused_run(col))
    return out


def _items(lists: Sequence[RankedList]) -> list[tuple[str, float]]:
    return list(next(x for x in lists if x.name == "lexical").items)


REF = "today"


def report_row(
    set_name: str, label: str, table: Mapping[str, Mapping[str, Scores]], ref: str = REF
) -> None:
    """One variant's lexical and fused means on one set, and its paired Δ nDCG@10 vs ``ref``."""
    cells = []
    for lst in ("lexical", "fused"):
        s = table[label][lst]
        mean = {m: sum(v.values()) / len(v) for m, v in s.items()}
        base = table[ref][lst]["ndcg@10"]
        d = paired_bootstrap([s["ndcg@10"][q] - base[q] for q in base])
        cells.append(
            f"{lst} {mean['ndcg@10']:.4f} {mean['recall@100']:.4f} {mean['mrr@10']:.4f} Δ {d}"
        )
    print(f"{set_name:<15} {label:<48} " + " | ".join(cells), flush=True)


def print_macro(
    scores: Mapping[str, Mapping[str, Mapping[str, Scores]]],
    labels: Sequence[str] | None = None,
    ref: str = REF,
) -> None:
    """Each variant's Δ nDCG@10 vs ``ref`` over both sets (equal weight, stratified)."""
    sets = list(scores)
    if len(sets) < 2:
        return
    print(f"\nmacro (both sets, equal weight), Δ nDCG@10 vs {ref}:")
    for label in labels if labels is not None else list(scores[sets[0]]):
        cells = []
        for lst in ("lexical", "fused"):
            deltas = {
                s: [
                    scores[s][label][lst]["ndcg@10"][q] - scores[s][ref][lst]["ndcg@10"][q]
                    for q in scores[s][ref][lst]["ndcg@10"]
                ]
                for s in sets
            }
            cells.append(f"{lst} {paired_bootstrap(deltas)}")
        print(f"  {label:<48} " + " | ".join(cells), flush=True)


def print_before_after(
    scores: Mapping[str, Mapping[str, Mapping[str, Scores]]], before: str
) -> None:
    """Each list's three measures before (``before``) and after (today), with paired intervals."""
    print(f"\nbefore = {before!r}, after = today; Δ = after − before [95 %]:")
    for set_name, table in scores.items():
        for lst in ("lexical", "vector", "fused"):
            cells = []
            for m in ("ndcg@10", "recall@100", "mrr@10"):
                a, b = table[before][lst][m], table[REF][lst][m]
                d = paired_bootstrap([b[q] - a[q] for q in a])
                mean_a, mean_b = sum(a.values()) / len(a), sum(b.values()) / len(b)
                cells.append(f"{m} {mean_a:.4f} → {mean_b:.4f} {d}")
            print(f"  {set_name:<15} {lst:<8} " + " | ".join(cells), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--set", nargs=2, action="append", metavar=("STORE", "SET_DIR"), required=True
    )
    parser.add_argument("--work", type=Path, default=Path("/tmp/eval_pagelex"))
    parser.add_argument(
        "--floor-only", action="store_true", help="only the floor's before/after (any engine)"
    )
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    scores = {
        Path(d).name: measure(s, d, args.work, floor_only=args.floor_only) for s, d in args.set
    }
    print_macro(scores)
    print_before_after(scores, "lexical without its floor (before)")


if __name__ == "__main__":
    main()
