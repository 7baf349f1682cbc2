"""Concurrent query embeddings, run as one batch: what ``ks serve`` wraps its embedder in.

The first caller to arrive leads a batch: it waits ``window`` seconds (or
until ``max_batch`` texts have joined), then for the previous batch's forward
pass to finish, takes every text that joined meanwhile and embeds them in one
call. The others wait for their row. With one caller at a time nothing waits
but the window; under load, the texts that queue behind a running pass go
together in the next — one pass of a few short texts costs little more than
one text alone. ``window`` defaults to :data:`WINDOW_MS` (``ks serve`` passes
``$KS_EMBED_WINDOW_MS``). bench/bench_serve.py ``--window-ms`` measures it; the runs so
far (0, 1 and 3 ms on a shared, oversubscribed 2-core machine) did not tell the
windows apart from the load's drift, so 1 ms is provisional.

A long text (over :data:`~knowledge_store.model.LIGHT_QUERY_CHARS`) is embedded on its
own, outside the batches: in a batch it would pad every short text to its length, and
the short queries queued behind its pass would wait for it (a flood of 4,000-character
queries put a plain search's p99 at 7.3× its idle p99, bench/bench_abuse.py).
"""

from __future__ import annotations

import threading
import time

from knowledge_store.ingest.embedders.core import (
    DelegatingEmbedder,
    Embedder,
    Vectors,
    check_query,
)
from knowledge_store.model import LIGHT_QUERY_CHARS

__all__ = ["MAX_BATCH", "WINDOW_MS", "MicroBatchingEmbedder"]

#: The default batching window (milliseconds); provisional (see the module docstring).
WINDOW_MS = 1.0
MAX_BATCH = 32


class _Batch:
    __slots__ = ("closed", "done", "error", "texts", "vectors")

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.closed = False
        self.done = threading.Event()
        self.vectors: Vectors | None = None
        self.error: BaseException | None = None


class MicroBatchingEmbedder(DelegatingEmbedder):
    """Wraps an embedder; ``embed_query`` calls from many threads share forward passes.

    ``embed`` (ingest-sized work) passes straight through.
    """

    def __init__(
        self, inner: Embedder, *, window_s: float | None = None, max_batch: int = MAX_BATCH
    ) -> None:
        super().__init__(inner)
        self.window_s = WINDOW_MS / 1000.0 if window_s is None else max(0.0, window_s)
        self.max_batch = max(1, max_batch)
        self._lock = threading.Lock()
        self._running = threading.Lock()
        self._open: _Batch | None = None
        self.passes = 0  # forward passes run, and the queries they embedded
        self.queries = 0

    def __repr__(self) -> str:
        return f"MicroBatchingEmbedder({self.inner!r}, window_s={self.window_s})"

    def embed_query(self, text: str) -> Vectors:
        check_query(text)
        if len(text) > LIGHT_QUERY_CHARS:
            return self.inner.embed_query(text)  # alone: see the module docstring
        with self._lock:
            batch = self._open
            lead = batch is None or batch.closed or len(batch.texts) >= self.max_batch
            if lead:
                batch = self._open = _Batch()
            assert batch is not None
            row = len(batch.texts)
            batch.texts.append(text)
        if lead:
            self._lead(batch)
        else:
            batch.done.wait()
        if batch.error is not None:
            raise batch.error
        assert batch.vectors is not None
        vector: Vectors = batch.vectors[row]
        return vector

    def _lead(self, batch: _Batch) -> None:
        try:
            if self.window_s > 0:
                deadline = time.monotonic() + self.window_s
                while (left := deadline - time.monotonic()) > 0 and len(
                    batch.texts
                ) < self.max_batch:
                    time.sleep(min(self.window_s / 4, left))
            with self._running:
                with self._lock:
                    batch.closed = True
                    if self._open is batch:
                        self._open = None
                    texts = list(batch.texts)
                if len(texts) == 1:
                    batch.vectors = self.inner.embed_query(texts[0])[None, :]
                else:
                    batch.vectors = self.inner.embed(texts)
                self.passes += 1
                self.queries += len(texts)
        except BaseException as exc:
            batch.error = exc
            raise
        finally:
            batch.done.set()
