"""A pinned generation of the embedded engine's dense index, and how it is searched.

The planner (``search``): the caller passes the sorted chunk ids it may see.

* none, or every live row → ``hnsw``;
* a visible share ≥ ``exact_share`` and more than ``exact_floor`` rows →
  ``hnsw-filtered``: the bitmap is applied while traversing, and the search
  expansion grows as the share falls;
* otherwise → ``exact``: a brute-force scan over only the visible vectors.

A generation is immutable once made (:class:`~.dense.DenseIndex` makes a new one
per change): rows added after it are outside its searches, rows tombstoned after
it are still in them, so a pinned answer is exact for its watermark.
"""

from __future__ import annotations

import functools
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import faiss as _faiss_module
import numpy as np
import numpy.typing as npt

from knowledge_store.errors import StoreError
from knowledge_store.model import Strategy, VectorInfo

if TYPE_CHECKING:
    from knowledge_store.engines.embedded.dense import DenseIndex

__all__ = ["FloatArray", "Generation", "IdArray", "Selection", "inner_products", "normalise"]

#: faiss through ``Any``: its bundled SWIG stubs lack most of the HNSW, selector and
#: I/O callback API used here.
faiss: Any = _faiss_module

IdArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float32]

# faiss keeps HNSW search counters in one process-wide struct: searches that
# read them are serialised so that ``scanned`` is this search's own count.
_STATS_LOCK = threading.Lock()

#: Prepared visible-row selections kept per index (see ``DenseIndex._select``).
_SELECTIONS = 16


@dataclass(frozen=True, eq=False)
class Selection:
    allowed: np.ndarray  # the caller's array of visible chunk ids (held: its id stays unique)
    rows: IdArray  # live rows of the visible chunks
    bitmap: npt.NDArray[np.uint8] | None  # packed rows for filtered HNSW, None: exact scan


def normalise(vectors: FloatArray) -> FloatArray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return np.ascontiguousarray(vectors / norms, dtype=np.float32)


@dataclass(eq=False)
class Generation:
    """The index as it was at one watermark: what a reader pins.

    Immutable once made: a change makes a new generation (the row table and
    the live flags are copied on write). HNSW can't delete and appends in
    place, so rows added after this generation are excluded from its searches
    and rows tombstoned after it are still included: a pinned answer is exact
    for its watermark. Searches and appends on the shared faiss index are
    serialised by the index's lock (faiss is not safe for add during search).
    """

    owner: DenseIndex  # its settings (ef, exact share) and the lock of the shared faiss index
    index: Any  # the faiss index object (shared with later generations until a rebuild)
    row_ids: IdArray  # row → chunk id, for rows 0 .. rows-1
    live: npt.NDArray[np.bool_]  # row → not tombstoned, at this generation
    live_count: int
    watermark: int
    #: The read-only file map ``index`` views (a format-2 file), kept alive with it; the
    #: owner copies the index (``densefile.owned``) before it changes it.
    mapping: Any = None
    _lookup: tuple[IdArray, IdArray, IdArray | None] | None = None
    _live_bits: npt.NDArray[np.uint8] | None = None
    _selections: OrderedDict[int, Selection] = field(default_factory=OrderedDict)

    @property
    def rows(self) -> int:
        return len(self.row_ids)

    def __len__(self) -> int:
        return self.live_count

    def _sorted_live(self) -> tuple[IdArray, IdArray, IdArray | None]:
        if self._lookup is None:
            rows = np.flatnonzero(self.live).astype(np.int64)
            ids = self.row_ids[rows]
            order = np.argsort(ids, kind="stable")
            ids, rows = ids[order], rows[order]
            table = None
            # Chunk ids are catalog row ids, dense from 1: a direct table maps a large
            # visible set 10× faster than a binary search (0.1 vs 1.2 ms for 50k ids).
            if len(ids) and ids[0] >= 0 and ids[-1] < 4 * len(ids) + 65_536:
                table = np.full(int(ids[-1]) + 1, -1, dtype=np.int64)
                table[ids] = rows
            self._lookup = (ids, rows, table)
        return self._lookup

    def rows_of(self, ids: IdArray) -> IdArray:
        """The live rows holding these chunk ids (unknown ids are ignored)."""
        keys, rows, table = self._sorted_live()
        if len(keys) == 0 or len(ids) == 0:
            return np.empty(0, dtype=np.int64)
        if table is not None:
            mapped = table[ids[(ids >= 0) & (ids < len(table))]]
            found: IdArray = mapped[mapped >= 0]
            return found
        pos = np.searchsorted(keys, ids)
        pos[pos >= len(keys)] = 0
        hit = keys[pos] == ids
        found = rows[pos[hit]]
        return found

    # -- searching -------------------------------------------------------------------
    def search(
        self, query: np.ndarray, k: int, *, allowed: np.ndarray | None
    ) -> tuple[IdArray, FloatArray, VectorInfo]:
        """The ``k`` nearest chunk ids and their cosine similarities, best first.

        ``allowed``: the sorted chunk ids the caller may see, or None for all.
        """
        dimension = self.owner.dimension
        q = np.asarray(query, dtype=np.float32).reshape(1, -1)
        if q.shape[1] != dimension:
            raise StoreError(f"dense index: query has dimension {q.shape[1]}, expected {dimension}")
        q = normalise(q)
        n = self.live_count
        if k <= 0 or n == 0:
            strategy: Strategy = "hnsw" if allowed is None else "exact"
            return _empty(_info(strategy, 0, exhaustive=True))
        k = min(k, n)  # faiss allocates k results per query
        owner = self.owner
        with owner.lock:
            if allowed is not None:
                selection = self._select(allowed)
                rows = selection.rows
                if len(rows) < n:
                    if selection.bitmap is not None:
                        share = len(rows) / n
                        ef = min(
                            owner.ef_max, max(owner.ef_search, math.ceil(owner.filtered_ef / share))
                        )
                        return self._hnsw(q, k, selection.bitmap, ef, "hnsw-filtered")
                    return self._exact(q, k, rows)
            dead = self.rows - n
            if dead == 0 and int(self.index.ntotal) == self.rows:
                return self._hnsw(q, k, None, owner.ef_search, "hnsw")
            ef = min(owner.ef_max, math.ceil(owner.ef_search * max(self.rows, 1) / n))
            return self._hnsw(q, k, self._live_bitmap(), ef, "hnsw")  # tombstones filtered out

    def _live_bitmap(self) -> npt.NDArray[np.uint8]:
        if self._live_bits is None:
            self._live_bits = np.packbits(self.live, bitorder="little")
        return self._live_bits

    def _select(self, allowed: np.ndarray) -> Selection:
        """The live rows of ``allowed`` and, when HNSW will filter, their bitmap.

        Mapping 50k visible ids to rows and packing the bitmap costs 0.2 ms — as
        much as the filtered traversal itself — so a selection is kept for as long
        as the caller passes the same array object (the engine caches one per
        publish, held principals and filters). The entry holds the array, so its
        id can't be reused while it lives.
        """
        cached = self._selections.get(id(allowed))
        if cached is not None and cached.allowed is allowed:
            self._selections.move_to_end(id(allowed))
            return cached
        wanted = np.asarray(allowed, dtype=np.int64).reshape(-1)
        if len(wanted) > 1 and bool((np.diff(wanted) <= 0).any()):
            wanted = np.unique(wanted)  # the contract says sorted; be safe anyway
        rows = self.rows_of(wanted)
        bitmap = None
        owner = self.owner
        if len(rows) >= owner.exact_share * self.live_count and len(rows) > owner.exact_floor:
            mask = np.zeros(self.rows, dtype=bool)
            mask[rows] = True
            bitmap = np.packbits(mask, bitorder="little")  # bit i of byte i>>3 = row i
        selection = Selection(allowed, rows, bitmap)
        self._selections[id(allowed)] = selection
        while len(self._selections) > _SELECTIONS:
            self._selections.popitem(last=False)
        return selection

    def _hnsw(
        self,
        q: FloatArray,
        k: int,
        bitmap: npt.NDArray[np.uint8] | None,
        ef: int,
        strategy: Strategy,
    ) -> tuple[IdArray, FloatArray, VectorInfo]:
        """HNSW search (the caller holds the lock), ``bitmap`` applied during traversal.

        Rows appended after this generation are outside the bitmap: the bitmap is
        padded with zeros to the index's current size, so they never match.
        """
        if bitmap is None:
            params = _plain_params(max(ef, k))
        else:
            params = faiss.SearchParametersHNSW()
            params.efSearch = max(ef, k)
            need = (int(self.index.ntotal) + 7) // 8
            if len(bitmap) < need:
                bitmap = np.concatenate([bitmap, np.zeros(need - len(bitmap), dtype=np.uint8)])
            params.sel = faiss.IDSelectorBitmap(len(bitmap), faiss.swig_ptr(bitmap))
        try:
            with _STATS_LOCK:
                faiss.cvar.hnsw_stats.reset()
                scores, found = self.index.search(q, k, params=params)
                scanned = int(faiss.cvar.hnsw_stats.ndis)
        except RuntimeError as exc:
            raise StoreError(f"dense index: search failed: {exc}") from exc
        del bitmap  # kept alive until the search returned
        keep = (found[0] >= 0) & (found[0] < self.rows)
        ids = self.row_ids[found[0][keep]]
        info = _info(strategy, scanned, exhaustive=False)
        return ids, scores[0][keep].astype(np.float32), info

    def _exact(
        self, q: FloatArray, k: int, rows: IdArray
    ) -> tuple[IdArray, FloatArray, VectorInfo]:
        if len(rows) == 0:
            return _empty(_info("exact", 0, exhaustive=True))
        scores = inner_products(self.index, q, rows)
        top = min(k, len(rows))
        best = np.argpartition(-scores, top - 1)[:top] if top < len(rows) else np.arange(top)
        ids = self.row_ids[rows[best]]
        order = np.lexsort((ids, -scores[best]))
        info = _info("exact", len(rows), exhaustive=True)
        return ids[order], scores[best][order], info


def inner_products(index: Any, q: FloatArray, rows: IdArray) -> FloatArray:
    """``q · x[row]`` for each row, read in place from a faiss index's flat storage.

    On one thread: for one query the work is small, and OpenMP's spinning
    workers made the same scan up to 100× slower on a busy 2-core machine.
    """
    scores = np.empty(len(rows), dtype=np.float32)
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    q = np.ascontiguousarray(q.reshape(-1), dtype=np.float32)
    storage = faiss.downcast_index(index.storage)
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)  # this thread's setting only
    try:
        faiss.fvec_inner_products_by_idx(
            faiss.swig_ptr(scores),
            faiss.swig_ptr(q),
            storage.get_xb(),
            faiss.swig_ptr(rows),
            len(q),
            1,
            len(rows),
        )
    finally:
        faiss.omp_set_num_threads(threads)
    return scores


def _info(strategy: Strategy, scanned: int, *, exhaustive: bool) -> VectorInfo:
    """How a search went, of values of the exact types (assigned, not validated again)."""
    return VectorInfo.of_checked(
        {"strategy": strategy, "scanned": scanned, "exhaustive": exhaustive}
    )


@functools.lru_cache(maxsize=64)
def _plain_params(ef: int) -> Any:
    """HNSW search parameters with no selector, one object per ``ef``: made once (a new SWIG
    object and its setter cost ~1% of a vector@10 answer), never changed after, and only
    read by faiss — so searches may share it."""
    params = faiss.SearchParametersHNSW()
    params.efSearch = ef
    return params


def _empty(info: VectorInfo) -> tuple[IdArray, FloatArray, VectorInfo]:
    return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32), info
