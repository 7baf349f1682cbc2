"""The embedded engine's derived indexes, each a component: Tantivy (lexical) and HNSW (dense).

Both are *derived* from the catalog (DESIGN §4) and share one protocol, :class:`Derived`,
which the engine drives for every one of them alike:

* the **writer** (holding the store's write lock) catches a component up to the
  catalog's latest publish (:meth:`~Derived.catch_up`: replay ``publish_ops``, or rebuild),
  applies a publish inside the catalog's write transaction (:meth:`~Derived.follow`;
  :meth:`~Derived.undo` when that fails, :meth:`~Derived.abort` when the transaction does,
  :meth:`~Derived.published` after it commits) and rebuilds it from the catalog a batch
  at a time (:meth:`~Derived.rebuild_start`, ``rebuild_batch``, ``rebuild_done``);
* a **reader** pins it at its snapshot's publish (:meth:`~Derived.pin`) without the write
  lock: a component behind that publish reloads what the writer committed (Tantivy's
  commit, the dense file; the dense generation may also replay the catalog's ops in
  memory, a private view that writes nothing), and one that still can't reach it says
  why in its pin — its list refuses, the catalog answers the rest. Catching up is the
  writer's job.

Each component records the publish it holds (its watermark). What a list searches with
is :mod:`.components` (the search side of every component).
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from knowledge_store.engines.embedded.catalog import Catalog, ChunkRow
from knowledge_store.engines.embedded.dense import DenseIndex, Generation
from knowledge_store.engines.embedded.dense import remove_leftovers as remove_dense_leftovers
from knowledge_store.engines.embedded.lexical import LexicalDoc, LexicalIndex, Pinned
from knowledge_store.engines.embedded.writelock import WriteLock
from knowledge_store.errors import StoreError

__all__ = ["DENSE_FILE", "DenseDerived", "Derived", "LexicalDerived", "Pin", "behind"]

log = logging.getLogger(__name__)

DENSE_FILE = "dense.hnsw"
#: Chunks a rebuild (or a lexical catch-up by rebuilding) reads and indexes at a time.
REBUILD_BATCH = 2000
#: Why a failed publish rebuilds the lexical index (it had taken that publish's changes).
_UNDONE = "a publish that failed after the index took its changes"


def behind(message: str) -> str:
    """The error of a list whose derived index is behind the catalog."""
    return (
        f"{message}. The derived indexes are behind the catalog: sql, aggregate, graph,"
        " query_graph and content still answer; the next write catches them up, and"
        " `ks rebuild` rebuilds them"
    )


@dataclass(frozen=True)
class Pin:
    """A derived index at one publish, as a reader searches it: what it searches (a Tantivy
    searcher, a dense generation) — or why it can't reach that publish (``error``, with
    ``details``; then its list refuses and the catalog answers the rest). ``keep``: the pin
    may serve every reader of this publish (not one of a rebuild under way elsewhere)."""

    publish: int
    searcher: Any = None
    error: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
    keep: bool = True


class Derived(Protocol):
    """A derived index of the embedded engine (see the module docstring)."""

    name: str

    def watermark(self) -> int | None: ...
    def remove_leftovers(self) -> None: ...
    def catch_up(self, latest: int) -> None: ...
    def follow(self, conn: sqlite3.Connection, publish: int) -> None: ...
    def undo(self) -> None: ...
    def abort(self, latest: int) -> None: ...
    def published(self, publish: int) -> None: ...
    def rebuild_start(self, why: str, total: int) -> None: ...
    def rebuild_batch(self, conn: sqlite3.Connection, ids: Sequence[int], done: int) -> None: ...
    def rebuild_done(self, latest: int) -> None: ...
    def pin(self, publish: int) -> Pin | None: ...
    def close(self) -> None: ...


# -- Tantivy --------------------------------------------------------------------------------------
class LexicalDerived:
    """Tantivy BM25 (:class:`~.lexical.LexicalIndex`): commits inside each publish's catalog
    transaction, its watermark inside the commit; a killed rebuild is recorded in its sidecar."""

    name = "tantivy"

    def __init__(self, catalog: Catalog, path: Path, lock: WriteLock) -> None:
        self._catalog = catalog
        self._lock = lock
        # Files of another schema are replaced by whoever holds the write lock first.
        self.index = LexicalIndex(path)
        self._took_publish = False  # this publish's changes are committed in Tantivy

    def watermark(self) -> int:
        return self.index.watermark

    def remove_leftovers(self) -> None:
        self.index.remove_leftovers()

    # -- the writer ----------------------------------------------------------------------
    def catch_up(self, latest: int) -> None:
        """Reach ``latest``: rebuilt when the index is unusable, ahead of the catalog or empty
        (new, replaced for another schema, a rebuild cut short); else the ops since its
        watermark replayed (a killed writer's leftovers removed first: a delete file its
        Tantivy commit wrote without recording it would collide with this commit's)."""
        if why := self._rebuild_reason(latest):
            self._rebuild(latest, why)
        elif self.index.watermark < latest:
            self.index.remove_leftovers()
            with self._catalog.read() as conn:
                self._apply(conn, self.index.watermark, latest)

    def _rebuild_reason(self, latest: int) -> str | None:
        """Why the lexical index must be rebuilt from the catalog (None: it can catch up)."""
        index = self.index
        if index.stale is not None:
            index.reload()  # another process may have rebuilt it since this one looked
        if index.stale is not None:
            return f"the index {index.stale}"
        if index.watermark > latest:
            return "the index held a publish the catalog never committed"
        if index.watermark == 0 < latest:
            cut = index.rebuilding()
            if cut is not None:
                return f"a rebuild by process {cut.pid} ({cut.reason}) was cut short"
            return "the index was empty"
        return None

    def forget_cut_rebuild(self) -> None:
        """After a clean catch-up on open: forget a rebuild record killed before it emptied."""
        self.index.forget_rebuild()

    def _apply(self, conn: sqlite3.Connection, since: int, latest: int) -> None:
        ops = self._catalog.ops_since(since, conn)
        touched = sorted({op.chunk for op in ops})
        readd = sorted({op.chunk for op in ops if op.op != "del"})
        if touched:
            self.index.delete_chunks(touched)
        self.index.add(self.docs(conn, readd))
        self.index.commit(latest)

    def docs(self, conn: sqlite3.Connection, chunk_ids: Sequence[int]) -> list[LexicalDoc]:
        """The lexical index's documents for ``chunk_ids``, each with its ACL's principals."""
        rows = self._catalog.chunk_rows(conn, chunk_ids)
        acls = self._catalog.acl_sets_principals(conn, {r.acl_set for r in rows})
        return [_lexical_doc(r, acls.get(r.acl_set, ())) for r in rows]

    def _rebuild(self, latest: int, why: str) -> None:
        """Every chunk of the catalog, :data:`REBUILD_BATCH` at a time (memory stays flat).

        Index files this process can't use are replaced here, and the sidecar records the
        rebuild and its progress (the other processes' readers say so) until its commit: one
        killed midway leaves an empty index, which the next holder of the write lock rebuilds.
        """
        started = time.perf_counter()
        with self._catalog.read() as conn:
            ids = self._catalog.all_chunk_ids(conn)
            self.rebuild_start(why, len(ids))
            if len(ids) > REBUILD_BATCH:
                log.warning("lexical index: indexing %d chunks from the catalog", len(ids))
            for i in range(0, len(ids), REBUILD_BATCH):
                part = ids[i : i + REBUILD_BATCH]
                self.rebuild_batch(conn, part, i + len(part))
        self.rebuild_done(latest)
        if len(ids) > REBUILD_BATCH:
            log.warning(
                "lexical index: %d chunks indexed in %.1f s",
                len(ids),
                time.perf_counter() - started,
            )

    def follow(self, conn: sqlite3.Connection, publish: int) -> None:
        self._apply(conn, self.index.watermark, publish)
        self._took_publish = True

    def undo(self) -> None:
        self.index.rollback()

    def abort(self, latest: int) -> None:
        """The publish's catalog transaction failed: nothing of it may stay in the index."""
        if self._took_publish:
            self._took_publish = False
            self._rebuild(latest, _UNDONE)
        self.index.rollback()

    def published(self, publish: int) -> None:
        self._took_publish = False

    def mark(self, publish: int) -> None:
        """Inside a publish that changes no text (a re-embedding): the watermark moves."""
        self.index.commit(publish)
        self._took_publish = True

    def rebuild_start(self, why: str, total: int) -> None:
        """The start of a rebuild of ``total`` chunks: recorded, then the index emptied (a
        lexical index that can't even be cleared is recreated)."""
        self.index.begin_rebuild(why, total)
        try:
            self.index.clear()
        except StoreError as exc:
            log.warning("the lexical index can't be cleared (%s); recreating it", exc)
            self.index.recreate()

    def rebuild_batch(self, conn: sqlite3.Connection, ids: Sequence[int], done: int) -> None:
        self.index.add(self.docs(conn, ids))
        self.index.rebuilt(done)

    def rebuild_done(self, latest: int) -> None:
        self.index.commit(latest)

    # -- a reader --------------------------------------------------------------------------
    def pin(self, publish: int) -> Pin | None:
        """The Tantivy searcher of ``publish`` (reloaded when another process committed it).
        None while a live writer is between its index commit and its catalog commit (the
        reader tries again); an error pin when no writer will bring it there."""
        index = self.index
        try:
            pinned: Pinned = index.pin()
            if pinned.watermark != publish:
                index.reload()
                pinned = index.pin()
        except StoreError:
            if index.damage is None:
                raise
            pinned = index.pin()  # found damaged: an empty index in memory, never its files
        if pinned.watermark == publish:
            return Pin(publish, pinned)
        if index.damage is not None:
            # damaged: never rebuilt by a reader (see :mod:`.views`)
            error = index.damage_error()
            return Pin(publish, pinned, error.message, error.details, keep=False)
        if (rebuild := self.rebuilding()) is not None:
            # Another process rebuilds it (minutes at a million chunks): the lexical list
            # says so at once, the rest answers; not kept, so the next reader looks again.
            message, details = rebuild
            return Pin(publish, pinned, message, details, keep=False)
        if self._lock.busy():
            return None  # a writer is at it: its commit is coming
        if publish < pinned.watermark <= self._catalog.latest_publish()[0]:
            return None  # a publish landed since the reader's snapshot: it looks again
        what = "ahead of" if pinned.watermark > publish else "behind"
        return Pin(
            publish,
            pinned,
            behind(
                f"the lexical index is {what} publish {publish} (at {pinned.watermark}): a"
                " writer stopped between the index and the catalog, or its index update failed"
            ),
            keep=False,
        )

    def rebuilding(self) -> tuple[str, dict[str, Any]] | None:
        """Why lexical search refuses while another process rebuilds the index (or must: this
        process can't use its files), with its progress; None when neither."""
        index = self.index
        state = index.rebuilding()
        if state is None and index.stale is None:
            return None
        if state is None and index.damage is not None:
            error = index.damage_error()
            return error.message, dict(error.details)
        details: dict[str, Any] = {"index": "lexical", "rebuilding": True, "retryable": True}
        if state is not None:
            elapsed = max(time.time() - state.started, 0.0)
            details |= {
                "indexed": state.indexed,
                "total": state.total,
                "elapsed_s": round(elapsed),
            }
            what = (
                f"is being rebuilt by process {state.pid} ({state.reason}): {state.indexed:,} of"
                f" {state.total:,} chunks indexed in {elapsed:.0f} s"
            )
        else:
            what = (
                f"must be rebuilt (it {index.stale}); the process writing to the store rebuilds it"
            )
        message = (
            f"the lexical index of {self._catalog.path.parent} {what}. Lexical and fused search"
            " answer when it is done: try again shortly. vector, sql, aggregate, graph,"
            " query_graph and content answer meanwhile"
        )
        return message, details

    def close(self) -> None:
        self.index.close()


def _lexical_doc(row: ChunkRow, acl: tuple[str, ...]) -> LexicalDoc:
    return LexicalDoc(
        chunk_id=row.chunk_id,
        uid=row.uid,
        acl=acl,
        type=row.type,
        source=row.source,
        status=row.status,
        facets=row.facets,
        created_at=row.created_at,
        updated_at=row.updated_at,
        title=row.title,
        heading=row.heading,
        text=row.text,
    )


# -- HNSW -------------------------------------------------------------------------------------------
class DenseDerived:
    """The HNSW index of the store's model (:class:`~.dense.DenseIndex`): applied in memory
    inside each publish, saved (tmp + rename) after the catalog commits. None until the
    store has a model; reopened when a re-embedding changed the dimension (the file of the
    old one loads empty, and catching up rebuilds it)."""

    name = "faiss"

    def __init__(self, catalog: Catalog, path: Path) -> None:
        self._catalog = catalog
        self.path = path
        self._index: DenseIndex | None = None
        self._at_start: DenseIndex | None = None  # the index a publish began with

    @property
    def index(self) -> DenseIndex | None:
        """The index of the recorded model's dimension (None: no model yet)."""
        dimension = self._catalog.get_meta("dimension")
        return None if dimension is None else self.of(int(dimension))

    def of(self, dimension: int) -> DenseIndex:
        if self._index is None or self._index.dimension != dimension:
            self._index = DenseIndex(self.path, dimension)
        return self._index

    def loaded(self) -> DenseIndex | None:
        """The index if this process has it in memory (``stats`` loads nothing)."""
        return self._index

    def forget(self) -> None:
        """Drop the index from memory: the next use opens the recorded model's from its file."""
        self._index = None

    def watermark(self) -> int | None:
        index = self.index
        return None if index is None else index.watermark

    def remove_leftovers(self) -> None:
        remove_dense_leftovers(self.path)

    # -- the writer ----------------------------------------------------------------------
    def catch_up(self, latest: int, *, persist: bool = True) -> None:
        index = self.index
        if index is None:
            return
        if index.damage is not None and persist:
            self._rebuild_damaged(index, latest)
        if index.watermark > latest:
            index.clear()
        if index.watermark < latest:
            remove_dense_leftovers(self.path)
            with self._catalog.read() as conn:
                self._apply(conn, index, index.watermark, latest)
            if persist:
                index.save(latest)

    def _rebuild_damaged(self, index: DenseIndex, latest: int) -> None:
        """A damaged dense file moved aside, and the index rebuilt from every vector the
        catalog holds, :data:`REBUILD_BATCH` at a time, then saved (the write lock held)."""
        index.quarantine()
        index.clear()
        with self._catalog.read() as conn:
            ids = self._catalog.all_chunk_ids(conn)
            for i in range(0, len(ids), REBUILD_BATCH):
                found, vectors = self._catalog.chunk_vectors(
                    conn, ids[i : i + REBUILD_BATCH], index.dimension
                )
                if len(found):
                    index.add(found, vectors)
        index.mark(latest)
        index.save(latest)

    def _apply(self, conn: sqlite3.Connection, index: DenseIndex, since: int, latest: int) -> None:
        """Apply the chunk ops since ``since`` in memory and mark ``latest`` (no save)."""
        ops = self._catalog.ops_since(since, conn)
        removed = sorted({op.chunk for op in ops if op.op == "del"})
        added = sorted({op.chunk for op in ops if op.op == "add"})
        if removed:
            index.remove(removed)
        ids, vectors = self._catalog.chunk_vectors(conn, added, index.dimension)
        if len(ids):
            index.add(ids, vectors)
        index.mark(latest)

    def follow(self, conn: sqlite3.Connection, publish: int) -> None:
        index = self._at_start = self.index
        if index is not None:
            self._apply(conn, index, index.watermark, publish)

    def undo(self) -> None:
        if self._at_start is not None:
            self._at_start.reload()

    def abort(self, latest: int) -> None:
        """The publish's catalog transaction failed: back to the file, then to ``latest``."""
        index, self._at_start = self._at_start, None
        if index is not None:
            index.reload()
            self.catch_up(latest)

    def published(self, publish: int) -> None:
        """After the catalog commit: save, or (the first publish set the model) catch up."""
        started, self._at_start = self._at_start, None
        index = self.index
        if index is None:
            return
        if started is None:
            self.catch_up(publish)
        elif index.watermark == publish:
            index.save(publish)

    def rebuild_start(self, why: str, total: int) -> None:
        index = self.index
        if index is not None:
            index.clear()

    def rebuild_batch(self, conn: sqlite3.Connection, ids: Sequence[int], done: int) -> None:
        index = self.index
        if index is None:
            return
        found, vectors = self._catalog.chunk_vectors(conn, ids, index.dimension)
        if len(found):
            index.add(found, vectors)

    def rebuild_done(self, latest: int) -> None:
        index = self.index
        if index is not None:
            index.save(latest)

    def reembed(self, publish: int, ids: Any, matrix: Any, dimension: int) -> None:
        """A re-embedding's publish: every vector replaced (in memory; saved when published)."""
        index = self._at_start = self.of(dimension)
        index.clear()
        index.add(ids, matrix)
        index.mark(publish)

    # -- a reader --------------------------------------------------------------------------
    def pin(self, publish: int) -> Pin | None:
        """The dense generation of ``publish``: the file another process saved, else the
        catalog's ops replayed in memory (a private view: nothing is saved). None when the
        index is ahead (a publish landed in between: the reader tries again)."""
        index = self.index
        if index is None:
            return Pin(publish)
        if index.watermark < publish:
            index.reload_if_newer()
        if index.watermark < publish:  # the writing process saves it; meanwhile, in memory
            try:
                with self._catalog.read() as conn:
                    self._apply(conn, index, index.watermark, publish)
            except StoreError as exc:
                return Pin(publish, index.generation(), behind(exc.message), keep=False)
        generation: Generation = index.generation()
        if generation.watermark != publish:
            return None
        return Pin(publish, generation)

    def close(self) -> None:
        if self._index is not None:
            self._index.close()
