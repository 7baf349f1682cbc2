"""How the servers run blocking store calls: two bounded lanes, bounded query embedding.

Every surface (REST, GraphQL, the page, MCP) awaits :func:`run_store`, which
runs the call on a thread pool of its own — never on the event loop, and not
on the loop's general pool of 40 — because each thread keeps its own SQLite
connection and page cache, so the thread count bounds the server's memory.

Two lanes, so that a flood of expensive requests degrades those requests and
not every caller:

- the **light lane** (:data:`THREADS` threads) runs requests within the light
  bounds of :mod:`knowledge_store.model` (``LIGHT_*``: the default k, short
  texts, short lists, one hop) — a plain search, a content read, a filter;
- the **heavy lane** (:data:`HEAVY_THREADS` threads, half the CPUs) runs
  everything else (:func:`is_heavy`): large k, long lists or texts, deep
  graphs, ``query_graph``, ingest, a GraphQL document with several store
  calls. While the heavy lane is busy, heavy requests wait their turn in it;
  light requests still find a thread (and a CPU) in their own lane.

:class:`SlotEmbedder` bounds the CPU-heavy part of a search, the query
embedding, to a few forward passes at once. ``$KS_SERVE_THREADS`` (default
4 × CPUs, at most 32), ``$KS_HEAVY_THREADS`` (default CPUs / 2, at least 1)
and ``$KS_EMBED_SLOTS`` (default the CPU count) tune them. A server of several worker
processes (``ks serve --workers N``) gives each process its share of the defaults
(:func:`share_cpus`): N processes together hold about the threads and embedding
slots one process would.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

from knowledge_store.ingest.embedding import (
    DelegatingEmbedder,
    Embedder,
    MicroBatchingEmbedder,
    Vectors,
)
from knowledge_store.model import LIGHT_K, LIGHT_LIST_VALUES, LIGHT_QUERY_CHARS
from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.operations import OPERATIONS

__all__ = [
    "ALWAYS_HEAVY",
    "EMBED_SLOTS",
    "HEAVY_THREADS",
    "THREADS",
    "SlotEmbedder",
    "is_heavy",
    "run_store",
    "share_cpus",
    "with_embedding_slots",
]

T = TypeVar("T")


def _setting(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() and int(value) > 0 else default


CPUS = os.cpu_count() or 2
THREADS = _setting("KS_SERVE_THREADS", min(32, 4 * CPUS))
HEAVY_THREADS = _setting("KS_HEAVY_THREADS", max(1, CPUS // 2))
EMBED_SLOTS = _setting("KS_EMBED_SLOTS", CPUS)
_POOL = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="ks-store")
_HEAVY_POOL = ThreadPoolExecutor(max_workers=HEAVY_THREADS, thread_name_prefix="ks-heavy")
_SLOTS = EMBED_SLOTS


def share_cpus(processes: int) -> int:
    """Size this process's lanes as one of ``processes`` serving together; its embedding slots.

    Call it before the first request (a worker process does, before it builds its app):
    the lanes are replaced, not resized. A variable that is set still wins.
    """
    global _POOL, _HEAVY_POOL, _SLOTS
    n = max(1, processes)
    threads = _setting("KS_SERVE_THREADS", max(4, min(32, 4 * CPUS) // n))
    heavy = _setting("KS_HEAVY_THREADS", max(1, CPUS // 2 // n))
    _SLOTS = _setting("KS_EMBED_SLOTS", max(1, CPUS // n))
    _POOL = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="ks-store")
    _HEAVY_POOL = ThreadPoolExecutor(max_workers=heavy, thread_name_prefix="ks-heavy")
    return _SLOTS


#: Operations that are heavy whatever their arguments (a time budget of their own, embedding).
ALWAYS_HEAVY = frozenset(op.name for op in OPERATIONS if op.heavy)


async def run_store(fn: Callable[..., T], /, *args: Any, heavy: bool = False, **kwargs: Any) -> T:
    """Run a blocking store call in its lane (``heavy``: see :func:`is_heavy`) and await it."""
    loop = asyncio.get_running_loop()
    pool = _HEAVY_POOL if heavy else _POOL
    return await loop.run_in_executor(pool, partial(fn, *args, **kwargs))


def is_heavy(operation: str, arguments: Mapping[str, Any] | None = None) -> bool:
    """Whether a request runs in the heavy lane, from its operation and its raw arguments.

    Cheap on any input (lengths only, nothing parsed): it runs on the event
    loop before the request is validated. ``operation`` names an operation of
    the table (:mod:`.operations`); ``arguments`` are the request's JSON
    arguments (REST body, MCP tool arguments, GraphQL field arguments).
    """
    if operation in ALWAYS_HEAVY:
        return True
    args = arguments or {}
    if args.get("cursor") == "*":  # a paged read's first page ranks to the bound (1,000)
        return True
    k = args.get("k")
    if isinstance(k, int) and k > LIGHT_K:
        return True
    for name in ("query", "ref"):
        text = args.get(name)
        if isinstance(text, str) and len(text) > LIGHT_QUERY_CHARS:
            return True
    depth = args.get("depth")
    if isinstance(depth, int) and depth > 1:
        return True
    lists: list[Any] = [args.get("starts"), args.get("uids"), args.get("labels")]
    filters = args.get("filters")
    if isinstance(filters, Mapping):
        lists += filters.values()
    return any(
        isinstance(v, Sequence) and not isinstance(v, str) and len(v) > LIGHT_LIST_VALUES
        for v in lists
    )


class SlotEmbedder(DelegatingEmbedder):
    """An :class:`Embedder` that lets at most ``slots`` embeddings run at once."""

    def __init__(self, inner: Embedder, slots: int | None = None) -> None:
        super().__init__(inner)
        self._slots = threading.BoundedSemaphore(_SLOTS if slots is None else slots)

    def embed(self, texts: Sequence[str], *, progress: bool = False) -> Vectors:
        with self._slots:
            return self.inner.embed(texts, progress=progress)

    def embed_query(self, text: str) -> Vectors:
        with self._slots:
            return self.inner.embed_query(text)


def with_embedding_slots(
    store: KnowledgeStore, slots: int | None = None, *, window_s: float | None = None
) -> KnowledgeStore:
    """The same store (same engine) whose query embeddings take a slot; loads the model now.

    Concurrent query embeddings are batched (:class:`MicroBatchingEmbedder`, within
    ``window_s``: ``ks serve`` passes ``$KS_EMBED_WINDOW_MS``) and each batch takes one slot.
    """
    batched = MicroBatchingEmbedder(SlotEmbedder(store.embedder, slots), window_s=window_s)
    return KnowledgeStore(store.engine, embedder=batched)
