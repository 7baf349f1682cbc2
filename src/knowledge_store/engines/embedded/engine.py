"""The embedded engine: SQLite catalog + Tantivy (lexical) + HNSW (dense) in one directory.

The catalog is the source of truth. Tantivy and HNSW are derived: every
publish logs what it did to chunks (``publish_ops``) and each derived index
records the publish it holds (its watermark). One writer at a time (a file
lock); readers never take it.

**A publish** plans its changes in the catalog's write transaction, applies
them to Tantivy (committed, with the publish id inside the commit) and to the
in-memory HNSW, then commits the catalog, then saves the HNSW file. Readers
that opened before keep their pinned views; a crash before the catalog
commit leaves Tantivy one publish ahead, which the next open rebuilds; a
crash after it leaves the HNSW file behind, which the next open catches up.

**A reader** (:meth:`EmbeddedEngine.reader`) opens a catalog read transaction
— publish ``P`` — and pins the Tantivy searcher and the dense generation of
exactly ``P`` (:mod:`.views`).

**A derived index that fails** never blocks the catalog (the truth): a publish
whose index update fails commits its catalog transaction anyway, the index stays
behind and the reason is kept (``derived_error``, in ``stats``); a reader at a
publish an index can't reach still answers everything the catalog answers (sql,
aggregate, graph, query_graph, content), and the primitive of that index says
why and names ``ks rebuild``. Every writer (and every open) first repairs what a
killed writer left (temp files, uncommitted segments, old date forms).
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from rich.progress import Progress

from knowledge_store.engines.base import EngineSettings, PreparedEntity, Published, Vector
from knowledge_store.engines.components import Components
from knowledge_store.engines.embedded import components as _components  # noqa: F401  (registers)
from knowledge_store.engines.embedded import fuzzy as _fuzzy  # noqa: F401  (registers)
from knowledge_store.engines.embedded.admin import EmbeddedAdmin
from knowledge_store.engines.embedded.analysis import Analyzers
from knowledge_store.engines.embedded.catalog import Catalog, ChunkRow
from knowledge_store.engines.embedded.dense import DenseIndex, file_watermark
from knowledge_store.engines.embedded.dense import remove_leftovers as remove_dense_leftovers
from knowledge_store.engines.embedded.lexical import LexicalDoc, LexicalIndex
from knowledge_store.engines.embedded.owners import ChunkOwners
from knowledge_store.engines.embedded.reader import EmbeddedReader
from knowledge_store.engines.embedded.views import View, Views, rebuilding
from knowledge_store.engines.embedded.writelock import WriteLock
from knowledge_store.engines.shared import (
    check_own_directory,
    check_prepared,
    check_store_directory,
    check_vectors,
    deletion,
    no_store,
)
from knowledge_store.engines.sql.dialect import SQLITE
from knowledge_store.engines.sql.publish import plan_publish
from knowledge_store.engines.sql.sources import (
    SourceSync,
    read_crawl_pages,
    read_sources,
    record_source,
    sync_deletes,
    write_crawl_pages,
)
from knowledge_store.errors import ModelMismatch, StoreError
from knowledge_store.model import (
    QUERY_GRAPH_TIME_LIMIT_S,
    Entity,
    Identity,
    SourceSummary,
    StoreStats,
)

__all__ = ["EmbeddedEngine", "open_store"]

log = logging.getLogger(__name__)

_DENSE_FILE = "dense.hnsw"
#: What a store directory holds (and a killed first open may have left): the catalog and its
#: ``-wal`` / ``-shm`` / ``-journal``, the lexical index, the write lock, the dense index and
#: the temp files of a killed save (``dense.hnsw.tmp<pid>``).
_STORE_FILE = re.compile(
    r"catalog\.sqlite(-wal|-shm|-journal)?|lexical|write\.lock|dense\.hnsw(\.tmp\d+)?"
)


def _is_store_file(name: str) -> bool:
    return _STORE_FILE.fullmatch(name) is not None


_REBUILD_BATCH = 2000
#: Why a failed publish rebuilds the lexical index (it had taken that publish's changes).
_UNDONE = "a publish that failed after the index took its changes"


def _check_model(recorded: tuple[str, int] | None, model: str | None) -> None:
    """A publish of vectors made by ``model`` into a store that records another is refused."""
    if model is not None and recorded is not None and recorded[0] != model:
        raise ModelMismatch(
            f"this store's vectors are now {recorded[0]}, not {model} (it was re-embedded"
            " meanwhile); nothing was published — ingest again",
            store_model=recorded[0],
            model=model,
        )


class EmbeddedEngine:
    """The default engine. ``EmbeddedEngine(path)`` opens or creates the store directory."""

    name = "embedded"

    def __init__(
        self,
        path: str | Path,
        *,
        create: bool = True,
        graph_time_limit_s: float = QUERY_GRAPH_TIME_LIMIT_S,
    ) -> None:
        """Open the store in ``path``; ``create=False``: only one that exists (else NotFound).
        ``graph_time_limit_s``: query_graph's wall-clock bound (EngineSettings).

        A leading ``~`` is the home directory, as for ``pg:~/DIR`` (a shell leaves it
        alone in ``--store=~/kb`` and in ``$KS_STORE``: it made a directory named ``~``)."""
        self.path = Path(os.path.expanduser(path))
        self.graph_time_limit_s = graph_time_limit_s
        check_store_directory(self.path, str(path))
        if not (self.path / "catalog.sqlite").is_file():
            if not create:
                raise no_store(str(path))
            check_own_directory(self.path, str(path), _is_store_file)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the store directory {self.path}: {exc}") from exc
        self.catalog = Catalog(self.path / "catalog.sqlite")
        self._write_lock = WriteLock(self.path)
        # Files of another schema are replaced by whoever holds the write lock first.
        self.lexical_index = LexicalIndex(self.path / "lexical")
        self._dense: DenseIndex | None = None
        self.views = Views(self)
        self.owners = ChunkOwners(self.catalog)
        self._admin = EmbeddedAdmin(self)
        #: Why the derived indexes could not catch up last time (None: they did).
        self.derived_error: str | None = None
        self.chunk_ids = self.catalog.chunk_ids()
        #: The index components by list (``engines.components``; registered by .components, .fuzzy).
        self.components = Components(self.name, self)
        #: How the lexical index reads text (the search page highlights with it).
        self.text_analysis = Analyzers()
        with self._writer(wait=False) as acquired:
            if acquired:
                self._recover()

    @property
    def writer(self) -> EmbeddedEngine:
        return self

    @property
    def admin(self) -> EmbeddedAdmin:
        return self._admin

    # -- opening the derived indexes --------------------------------------------------
    @property
    def dense(self) -> DenseIndex | None:
        """The HNSW index of the store's model (reopened when a re-embedding changed the
        dimension: the file of the old one loads empty, and catching up rebuilds it)."""
        model = self.model()
        return None if model is None else self._dense_of(model[1])

    def _dense_of(self, dimension: int) -> DenseIndex:
        if self._dense is None or self._dense.dimension != dimension:
            self._dense = DenseIndex(self.path / _DENSE_FILE, dimension)
        return self._dense

    # -- the single writer ----------------------------------------------------------------
    @contextmanager
    def _writer(self, *, wait: bool = True) -> Iterator[bool]:
        """Hold the store's write lock (see ``writelock``); readers pass ``wait=False``."""
        with self._write_lock.hold(wait=wait) as held:
            yield held

    # -- derived index catch-up (the write lock held) -------------------------------------------
    def _recover(self) -> None:
        """At open, holding the write lock: repair what a killed writer or an older
        version left, then catch the derived indexes up (a failure is logged, never
        raised: the catalog-backed primitives answer regardless)."""
        remove_dense_leftovers(self.path / _DENSE_FILE)
        self.lexical_index.remove_leftovers()
        self.catalog.repair_timestamps()
        try:  # the publish inside the last commit, not the sidecar's (a kill may split them)
            self.lexical_index.reload()
        except StoreError as exc:
            self._derived_failed(exc)
        self._catch_up_or_log()
        if self.derived_error is None:
            self.lexical_index.forget_rebuild()  # one killed before it emptied the index

    def _catch_up(self, *, persist: bool = True) -> None:
        """Bring the derived indexes to the catalog's latest publish (idempotent).

        An index *ahead* of the catalog holds a publish that never committed (a
        writer died between its index commit and its catalog commit): rebuilt.
        Behind means a writer died, or its index update failed: a killed writer's
        leftovers go first (a delete file its Tantivy commit wrote without recording
        it would collide with this commit's).
        """
        latest, _ = self.catalog.latest_publish()
        if why := self._lexical_rebuild_reason(latest):
            # unusable files, ahead of the catalog, or empty (new, replaced for another
            # schema, or a rebuild cut short): every chunk, a batch at a time, instead of
            # replaying the whole ops log in one list
            self._rebuild_lexical(latest, why)
        elif self.lexical_index.watermark < latest:
            self.lexical_index.remove_leftovers()
            with self.catalog.read() as conn:
                self._apply_lexical(conn, self.lexical_index.watermark, latest)
        dense = self.dense
        if dense is not None and dense.watermark > latest:
            dense.clear()
        if dense is not None and dense.watermark < latest:
            remove_dense_leftovers(self.path / _DENSE_FILE)
            with self.catalog.read() as conn:
                self._apply_dense(conn, dense, dense.watermark, latest)
            if persist:
                dense.save(latest)
        self.derived_error = None

    def _catch_up_or_log(self) -> None:
        """``_catch_up`` for writers: a derived index that can't catch up must not stop a
        publish (deleting the record it chokes on is one) nor an open; readers of that
        index get the error, and ``ks rebuild`` rebuilds it."""
        try:
            self._catch_up()
        except StoreError as exc:
            self._derived_failed(exc)

    def _derived_failed(self, exc: StoreError) -> None:
        self.derived_error = exc.message
        log.warning("derived indexes behind the catalog: %s", exc.message)

    def _apply_lexical(self, conn: sqlite3.Connection, since: int, latest: int) -> None:
        ops = self.catalog.ops_since(since, conn)
        touched = sorted({op.chunk for op in ops})
        readd = sorted({op.chunk for op in ops if op.op != "del"})
        if touched:
            self.lexical_index.delete_chunks(touched)
        self.lexical_index.add(self._lexical_docs(conn, readd))
        self.lexical_index.commit(latest)

    def _lexical_docs(self, conn: sqlite3.Connection, chunk_ids: Sequence[int]) -> list[LexicalDoc]:
        """The lexical index's documents for ``chunk_ids``, each with its ACL's principals."""
        rows = self.catalog.chunk_rows(conn, chunk_ids)
        acls = self.catalog.acl_sets_principals(conn, {r.acl_set for r in rows})
        return [_lexical_doc(r, acls.get(r.acl_set, ())) for r in rows]

    def _apply_dense(
        self, conn: sqlite3.Connection, dense: DenseIndex, since: int, latest: int
    ) -> None:
        """Apply the chunk ops since ``since`` in memory and mark ``latest`` (no save)."""
        ops = self.catalog.ops_since(since, conn)
        removed = sorted({op.chunk for op in ops if op.op == "del"})
        added = sorted({op.chunk for op in ops if op.op == "add"})
        if removed:
            dense.remove(removed)
        ids, vectors = self.catalog.chunk_vectors(conn, added, dense.dimension)
        if len(ids):
            dense.add(ids, vectors)
        dense.mark(latest)

    def _lexical_rebuild_reason(self, latest: int) -> str | None:
        """Why the lexical index must be rebuilt from the catalog (None: it can catch up)."""
        index = self.lexical_index
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

    def _rebuild_lexical(self, latest: int, why: str) -> None:
        """The lexical index from every chunk of the catalog, :data:`_REBUILD_BATCH` at a time
        (memory stays flat; replaying the ops log held every document of the store at once).

        The write lock held. Index files this process can't use are replaced here, and the
        sidecar records the rebuild and its progress (the other processes' readers say so)
        until its commit: one killed midway leaves an empty index, which the next holder of
        the write lock rebuilds.
        """
        started = time.perf_counter()
        with self.catalog.read() as conn:
            ids = self.catalog.all_chunk_ids(conn)
            self._clear_lexical(why, len(ids))
            if len(ids) > _REBUILD_BATCH:
                log.warning("lexical index: indexing %d chunks from the catalog", len(ids))
            for i in range(0, len(ids), _REBUILD_BATCH):
                self.lexical_index.add(self._lexical_docs(conn, ids[i : i + _REBUILD_BATCH]))
                self.lexical_index.rebuilt(min(i + _REBUILD_BATCH, len(ids)))
        self.lexical_index.commit(latest)
        if len(ids) > _REBUILD_BATCH:
            log.warning(
                "lexical index: %d chunks indexed in %.1f s",
                len(ids),
                time.perf_counter() - started,
            )

    def _clear_lexical(self, why: str, total: int) -> None:
        """The start of a rebuild of ``total`` chunks: recorded, then the index emptied (a
        lexical index that can't even be cleared is recreated)."""
        self.lexical_index.begin_rebuild(why, total)
        try:
            self.lexical_index.clear()
        except StoreError as exc:
            log.warning("the lexical index can't be cleared (%s); recreating it", exc)
            self.lexical_index.recreate()

    # -- readers --------------------------------------------------------------------------------
    @contextmanager
    def reader(self, identity: Identity) -> Iterator[EmbeddedReader]:
        """A point-in-time reader for ``identity`` (see the module docstring)."""
        conn = self.catalog.borrow()
        try:
            publish, root, view = self._open_snapshot(conn)
            yield EmbeddedReader(self, conn, identity, publish, root, view)
        finally:
            self.catalog.give(conn)

    def _open_snapshot(self, conn: sqlite3.Connection) -> tuple[int, str, View]:
        """Begin a read transaction on ``conn`` whose publish the derived indexes are at."""
        return self.views.open_snapshot(conn)

    # -- model and content ----------------------------------------------------------------------
    def model(self) -> tuple[str, int] | None:
        model = self.catalog.get_meta("model")
        dimension = self.catalog.get_meta("dimension")
        if model is None or dimension is None:
            return None
        return model, int(dimension)

    def model_spec(self) -> str | None:
        return self.catalog.get_meta("embedder")

    def set_model(self, model_id: str, dimension: int, spec: str) -> None:
        current = self.model()
        if current is not None:
            if current != (model_id, dimension):
                raise ModelMismatch(
                    f"this store was built with {current[0]} ({current[1]} dimensions);"
                    f" it cannot mix in {model_id} ({dimension} dimensions). Use the store's"
                    " model, or ingest into a new store",
                    store_model=current[0],
                    store_dimension=current[1],
                    model=model_id,
                    dimension=dimension,
                )
            return
        with self._writer(), self.catalog.write() as conn:
            self.catalog.set_meta("model", model_id, conn)
            self.catalog.set_meta("dimension", str(dimension), conn)
            self.catalog.set_meta("embedder", spec, conn)

    def content_root(self) -> str:
        return self.catalog.latest_publish()[1]

    def chunk_contexts(self, after: int, limit: int) -> list[tuple[int, str]]:
        with self.catalog.read() as conn:
            return self.catalog.chunk_contexts(conn, after, limit)

    def replace_embeddings(
        self,
        ids: Sequence[int],
        vectors: Vector,
        *,
        model_id: str,
        dimension: int,
        spec: str,
        base_root: str,
    ) -> str:
        """Every vector and the recorded model as one publish, like any publish: the
        dense index is rebuilt from ``vectors`` and Tantivy's watermark moves (its
        texts are unchanged) before the catalog transaction commits."""
        check_vectors("the re-embedding", vectors, len(ids), dimension)
        matrix = np.asarray(vectors, dtype=np.float32)
        keys = np.asarray(ids, dtype=np.int64)
        meta = {"model": model_id, "dimension": str(dimension), "embedder": spec}
        with self._writer():
            self._catch_up_or_log()
            dense: DenseIndex | None = self._dense_of(dimension)
            lexical_done = False
            try:
                with self.catalog.write() as conn:
                    publish, root = self.catalog.replace_embeddings(
                        conn, ids, matrix, meta, base_root=base_root
                    )
                    self.lexical_index.commit(publish)
                    lexical_done = True
                    if dense is not None:
                        dense.clear()
                        dense.add(keys, matrix)
                        dense.mark(publish)
            except BaseException:
                if lexical_done:
                    self._rebuild_lexical(self.catalog.latest_publish()[0], _UNDONE)
                self.lexical_index.rollback()
                self._dense = None  # the recorded model's index reopens from its file
                self._catch_up_or_log()
                raise
            if dense is not None:
                dense.save(publish)
            return root

    def content_hashes(self, uids: Sequence[str]) -> dict[str, str]:
        return self.catalog.content_hashes(uids)

    def cached_embeddings(self, keys: Sequence[str]) -> dict[str, Vector]:
        return self.catalog.cached_embeddings(keys)

    def cache_embeddings(self, items: Mapping[str, Vector]) -> None:
        if items:
            self.catalog.cache_embeddings(items)

    # -- publishing -----------------------------------------------------------------------------
    def publish(
        self,
        upserts: Sequence[PreparedEntity],
        deletes: Sequence[str],
        *,
        kind: str,
        acl_only: Sequence[Entity] = (),
        model: str | None = None,
        source: SourceSync | None = None,
    ) -> Published:
        """One publish: planned and written in the catalog's write transaction, the derived
        indexes updated before that transaction commits (see the module docstring).

        With ``source``, a sync deletes what the source holds beyond the batch
        (``engines.sql.sources``) and the source's row is written in that transaction.

        With ``model``, refused (ModelMismatch) unless the store records that model.
        Chunks and vectors a derived index could not take are refused before anything
        is written (StoreError); a derived index that fails anyway is left behind (see
        the module docstring) and the catalog commits.
        """
        recorded = self.model()
        check_prepared(upserts, None if recorded is None else recorded[1])
        with self._writer():
            _check_model(self.model(), model)
            self._catch_up_or_log()
            dense = self.dense
            lexical_done = False
            try:
                with self.catalog.write() as conn:
                    latest = self.catalog.latest_publish(conn)
                    deletes = sync_deletes(conn, SQLITE, source, deletes)
                    uids = [p.entity.uid for p in upserts] + list(deletes)
                    uids += [e.uid for e in acl_only]
                    existing = self.catalog.content_hashes(uids, conn)
                    plan = plan_publish(latest, existing, upserts, deletes, acl_only)
                    if plan.empty:
                        return record_source(conn, SQLITE, source, Published.of(plan))
                    self.catalog.apply(conn, plan, kind=kind)
                    record_source(conn, SQLITE, source, Published.of(plan))
                    self._follow(conn, dense, plan.publish)
                    lexical_done = True
            except BaseException:
                # Nothing of this publish may survive in a derived index.
                if lexical_done:
                    self._rebuild_lexical(self.catalog.latest_publish()[0], _UNDONE)
                self.lexical_index.rollback()
                if dense is not None:
                    dense.reload()
                    self._catch_up_or_log()
                raise
            if dense is None and self.dense is not None:  # the first publish set the model
                self._catch_up_or_log()
            if self.dense is not None and self.dense.watermark == plan.publish:
                self.dense.save(plan.publish)
            return Published.of(plan)

    def _follow(self, conn: sqlite3.Connection, dense: DenseIndex | None, publish: int) -> None:
        """Inside a publish's catalog transaction: bring the derived indexes to ``publish``.

        An index that fails (StoreError) is rolled back to what it committed and left
        behind, the reason kept: the catalog commits regardless.
        """
        try:
            self._apply_lexical(conn, self.lexical_index.watermark, publish)
        except StoreError as exc:
            self.lexical_index.rollback()
            self._derived_failed(exc)
        if dense is not None:
            try:
                self._apply_dense(conn, dense, dense.watermark, publish)
            except StoreError as exc:
                dense.reload()
                self._derived_failed(exc)

    # -- sources and crawl state (engines.sql.sources) ----------------------------------------------
    def sources(self) -> list[SourceSummary]:
        with self.catalog.read() as conn:
            return read_sources(conn, SQLITE)

    def delete_source(self, name: str) -> Published:
        return self.publish([], [], kind="delete", source=SourceSync.removal(name))

    def crawl_pages(self, source: str) -> dict[str, str]:
        with self.catalog.read() as conn:
            return read_crawl_pages(conn, SQLITE, source)

    def save_crawl_pages(self, source: str, pages: Mapping[str, str | None]) -> None:
        with self._writer(), self.catalog.write() as conn:
            write_crawl_pages(conn, SQLITE, source, pages)

    def delete(self, uids: Sequence[str]) -> Published:
        with self._writer():  # what is derived from uids can't change before the publish
            with self.catalog.read() as conn:
                stored = self.catalog.content_hashes(list(uids), conn)
                doomed = deletion(uids, stored, lambda uid: self._admin.derived_from(conn, uid))
            return self.publish([], doomed, kind="delete")

    def is_empty(self) -> bool:
        return not self.catalog.has_chunks()

    def stats(self) -> StoreStats:
        """Counts from the catalog; the derived indexes' state beside them (never a failure)."""
        with self.catalog.read() as conn:
            latest, root = self.catalog.latest_publish(conn)
            entities, chunks, edges = self.catalog.counts(conn)
        model = self.model()
        try:
            segments = self.lexical_index.num_segments()
        except StoreError as exc:
            segments, self.derived_error = 0, exc.message
        dense = self._dense  # not loaded just for stats: its file's header says as much
        on_disk = file_watermark(self.path / _DENSE_FILE)
        error = self.derived_error
        if error is None and self.lexical_index.watermark != latest:
            # another process rebuilds the lexical index (or must): say so, with its progress
            rebuild = rebuilding(self)
            error = None if rebuild is None else rebuild[0]
        indexes = {
            "publish": latest,
            "lexical": self.lexical_index.watermark,
            "dense": dense.watermark if dense is not None else on_disk if on_disk >= 0 else None,
            "error": error,
        }
        return StoreStats(
            content_root=root,
            entities=entities,
            chunks=chunks,
            edges=edges,
            segments=segments,
            model=model[0] if model else None,
            dimension=model[1] if model else None,
            is_empty=chunks == 0,
            engine=self.name,
            path=str(self.path),
            indexes=indexes,
        )

    def rebuild(self, *, progress: bool = False) -> None:
        """Rebuild Tantivy and HNSW from the catalog, whatever state they are in.

        Never fails on data the catalog holds: a date that can't be read is left out
        of its lexical document, a vector the dense index can't take is left out of it
        (both logged); a lexical index that can't even be cleared is recreated.
        """
        with self._writer():
            remove_dense_leftovers(self.path / _DENSE_FILE)
            self.lexical_index.remove_leftovers()
            latest, _ = self.catalog.latest_publish()
            with self.catalog.read() as conn:
                ids = self.catalog.all_chunk_ids(conn)
            self._clear_lexical("`ks rebuild`", len(ids))
            dense = self.dense
            if dense is not None:
                dense.clear()
            with Progress(disable=not progress, transient=True) as bar:
                task = bar.add_task("rebuilding indexes", total=len(ids))
                for i in range(0, len(ids), _REBUILD_BATCH):
                    part = ids[i : i + _REBUILD_BATCH]
                    with self.catalog.read() as conn:
                        docs = self._lexical_docs(conn, part)
                        if dense is not None:
                            vids, vectors = self.catalog.chunk_vectors(conn, part, dense.dimension)
                    self.lexical_index.add(docs)
                    self.lexical_index.rebuilt(i + len(part))
                    if dense is not None and len(vids):
                        dense.add(vids, vectors)
                    bar.advance(task, len(part))
            self.lexical_index.commit(latest)
            if dense is not None:
                dense.save(latest)
            self.views.reset()
            self.derived_error = None

    def close(self) -> None:
        self.owners.close()
        self.lexical_index.close()
        if self._dense is not None:
            self._dense.close()
        self.catalog.close()


def open_store(location: str, settings: EngineSettings, create: bool) -> EmbeddedEngine:
    """The engine registry's opener (``engines.registry``): the store in directory ``location``."""
    return EmbeddedEngine(
        Path(location), create=create, graph_time_limit_s=settings.graph_time_limit_s
    )


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
