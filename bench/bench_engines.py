"""Embedded vs PostgreSQL, side by side (issue 7's figures).

* **quality** on postgres-docs (1,500 queries, pages only: ``--not-type codeSample``):
  nDCG@10 / Recall@100 / MRR@10 of lexical, vector and fused search through
  ``retrieval.evaluation.evaluate`` — the same code path for both engines. The
  PostgreSQL store is the eval store's own entities, chunks and vectors published
  again (its content root must equal the embedded store's); PostgreSQL's lexical
  rankers ``bm25`` (SQL) and ``ts_rank_cd`` are both measured.
* **scale** at 10k and 100k chunks: the eval store's real chunks replicated with
  small noise on their real vectors (the batches of ``common.build_replicated_store``),
  published as the *same* ``PreparedEntity`` batches to both engines: ingest
  rate, lexical / vector / fused p50 and p95 (query embedding excluded: vectors are
  computed once), and filtered vector recall@10 against exact search at 1 % and
  10 % visible.

    .venv/bin/python bench/bench_engines.py                 # everything
    .venv/bin/python bench/bench_engines.py --sizes 10000   # one size
    .venv/bin/python bench/bench_engines.py --skip-eval

Results: printed tables and ``bench/results/engines.json``. The PostgreSQL server
is a local pgserver instance in ``bench/.cache/engines/pg`` (PostgreSQL 16,
pgvector 0.6, default settings: shared_buffers 128 MB).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    CACHE,
    EVAL,
    PG15_STORE,
    ROOT,
    chunk_vectors_sql,
    entity_bodies_sql,
    need_eval,
    percentiles,
    pg15_store,
    queries,
    replicated_batches,
    table,
)

from knowledge_store.engines.base import PreparedEntity
from knowledge_store.engines.embedded.engine import EmbeddedEngine
from knowledge_store.engines.postgres.engine import PostgresEngine
from knowledge_store.engines.postgres.server import local_server_url
from knowledge_store.ingest.embedding import open_embedder
from knowledge_store.model import Chunk, Edge, Entity, Filters, Identity
from knowledge_store.retrieval.evaluation import evaluate
from knowledge_store.store import KnowledgeStore

HERE = CACHE / "engines"
RESULTS = ROOT / "bench" / "results" / "engines.json"
DOCS_ONLY = Filters.build(not_type=["codeSample"])


# -- a shared, persistent embedder (queries are embedded once for every engine and ranker) ----
class CachedEmbedder:
    def __init__(self, path: Path) -> None:
        self.inner = open_embedder()
        self.path = path
        self.cache: dict[str, np.ndarray] = {}
        if path.exists():
            with np.load(path, allow_pickle=False) as data:
                self.cache = dict(zip(map(str, data["texts"]), data["vectors"], strict=True))

    model_id = property(lambda self: self.inner.model_id)
    dimension = property(lambda self: self.inner.dimension)
    max_tokens = property(lambda self: self.inner.max_tokens)

    def embed(self, texts: Sequence[str], *, progress: bool = False) -> np.ndarray:
        return self.inner.embed(texts, progress=progress)

    def embed_query(self, text: str) -> np.ndarray:
        if text not in self.cache:
            self.cache[text] = self.inner.embed_query(text)
        return self.cache[text]

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        texts = list(self.cache)
        tmp = self.path.with_suffix(".tmp.npz")
        np.savez(tmp, texts=np.array(texts), vectors=np.stack([self.cache[t] for t in texts]))
        tmp.replace(self.path)


# -- data --------------------------------------------------------------------------------------------
def catalog_entities(store: Path) -> list[PreparedEntity]:
    """Every entity of an embedded store — fields, edges, ACL, chunks, vectors — in row order."""
    conn = sqlite3.connect(store / "catalog.sqlite")
    edges: dict[str, list[Edge]] = {}
    for src, label, dst, position in conn.execute(
        "SELECT src, label, dst, position FROM edges ORDER BY src, label, dst"
    ):
        edges.setdefault(src, []).append(Edge(src, label, dst, position))
    acls: dict[int, tuple[str, ...]] = {}
    for acl_set, principal in conn.execute(
        "SELECT acl_set, principal FROM acl_set_principals ORDER BY acl_set, principal"
    ):
        acls[acl_set] = (*acls.get(acl_set, ()), principal)
    chunks: dict[int, list[tuple[Chunk, np.ndarray]]] = {}
    vectors, vector = chunk_vectors_sql(conn)
    for entity, ordinal, text, heading, start, end, blob in conn.execute(
        f'SELECT c.entity, c.ordinal, c.text, c.heading, c.start, c."end", {vector}'
        f" FROM chunks AS c{vectors} ORDER BY c.id"
    ):
        chunks.setdefault(entity, []).append(
            (
                Chunk(ordinal, text, tuple(json.loads(heading)), start, end),
                np.frombuffer(blob, np.float32),
            )
        )
    out = []
    bodies, b = entity_bodies_sql(conn)
    for row in conn.execute(
        f"SELECT e.id, e.uid, e.type, e.title, {b}.body, e.source, e.status, e.created_at,"
        f" e.updated_at, e.href, {b}.attributes, e.acl_set FROM entities AS e{bodies}"
        " ORDER BY e.id"
    ):
        mine = chunks.get(row[0], [])
        entity = Entity(
            uid=row[1],
            type=row[2],
            title=row[3],
            body=row[4],
            source=row[5],
            status=row[6],
            created_at=row[7],
            updated_at=row[8],
            href=row[9],
            attributes=json.loads(row[10]),
            edges=tuple(edges.get(row[1], ())),
            acl=acls.get(row[11], ()),
        )
        vectors = (
            np.stack([v for _, v in mine]) if mine else np.zeros((0, 384), np.float32)
        ).astype(np.float32)
        out.append(PreparedEntity(entity, tuple(c for c, _ in mine), vectors))
    conn.close()
    return out


def bench_acl(copy: int, i: int) -> list[str]:
    """Everything for group:all; ~1 % of entities for group:one, ~10 % for group:ten."""
    key = copy * 7919 + i
    acl = ["group:all"]
    if key % 100 == 0:
        acl.append("group:one")
    if key % 10 == 0:
        acl.append("group:ten")
    return acl


MEMBERSHIPS = [("group:all", "user:all"), ("group:one", "user:one"), ("group:ten", "user:ten")]


# -- engines -------------------------------------------------------------------------------------------
def pg_url() -> str:
    HERE.mkdir(parents=True, exist_ok=True)
    return local_server_url(HERE / "pg")


def open_pg(schema: str, **kwargs: Any) -> PostgresEngine:
    return PostgresEngine(pg_url(), schema=schema, **kwargs)


def publish_all(engine: Any, batches: Sequence[Sequence[PreparedEntity]]) -> float:
    """Publish every batch; seconds (for PostgreSQL including the final VACUUM ANALYZE)."""
    started = time.perf_counter()
    for n, batch in enumerate(batches, start=1):
        engine.writer.publish(batch, [], kind="ingest")
        print(f"    batch {n}/{len(batches)} ({time.perf_counter() - started:.0f} s)", flush=True)
    if isinstance(engine, PostgresEngine):
        engine.db.conn().execute("VACUUM ANALYZE")
    return time.perf_counter() - started


def ensure(
    engine: Any, batches: Sequence[Sequence[PreparedEntity]], marker: Path
) -> dict[str, Any]:
    """Load ``batches`` once (a marker keeps the figures); later runs reuse the store."""
    chunks = sum(len(p.chunks) for b in batches for p in b)
    if marker.exists():
        data = json.loads(marker.read_text())
        if data.get("chunks") == chunks and engine.writer.content_root() == data.get("root"):
            return dict(data)
    model = EmbeddedEngine(PG15_STORE).model()
    assert model is not None
    engine.writer.set_model(model[0], model[1], "default")
    seconds = publish_all(engine, batches)
    for group, member in MEMBERSHIPS:
        engine.admin.add_member(group, member)
    data = {"chunks": chunks, "seconds": seconds, "root": engine.writer.content_root()}
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps(data))
    return data


# -- measurements --------------------------------------------------------------------------------------
def latencies(
    store: KnowledgeStore, texts: Sequence[str], vectors: np.ndarray, who: str
) -> dict[str, dict[str, float]]:
    calls: dict[str, Callable[[int], Any]] = {
        "lexical": lambda i: store.lexical(texts[i], identity=who, k=10),
        "vector": lambda i: store.vector(vectors[i], identity=who, k=10),
        "fused": lambda i: store.search(texts[i], identity=who, k=10),
    }
    out = {}
    for name, call in calls.items():
        for i in range(min(20, len(texts))):  # warm up
            call(i)
        samples = []
        for i in range(len(texts)):
            started = time.perf_counter()
            call(i)
            samples.append(time.perf_counter() - started)
        p = percentiles(samples)
        out[name] = {"p50_ms": round(p["p50"], 2), "p95_ms": round(p["p95"], 2)}
    return out


def filtered_recall(
    engine: Any,
    batches: Sequence[Sequence[PreparedEntity]],
    vectors: np.ndarray,
    who: str,
    group: str,
) -> dict[str, Any]:
    keys: list[tuple[str, int]] = []
    rows: list[np.ndarray] = []
    for batch in batches:
        for p in batch:
            if group in p.entity.acl:
                keys.extend((p.entity.uid, c.ordinal) for c in p.chunks)
                rows.append(p.vectors)
    matrix = np.concatenate(rows).astype(np.float32)
    ident = Identity(who)
    recalls, samples, strategies = [], [], set()
    total = sum(len(p.chunks) for b in batches for p in b)
    for q in vectors:
        truth = {keys[j] for j in np.argsort(-(matrix @ q), kind="stable")[:10]}
        started = time.perf_counter()
        answer = KnowledgeStore(engine).vector(q, identity=ident, k=10)
        samples.append(time.perf_counter() - started)
        got = {(h.uid, _ordinal(engine, h)) for h in answer.hits}
        recalls.append(len(got & truth) / len(truth))
        strategies.add(answer.vector.strategy if answer.vector else "?")
    return {
        "visible_share": round(len(keys) / total, 4),
        "recall@10": round(float(np.mean(recalls)), 4),
        "p50_ms": round(percentiles(samples)["p50"], 2),
        "strategy": "/".join(sorted(strategies)),
    }


_ORDINALS: dict[tuple[int, int], int] = {}


def _ordinal(engine: Any, hit: Any) -> int:
    """The chunk's ordinal within its entity (chunk ids differ between engines)."""
    key = (id(engine), hit.chunk_id)
    if key not in _ORDINALS:
        if isinstance(engine, PostgresEngine):
            row = (
                engine.db.conn()
                .execute("SELECT ordinal FROM chunks WHERE id = %s", (hit.chunk_id,))
                .fetchone()
            )
        else:
            row = engine.catalog.execute(
                "SELECT ordinal FROM chunks WHERE id = ?", (hit.chunk_id,)
            )[0]
        _ORDINALS[key] = int(row[0])
    return _ORDINALS[key]


# -- the two parts -------------------------------------------------------------------------------------
def run_eval(embedder: CachedEmbedder, results: dict[str, Any]) -> None:
    need_eval()
    print("quality on postgres-docs (pages only)", flush=True)
    qpath, rpath = EVAL / "queries.jsonl", EVAL / "qrels.tsv"
    rows = []
    with KnowledgeStore(EmbeddedEngine(pg15_store(progress=False)), embedder=embedder) as emb:
        root = emb.content_root()
        started = time.perf_counter()
        got = evaluate(emb, qpath, rpath, filters=DOCS_ONLY)
        rows.append({"engine": "embedded (tantivy bm25)", **_flat(got), **planner_fused(emb)})
        print(f"  embedded: {time.perf_counter() - started:.0f} s", flush=True)
    embedder.save()
    engine = open_pg("pg15")
    if engine.writer.content_root() != root:
        print(
            "  publishing the eval store to PostgreSQL (one batch, as it was ingested)", flush=True
        )
        ensure(engine, [catalog_entities(PG15_STORE)], HERE / "pg15.json")
    assert engine.writer.content_root() == root, "the same entities must publish the same root"
    engine.close()
    for ranker in ("bm25", "ts_rank_cd"):
        with KnowledgeStore(open_pg("pg15", lexical_ranker=ranker), embedder=embedder) as pg:
            started = time.perf_counter()
            got = evaluate(pg, qpath, rpath, filters=DOCS_ONLY)
            rows.append({"engine": f"postgres ({ranker})", **_flat(got), **planner_fused(pg)})
            print(f"  postgres {ranker}: {time.perf_counter() - started:.0f} s", flush=True)
    results["quality"] = rows
    table(rows, "nDCG@10 / Recall@100 / MRR@10 on postgres-docs (1500 queries, pages only)")


def planner_fused(store: KnowledgeStore) -> dict[str, float]:
    """nDCG@10 / Recall@100 of ``store.search`` itself (the planner, as surfaces call it)."""
    from knowledge_store.retrieval.evaluation import read_qrels, read_queries

    qrels = read_qrels(EVAL / "qrels.tsv")
    todo = [(q, t) for q, t in read_queries(EVAL / "queries.jsonl") if q in qrels]
    ndcg = recall = 0.0
    for qid, text in todo:
        relevant = {d for d, v in qrels[qid].items() if v > 0}
        ranked = [r.uid for r in store.search(text, k=100, filters=DOCS_ONLY).results]
        gain = sum(1 / np.log2(i + 2) for i, u in enumerate(ranked[:10]) if u in relevant)
        ideal = sum(1 / np.log2(i + 2) for i in range(min(10, len(relevant))))
        ndcg += gain / ideal
        recall += len(relevant & set(ranked)) / len(relevant)
    return {
        "planner fused ndcg@10": round(ndcg / len(todo), 4),
        "planner fused recall@100": round(recall / len(todo), 4),
    }


def _flat(got: dict[str, Any]) -> dict[str, float]:
    out = {}
    for name in ("lexical", "vector", "fused"):
        for metric in ("ndcg@10", "recall@100", "mrr@10"):
            out[f"{name} {metric}"] = round(float(got[name][metric]), 4)
    return out


def run_scale(size: int, n_queries: int, embedder: CachedEmbedder, results: dict[str, Any]) -> None:
    print(f"scale: {size:,} chunks", flush=True)
    batches = replicated_batches(size, bench_acl)
    chunks = sum(len(p.chunks) for b in batches for p in b)
    texts = [t for _, t in queries(n_queries)]
    vectors = np.stack([embedder.embed_query(t) for t in texts]).astype(np.float32)
    embedder.save()
    rows = []
    engines: list[tuple[str, Callable[[], Any]]] = [
        ("embedded", lambda: EmbeddedEngine(HERE / f"emb-{size}")),
        ("postgres", lambda: open_pg(f"s{size}")),
    ]
    for name, make in engines:
        engine = make()
        print(f"  {name}: loading", flush=True)
        loaded = ensure(engine, batches, HERE / f"{name}-{size}.json")
        with KnowledgeStore(engine, embedder=embedder) as store:
            lat = latencies(store, texts, vectors, "user:all")
            one = filtered_recall(engine, batches, vectors[:100], "user:one", "group:one")
            ten = filtered_recall(engine, batches, vectors[:100], "user:ten", "group:ten")
        row = {
            "engine": name,
            "chunks": chunks,
            "ingest chunks/s": round(chunks / loaded["seconds"], 1),
            **{f"{k} p50": v["p50_ms"] for k, v in lat.items()},
            **{f"{k} p95": v["p95_ms"] for k, v in lat.items()},
            "recall@10 1%": one["recall@10"],
            "1% p50": one["p50_ms"],
            "1% strategy": one["strategy"],
            "recall@10 10%": ten["recall@10"],
            "10% p50": ten["p50_ms"],
            "10% strategy": ten["strategy"],
        }
        rows.append(row)
        print("   ", row, flush=True)
    results.setdefault("scale", {})[str(size)] = rows
    table(rows, f"{chunks:,} chunks (ms; query embedding excluded)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=200, help="latency queries per engine")
    parser.add_argument("--skip-eval", action="store_true")
    args = parser.parse_args()
    embedder = CachedEmbedder(HERE / "queries.npz")
    results: dict[str, Any] = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    if not args.skip_eval:
        run_eval(embedder, results)
    for size in args.sizes:
        run_scale(size, args.queries, embedder, results)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2))
    embedder.save()
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
