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

**A damaged derived index** (its files fail their checksums, or Tantivy fails on
them) is never read: the holder of the write lock — the open that finds nobody
writing, a writer, ``ks rebuild`` — moves it aside (``lexical.damaged-<time>``,
``dense.hnsw.damaged-<time>``) and rebuilds it from the catalog; meanwhile its
primitive says what is damaged, and everything the catalog answers answers.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from rich.progress import Progress

from knowledge_store.engines.base import EngineSettings, PreparedEntity, Published, Vector
from knowledge_store.engines.components import Components
from knowledge_store.engines.embedded import components as _components  # noqa: F401  (registers)
from knowledge_store.engines.embedded import fuzzy as _fuzzy  # noqa: F401  (registers)
from knowledge_store.engines.embedded.admin import embedded_admin
from knowledge_store.engines.embedded.analysis import Analyzers
from knowledge_store.engines.embedded.catalog import Catalog
from knowledge_store.engines.embedded.cursors import CURSORS_FILE, CursorFile
from knowledge_store.engines.embedded.dense import DenseIndex, file_watermark
from knowledge_store.engines.embedded.derived import (
    DENSE_FILE,
    REBUILD_BATCH,
    DenseDerived,
    Derived,
    LexicalDerived,
)
from knowledge_store.engines.embedded.owners import ChunkOwners
from knowledge_store.engines.embedded.quarantine import QUARANTINED, quarantined
from knowledge_store.engines.embedded.reader import EmbeddedReader
from knowledge_store.engines.embedded.views import View, Views
from knowledge_store.engines.embedded.writelock import WriteLock
from knowledge_store.engines.shared import (
    check_own_directory,
    check_prepared,
    check_store_directory,
    check_vectors,
    deletion,
    no_store,
)
from knowledge_store.engines.sql.acl import AclAdministration, derived_from
from knowledge_store.engines.sql.batch import BatchScope, settle_batch
from knowledge_store.engines.sql.declared import write_values
from knowledge_store.engines.sql.dialect import SQLITE
from knowledge_store.engines.sql.export import Snapshot
from knowledge_store.engines.sql.publish import plan_publish
from knowledge_store.engines.sql.sources import (
    SourceSync,
    read_crawl_pages,
    read_sources,
    read_uid_prefix,
    record_source,
    write_crawl_pages,
)
from knowledge_store.errors import ModelMismatch, StoreError
from knowledge_store.model import (
    QUERY_GRAPH_TIME_LIMIT_S,
    CheckReport,
    Entity,
    Identity,
    SourceSummary,
    StoreStats,
)

__all__ = ["EmbeddedEngine", "open_store"]

log = logging.getLogger(__name__)

#: What a store directory holds (and a killed first open may have left): the catalog and its
#: ``-wal`` / ``-shm`` / ``-journal``, the lexical index, the write lock, the dense index and
#: the temp files of a killed save (``dense.hnsw.tmp<pid>``); and damaged indexes moved aside.
_STORE_FILE = re.compile(
    r"(catalog|cursors)\.sqlite(-wal|-shm|-journal)?|lexical|write\.lock|dense\.hnsw(\.tmp\d+)?"
)


def _is_store_file(name: str) -> bool:
    return _STORE_FILE.fullmatch(name) is not None or QUARANTINED.fullmatch(name) is not None


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
        #: The derived indexes (``.derived``), each a component with its own watermark: the
        #: writer catches them up, applies publishes to them and rebuilds them, in this order.
        self.lexical = LexicalDerived(self.catalog, self.path / "lexical", self._write_lock)
        self.dense_index = DenseDerived(self.catalog, self.path / DENSE_FILE)
        self.derived: tuple[Derived, ...] = (self.lexical, self.dense_index)
        #: The Tantivy index itself (the lexical component's).
        self.lexical_index = self.lexical.index
        self.views = Views(self.catalog, self.lexical, self.dense_index)
        self.owners = ChunkOwners(self.catalog)
        self._admin = embedded_admin(self)
        #: Why the derived indexes could not catch up last time (None: they did).
        self.derived_error: str | None = None
        self.chunk_ids = self.catalog.chunk_ids()
        #: Where paged reads keep their rankings (``engines/cursors.py``).
        self.cursors = CursorFile(self.path / CURSORS_FILE, self.chunk_ids.derived_key("cursors"))
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
    def admin(self) -> AclAdministration:
        return self._admin

    # -- the derived indexes ------------------------------------------------------------------
    @property
    def dense(self) -> DenseIndex | None:
        """The HNSW index of the store's model (see :class:`~.derived.DenseDerived`)."""
        return self.dense_index.index

    # -- the single writer ----------------------------------------------------------------
    @contextmanager
    def _writer(self, *, wait: bool = True) -> Iterator[bool]:
        """Hold the store's write lock (see ``writelock``); ``wait=False``: only if free."""
        with self._write_lock.hold(wait=wait) as held:
            yield held

    def write_lock(self) -> AbstractContextManager[bool]:
        """The store's write lock, held for a block (every writer of the catalog takes it)."""
        return self._writer()

    # -- derived index catch-up (the write lock held) -------------------------------------------
    def _recover(self) -> None:
        """At open, holding the write lock: repair what a killed writer or an older
        version left, then catch the derived indexes up (a failure is logged, never
        raised: the catalog-backed primitives answer regardless)."""
        for index in self.derived:
            index.remove_leftovers()
        self.catalog.repair_timestamps()
        try:  # the publish inside the last commit, not the sidecar's (a kill may split them)
            self.lexical_index.reload()
        except StoreError as exc:
            self._derived_failed(exc)
        self._catch_up_or_log()
        if self.derived_error is None:
            self.lexical.forget_cut_rebuild()  # one killed before it emptied the index

    def _catch_up(self) -> None:
        """Bring every derived index to the catalog's latest publish (idempotent; each
        component knows how: ``Derived.catch_up``)."""
        latest, _ = self.catalog.latest_publish()
        for index in self.derived:
            index.catch_up(latest)
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

    @contextmanager
    def snapshot(self) -> Iterator[Snapshot]:
        """One catalog read transaction, for reading the whole store back (``ks export``):
        the derived indexes are not pinned (nothing ranks)."""
        conn = self.catalog.borrow()
        try:
            conn.execute("BEGIN")
            publish, root = self.catalog.latest_publish(conn)

            def run(sql: str, params: Mapping[str, Any]) -> Sequence[Sequence[Any]]:
                try:
                    return conn.execute(sql, params).fetchall()
                except sqlite3.Error as exc:
                    raise StoreError(f"reading the catalog failed: {exc}") from exc

            yield Snapshot(run, SQLITE, publish, root)
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
            try:
                with self.catalog.write() as conn:
                    publish, root = self.catalog.replace_embeddings(
                        conn, ids, matrix, meta, base_root=base_root
                    )
                    self.lexical.mark(publish)  # its texts are unchanged: the watermark moves
                    self.dense_index.reembed(publish, keys, matrix, dimension)
            except BaseException:
                self._abort()
                self.dense_index.forget()  # the recorded model's index reopens from its file
                self._catch_up_or_log()
                raise
            for index in self.derived:
                index.published(publish)
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
        scope: BatchScope | None = None,
    ) -> Published:
        """One publish: planned and written in the catalog's write transaction, the derived
        indexes updated before that transaction commits (see the module docstring).

        With ``source``, a sync deletes what the source holds beyond the batch
        (``engines.sql.sources``) and the source's row is written in that transaction;
        the batch is settled there first (``engines.sql.batch``, ``scope``).

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
            try:
                with self.catalog.write() as conn:
                    latest = self.catalog.latest_publish(conn)
                    batch = settle_batch(
                        conn,
                        SQLITE,
                        upserts,
                        deletes,
                        source=source,
                        scope=scope,
                        acl_only=acl_only,
                    )
                    uids = [p.entity.uid for p in batch.upserts] + list(batch.deletes)
                    uids += [e.uid for e in batch.acl_only]
                    existing = self.catalog.content_hashes(uids, conn)
                    plan = plan_publish(
                        latest, existing, batch.upserts, batch.deletes, batch.acl_only
                    )
                    if plan.empty:
                        return record_source(conn, SQLITE, source, Published.of(plan))
                    self.catalog.apply(conn, plan, kind=kind)
                    write_values(conn, SQLITE, plan)  # the declared facets' values
                    record_source(conn, SQLITE, source, Published.of(plan))
                    self._follow(conn, plan.publish)
            except BaseException:
                self._abort()
                raise
            for index in self.derived:
                index.published(plan.publish)
            if self.lexical_index.damage is not None:  # found damaged on the way: repaired now
                self._catch_up_or_log()
            return Published.of(plan)

    def _abort(self) -> None:
        """A publish failed: nothing of it may survive in a derived index (each is brought
        back to the catalog's latest publish; one that can't be is logged, as at open)."""
        latest = self.catalog.latest_publish()[0]
        for index in self.derived:
            try:
                index.abort(latest)
            except StoreError as exc:
                self._derived_failed(exc)

    def _follow(self, conn: sqlite3.Connection, publish: int) -> None:
        """Inside a publish's catalog transaction: bring every derived index to ``publish``.

        An index that fails (StoreError) is rolled back to what it committed and left
        behind, the reason kept: the catalog commits regardless.
        """
        for index in self.derived:
            try:
                index.follow(conn, publish)
            except StoreError as exc:
                index.undo()
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

    def source_uid_prefix(self, name: str) -> str | None:
        with self.catalog.read() as conn:
            return read_uid_prefix(conn, SQLITE, name)

    def save_crawl_pages(self, source: str, pages: Mapping[str, str | None]) -> None:
        with self._writer(), self.catalog.write() as conn:
            write_crawl_pages(conn, SQLITE, source, pages)

    def delete(self, uids: Sequence[str]) -> Published:
        with self._writer():  # what is derived from uids can't change before the publish
            with self.catalog.read() as conn:
                stored = self.catalog.content_hashes(list(uids), conn)
                doomed = deletion(uids, stored, lambda uid: derived_from(conn, SQLITE, uid))
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
        dense = self.dense_index.loaded()  # not loaded just for stats: its file's header says
        on_disk = file_watermark(self.path / DENSE_FILE)
        error = self.derived_error
        if error is None and self.lexical_index.watermark != latest:
            # another process rebuilds the lexical index (or must): say so, with its progress
            rebuild = self.lexical.rebuilding()
            error = None if rebuild is None else rebuild[0]
        if error is None and dense is not None and dense.damage is not None:
            error = f"the dense index is damaged ({dense.damage}); `ks rebuild` rebuilds it"
        indexes: dict[str, Any] = {
            "publish": latest,
            "lexical": self.lexical_index.watermark,
            "dense": dense.watermark if dense is not None else on_disk if on_disk >= 0 else None,
            "error": error,
        }
        if moved := quarantined(self.path):
            indexes["quarantined"] = [q.to_dict() for q in moved]
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

    def check(self) -> CheckReport:
        """The catalog and the derived indexes verified against it (``engines/embedded/check``)."""
        from knowledge_store.engines.embedded.check import check_store

        return check_store(self)

    def moved_aside(self) -> list[tuple[str, str]]:
        """``(index, why)`` of each damaged index this process moved aside and rebuilt."""
        lexical = [("lexical", why) for why in self.lexical_index.moved_aside]
        loaded = self.dense_index.loaded()
        dense = [] if loaded is None else [("dense", why) for why in loaded.moved_aside]
        return lexical + dense

    def rebuild(self, *, progress: bool = False) -> None:
        """Rebuild Tantivy and HNSW from the catalog, whatever state they are in.

        Never fails on data the catalog holds: a date that can't be read is left out
        of its lexical document, a vector the dense index can't take is left out of it
        (both logged); a lexical index that can't even be cleared is recreated.
        """
        with self._writer():
            for index in self.derived:
                index.remove_leftovers()
            self.lexical_index.find_damage()  # damaged files are moved aside, to be inspected
            dense = self.dense
            if dense is not None:
                dense.damage = dense.damage or dense.verify()
                dense.quarantine()  # a damaged file, kept aside to be inspected
            latest, _ = self.catalog.latest_publish()
            with self.catalog.read() as conn:
                ids = self.catalog.all_chunk_ids(conn)
            for index in self.derived:
                index.rebuild_start("`ks rebuild`", len(ids))
            with Progress(disable=not progress, transient=True) as bar:
                task = bar.add_task("rebuilding indexes", total=len(ids))
                for i in range(0, len(ids), REBUILD_BATCH):
                    part = ids[i : i + REBUILD_BATCH]
                    with self.catalog.read() as conn:
                        for index in self.derived:
                            index.rebuild_batch(conn, part, i + len(part))
                    bar.advance(task, len(part))
            for index in self.derived:
                index.rebuild_done(latest)
            self.views.reset()
            self.derived_error = None

    def close(self) -> None:
        self.owners.close()
        for index in self.derived:
            index.close()
        self.cursors.close()
        self.catalog.close()


def open_store(location: str, settings: EngineSettings, create: bool) -> EmbeddedEngine:
    """The engine registry's opener (``engines.registry``): the store in directory ``location``."""
    return EmbeddedEngine(
        Path(location), create=create, graph_time_limit_s=settings.graph_time_limit_s
    )
