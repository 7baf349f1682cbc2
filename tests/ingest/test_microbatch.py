"""MicroBatchingEmbedder: concurrent query embeddings share forward passes, each gets its row."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import pytest

from knowledge_store.ingest.embedders.microbatch import WINDOW_MS
from knowledge_store.ingest.embedding import (
    DelegatingEmbedder,
    MicroBatchingEmbedder,
    cache_id_of,
    spec_of,
)
from knowledge_store.model import LIGHT_QUERY_CHARS

QUERIES = [
    "how do I create an index",
    "vacuum reclaims storage",
    "replica lag during bulk loads",
    "what is a partial index",
    "write-ahead log checkpoints",
    "pg_stat_activity columns",
    "",
    "autovacuum daemon settings and thresholds for large tables",
]


class Counting(DelegatingEmbedder):
    """Counts the calls that reach the model, and how many texts each carried."""

    def __init__(self, inner, fail: bool = False) -> None:
        super().__init__(inner)
        self.sizes: list[int] = []
        self.fail = fail
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str], *, progress: bool = False) -> np.ndarray:
        with self._lock:
            self.sizes.append(len(texts))
        if self.fail:
            raise RuntimeError("model unavailable")
        return self.inner.embed(texts, progress=progress)

    def embed_query(self, text: str) -> np.ndarray:
        with self._lock:
            self.sizes.append(1)
        if self.fail:
            raise RuntimeError("model unavailable")
        return self.inner.embed_query(text)


def concurrently(batcher: MicroBatchingEmbedder, texts: list[str]) -> list[object]:
    start = threading.Barrier(len(texts))
    out: list[object] = [None] * len(texts)

    def ask(i: int) -> None:
        start.wait()
        try:
            out[i] = batcher.embed_query(texts[i])
        except Exception as exc:
            out[i] = exc

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(texts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


@pytest.mark.real_model(reason="the production runtime: int8 activations are quantized per batch")
def test_concurrent_queries_share_passes_and_get_their_own_rows(real_embedder):
    embedder = real_embedder
    inner = Counting(embedder)
    batcher = MicroBatchingEmbedder(inner, window_s=0.02)
    texts = QUERIES * 3
    vectors = concurrently(batcher, texts)
    alone = {text: embedder.embed_query(text) for text in QUERIES}
    reference = np.stack([alone[t] for t in QUERIES])
    for text, vector in zip(texts, vectors, strict=True):
        assert isinstance(vector, np.ndarray)
        # Its own row: int8 activations are quantized per batch, so a text's vector in a
        # batch is close to (cosine > 0.9), not equal to, its vector alone.
        assert float(vector @ alone[text]) > 0.9
        assert QUERIES[int(np.argmax(reference @ vector))] == text
    assert sum(inner.sizes) == len(texts) == batcher.queries
    assert batcher.passes == len(inner.sizes) < len(texts)  # batched
    assert max(inner.sizes) > 1


def test_one_caller_is_one_pass_of_one_text(embedder):
    inner = Counting(embedder)
    batcher = MicroBatchingEmbedder(inner, window_s=0.0)
    assert np.allclose(batcher.embed_query(QUERIES[0]), embedder.embed_query(QUERIES[0]))
    assert inner.sizes == [1]


def test_batches_are_capped(embedder):
    inner = Counting(embedder)
    batcher = MicroBatchingEmbedder(inner, window_s=0.05, max_batch=3)
    assert all(isinstance(v, np.ndarray) for v in concurrently(batcher, QUERIES))
    assert max(inner.sizes) <= 3 and sum(inner.sizes) == len(QUERIES)


def test_a_failed_pass_fails_every_caller_in_it(embedder):
    batcher = MicroBatchingEmbedder(Counting(embedder, fail=True), window_s=0.02)
    answers = concurrently(batcher, QUERIES[:5])
    assert all(isinstance(a, RuntimeError) for a in answers)
    healthy = MicroBatchingEmbedder(embedder, window_s=0.0)  # and nothing is left waiting
    assert healthy.embed_query("x").shape == (384,)


@pytest.mark.real_model(reason="it wraps the default ONNX runtime and keeps its spec")
def test_it_keeps_the_identity_of_what_it_wraps(real_embedder):
    embedder = real_embedder
    batcher = MicroBatchingEmbedder(embedder)
    assert batcher.model_id == embedder.model_id
    assert spec_of(batcher) == spec_of(embedder)
    assert spec_of(embedder).startswith("onnx:")
    assert cache_id_of(batcher) == cache_id_of(embedder)
    assert batcher.embed(["a", "b"]).shape == (2, 384)
    with pytest.raises(Exception, match="a query is a str"):
        batcher.embed_query(3)  # type: ignore[arg-type]


def test_the_window_is_a_parameter(embedder):
    assert MicroBatchingEmbedder(embedder, window_s=0.004).window_s == pytest.approx(0.004)
    assert MicroBatchingEmbedder(embedder).window_s == pytest.approx(WINDOW_MS / 1000)


class Gated(Counting):
    """Holds every call on a long text until ``release`` is set (a long forward pass)."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.release = threading.Event()
        self.long_started = threading.Event()

    def embed_query(self, text: str) -> np.ndarray:
        if len(text) > LIGHT_QUERY_CHARS:
            self.long_started.set()
            assert self.release.wait(30)
        return super().embed_query(text)


def test_a_long_text_runs_alone_and_short_queries_do_not_wait_for_it(embedder):
    """A long query neither joins a batch (it would pad every short text to its length) nor
    holds the pass that short queries queue behind (bench/bench_abuse.py's probe)."""
    inner = Gated(embedder)
    batcher = MicroBatchingEmbedder(inner, window_s=0.0)
    long_text = "vacuum " * (LIGHT_QUERY_CHARS // 7 + 10)
    got: list[object] = []
    running = threading.Thread(target=lambda: got.append(batcher.embed_query(long_text)))
    running.start()
    assert inner.long_started.wait(30)
    try:  # the long pass is still running: a short query is answered all the same
        assert np.allclose(batcher.embed_query(QUERIES[0]), embedder.embed_query(QUERIES[0]))
    finally:
        inner.release.set()
        running.join(30)
    assert np.allclose(got[0], embedder.embed_query(long_text))
    assert inner.sizes == [1, 1]  # two passes of one text each: nothing was batched with it
