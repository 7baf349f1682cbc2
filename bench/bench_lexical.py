"""Lexical latency: knowledge-store's `lexical` vs raw tantivy-py vs bm25s, same chunks, same queries.

Every system returns the top 10 with the same stored fields (chunk id, uid,
text). knowledge-store's figure includes identity expansion, the ACL filter
inside the Tantivy query and the final check against the catalog.

    .venv/bin/python bench/bench_lexical.py [--store .ks/pg15] [--store .ks/pg15-100k] [--queries 300]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from common import ROOT, percentiles, queries, source_chunks, table


def bench_store(path: Path, texts: list[str]) -> list[dict[str, object]]:
    import bm25s
    import Stemmer
    import tantivy

    from knowledge_store.store import KnowledgeStore

    entities = source_chunks(path)
    docs = [
        (e["uid"], f"{e['title']}\n{' > '.join(h)}\n{t}")
        for e in entities
        for (_, t, h, _, _, _) in e["chunks"]
    ]
    rows: list[dict[str, object]] = []

    def run(name: str, search: object) -> None:
        for t in texts[:20]:
            search(t)  # type: ignore[operator]  # warm up
        samples = []
        for t in texts:
            started = time.perf_counter()
            search(t)  # type: ignore[operator]
            samples.append(time.perf_counter() - started)
        p = percentiles(samples)
        rows.append(
            {
                "system": name,
                "chunks": len(docs),
                "p50 ms": p["p50"],
                "p95 ms": p["p95"],
                "QPS": p["qps"],
            }
        )

    store = KnowledgeStore.open(path)
    run("knowledge-store lexical", lambda t: store.lexical(t, k=10))

    builder = tantivy.SchemaBuilder()
    builder.add_integer_field("chunk_id", stored=True)
    builder.add_text_field("uid", stored=True, tokenizer_name="raw")
    builder.add_text_field("body", stored=True, tokenizer_name="en_stem")
    schema = builder.build()
    raw_dir = tempfile.mkdtemp(prefix="ks-raw-tantivy-")
    index = tantivy.Index(schema, raw_dir)
    writer = index.writer(heap_size=128_000_000, num_threads=1)
    for i, (uid, body) in enumerate(docs):
        writer.add_document(tantivy.Document(chunk_id=i, uid=uid, body=body))
    writer.commit()
    writer.wait_merging_threads()
    index.reload()
    searcher = index.searcher()

    def raw_search(text: str) -> list[tuple[int, str, str]]:
        query, _errors = index.parse_query_lenient(text, ["body"])
        found = searcher.search(query, 10).hits
        out = []
        for _score, address in found:
            doc = searcher.doc(address)
            out.append((doc["chunk_id"][0], doc["uid"][0], doc["body"][0]))
        return out

    run("raw tantivy-py (en_stem, query parser)", raw_search)

    stemmer = Stemmer.Stemmer("english")
    corpus_tokens = bm25s.tokenize(
        [b for _, b in docs], stopwords="en", stemmer=stemmer, show_progress=False
    )
    retriever = bm25s.BM25(k1=1.2, b=0.75)
    retriever.index(corpus_tokens, show_progress=False)

    def bm25s_search(text: str) -> list[tuple[str, str]]:
        tokens = bm25s.tokenize([text], stopwords="en", stemmer=stemmer, show_progress=False)
        if not tokens.vocab:
            return []
        ids, _scores = retriever.retrieve(tokens, k=10, show_progress=False, n_threads=1)
        return [docs[int(i)] for i in ids[0]]

    run("bm25s (stopwords + Snowball)", bm25s_search)
    store.close()
    ours = float(rows[0]["p50 ms"])  # type: ignore[arg-type]
    raw = float(rows[1]["p50 ms"])  # type: ignore[arg-type]
    rows[0]["vs raw tantivy"] = f"{ours / raw:.2f}x"
    rows[1]["vs raw tantivy"] = "1.00x"
    rows[2]["vs raw tantivy"] = f"{float(rows[2]['p50 ms']) / raw:.2f}x"  # type: ignore[arg-type]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", action="append", type=Path)
    parser.add_argument("--queries", type=int, default=300)
    args = parser.parse_args()
    stores = args.store or [ROOT / ".ks" / "pg15", ROOT / ".ks" / "pg15-100k"]
    texts = [t for _, t in queries(args.queries)]
    for path in stores:
        if not (path / "catalog.sqlite").exists():
            print(
                f"skipping {path}: no store there (bench/bench_search.py --replicate-to builds it)"
            )
            continue
        table(
            bench_store(path, texts), f"lexical top-10 latency, {path.name}, {len(texts)} queries"
        )


if __name__ == "__main__":
    main()
