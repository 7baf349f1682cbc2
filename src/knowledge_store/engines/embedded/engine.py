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
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
from rich.progress import Progress

from knowledge_store.engines.base import EngineSettings, Published
from knowledge_store.engines.components import Components
from knowledge_store.engines.embedded import components as _components  # noqa: F401  (registers)
from knowledge_store.engines.embedded import fuzzy as _fuzzy  # noqa: F401  (registers)
from knowledge_store.engines.embedded.analysis import Analyzers
from knowledge_store.engines.embedded.auditfile import AUDIT_FILE, AuditFile
from knowledge_store.engines.embedded.catalog import Catalog, EmbeddedChunks, chunk_vector_bytes
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
from knowledge_store.engines.embedded.replica import EmbeddedReplica
from knowledge_store.engines.embedded.views import View, Views
from knowledge_store.engines.embedded.writelock import WriteLock
from knowledge_store.engines.shared import (
    check_own_directory,
    check_store_directory,
    no_store,
)
from knowledge_store.engines.sql.acl import AclAdministration
from knowledge_store.engines.sql.audit import AuditStorage
from knowledge_store.engines.sql.dialect import SQLITE
from knowledge_store.engines.sql.export import Snapshot
from knowledge_store.engines.sql.history import History, prune
from knowledge_store.engines.sql.write import Batch, Reembedding, publish_batch, reembed
from knowledge_store.engines.sql.writer import CatalogWriter
from knowledge_store.errors import StoreError
from knowledge_store.model import (
    QUERY_GRAPH_TIME_LIMIT_S,
    CheckReport,
    Identity,
    StoreStats,
)

__all__ = ["EmbeddedEngine", "open_store"]

log = logging.getLogger(__name__)

#: What a store directory holds (and a killed first open may have left): the catalog and its
#: ``-wal`` / ``-shm`` / ``-journal``, the lexical index, the write lock, the dense index and
#: the temp files of a killed save (``dense.hnsw.tmp<pid>``), the audit log; and damaged
#: indexes moved aside.
_STORE_FILE = re.compile(
    r"(catalog|audit|cursors)\.sqlite(-wal|-shm|-journal)?|lexical|write\.lock|dense\.hnsw(\.tmp\d+)?"
)


def _is_store_file(name: str) -> bool:
    return _STORE_FILE.fullmatch(name) is not None or QUARANTINED.fullmatch(name) is not None


class EmbeddedEngine:
    """The default engine. ``EmbeddedEngine(path)`` opens or creates the store directory."""

    name = "embedded"
    #: Tantivy's BM25 statistics count deleted documents until their segments merge.
    exact_lexical_statistics = False

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
        #: The audit log (``audit.sqlite``, made on its first record: :mod:`.auditfile`).
        self.audit = AuditStorage(AuditFile(self.path / AUDIT_FILE, self.catalog.path))
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
        #: ACL administration and the store's writer: the shared ones, over this engine.
        self.admin = AclAdministration(self)
        self.writer = CatalogWriter(self)
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

    # -- what the shared write path needs (engines.base.Writer) -------------------------------
    dialect = SQLITE
    chunk_store = EmbeddedChunks()

    def connection(self) -> AbstractContextManager[sqlite3.Connection]:
        return nullcontext(self.catalog.db.conn())

    def reading(self) -> AbstractContextManager[sqlite3.Connection]:
        return self.catalog.read()

    @contextmanager
    def writing(self) -> Iterator[sqlite3.Connection]:
        with self._writer(), self.catalog.write() as conn:
            yield conn

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

    # -- re-embedding ------------------------------------------------------------------------------
    def replace_embeddings(self, job: Reembedding) -> str:
        """``engines.sql.write.reembed``, like any publish: the dense index is rebuilt from
        the new vectors and Tantivy's watermark moves (its texts are unchanged) before the
        catalog transaction commits."""
        keys = np.asarray(job.ids, dtype=np.int64)
        with self._writer():
            self._catch_up_or_log()
            try:
                with self.catalog.write() as conn:
                    publish, root = reembed(conn, SQLITE, self.chunk_store, job)
                    self.lexical.mark(publish)  # its texts are unchanged: the watermark moves
                    self.dense_index.reembed(publish, keys, job.vectors, job.vectors.shape[1])
            except BaseException:
                self._abort()
                self.dense_index.forget()  # the recorded model's index reopens from its file
                self._catch_up_or_log()
                raise
            for index in self.derived:
                index.published(publish)
            return root

    # -- publishing -----------------------------------------------------------------------------
    def publish(self, batch: Batch) -> Published:
        """One publish (``engines.base.Writer.publish``): written in the catalog's write
        transaction (``engines.sql.write.publish_batch``), the derived indexes updated before
        that transaction commits (see the module docstring).

        Chunks and vectors a derived index could not take are refused before anything
        is written (StoreError); a derived index that fails anyway is left behind (see
        the module docstring) and the catalog commits.
        """
        with self._writer():
            self._catch_up_or_log()
            try:
                with self.catalog.write() as conn:
                    plan = publish_batch(conn, SQLITE, self.chunk_store, batch)
                    if plan.empty:
                        return Published.of(plan)
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

    def stats(self) -> StoreStats:
        """Counts from the catalog; the derived indexes' state beside them (never a failure)."""
        with self.catalog.read() as conn:
            latest, root = self.catalog.latest_publish(conn)
            entities, chunks, edges = self.catalog.counts(conn)
        model = self.writer.model()
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

    # -- history ---------------------------------------------------------------------------------
    def replica(self) -> EmbeddedReplica:
        """A new, empty replica of this store (``engines.base.Replica``)."""
        return EmbeddedReplica(self)

    @contextmanager
    def history(self) -> Iterator[History]:
        """The catalog's history on one read snapshot."""
        with self.catalog.read() as conn:
            yield History(conn, SQLITE, chunk_vector_bytes)

    def prune_history(
        self, before_publish: int, before: str, *, dry_run: bool = False
    ) -> dict[str, int]:
        with self._writer(), self.catalog.write() as conn:
            return prune(conn, SQLITE, before_publish, before, dry_run=dry_run)

    def close(self) -> None:
        self.owners.close()
        for index in self.derived:
            index.close()
        self.audit.close()
        self.cursors.close()
        self.catalog.close()


def open_store(location: str, settings: EngineSettings, create: bool) -> EmbeddedEngine:
    """The engine registry's opener (``engines.registry``): the store in directory ``location``."""
    return EmbeddedEngine(
        Path(location), create=create, graph_time_limit_s=settings.graph_time_limit_s
    )
