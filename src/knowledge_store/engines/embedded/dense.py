"""The dense index of the embedded engine: in-process HNSW keyed by chunk id.

A *derived* index (DESIGN §4), rebuildable from the embeddings the catalog
keeps. The library is faiss (``IndexHNSWFlat``, inner product over L2-normalised
vectors = cosine), chosen by ``bench/bench_vector.py`` over usearch: only faiss
lets the Python caller apply a filter *during* graph traversal (an
``IDSelectorBitmap``), which is what keeps recall up under an ACL filter;
usearch's Python binding can only post-filter.

faiss HNSW can't delete, so rows are tombstoned (excluded by the same bitmap)
and the graph is rebuilt from the stored vectors when more than
``rebuild_dead_share`` of the rows are dead. Each change makes a new
:class:`Generation` (copy on write of the row table and the live flags), which
a reader pins: its answer is exact for its watermark while the writer goes on.

Searching a pinned generation (the planner: hnsw, hnsw-filtered or exact):
:mod:`.generation`.

File format (one file, replaced atomically by ``save``): :mod:`.densefile`. A
reader maps it and faiss views the index in place (no private copy); the first
change copies it. A missing, truncated, corrupt or foreign file loads as an empty index with
watermark 0, and the catalog rebuilds it. A *damaged* one (its checksums fail, it is
truncated, not a dense file at all) is kept in ``damage``: the holder of the write lock
moves it aside (:meth:`DenseIndex.quarantine`) before the rebuild, so it can be inspected.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO, ClassVar

import numpy as np
import numpy.typing as npt

from knowledge_store.engines.embedded import densefile, quarantine
from knowledge_store.engines.embedded.generation import (
    FloatArray,
    Generation,
    IdArray,
    Selection,
    faiss,
    inner_products,
    normalise,
)
from knowledge_store.errors import StoreError
from knowledge_store.model import VectorInfo

__all__ = ["DenseIndex", "Generation", "file_watermark", "inner_products", "remove_leftovers"]

log = logging.getLogger(__name__)


class DenseIndex:
    """HNSW over chunk embeddings with an exact fallback for selective filters."""

    #: Below this visible share an exact scan over the visible vectors is both more
    #: accurate and not slower than filtered HNSW. Measured on 100k real 384-d chunk
    #: vectors (bench/bench_acl.py, crossover table), the visible-row bitmap prepared
    #: once per visible set (``_select``), p50 exact vs filtered (efSearch 24/share):
    #: 3% 0.27 vs 0.93 ms, 5% 0.44 vs 0.53, 8% 1.0 vs 0.37, 10% 1.6 vs 0.34, 20% 4.1
    #: vs 0.25. Before the bitmap was cached (and with 64/share) it was 12%. The
    #: crossover falls as the index grows: re-measure for millions of vectors.
    exact_share: ClassVar[float] = 0.06
    #: Up to this many visible rows are always scanned exactly (about 0.3 ms at 384-d,
    #: the cost of the cheapest filtered HNSW search).
    exact_floor: ClassVar[int] = 5_000
    #: HNSW graph degree (faiss M), construction and unfiltered search expansion
    #: (recall@10 at 100k: 0.952 at 64, 0.976 at 128, 0.985 at 192, 0.990 at 256).
    connectivity: ClassVar[int] = 32
    ef_construction: ClassVar[int] = 128
    ef_search: ClassVar[int] = 192
    #: Filtered search expansion: ``filtered_ef / share``, at least ``ef_search``, at
    #: most ``ef_max``. Recall@10 vs exact at 100k (random visible sets), 16 / 24 / 64:
    #: 3% 0.977 / 0.991 / –, 5% 0.980 / 0.990 / 0.992, 8% 0.972 / 0.979 / 0.996,
    #: 10% 0.974 / 0.975 / 0.996, 30% 0.979 throughout; 24 costs 0.34 ms at 10%
    #: where 64 costs 0.74 ms. (A fixed efSearch of 64 fell to 0.76 at 10%.)
    filtered_ef: ClassVar[int] = 24
    ef_max: ClassVar[int] = 1024
    #: Rebuild the graph (at ``save``) when this share of the rows are tombstones.
    rebuild_dead_share: ClassVar[float] = 0.25

    def __init__(self, path: Path, dimension: int) -> None:
        if dimension < 1:
            raise StoreError(f"dense index: dimension must be positive, not {dimension}")
        self._path = Path(path)
        self.dimension = dimension
        self.lock = threading.RLock()
        self._signature: tuple[int, int, int] | None = None
        #: Why the file on disk is damaged (None: it is not, or there is none).
        self.damage: str | None = None
        #: Why each damaged file this process moved aside was damaged (``ks check`` says so).
        self.moved_aside: list[str] = []
        self._gen = self._empty_generation()
        self._load()  # a missing or unreadable file leaves it empty, watermark 0

    # -- state ---------------------------------------------------------------

    def _new_index(self) -> Any:
        index = faiss.IndexHNSWFlat(self.dimension, self.connectivity, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = self.ef_construction
        index.hnsw.efSearch = self.ef_search
        return index

    def _empty_generation(self, watermark: int = 0) -> Generation:
        return Generation(
            self,
            self._new_index(),
            np.empty(0, dtype=np.int64),
            np.empty(0, dtype=bool),
            0,
            watermark,
        )

    def _next(
        self,
        *,
        index: Any = None,
        row_ids: IdArray | None = None,
        live: npt.NDArray[np.bool_] | None = None,
        watermark: int | None = None,
    ) -> None:
        """Make the next generation (the lock is held); readers keep theirs."""
        gen = self._gen
        live = gen.live if live is None else live
        self._gen = Generation(
            self,
            gen.index if index is None else index,
            gen.row_ids if row_ids is None else row_ids,
            live,
            int(live.sum()),
            gen.watermark if watermark is None else watermark,
            gen.mapping if index is None else None,
        )

    def generation(self) -> Generation:
        """The current generation: pin it to search one watermark's view."""
        return self._gen

    def _vectors(self, gen: Generation) -> FloatArray:
        """A view of the stored vectors (valid until the next add)."""
        n = gen.rows
        if n == 0:
            return np.empty((0, self.dimension), dtype=np.float32)
        storage = faiss.downcast_index(gen.index.storage)
        flat = faiss.rev_swig_ptr(storage.get_xb(), n * self.dimension)
        return np.asarray(flat).reshape(n, self.dimension)

    # -- writing -------------------------------------------------------------

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Index ``vectors`` (n, d) under chunk ``ids``; an id already present is replaced."""
        keys = np.asarray(ids, dtype=np.int64).reshape(-1)
        matrix = np.asarray(vectors, dtype=np.float32)
        if matrix.ndim != 2 or matrix.shape != (len(keys), self.dimension):
            raise StoreError(
                f"dense index: expected vectors of shape ({len(keys)}, {self.dimension}),"
                f" got {matrix.shape}"
            )
        if len(keys) == 0:
            return
        if not np.isfinite(matrix).all():
            raise StoreError("dense index: vectors must be finite (no NaN or infinity)")
        # The last occurrence of a repeated id wins, as if added one by one.
        _, last = np.unique(keys[::-1], return_index=True)
        keep = np.sort(len(keys) - 1 - last)
        keys, matrix = keys[keep], normalise(matrix[keep])
        with self.lock:
            gen = self._gen
            live = gen.live.copy()
            live[gen.rows_of(np.sort(keys))] = False
            index = densefile.owned(gen.index, gen.mapping)  # a mapped index is read-only
            try:
                index.add(matrix)
            except RuntimeError as exc:
                raise StoreError(f"dense index: adding vectors failed: {exc}") from exc
            self._next(
                index=index,
                row_ids=np.concatenate([gen.row_ids, keys]),
                live=np.concatenate([live, np.ones(len(keys), dtype=bool)]),
            )

    def remove(self, ids: Iterable[int]) -> None:
        """Forget these chunk ids (absent ids are ignored)."""
        keys = np.unique(np.fromiter((int(i) for i in ids), dtype=np.int64))
        with self.lock:
            gen = self._gen
            rows = gen.rows_of(keys)
            if len(rows):
                live = gen.live.copy()
                live[rows] = False
                self._next(live=live)

    def clear(self) -> None:
        """Drop every vector (in memory, watermark 0); ``save`` makes it durable."""
        with self.lock:
            self._gen = self._empty_generation()

    def compact(self) -> None:
        """Rebuild the graph from the live vectors, dropping tombstones (a new faiss index)."""
        with self.lock:
            gen = self._gen
            rows = np.flatnonzero(gen.live)
            vectors = self._vectors(gen)[rows].copy()
            ids = gen.row_ids[rows]
            self._gen = self._empty_generation(gen.watermark)
            if len(ids):
                self.add(ids, vectors)

    def save(self, watermark: int) -> None:
        """Write the index and ``watermark`` to ``path`` atomically (tmp file + rename)."""
        with self.lock:
            gen = self._gen
            dead = gen.rows - gen.live_count
            if dead and dead >= self.rebuild_dead_share * gen.rows:
                self.compact()
            self._next(watermark=watermark)
            gen = self._gen
            tmp = self._path.with_name(f"{self._path.name}.tmp{os.getpid()}")
            try:
                self._path.parent.mkdir(parents=True, exist_ok=True)
                with tmp.open("wb") as fh:
                    self._write(fh, gen)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, self._path)
                self.damage = None
                fd = os.open(self._path.parent, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                self._signature = self._stat()
            except (OSError, RuntimeError) as exc:
                with contextlib.suppress(OSError):
                    tmp.unlink(missing_ok=True)
                raise StoreError(f"dense index: saving {self._path} failed: {exc}") from exc

    def _write(self, fh: BinaryIO, gen: Generation) -> None:
        header = {
            "library": "faiss-hnsw-flat",
            "dimension": self.dimension,
            "rows": gen.rows,
            "watermark": gen.watermark,
        }
        densefile.write(fh, header, gen.row_ids, gen.live, gen.index)

    # -- loading -------------------------------------------------------------

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = self._path.stat()
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _load(self) -> bool:
        """Replace the in-memory state with the file's; False (state kept) if unreadable."""
        signature = self._stat()
        if signature is None:
            return False
        try:
            got = densefile.read(self._path, self.dimension)
        except densefile.ForeignFile as exc:
            log.warning("dense index %s is of another model (%s); not loaded", self._path, exc)
            return False
        except (OSError, RuntimeError, ValueError, KeyError, TypeError, struct.error) as exc:
            self.damage = f"{self._path.name}: {exc or type(exc).__name__}"
            log.warning("dense index %s is damaged (%s); not loaded", self._path, exc)
            return False
        finally:
            self._signature = signature
        self.damage = None
        got.index.hnsw.efSearch = self.ef_search
        with self.lock:
            self._gen = Generation(
                self,
                got.index,
                got.row_ids,
                got.live,
                int(got.live.sum()),
                got.watermark,
                got.mapping,
            )
        return True

    def quarantine(self) -> None:
        """Move a damaged file aside, to be inspected (the write lock held): the next
        ``save`` writes a new one. Deleted instead if it can't be moved."""
        if self.damage is None:
            return
        reason = f"the dense index is damaged ({self.damage})"
        try:
            moved = quarantine.quarantine(self._path, reason)
        except OSError as exc:
            log.warning("%s, and it can't be moved aside (%s); deleting it", reason, exc)
            with contextlib.suppress(OSError):
                self._path.unlink()
        else:
            log.warning("%s; moved it to %s, rebuilding it from the catalog", reason, moved)
            self.moved_aside.append(f"{reason}: moved to {moved} and rebuilt from the catalog")
        self.damage = None
        self._signature = None

    @property
    def watermark(self) -> int:
        """The publish id the current generation holds (0 for a new or unreadable index)."""
        return self._gen.watermark

    def mark(self, watermark: int) -> None:
        """Record in memory that changes up to ``watermark`` are applied, without saving."""
        with self.lock:
            self._next(watermark=watermark)

    def reload(self) -> bool:
        """Load the file as it is (dropping changes made in memory since the last save)."""
        self._signature = None
        return self._load()

    def reload_if_newer(self) -> bool:
        """Load the file if another process saved a newer one (a higher watermark).

        An unreadable new file leaves the current state (and watermark) as it is.
        """
        with self.lock:
            signature = self._stat()
            if signature is None or signature == self._signature:
                return False
            if self._peek_watermark() <= self._gen.watermark:
                self._signature = signature  # nothing newer than what we hold
                return False
            return self._load()

    def _peek_watermark(self) -> int:
        return file_watermark(self._path)

    # -- checking (``ks check``) -------------------------------------------------------

    def verify(self) -> str | None:
        """The file read again and its checksums checked (None: sound, none there, or of
        another model — replaced, not damaged)."""
        if self._stat() is None:
            return None
        try:
            densefile.read(self._path, self.dimension)
        except densefile.ForeignFile:
            return None
        except (OSError, RuntimeError, ValueError, KeyError, TypeError, struct.error) as exc:
            return f"{self._path.name}: {exc or type(exc).__name__}"
        return None

    def live_vectors(self, gen: Generation, ids: np.ndarray) -> tuple[IdArray, FloatArray]:
        """The live rows of ``gen`` holding ``ids``: their chunk ids and (normalised) vectors."""
        with self.lock:
            rows = gen.rows_of(np.asarray(ids, dtype=np.int64))
            return gen.row_ids[rows], self._vectors(gen)[rows].copy()

    # -- searching (the current generation) -------------------------------------------

    def search(
        self, query: np.ndarray, k: int, *, allowed: np.ndarray | None
    ) -> tuple[IdArray, FloatArray, VectorInfo]:
        """:meth:`Generation.search` on the current generation."""
        return self._gen.search(query, k, allowed=allowed)

    def _exact(
        self, q: FloatArray, k: int, rows: IdArray
    ) -> tuple[IdArray, FloatArray, VectorInfo]:
        return self._gen._exact(q, k, rows)

    def _select(self, allowed: np.ndarray) -> Selection:
        return self._gen._select(allowed)

    def __len__(self) -> int:
        return self._gen.live_count

    def close(self) -> None:
        """Release the in-memory index (unsaved changes are dropped)."""
        with self.lock:
            self._gen = self._empty_generation()


def file_watermark(path: Path) -> int:
    """The watermark in a dense index file's header, without loading it (-1: none, unreadable)."""
    return densefile.peek_watermark(path)


def remove_leftovers(path: Path) -> list[str]:
    """Remove the temp files of killed ``save`` calls (``<name>.tmp<pid>``); the names removed.

    Call only while holding the store's write lock: only a writer saves, so no
    live process is writing one of them.
    """
    removed = []
    for entry in Path(path).parent.glob(f"{Path(path).name}.tmp*"):
        with contextlib.suppress(FileNotFoundError):
            entry.unlink()
        removed.append(entry.name)
    if removed:
        log.warning("dense index: removed temp files of a killed writer: %s", removed)
    return removed
