"""The lexical index of the embedded engine: Tantivy BM25 over chunk documents.

A *derived* index (DESIGN §4): the SQLite catalog is the source of truth, calls
this class with the chunk documents of each publish and records how far it got
with a watermark (the publish id) committed after the Tantivy commit. The
catalog decides permissions; this index only applies the principals and the
filters it is given, *inside* the query, before ranking.

Fields, analyzers and query terms: :mod:`.analysis`.

A query is a disjunction of term queries (BM25, k1=1.2, b=0.75): every word on
``body``, ``title`` and ``heading``, and every token that is not a plain word (``pg_hba.conf``,
``err-1042``, ``$libdir``) on ``ident`` — ANDed with the ACL and filter
clauses, which score 0. The ACL clause is a term set of the principals the
caller holds (itself, ``everyone`` and its groups, expanded by the catalog): a
document matches when its ACL names one of them. That is a handful of terms
where the ACL-set ids the caller may read can run to thousands (2,218 for a
user of a group shared by half the estate: 3.4 ms against 0.3 ms per query at
100k chunks). An empty ACL has no ``acl`` term and matches nobody. It is built programmatically from the analyzers' tokens,
never parsed with Tantivy's query language, so ``field:x``, ``*``, ``OR``, quotes
or NUL in the text are matched literally or dropped and can't widen a query.

**Files of another schema** (an upgrade changed :data:`SCHEMA_ID`), unreadable or
missing are never touched on open: the process reads an empty index in memory
(``stale`` says why), and the first write — made only under the store's write
lock — replaces them with a new generation (:mod:`.lexfiles`). A rebuild records
itself in the sidecar until its commit (:meth:`LexicalIndex.begin_rebuild`), so the
store's other processes can tell their readers what is happening and how far it got.

**Damaged files** (a flipped byte, a torn write below the file system) are found
before Tantivy reads them: on open, and for the segments another process committed
since, on reload, the files' own checksums are checked (:func:`.lexfiles.damage`);
and every Tantivy failure — an IO error, or a Rust panic, which tantivy-py raises as
``pyo3_runtime.PanicException``, a ``BaseException`` — checks them again. A damaged
index is never read: the process reads an empty one in memory, its primitive says
what is damaged and that ``ks rebuild`` repairs it (:meth:`LexicalIndex.damage_error`),
and the holder of the write lock moves the files aside (:mod:`.quarantine`) and
rebuilds from the catalog.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import tantivy

from knowledge_store.engines.embedded import analysis, lexfiles, quarantine
from knowledge_store.engines.embedded.analysis import (
    Analyzers,
    QueryTerms,
    bound,
    epoch,
    schema,
)
from knowledge_store.engines.embedded.lexfiles import SIDECAR, Damage, Rebuild
from knowledge_store.errors import StoreError
from knowledge_store.model import (
    FACET_NAMES,
    FILTER_FIELDS,
    Filters,
    compose_context,
    last_heading,
)

__all__ = [
    "SIDECAR",
    "WATERMARK_ID",
    "Analyzers",
    "Damage",
    "LexicalDoc",
    "LexicalIndex",
    "Pinned",
    "QueryTerms",
    "Rebuild",
]

log = logging.getLogger(__name__)

#: Bumped whenever fields or analyzers change; an index of another version is rebuilt.
SCHEMA_VERSION = 6  # 2: the ACL as principals, not an ACL-set id; 3: the watermark document;
# 4: a facet field; 5: the filter fields named in SCHEMA_ID; 6: the heading field
#: What the sidecar records of the layout: the version and the filter fields (their Tantivy
#: fields come from FILTER_FIELDS), so an index built with another field set — a filter
#: field declared or dropped since — is of another schema, and is rebuilt from the catalog.
SCHEMA_ID = f"{SCHEMA_VERSION}:" + ",".join(f"{f.name}={f.kind}" for f in FILTER_FIELDS)
#: The chunk id of the document that records, inside each commit, the publish it holds.
WATERMARK_ID = -1

#: Up to this many held principals the ACL clause is a union of term queries, above
#: it a term set. At 100k chunks, 50 % visible, p50 of the filtered query: 8 held
#: 0.28 vs 0.55 ms, 40: 0.45 vs 0.59, 136: 0.62 vs 0.69, 520: 1.37 vs 0.92 ms.
_ACL_UNION_MAX = 128

_WRITER_HEAP = 96_000_000
_WRITER_THREADS = 1


@dataclass(frozen=True)
class Pinned:
    """A Tantivy searcher (a point-in-time view) and the publish id it shows."""

    searcher: tantivy.Searcher
    watermark: int
    marked: bool = False  # the commit holds the watermark document


#: Why a store without an index can't use one yet (a new store: no warning when it is made).
_MISSING = "does not exist yet"


def _unusable(path: Path, sidecar: Mapping[str, Any]) -> str | None:
    """Why the index files in ``path`` are not this version's (None: they may be): missing,
    without our sidecar, or of another schema. Damage and Tantivy's own version are checked
    after (:meth:`LexicalIndex._open`)."""
    if not (path / "meta.json").is_file():
        return _MISSING
    found = sidecar.get("schema")
    if found is None:  # the sidecar is written before the index: an index without one isn't ours
        return "has no sidecar"
    if found != SCHEMA_ID:
        version = str(found).partition(":")[0]
        if version != str(SCHEMA_VERSION):
            return (
                f"has another schema: lexical schema {version}, this version's is {SCHEMA_VERSION}"
            )
        return f"has another schema: the filter fields {found}, this version's are {SCHEMA_ID}"
    return None


def _damaged(damage: list[Damage]) -> str:
    """``stale``'s sentence for damaged files."""
    shown = "; ".join(str(d) for d in damage[:3])
    more = f"; and {len(damage) - 3} more files" if len(damage) > 3 else ""
    return f"is damaged ({shown}{more})"


def _is_panic(exc: BaseException) -> bool:
    """A Rust panic inside tantivy-py: pyo3 raises ``pyo3_runtime.PanicException``, which
    derives from ``BaseException`` (so ``except Exception`` lets it through)."""
    kind = type(exc)
    return kind.__name__ == "PanicException" and kind.__module__ == "pyo3_runtime"


def _tantivy_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is how tantivy-py reports a failure (an error, or a panic)."""
    return isinstance(exc, ValueError | OSError | RuntimeError) or _is_panic(exc)


def _described(exc: BaseException) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    return f"Tantivy panicked ({first})" if _is_panic(exc) else text or type(exc).__name__


@dataclass(frozen=True)
class LexicalDoc:
    """One chunk as the lexical index sees it."""

    chunk_id: int
    uid: str
    acl: tuple[str, ...]  # the principals of the entity's ACL set
    type: str
    source: str
    status: str
    created_at: str | None  # "YYYY-MM-DDTHH:MM:SSZ" or None
    updated_at: str | None
    title: str
    heading: tuple[str, ...]
    text: str
    facets: Mapping[str, str] = field(default_factory=dict)  # "" when unset

    def value(self, name: str) -> str | None:
        """The value of filter field ``name``: a facet's, else the field of that name."""
        return self.facets.get(name, "") if name in FACET_NAMES else getattr(self, name)


T = TypeVar("T")
H = TypeVar("H")


def _chunk_id(searcher: tantivy.Searcher, address: Any) -> int:
    """The stored chunk id of a document (every chunk document has the fast field too)."""
    value = searcher.doc(address).get_first("chunk_id")
    if value is None:
        raise ValueError("a document without chunk_id")
    return int(value)


class LexicalIndex:
    """BM25 over chunk documents in one Tantivy directory, with a watermark sidecar.

    Readers never open a writer: the writer (and Tantivy's directory lock) is
    taken on the first write and released after each ``commit``, so another
    process can write next. Every write is made holding the store's write lock.
    """

    def __init__(self, path: Path) -> None:
        self._path = Path(path)
        self._lock = threading.RLock()
        self._writer: tantivy.IndexWriter | None = None
        self._schema = schema()
        self._analyzers = Analyzers()
        self._watermark = 0
        self._pinned: Pinned | None = None
        #: Why the files on disk can't be used (None: they can): then this process reads an
        #: empty in-memory index, and the write-lock holder's first write replaces them.
        self.stale: str | None = None
        self._generation: str | None = None  # the sidecar's: new each time the files are replaced
        self._rebuild: dict[str, Any] | None = None  # the rebuild under way here (the sidecar's)
        #: The damaged files found (None: none): ``stale`` says so, and the files are moved
        #: aside, not deleted, when they are replaced.
        self._damage: list[Damage] | None = None
        self._verified: lexfiles.Verified = {}  # files whose checksums this process checked
        #: Why each damaged index this process moved aside was damaged (``ks check`` says so).
        self.moved_aside: list[str] = []
        self._index = self._open()
        self._watermark = 0 if self.stale else self._read_watermark()

    # -- opening -------------------------------------------------------------

    def _open(self) -> tantivy.Index:
        """The index on disk, opened read-only; else an empty one in memory, ``stale`` saying why.

        Never writes: only the holder of the store's write lock replaces index files (on
        its first write, :meth:`_replace`), so a process opening the store while another
        rebuilds the index can't destroy the rebuild under way, nor create an index beside it.
        Damaged files are found before Tantivy reads them (:func:`.lexfiles.damage`).
        """
        sidecar = lexfiles.read_sidecar(self._path)
        generation = sidecar.get("generation")
        self._generation = generation if isinstance(generation, str) else None
        self._damage = None
        self.stale = _unusable(self._path, sidecar)
        if self.stale is None and (found := lexfiles.damage(self._path, self._verified)):
            self._damage, self.stale = found, _damaged(found)
        index: tantivy.Index | None = None
        if self.stale is None:
            try:
                if not tantivy.Index.is_compatible(str(self._path)):
                    self.stale = "was written by an incompatible Tantivy version"
                else:
                    index = tantivy.Index.open(str(self._path))
            except BaseException as exc:
                if not _tantivy_failure(exc):
                    raise
                # the checksums held, yet Tantivy can't read it: damaged all the same
                self._damage = [Damage("meta.json", f"Tantivy can't open it: {_described(exc)}")]
                self.stale = _damaged(self._damage)
        if index is None:
            index = tantivy.Index(self._schema)  # in memory: empty, watermark 0
        return self._ready(index)

    def _ready(self, index: tantivy.Index) -> tantivy.Index:
        index.register_tokenizer("ks_words", self._analyzers.words)
        index.register_tokenizer("ks_ident", self._analyzers.ident)
        index.config_reader("manual")
        return index

    def _reopen(self) -> None:
        """Open the index afresh before making a writer (the write lock held). Tantivy keeps
        the list of the files it manages (``.managed.json``) as it was when the index was
        opened, and a writer made from an index opened before another process's commits
        writes that stale list back: the other process's files drop out of it, are never
        collected, and the next open took them for a killed writer's leftovers."""
        if self.stale is None:
            self._index = self._open()
            self._pinned = None

    def _usable(self) -> None:
        """Before a write (the write lock held): replace files this process can't use —
        unless another process replaced them since this one looked."""
        if self.stale is not None and not self._known_damaged():
            self._index = self._open()
            self._pinned = None
            if self.stale is None:
                self._watermark = self.pin().watermark
        if self.stale is not None:
            self._replace()

    def _known_damaged(self) -> bool:
        """Damage found here, in files nobody has replaced since (no need to look again)."""
        if self._damage is None:
            return False
        return lexfiles.read_sidecar(self._path).get("generation") == self._generation

    def _replace(self) -> None:
        """Start over empty (watermark 0), holding the store's write lock: every file goes —
        damaged ones are moved aside instead (:mod:`.quarantine`) — then a sidecar of this
        schema and a new generation, then a new index; killed anywhere in between, the next
        holder finds no index or an empty one and redoes it."""
        with self._lock:
            self.rollback()
            if self._damage is not None:
                self._quarantine()
                self._damage = None  # what follows fails on its own account, if it does
            elif self.stale not in (None, _MISSING):
                log.warning("lexical index at %s %s; recreating it", self._path, self.stale)
            self._path.mkdir(parents=True, exist_ok=True)
            self._call("removing the old index", lambda: lexfiles.wipe(self._path))
            self._generation = uuid.uuid4().hex
            self._write_sidecar(0)
            created = self._call(
                "creating the index",
                lambda: tantivy.Index(self._schema, str(self._path), reuse=False),
            )
            self._index = self._ready(created)
            self.stale = None
            self._damage = None
            self._verified.clear()
            self._watermark = 0
            self._pinned = None

    def _quarantine(self) -> None:
        """Move the damaged files aside, to be inspected (deleted if that fails)."""
        reason = f"the lexical index {self.stale}"
        try:
            moved = quarantine.quarantine(self._path, reason)
        except OSError as exc:
            log.warning(
                "lexical index at %s %s, and it can't be moved aside (%s); deleting it",
                self._path,
                self.stale,
                exc,
            )
            return
        log.warning(
            "lexical index at %s %s; moved it to %s, rebuilding it from the catalog",
            self._path,
            self.stale,
            moved,
        )
        self.moved_aside.append(f"{reason}: moved to {moved} and rebuilt from the catalog")

    # -- failures ----------------------------------------------------------------

    @property
    def damage(self) -> list[Damage] | None:
        """The damaged files found (None: none found): the index is not read until the
        holder of the write lock has moved them aside and rebuilt it."""
        return self._damage

    def damage_error(self) -> StoreError:
        """What a primitive of the damaged index answers: what is damaged, what still
        answers, and what repairs it."""
        damage = self._damage or []
        return StoreError(
            f"the lexical index of {self._path.parent} {_damaged(damage)}. It is derived from the"
            " catalog: sql, aggregate, graph, query_graph, content and vector answer"
            " meanwhile. `ks rebuild` (or the next write to the store) moves it aside to"
            " lexical.damaged-<time> and rebuilds it from the catalog",
            index="lexical",
            damaged=[str(d) for d in damage],
            retryable=False,
        )

    def _call(self, action: str, call: Callable[[], T]) -> T:
        """``call()``, a Tantivy failure (an error or a panic) translated (:meth:`_failure`)."""
        try:
            return call()
        except BaseException as exc:
            if not _tantivy_failure(exc):
                raise
            raise self._failure(action, exc) from exc

    def _failure(self, action: str, exc: BaseException, *, dropped: bool = False) -> StoreError:
        """The error of a Tantivy failure: the files are checked again, and when they are
        damaged, the process stops reading them (an empty index in memory) and says so."""
        with self._lock:
            if self._damage is None and self.stale is None and (self._path / "meta.json").exists():
                found = lexfiles.damage(self._path)
                if found:
                    self._mark_damaged(found)
            if self._damage is not None:
                log.warning("lexical index at %s %s (%s failed)", self._path, self.stale, action)
                return self.damage_error()
        tail = "; changes since the last commit were dropped" if dropped else ""
        return StoreError(f"lexical index: {action} failed: {_described(exc)}{tail}", action=action)

    def _mark_damaged(self, damage: list[Damage]) -> None:
        """Stop reading the files: an empty index in memory, watermark 0, ``stale`` saying
        why; the holder of the write lock moves them aside (:meth:`_replace`)."""
        self.rollback()
        self._damage, self.stale = damage, _damaged(damage)
        self._index = self._ready(tantivy.Index(self._schema))
        self._pinned = None
        self._watermark = 0

    def remove_leftovers(self) -> list[str]:
        """Remove what killed writers left behind (:func:`.lexfiles.remove_leftovers`); the
        names removed. Call only while holding the store's write lock."""
        with self._lock:
            if self._writer is not None:
                return []
            removed = lexfiles.remove_leftovers(self._path)
            if removed:
                log.warning("lexical index: removed leftovers of a killed writer: %s", removed)
            return removed

    def recreate(self) -> None:
        """Start over empty (watermark 0), holding the store's write lock: the last resort
        of a rebuild."""
        self._replace()

    def _read_watermark(self) -> int:
        value = lexfiles.read_sidecar(self._path).get("watermark", 0)
        return value if isinstance(value, int) else 0

    def _write_sidecar(self, watermark: int, *, durable: bool = True) -> None:
        """The watermark, the schema, the generation and the rebuild under way, if any
        (``durable=False``: a rebuild's progress, which nothing depends on, not synced)."""
        sidecar: dict[str, Any] = {"watermark": watermark, "schema": SCHEMA_ID}
        if self._generation is not None:
            sidecar["generation"] = self._generation
        if self._rebuild is not None:
            sidecar["rebuild"] = self._rebuild
        self._call(
            "recording the watermark",
            lambda: lexfiles.write_sidecar(self._path, sidecar, durable=durable),
        )

    # -- writing -------------------------------------------------------------

    @contextlib.contextmanager
    def _writing(self, action: str) -> Iterator[tantivy.IndexWriter]:
        """The writer, opened on first use; on any error every staged change is dropped.

        Every write happens under the store's write lock (the engine's writers), the
        first one replacing files this process found unusable (:meth:`_usable`).
        """
        with self._lock:
            if self._writer is None:
                self._reopen()
            self._usable()
            if self._writer is None:
                self._writer = self._call(
                    "opening the writer (is another process writing?)",
                    lambda: self._index.writer(heap_size=_WRITER_HEAP, num_threads=_WRITER_THREADS),
                )
            try:
                yield self._writer
            except BaseException as exc:
                self.rollback()
                if _tantivy_failure(exc):
                    raise self._failure(action, exc, dropped=True) from exc
                raise

    def rollback(self) -> None:
        """Drop every change staged since the last commit and release the writer."""
        with self._lock:
            writer, self._writer = self._writer, None
            if writer is not None:
                try:
                    writer.rollback()
                    writer.wait_merging_threads()
                except BaseException as exc:  # a failure (or a panic) dropping what was staged
                    if not _tantivy_failure(exc):
                        raise

    def _document(self, doc: LexicalDoc) -> tantivy.Document:
        out = tantivy.Document()
        out.add_integer("chunk_id", doc.chunk_id)
        for principal in doc.acl:
            out.add_text("acl", principal)
        for f in FILTER_FIELDS:
            value = doc.value(f.name)
            if f.kind == "keyword":
                out.add_text(f.name, value or "")
            elif value and (seconds := epoch(value)) is not None:
                out.add_integer(f.name, seconds)
        full = compose_context(doc.title, doc.heading, doc.text)
        out.add_text("body", full)
        out.add_text("title", doc.title)
        out.add_text("heading", last_heading(doc.title, doc.heading))
        out.add_text("ident", full)
        return out

    def add(self, docs: Iterable[LexicalDoc]) -> None:
        """Stage chunk documents; re-adding a chunk id replaces its document."""
        with self._writing("adding documents") as writer:
            for doc in docs:
                writer.delete_documents_by_term("chunk_id", doc.chunk_id)
                writer.add_document(self._document(doc))

    def delete_entities(self, uids: Iterable[str]) -> None:
        """Stage the deletion of every chunk of these entities."""
        with self._writing("deleting entities") as writer:
            for uid in uids:
                writer.delete_documents_by_term("uid", uid)

    def delete_chunks(self, chunk_ids: Iterable[int]) -> None:
        """Stage the deletion of these chunks."""
        with self._writing("deleting chunks") as writer:
            for chunk_id in chunk_ids:
                writer.delete_documents_by_term("chunk_id", int(chunk_id))

    def commit(self, watermark: int) -> None:
        """Make staged changes durable and visible as the index of publish ``watermark``.

        The publish id goes into the commit itself (a document under
        :data:`WATERMARK_ID`), so a searcher always knows which publish it
        shows (:meth:`pin`); the sidecar repeats it for a cheap look on open.
        """
        self._rebuild = None
        self._commit(watermark)

    def _commit(self, watermark: int) -> None:
        with self._writing("recording the watermark") as writer:
            writer.delete_documents_by_term("chunk_id", WATERMARK_ID)
            mark = tantivy.Document()
            mark.add_integer("chunk_id", WATERMARK_ID)
            mark.add_text("uid", str(int(watermark)))
            writer.add_document(mark)
        with self._lock:
            committing, self._writer = self._writer, None
            if committing is not None:
                self._call("committing", committing.commit)
                # Finish merges and release Tantivy's directory lock for the next writer.
                self._call("merging segments", committing.wait_merging_threads)
                lexfiles.trust(self._path, self._verified)  # written here, under the write lock
            self._write_sidecar(watermark)
            self._watermark = watermark
            self._call("reloading", self._index.reload)
            self._pinned = None

    def clear(self) -> None:
        """Drop every document now (committed, watermark 0): the start of a rebuild.

        The watermark goes to 0 *before* the documents go: a watermark may lag the
        index (replaying is idempotent) but never lead it — killed between the two,
        an emptied index still claiming the latest publish was never caught up.
        """
        with self._lock:
            self._usable()
            self._write_sidecar(0)
            self._watermark = 0
            with self._writing("clearing") as writer:
                writer.delete_all_documents()
            self._commit(0)  # a rebuild under way stays recorded

    # -- reading -------------------------------------------------------------

    @property
    def watermark(self) -> int:
        """The publish id of the last commit (0 for a new index)."""
        return self._watermark

    def reload(self) -> None:
        """Pick up commits (and the watermark) made by another process — opening the index
        afresh when this process could not use its files or another one replaced them."""
        with self._lock:
            generation = lexfiles.read_sidecar(self._path).get("generation")
            if self._damage is not None and generation == self._generation:
                return  # still the damaged files: nobody has replaced them yet
            if self._writer is None and (self.stale is not None or generation != self._generation):
                self._index = self._open()
            elif self._writer is None and (found := lexfiles.damage(self._path, self._verified)):
                self._mark_damaged(found)  # a segment committed since this process looked
                return
            else:
                self._call("reloading", self._index.reload)
            self._pinned = None
            self._watermark = self.pin().watermark

    # -- rebuilding (the write lock held) --------------------------------------

    def begin_rebuild(self, reason: str, total: int) -> None:
        """Record in the sidecar that this process rebuilds the index (``reason``) and will
        index ``total`` chunks: what the store's other processes tell their readers. The
        record stays until the rebuild's :meth:`commit` (a killed rebuild's stays behind).
        Files this process can't use are replaced first (their new sidecar has the record)."""
        with self._lock:
            self._rebuild = {
                "reason": reason,
                "pid": os.getpid(),
                "started": time.time(),
                "indexed": 0,
                "total": total,
            }
            if self.stale is None:
                self._write_sidecar(self._watermark)
            self._usable()

    def rebuilt(self, indexed: int) -> None:
        """The rebuild under way has staged ``indexed`` chunks (its progress, in the sidecar)."""
        with self._lock:
            if self._rebuild is not None:
                self._rebuild["indexed"] = indexed
                self._write_sidecar(self._watermark, durable=False)

    def forget_rebuild(self) -> None:
        """Drop the record of a rebuild that is not under way here (a killed one's, on an
        index that needs none now); the write lock held."""
        with self._lock:
            if self._rebuild is None and self.stale is None and self.rebuilding() is not None:
                self._write_sidecar(self._watermark)

    def rebuilding(self) -> Rebuild | None:
        """The rebuild the sidecar records (another process's, or one that was killed)."""
        return Rebuild.read(lexfiles.read_sidecar(self._path).get("rebuild"))

    def pin(self) -> Pinned:
        """A point-in-time searcher and the publish it shows (read from the commit itself)."""
        with self._lock:
            if self._pinned is None:
                searcher = self._call("opening a searcher", self._index.searcher)
                self._pinned = self._marked(searcher)
            return self._pinned

    def _marked(self, searcher: tantivy.Searcher) -> Pinned:
        query = tantivy.Query.term_query(self._schema, "chunk_id", WATERMARK_ID)
        hits = self._call("reading the watermark", lambda: searcher.search(query, 1).hits)
        if not hits:
            return Pinned(searcher, 0)
        value = self._call("reading the watermark", lambda: searcher.doc(hits[0][1])).get_first(
            "uid"
        )
        mark = int(value) if isinstance(value, str) and value.isdigit() else 0
        return Pinned(searcher, mark, marked=True)

    def _text_query(self, text: str) -> tantivy.Query | None:
        terms = self._analyzers.query_terms(text)
        if not terms.words:
            return None
        return tantivy.Query.boolean_query(analysis.text_clauses(self._schema, terms))

    def _filter_clauses(
        self, principals: Collection[str] | None, filters: Filters
    ) -> list[tuple[tantivy.Occur, tantivy.Query]]:
        query, must, must_not = tantivy.Query, tantivy.Occur.Must, tantivy.Occur.MustNot

        def const(q: tantivy.Query) -> tantivy.Query:
            return query.const_score_query(q, 0.0)  # filters never change the BM25 score

        clauses: list[tuple[tantivy.Occur, tantivy.Query]] = []
        if principals is not None:
            held = sorted(set(principals))
            if len(held) <= _ACL_UNION_MAX:
                # A union of term queries seeks along the text query's candidates;
                # a term set first collects every doc of every held principal.
                union = [
                    (tantivy.Occur.Should, query.term_query(self._schema, "acl", p)) for p in held
                ]
                clauses.append((must, const(query.boolean_query(union))))
            else:
                clauses.append((must, const(query.term_set_query(self._schema, "acl", held))))
        for f in FILTER_FIELDS:
            if f.kind == "date":
                lo, hi = filters.range(f.name)
                if lo is None and hi is None:
                    continue
                bounds = query.range_query(
                    self._schema,
                    f.name,
                    tantivy.FieldType.Integer,
                    lower_bound=None if lo is None else bound(lo),
                    upper_bound=None if hi is None else bound(hi),
                )
                clauses.append((must, const(bounds)))
                continue
            if values := filters.values(f.name):
                terms = query.term_set_query(self._schema, f.name, list(values))
                clauses.append((must, const(terms)))
            if excluded := filters.excluded(f.name):
                clauses.append(
                    (must_not, query.term_set_query(self._schema, f.name, list(excluded)))
                )
        return clauses

    def search_ids(
        self,
        text: str,
        k: int,
        *,
        principals: Collection[str] | None,
        filters: Filters,
        pinned: Pinned | None = None,
        within: Sequence[int] | None = None,
    ) -> list[tuple[int, float]]:
        """``(chunk_id, bm25 score)`` of the best ``k`` chunks, best first (ties by id).

        ``principals`` are those the caller holds (None: no ACL restriction;
        empty: nothing). Filters restrict inside the query; ``within``, chunk ids, too
        (what the catalog selected for filters the index has no field for: a declared
        facet). The ids come from the ``chunk_id`` fast field: no stored document is
        read (the reader names the entities of the hits it keeps, after its final check).
        """

        def run(searcher: tantivy.Searcher, hits: list[Any]) -> list[tuple[int, float]]:
            values = searcher.fast_field_values("chunk_id", [a for _, a in hits])
            # best first, ties by id: tuples compared in C (a key function is a call a hit)
            ranked = sorted(
                (-float(score), _chunk_id(searcher, address) if value is None else int(value))
                for (score, address), value in zip(hits, values, strict=True)
            )
            return [(chunk_id, -score) for score, chunk_id in ranked]

        return self._searched(text, k, principals, filters, pinned, run, within)

    def search(
        self,
        text: str,
        k: int,
        *,
        principals: Collection[str] | None,
        filters: Filters,
        pinned: Pinned | None = None,
    ) -> list[tuple[int, str, float]]:
        """:meth:`search_ids` with each hit's uid, read from its stored document (for
        tools and tests; a reader names uids from the catalog's snapshot)."""

        def run(searcher: tantivy.Searcher, hits: list[Any]) -> list[tuple[int, str, float]]:
            out = []
            for score, address in hits:
                doc = searcher.doc(address)
                chunk_id, uid = doc.get_first("chunk_id"), doc.get_first("uid")
                if chunk_id is None or uid is None:
                    raise ValueError("a document without chunk_id or uid")
                out.append((int(chunk_id), str(uid), float(score)))
            out.sort(key=lambda hit: (-hit[2], hit[0]))
            return out

        return self._searched(text, k, principals, filters, pinned, run)

    def _searched(
        self,
        text: str,
        k: int,
        principals: Collection[str] | None,
        filters: Filters,
        pinned: Pinned | None,
        read: Callable[[tantivy.Searcher, list[Any]], list[H]],
        within: Sequence[int] | None = None,
    ) -> list[H]:
        """``read(searcher, hits)`` of Tantivy's ``(score, address)`` hits of the query."""
        if k <= 0 or (principals is not None and len(principals) == 0):
            return []
        if within is not None and not len(within):
            return []
        text_query = self._text_query(text)
        if text_query is None:
            return []
        clauses = [(tantivy.Occur.Must, text_query), *self._filter_clauses(principals, filters)]
        if within is not None:  # scores 0, as every filter clause
            ids = tantivy.Query.term_set_query(self._schema, "chunk_id", [int(c) for c in within])
            clauses.append((tantivy.Occur.Must, tantivy.Query.const_score_query(ids, 0.0)))
        query = tantivy.Query.boolean_query(clauses) if len(clauses) > 1 else text_query

        def run() -> list[H]:
            searcher = (pinned or self.pin()).searcher
            limit = min(k, searcher.num_docs)  # Tantivy sizes its top-k heap by the limit
            if limit <= 0:
                return []
            hits = searcher.search(query, limit=limit, count=False).hits
            return read(searcher, hits) if hits else []

        return self._call("searching", run)

    # -- checking (``ks check``) ----------------------------------------------

    def verify(self) -> list[Damage]:
        """Every file of the committed index checked again, nothing taken as known."""
        return lexfiles.damage(self._path) if (self._path / "meta.json").exists() else []

    def find_damage(self) -> None:
        """Check every file again (the write lock held, before a rebuild): damaged ones are
        then moved aside by the rebuild, not deleted with the rest."""
        with self._lock:
            if self._damage is None and self.stale is None and (found := self.verify()):
                self._mark_damaged(found)

    def chunk_ids(self, pinned: Pinned) -> list[int]:
        """The chunk id of every document ``pinned`` holds (a chunk held twice, twice; the
        watermark document left out), from the ``chunk_id`` fast field."""
        searcher = pinned.searcher
        if searcher.num_docs == 0:
            return []

        def read() -> list[int]:
            everything = tantivy.Query.all_query()
            hits = searcher.search(everything, limit=searcher.num_docs, count=False).hits
            addresses = [address for _, address in hits]
            values = searcher.fast_field_values("chunk_id", addresses)
            ids = [
                _chunk_id(searcher, address) if value is None else int(value)
                for address, value in zip(addresses, values, strict=True)
            ]
            return [i for i in ids if i != WATERMARK_ID]

        return self._call("listing the documents", read)

    def uids_of(self, pinned: Pinned, chunk_ids: Iterable[int]) -> dict[int, str]:
        """The uid stored with each of ``chunk_ids`` (those found)."""
        searcher = pinned.searcher

        def read() -> dict[int, str]:
            out: dict[int, str] = {}
            for chunk_id in chunk_ids:
                query = tantivy.Query.term_query(self._schema, "chunk_id", int(chunk_id))
                hits = searcher.search(query, 1).hits
                if hits:
                    uid = searcher.doc(hits[0][1]).get_first("uid")
                    out[int(chunk_id)] = "" if uid is None else str(uid)
            return out

        return self._call("reading stored uids", read)

    def word_counts(
        self, words: Sequence[str], *, principals: Collection[str] | None, pinned: Pinned
    ) -> dict[str, int | None]:
        """How many chunk documents hold each of ``words`` in ``body``, as the index analyses
        it (a stem counts for its inflections), among those ``principals`` may read (None:
        all, from the term dictionary); None for a word the analyzer drops (a stop word)."""
        stems: dict[str, str | None] = {}
        for word in words:
            tokens = self._analyzers.words.analyze(word)
            stems[word] = tokens[0] if len(tokens) == 1 else None
        searcher = pinned.searcher
        acl = [] if principals is None else self._filter_clauses(principals, Filters())
        counted: dict[str, int] = {}

        def count(stem: str) -> int:
            if stem not in counted:
                total = int(searcher.doc_freq("body", stem))
                if total and acl:
                    term = tantivy.Query.term_query(self._schema, "body", stem)
                    query = tantivy.Query.boolean_query([(tantivy.Occur.Must, term), *acl])
                    found = searcher.search(query, limit=1, count=True)
                    total = int(getattr(found, "count", 0) or 0)
                counted[stem] = total
            return counted[stem]

        return self._call(
            "counting words",
            lambda: {w: None if s is None else count(s) for w, s in stems.items()},
        )

    def num_docs(self) -> int:
        """Chunk documents in the index (the watermark document left out)."""
        pinned = self.pin()
        return int(pinned.searcher.num_docs) - (1 if pinned.marked else 0)

    def num_segments(self) -> int:
        return int(self.pin().searcher.num_segments)

    def close(self) -> None:
        """Drop uncommitted changes and release the writer, if this process holds one."""
        self.rollback()
