"""The shared eval sets, a content-hash vector cache, and stores built from both.

Everything is read from ``../shared/eval`` (never copied into the repo). The
vector cache lives in ``bench/.cache/vectors.sqlite`` (git-ignored), keyed by
:func:`knowledge_store.ingest.embedding.embedding_key` — the key the store's
own embedding cache uses — so a text is embedded once for every experiment
and for the stores (:func:`build_store` seeds a store's cache from it).

Vectors are keyed by the *embedder spec* too: the key is
``embedding_key(cache_id, text)`` with the embedder's ``cache_id`` (PyTorch:
``sentence-transformers/all-MiniLM-L6-v2``; ONNX: ``…|onnx-int8-smoothed``,
``…|onnx-int8`` for the plain int8 model, ``…|onnx-fp32``), so vectors of different
runtimes and models never mix, and a store built
on that embedder finds the same keys in its own embedding cache. The default
spec is the store's default (``onnx:int8``); ``st:sentence-transformers/all-MiniLM-L6-v2``
reads the PyTorch vectors of phase 1 (equal to ONNX fp32 to cosine 0.9999).

Two embedding modes share the cache:

* ``windowed`` (the store's embedder: a text over the model window is the mean
  of its windows) — key ``embedding_key(cache_id, text)``;
* ``truncated`` (cut at the model window, as the BASELINES.md dense baseline's
  sentence-transformers ``encode`` does) — a text within the window has the
  same vector in both modes, so only longer texts get a second key
  (``cache_id + "#truncated"``).
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
SHARED_EVAL = Path(os.environ.get("KS_SHARED_EVAL", ROOT.parent / "shared" / "eval"))
if not SHARED_EVAL.is_dir():  # a worktree under /work/wt/NAME: shared/ is two levels up
    SHARED_EVAL = ROOT.parents[1] / "shared" / "eval"
CACHE = ROOT / "bench" / ".cache"
#: Window of all-MiniLM-L6-v2 (256) less its two special tokens.
WINDOW = 254


@dataclass
class EvalSet:
    """One shared eval set: corpus, queries, qrels, per-query metadata, its store."""

    name: str
    store: Path
    group_field: str  # the queries-meta field that splits queries into types

    @property
    def path(self) -> Path:
        return SHARED_EVAL / self.name

    @cached_property
    def records(self) -> list[dict[str, Any]]:
        with (self.path / "corpus.jsonl").open(encoding="utf-8") as handle:
            return [json.loads(line) for line in handle if line.strip()]

    @cached_property
    def pages(self) -> list[dict[str, Any]]:
        """The judged kind of record: everything but code samples."""
        return [r for r in self.records if r["type"] != "codeSample"]

    @cached_property
    def queries(self) -> list[tuple[str, str]]:
        from knowledge_store.retrieval.evaluation import read_queries

        judged = self.qrels
        return [(q, t) for q, t in read_queries(self.path / "queries.jsonl") if q in judged]

    @cached_property
    def qrels(self) -> dict[str, dict[str, int]]:
        from knowledge_store.retrieval.evaluation import read_qrels

        return read_qrels(self.path / "qrels.tsv")

    @cached_property
    def meta(self) -> dict[str, dict[str, Any]]:
        with (self.path / "queries-meta.jsonl").open(encoding="utf-8") as handle:
            rows = [json.loads(line) for line in handle if line.strip()]
        return {str(r["qid"]): r for r in rows}

    @cached_property
    def groups(self) -> dict[str, str]:
        """qid → its query type (``group_field`` of queries-meta.jsonl)."""
        return {q: str(self.meta.get(q, {}).get(self.group_field, "?")) for q, _ in self.queries}


SETS: dict[str, EvalSet] = {
    "postgres-docs": EvalSet("postgres-docs", ROOT / ".ks" / "pg15", "stratum"),
    "sqlite-git-faq": EvalSet("sqlite-git-faq", ROOT / ".ks" / "sqlite-git-faq", "source"),
}


def scoring_key() -> str:
    """The lexical scoring parameters (``model.relevance``) and a digest of the code that
    analyses a query (``analysis``, ``model.queries``) as a string: caches of a store's lists
    are keyed by it, since a script may vary the first and a change may edit the second."""
    import hashlib
    import inspect

    from knowledge_store.engines.embedded import analysis
    from knowledge_store.model import queries, relevance

    code = hashlib.sha256(
        "".join(inspect.getsource(m) for m in (analysis, queries)).encode()
    ).hexdigest()[:12]
    return "-".join(f"{getattr(relevance, name):g}" for name in relevance.__all__) + "-" + code


def eval_sets(names: Sequence[str] | None = None) -> list[EvalSet]:
    chosen = list(names) if names else list(SETS)
    unknown = [n for n in chosen if n not in SETS]
    if unknown:
        sys.exit(f"unknown eval set {unknown}; use {', '.join(SETS)}")
    for s in (SETS[n] for n in chosen):
        if not (s.path / "corpus.jsonl").exists():
            sys.exit(f"the eval set {s.name} is not at {s.path}; set KS_SHARED_EVAL")
    return [SETS[n] for n in chosen]


def set_torch_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


@dataclass
class VectorCache:
    """Content-hash → float32 vector, in one SQLite file; embeds what is missing."""

    spec: str = "onnx:int8"
    path: Path = CACHE / "vectors.sqlite"
    batch: int = 128
    _conn: sqlite3.Connection | None = field(default=None, repr=False)

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(self.path)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, vector BLOB NOT NULL)"
            )
        return self._conn

    @cached_property
    def embedder(self) -> Any:
        from knowledge_store.ingest.embedding import open_embedder

        return open_embedder(self.spec)

    @cached_property
    def cache_id(self) -> str:
        from knowledge_store.ingest.embedding import cache_id_of

        return cache_id_of(self.embedder)

    def keys(self, texts: Sequence[str], *, truncated: bool = False) -> list[str]:
        from knowledge_store.ingest.chunking import token_counter
        from knowledge_store.ingest.embedding import embedding_key

        count = token_counter()
        return [
            embedding_key(
                self.cache_id
                + ("#truncated" if truncated and len(t) > WINDOW and count(t) > WINDOW else ""),
                t,
            )
            for t in texts
        ]

    def lookup(self, keys: Iterable[str]) -> dict[str, np.ndarray]:
        wanted = list(dict.fromkeys(keys))
        out: dict[str, np.ndarray] = {}
        for i in range(0, len(wanted), 500):
            part = wanted[i : i + 500]
            marks = ",".join("?" * len(part))
            for key, blob in self.conn.execute(
                f"SELECT key, vector FROM vectors WHERE key IN ({marks})", part
            ):
                out[key] = np.frombuffer(blob, dtype=np.float32)
        return out

    def missing(self, texts: Sequence[str], *, truncated: bool = False) -> int:
        keys = self.keys(texts, truncated=truncated)
        return len(set(keys) - set(self.lookup(keys)))

    def vectors(
        self, texts: Sequence[str], *, truncated: bool = False, label: str = ""
    ) -> np.ndarray:
        """``(len(texts), 384)`` float32, L2-normalised; embeds (and caches) the missing ones."""
        keys = self.keys(texts, truncated=truncated)
        found = self.lookup(keys)
        todo: dict[str, str] = {}
        for key, text in zip(keys, texts, strict=True):
            if key not in found:
                todo.setdefault(key, text)
        if todo:
            started = time.perf_counter()
            # Longest first across the whole job: every batch pads little.
            items = sorted(todo.items(), key=lambda kv: -len(kv[1]))
            print(f"  embedding {len(items):,} texts {label}", file=sys.stderr, flush=True)
            for i in range(0, len(items), self.batch):
                part = items[i : i + self.batch]
                # Another process sharing the cache may have embedded some meanwhile.
                done_elsewhere = self.lookup(k for k, _ in part)
                found.update(done_elsewhere)
                part = [(k, t) for k, t in part if k not in done_elsewhere]
                if not part:
                    continue
                vecs = self._embed([t for _, t in part], truncated=truncated)
                rows = [
                    (k, v.astype(np.float32).tobytes())
                    for (k, _), v in zip(part, vecs, strict=True)
                ]
                with self.conn:
                    self.conn.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?)", rows)
                found.update({k: v for (k, _), v in zip(part, vecs, strict=True)})
                done = min(i + self.batch, len(items))
                rate = done / (time.perf_counter() - started)
                print(
                    f"  {done:,}/{len(items):,} ({rate:.1f}/s) {label}",
                    file=sys.stderr,
                    flush=True,
                )
        return np.stack([found[k] for k in keys]).astype(np.float32)

    def import_store(self, store: Path) -> int:
        """Copy a store's embedding cache in (same keys: ``embedding_key``); returns rows added."""
        source = sqlite3.connect(f"file:{store / 'catalog.sqlite'}?mode=ro", uri=True)
        try:
            rows = source.execute("SELECT key, vector FROM embedding_cache").fetchall()
        finally:
            source.close()
        before = self.conn.execute("SELECT count(*) FROM vectors").fetchone()[0]
        with self.conn:
            self.conn.executemany("INSERT OR IGNORE INTO vectors VALUES (?, ?)", rows)
        return int(self.conn.execute("SELECT count(*) FROM vectors").fetchone()[0] - before)

    def _embed(self, texts: list[str], *, truncated: bool) -> np.ndarray:
        if not truncated:
            return np.asarray(self.embedder.embed(texts), dtype=np.float32)
        from knowledge_store.ingest.embedders.onnx import OnnxEmbedder

        if isinstance(self.embedder, OnnxEmbedder):
            # Cut at the window as sentence-transformers does: first 255 tokens + [SEP].
            session, tokens = self.embedder._loaded(parallel=True)
            rows = [tokens.encode(t) for t in texts]
            order = sorted(range(len(rows)), key=lambda j: -len(rows[j]))
            out = np.empty((len(rows), 384), dtype=np.float32)
            for i in range(0, len(order), 32):
                part = order[i : i + 32]
                ids, mask = tokens.pad([rows[j] for j in part])
                out[part] = self.embedder._run(session, ids, mask)
            return out / np.linalg.norm(out, axis=1, keepdims=True)
        model = self.embedder.model
        encoded = model.encode(
            texts,
            batch_size=32,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return np.asarray(encoded, dtype=np.float32)


def store_texts(eval_set: EvalSet) -> tuple[list[Any], list[str]]:
    """The set's entities and every distinct text ingest embeds for them (in ingest's order)."""
    from knowledge_store.ingest.loaders import load_paths
    from knowledge_store.ingest.pipeline import chunk_entity

    loaded = load_paths(
        [eval_set.path / "corpus.jsonl"], format=None, source=None, default_acl=None
    )
    entities = [r.entity for r in loaded.records]
    texts = list(dict.fromkeys(c.context_text(e.title) for e in entities for c in chunk_entity(e)))
    return entities, texts


def fill_from_the_end(eval_set: EvalSet, cache: VectorCache, peers: Sequence[Path]) -> None:
    """Embed the set's store texts from the last one backwards, re-importing ``peers``' caches.

    Another worker building the same store embeds in ingest's order; working
    from the other end, the two meet in the middle and nothing is embedded twice.
    """
    _, texts = store_texts(eval_set)
    while True:
        for peer in peers:
            if (peer / "catalog.sqlite").exists():
                cache.import_store(peer)
        keys = cache.keys(texts)
        have = cache.lookup(keys)
        todo = [t for k, t in zip(keys, texts, strict=True) if k not in have]
        print(f"  {eval_set.name}: {len(todo):,} store texts left", file=sys.stderr, flush=True)
        if not todo:
            return
        cache.vectors(todo[-cache.batch :], label=f"{eval_set.name} store, from the end")


def store_path(eval_set: EvalSet, spec: str) -> Path:
    """Where the set's store built on ``spec`` lives (the default embedder: ``eval_set.store``)."""
    from knowledge_store.ingest.embedding import DEFAULT_SPEC

    if spec in ("default", DEFAULT_SPEC):
        return eval_set.store
    return eval_set.store.with_name(
        f"{eval_set.store.name}-{spec.replace(':', '-').replace('/', '-')}"
    )


def seed_store(eval_set: EvalSet, cache: VectorCache, where: Path | None = None) -> Path:
    """A store for the set on ``cache.spec`` whose embedding cache holds every chunk vector.

    The chunk texts ingest will embed are computed the way ingest does
    (``chunk_entity`` + ``context_text``); missing ones are embedded into the
    bench cache, then the store's embedding cache is seeded with them under
    the store's own keys (``embedding_key(cache_id, text)``). Ingesting the
    corpus afterwards — ``ks ingest`` or the API — embeds nothing.
    """
    from knowledge_store.ingest.embedding import spec_of
    from knowledge_store.store import KnowledgeStore

    _, texts = store_texts(eval_set)
    where = where or store_path(eval_set, cache.spec)
    vectors = cache.vectors(texts, label=f"{eval_set.name} store")
    with KnowledgeStore.open(where, embedder=cache.spec) as store:
        engine = store.engine
        embedder = cache.embedder
        engine.writer.set_model(embedder.model_id, vectors.shape[1], spec_of(embedder))
        items = list(dict(zip(cache.keys(texts), vectors, strict=True)).items())
        for i in range(0, len(items), 2000):
            engine.writer.cache_embeddings(dict(items[i : i + 2000]))
    return where


def build_store(eval_set: EvalSet, cache: VectorCache) -> Path:
    """The set's corpus ingested into an embedded store on ``cache.spec``, vectors from the cache.

    Rebuilds nothing when it is current; otherwise :func:`seed_store`, then ingest.
    """
    from knowledge_store.store import KnowledgeStore

    entities, _ = store_texts(eval_set)
    where = store_path(eval_set, cache.spec)
    with KnowledgeStore.open(where, embedder=cache.spec) as store:
        current = store.engine.writer.content_hashes([e.uid for e in entities])
        if all(current.get(e.uid) == e.content_hash for e in entities):
            return where
    seed_store(eval_set, cache, where)
    with KnowledgeStore.open(where, embedder=cache.spec) as store:
        store.ingest([eval_set.path / "corpus.jsonl"], progress=False)
    return where


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description="Seed eval stores' embedding caches")
    parser.add_argument("command", choices=["seed"])
    parser.add_argument("--sets", nargs="*")
    parser.add_argument("--spec", default="onnx:int8")
    parser.add_argument("--store", type=Path, help="the store (one set only)")
    args = parser.parse_args()
    cache = VectorCache(args.spec)
    for eval_set in eval_sets(args.sets):
        print(seed_store(eval_set, cache, args.store))


if __name__ == "__main__":
    main()
