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
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import tantivy

from knowledge_store.engines.embedded import analysis
from knowledge_store.engines.embedded.analysis import (
    Analyzers,
    QueryTerms,
    bound,
    epoch,
    schema,
)
from knowledge_store.errors import StoreError
from knowledge_store.model import (
    FACET_NAMES,
    FILTER_FIELDS,
    Filters,
    compose_context,
    last_heading,
)

__all__ = ["WATERMARK_ID", "Analyzers", "LexicalDoc", "LexicalIndex", "Pinned", "QueryTerms"]

log = logging.getLogger(__name__)

#: Bumped whenever fields or analyzers change; an index of another version is rebuilt.
SCHEMA_VERSION = 7  # 2: the ACL as principals, not an ACL-set id; 3: the watermark document;
# 4: a facet field; 5: the filter fields named in SCHEMA_ID; 6: the heading field;
# 7: Snowball's English stop words (PostgreSQL's), not Tantivy's shorter list
#: What the sidecar records of the layout: the version and the filter fields (their Tantivy
#: fields come from FILTER_FIELDS), so an index built with another field set — a filter
#: field declared or dropped since — is of another schema, and is rebuilt from the catalog.
SCHEMA_ID = f"{SCHEMA_VERSION}:" + ",".join(f"{f.name}={f.kind}" for f in FILTER_FIELDS)
#: The chunk id of the document that records, inside each commit, the publish it holds.
WATERMARK_ID = -1
SIDECAR = "ks-lexical.json"

#: Up to this many held principals the ACL clause is a union of term queries, above
#: it a term set. At 100k chunks, 50 % visible, p50 of the filtered query: 8 held
#: 0.28 vs 0.55 ms, 40: 0.45 vs 0.59, 136: 0.62 vs 0.69, 520: 1.37 vs 0.92 ms.
_ACL_UNION_MAX = 128

#: Files of a segment (``<uuid>.<component>``) and its deletes (``<uuid>.<opstamp>.del``).
_SEGMENT_FILE = re.compile(r"[0-9a-f]{32}\.(?:[a-z]+|[0-9]+\.del)")

_WRITER_HEAP = 96_000_000
_WRITER_THREADS = 1


@dataclass(frozen=True)
class Pinned:
    """A Tantivy searcher (a point-in-time view) and the publish id it shows."""

    searcher: tantivy.Searcher
    watermark: int
    marked: bool = False  # the commit holds the watermark document


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


def _translate(action: str, call: Callable[[], T]) -> T:
    try:
        return call()
    except (ValueError, OSError, RuntimeError) as exc:
        raise StoreError(f"lexical index: {action} failed: {exc}", action=action) from exc


class LexicalIndex:
    """BM25 over chunk documents in one Tantivy directory, with a watermark sidecar.

    Readers never open a writer: the writer (and Tantivy's directory lock) is
    taken on the first write and released after each ``commit``, so another
    process can write next.
    """

    def __init__(self, path: Path) -> None:
        self._path = Path(path)
        self._lock = threading.RLock()
        self._writer: tantivy.IndexWriter | None = None
        self._schema = schema()
        self._analyzers = Analyzers()
        self._watermark = 0
        self._pinned: Pinned | None = None
        self._index = self._open()
        self._watermark = self._read_watermark()

    # -- opening -------------------------------------------------------------

    def _open(self) -> tantivy.Index:
        self._path.mkdir(parents=True, exist_ok=True)
        if tantivy.Index.exists(str(self._path)) and (
            self._read_sidecar().get("schema") != SCHEMA_ID
            or not tantivy.Index.is_compatible(str(self._path))
        ):
            # Derived data of another layout: start empty (watermark 0); the catalog rebuilds.
            log.warning("lexical index at %s has another schema; recreating it", self._path)
            self._wipe()
        if not (self._path / SIDECAR).exists():
            # Written before the index exists, so an index without one is never ours.
            self._write_sidecar(0)
        try:
            index = tantivy.Index(self._schema, str(self._path), reuse=True)
        except (ValueError, OSError) as exc:
            log.warning("lexical index at %s unreadable (%s); recreating it", self._path, exc)
            self._wipe()
            self._write_sidecar(0)
            index = _translate(
                "creating the index", lambda: tantivy.Index(self._schema, str(self._path))
            )
        index.register_tokenizer("ks_words", self._analyzers.words)
        index.register_tokenizer("ks_ident", self._analyzers.ident)
        index.config_reader("manual")
        return index

    def remove_leftovers(self) -> list[str]:
        """Remove what killed writers left behind; the names removed.

        Call only while holding the store's write lock (no writer is alive): our
        watermark's temp files, Tantivy's atomic-write temp files, and index files
        that no commit refers to — segments of an uncommitted write, and a delete
        file (``<segment>.<opstamp>.del``) written by a commit that never reached
        ``meta.json``, which the next commit of the same operations would collide with.
        """
        with self._lock:
            committed = self._committed_files()
            if self._writer is not None or committed is None:
                return []
            segments, deletes = committed
            removed: list[str] = []
            for entry in self._path.iterdir():
                name = entry.name
                if _SEGMENT_FILE.fullmatch(name):
                    leftover = (
                        name not in deletes
                        if name.endswith(".del")
                        else name.partition(".")[0] not in segments
                    )
                else:
                    leftover = name.startswith((".tmp", Path(SIDECAR).stem + ".tmp"))
                if leftover and entry.is_file():
                    with contextlib.suppress(FileNotFoundError):
                        entry.unlink()
                    removed.append(name)
            if removed:
                log.warning("lexical index: removed leftovers of a killed writer: %s", removed)
            return removed

    def _committed_files(self) -> tuple[set[str], set[str]] | None:
        """The segment ids and delete-file names ``meta.json`` refers to (None: unreadable)."""
        meta = self._path / "meta.json"
        segments: set[str] = set()
        deletes: set[str] = set()
        if not meta.exists():
            return segments, deletes
        try:
            for segment in json.loads(meta.read_text())["segments"]:
                uuid = str(segment["segment_id"]).replace("-", "")
                segments.add(uuid)
                if segment.get("deletes"):
                    deletes.add(f"{uuid}.{int(segment['deletes']['opstamp'])}.del")
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return segments, deletes

    def recreate(self) -> None:
        """Start over empty (watermark 0): the last resort of a rebuild."""
        with self._lock:
            self.rollback()
            self._wipe()
            self._write_sidecar(0)
            self._watermark = 0
            self._index = self._open()

    def _wipe(self) -> None:
        for entry in self._path.iterdir():
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()

    def _read_sidecar(self) -> dict[str, Any]:
        try:
            data = json.loads((self._path / SIDECAR).read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _read_watermark(self) -> int:
        value = self._read_sidecar().get("watermark", 0)
        return value if isinstance(value, int) else 0

    def _write_sidecar(self, watermark: int) -> None:
        target = self._path / SIDECAR
        tmp = target.with_suffix(f".tmp{os.getpid()}")
        payload = json.dumps({"watermark": watermark, "schema": SCHEMA_ID})

        def write() -> None:
            with tmp.open("w") as fh:
                fh.write(payload)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, target)
            fd = os.open(self._path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

        _translate("recording the watermark", write)

    # -- writing -------------------------------------------------------------

    @contextlib.contextmanager
    def _writing(self, action: str) -> Iterator[tantivy.IndexWriter]:
        """The writer, opened on first use; on any error every staged change is dropped."""
        with self._lock:
            if self._writer is None:
                self._writer = _translate(
                    "opening the writer (is another process writing?)",
                    lambda: self._index.writer(heap_size=_WRITER_HEAP, num_threads=_WRITER_THREADS),
                )
            try:
                yield self._writer
            except BaseException as exc:
                self.rollback()
                if isinstance(exc, ValueError | OSError | RuntimeError):
                    raise StoreError(
                        f"lexical index: {action} failed: {exc}; changes since the last"
                        " commit were dropped",
                        action=action,
                    ) from exc
                raise

    def rollback(self) -> None:
        """Drop every change staged since the last commit and release the writer."""
        with self._lock:
            writer, self._writer = self._writer, None
            if writer is not None:
                with contextlib.suppress(ValueError, OSError, RuntimeError):
                    writer.rollback()
                    writer.wait_merging_threads()

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
        with self._writing("recording the watermark") as writer:
            writer.delete_documents_by_term("chunk_id", WATERMARK_ID)
            mark = tantivy.Document()
            mark.add_integer("chunk_id", WATERMARK_ID)
            mark.add_text("uid", str(int(watermark)))
            writer.add_document(mark)
        with self._lock:
            committing, self._writer = self._writer, None
            if committing is not None:
                _translate("committing", committing.commit)
                # Finish merges and release Tantivy's directory lock for the next writer.
                _translate("merging segments", committing.wait_merging_threads)
            self._write_sidecar(watermark)
            self._watermark = watermark
            _translate("reloading", self._index.reload)
            self._pinned = None

    def clear(self) -> None:
        """Drop every document now (committed, watermark 0): the start of a rebuild.

        The watermark goes to 0 *before* the documents go: a watermark may lag the
        index (replaying is idempotent) but never lead it — killed between the two,
        an emptied index still claiming the latest publish was never caught up.
        """
        self._write_sidecar(0)
        self._watermark = 0
        with self._writing("clearing") as writer:
            writer.delete_all_documents()
        self.commit(0)

    # -- reading -------------------------------------------------------------

    @property
    def watermark(self) -> int:
        """The publish id of the last commit (0 for a new index)."""
        return self._watermark

    def reload(self) -> None:
        """Pick up commits (and the watermark) made by another process."""
        with self._lock:
            _translate("reloading", self._index.reload)
            self._pinned = None
            self._watermark = self.pin().watermark

    def pin(self) -> Pinned:
        """A point-in-time searcher and the publish it shows (read from the commit itself)."""
        with self._lock:
            if self._pinned is None:
                searcher = _translate("opening a searcher", self._index.searcher)
                self._pinned = self._marked(searcher)
            return self._pinned

    def _marked(self, searcher: tantivy.Searcher) -> Pinned:
        query = tantivy.Query.term_query(self._schema, "chunk_id", WATERMARK_ID)
        hits = _translate("reading the watermark", lambda: searcher.search(query, 1).hits)
        if not hits:
            return Pinned(searcher, 0)
        value = searcher.doc(hits[0][1]).get_first("uid")
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

    def search(
        self,
        text: str,
        k: int,
        *,
        principals: Collection[str] | None,
        filters: Filters,
        pinned: Pinned | None = None,
        owners: Callable[[list[int]], Mapping[int, str]] | None = None,
    ) -> list[tuple[int, str, float]]:
        """``(chunk_id, uid, bm25 score)`` of the best ``k`` chunks, best first.

        ``principals`` are those the caller holds (None: no ACL restriction;
        empty: nothing). Filters restrict inside the query. ``owners`` names the
        uids of chunk ids it knows (the engine's in-memory map): the hits' ids
        come from the ``chunk_id`` fast field, and only the others' stored
        documents are read.
        """
        if k <= 0 or (principals is not None and len(principals) == 0):
            return []
        text_query = self._text_query(text)
        if text_query is None:
            return []
        clauses = [(tantivy.Occur.Must, text_query), *self._filter_clauses(principals, filters)]
        query = tantivy.Query.boolean_query(clauses) if len(clauses) > 1 else text_query

        def run() -> list[tuple[int, str, float]]:
            searcher = (pinned or self.pin()).searcher
            limit = min(k, searcher.num_docs)  # Tantivy sizes its top-k heap by the limit
            if limit <= 0:
                return []
            hits = searcher.search(query, limit=limit, count=False).hits
            named: Mapping[int, str] = {}
            ids: list[Any] = [None] * len(hits)
            if owners is not None and hits:
                ids = searcher.fast_field_values("chunk_id", [a for _, a in hits])
                named = owners([int(i) for i in ids if i is not None])
            out = []
            for (score, address), chunk_id in zip(hits, ids, strict=True):
                uid = None if chunk_id is None else named.get(int(chunk_id))
                if uid is None:
                    doc = searcher.doc(address)
                    chunk_id, uid = doc.get_first("chunk_id"), doc.get_first("uid")
                if chunk_id is None or uid is None:
                    raise ValueError("a document without chunk_id or uid")
                out.append((int(chunk_id), str(uid), float(score)))
            out.sort(key=lambda hit: (-hit[2], hit[0]))
            return out

        return _translate("searching", run)

    def num_docs(self) -> int:
        """Chunk documents in the index (the watermark document left out)."""
        pinned = self.pin()
        return int(pinned.searcher.num_docs) - (1 if pinned.marked else 0)

    def num_segments(self) -> int:
        return int(self.pin().searcher.num_segments)

    def close(self) -> None:
        """Drop uncommitted changes and release the writer, if this process holds one."""
        self.rollback()
