"""`ks lexical` and `ks vector` against raw tantivy-py and raw faiss — same chunks, same queries.

One run, top-10 and top-100. knowledge-store's figures are the public API
(``store.lexical(text, k=…)``, ``store.vector(query_vector, k=…)``): request
validation, one point-in-time reader, identity expansion, the ACL inside the
index query, the final check, hydration of the answer's chunks, the answer
model. The baselines are the bare libraries: raw Tantivy (its query parser,
its stemmer, the stored body fetched per hit) and raw faiss HNSW with the
engine's parameters (ids only). Query embedding is excluded (vectors are
embedded once, before timing). The chunks are read from the store's catalog
with SQL, so the script measures any version of the library on one store:

    PYTHONPATH=src .venv/bin/python bench/bench_primitives.py --store .ks/pg15-100k --k 10 --k 100
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import chunk_vectors_sql, percentiles, queries, table


def _chunks(path: Path) -> tuple[list[tuple[int, str, str]], np.ndarray, np.ndarray]:
    """``(chunk id, uid, indexed text)`` of every chunk, their ids, their vectors."""
    conn = sqlite3.connect(path / "catalog.sqlite")
    docs: list[tuple[int, str, str]] = []
    ids: list[int] = []
    blobs: list[bytes] = []
    vectors, vector = chunk_vectors_sql(conn)
    for cid, uid, title, heading, text, blob in conn.execute(
        f"SELECT c.id, e.uid, e.title, c.heading, c.text, {vector}"
        f" FROM chunks c JOIN entities e ON e.id = c.entity{vectors} ORDER BY c.id"
    ):
        path_text = " > ".join(h for h in json.loads(heading) if h and h != title)
        docs.append(
            (int(cid), uid, f"{title}\n{path_text}\n{text}" if path_text else f"{title}\n{text}")
        )
        ids.append(int(cid))
        blobs.append(blob)
    conn.close()
    matrix = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(ids), -1)
    return docs, np.asarray(ids, dtype=np.int64), matrix


def _time(run: Callable[[Any], object], inputs: list[Any], warm: int = 20) -> dict[str, float]:
    for item in inputs[:warm]:
        run(item)
    samples = []
    for item in inputs:
        started = time.perf_counter()
        run(item)
        samples.append(time.perf_counter() - started)
    return percentiles(samples)


def raw_tantivy(docs: list[tuple[int, str, str]]) -> Callable[[str, int], object]:
    import tantivy

    builder = tantivy.SchemaBuilder()
    builder.add_integer_field("chunk_id", stored=True)
    builder.add_text_field("uid", stored=True, tokenizer_name="raw")
    builder.add_text_field("body", stored=True, tokenizer_name="en_stem")
    schema = builder.build()
    index = tantivy.Index(schema, tempfile.mkdtemp(prefix="ks-raw-tantivy-"))
    writer = index.writer(heap_size=128_000_000, num_threads=1)
    for cid, uid, body in docs:
        writer.add_document(tantivy.Document(chunk_id=cid, uid=uid, body=body))
    writer.commit()
    writer.wait_merging_threads()
    index.reload()
    searcher = index.searcher()

    def search(text: str, k: int) -> object:
        query, _errors = index.parse_query_lenient(text, ["body"])
        out = []
        for _score, address in searcher.search(query, k).hits:
            doc = searcher.doc(address)
            out.append((doc["chunk_id"][0], doc["uid"][0], doc["body"][0]))
        return out

    return search


def raw_faiss(matrix: np.ndarray) -> Callable[[np.ndarray, int], object]:
    import faiss

    from knowledge_store.engines.embedded.dense import DenseIndex

    index = faiss.IndexHNSWFlat(
        matrix.shape[1], DenseIndex.connectivity, faiss.METRIC_INNER_PRODUCT
    )
    index.hnsw.efConstruction = DenseIndex.ef_construction
    index.hnsw.efSearch = DenseIndex.ef_search
    index.add(np.ascontiguousarray(matrix))

    def search(vector: np.ndarray, k: int) -> object:
        return index.search(vector.reshape(1, -1), k)

    return search


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--k", type=int, action="append")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    ks = args.k or [10, 100]

    import faiss

    faiss.omp_set_num_threads(1)
    from knowledge_store.store import KnowledgeStore

    texts = [t for _, t in queries(args.queries)]
    docs, _, matrix = _chunks(args.store)
    print(f"{args.store}: {len(docs)} chunks, {len(texts)} queries", file=sys.stderr)
    store = KnowledgeStore.open(args.store)
    vectors = [store.embedder.embed_query(t) for t in texts]
    tantivy_search = raw_tantivy(docs)
    faiss_search = raw_faiss(matrix)
    rows: list[dict[str, object]] = []
    figures: dict[str, dict[str, float]] = {}
    for k in ks:
        pairs = (
            (
                "lexical",
                lambda t, k=k: store.lexical(t, k=k),
                lambda t, k=k: tantivy_search(t, k),
                texts,
            ),
            (
                "vector",
                lambda v, k=k: store.vector(v, k=k),
                lambda v, k=k: faiss_search(v, k),
                vectors,
            ),
        )
        for name, ours, raw, inputs in pairs:
            mine = _time(ours, inputs)
            base = _time(raw, inputs)
            figures[f"{name}@{k}"] = {"ks_p50": mine["p50"], "raw_p50": base["p50"]}
            rows.append(
                {
                    "primitive": f"{name} top-{k}",
                    "ks p50 ms": mine["p50"],
                    "ks p95 ms": mine["p95"],
                    "raw p50 ms": base["p50"],
                    "raw p95 ms": base["p95"],
                    "ks / raw": f"{mine['p50'] / base['p50']:.2f}x",
                }
            )
    store.close()
    table(rows, f"primitives vs raw libraries, {args.store.name}, {len(texts)} queries")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
