"""How the servers run blocking store calls: a small dedicated pool, bounded query embedding.

Every surface (REST, GraphQL, the page, MCP) awaits :func:`run_store`, which
runs the call on a pool of :data:`THREADS` threads of its own — not the
event loop's general pool of 40 — because each thread keeps its own SQLite
connection and page cache, so the thread count bounds the server's memory.
:class:`SlotEmbedder` bounds the CPU-heavy part, the query embedding, to a few
forward passes at once, so cheap calls (content, graph, sql) are not queued
behind searches and the CPUs are not oversubscribed.

``$KS_SERVE_THREADS`` (default 4 × CPUs, at most 32) and ``$KS_EMBED_SLOTS``
(default the CPU count) tune them.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

from knowledge_store.ingest.embedding import (
    DelegatingEmbedder,
    Embedder,
    MicroBatchingEmbedder,
    Vectors,
)
from knowledge_store.store import KnowledgeStore

__all__ = ["EMBED_SLOTS", "THREADS", "SlotEmbedder", "run_store", "with_embedding_slots"]

T = TypeVar("T")


def _setting(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() and int(value) > 0 else default


CPUS = os.cpu_count() or 2
THREADS = _setting("KS_SERVE_THREADS", min(32, 4 * CPUS))
EMBED_SLOTS = _setting("KS_EMBED_SLOTS", CPUS)
_POOL = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="ks-store")


async def run_store(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking store call on the store pool and await its answer."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_POOL, partial(fn, *args, **kwargs))


class SlotEmbedder(DelegatingEmbedder):
    """An :class:`Embedder` that lets at most ``slots`` embeddings run at once."""

    def __init__(self, inner: Embedder, slots: int = EMBED_SLOTS) -> None:
        super().__init__(inner)
        self._slots = threading.BoundedSemaphore(slots)

    def embed(self, texts: Sequence[str], *, progress: bool = False) -> Vectors:
        with self._slots:
            return self.inner.embed(texts, progress=progress)

    def embed_query(self, text: str) -> Vectors:
        with self._slots:
            return self.inner.embed_query(text)


def with_embedding_slots(store: KnowledgeStore, slots: int = EMBED_SLOTS) -> KnowledgeStore:
    """The same store (same engine) whose query embeddings take a slot; loads the model now.

    Concurrent query embeddings are batched (:class:`MicroBatchingEmbedder`,
    ``$KS_EMBED_WINDOW_MS``) and each batch takes one slot.
    """
    batched = MicroBatchingEmbedder(SlotEmbedder(store.embedder, slots))
    return KnowledgeStore(store.engine, embedder=batched)
