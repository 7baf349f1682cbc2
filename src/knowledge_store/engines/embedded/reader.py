"""The embedded engine's point-in-time reader: one catalog snapshot, one searcher, one dense generation.

A reader owns a catalog connection for its lifetime and holds one SQLite read
transaction on it (one WAL snapshot, publish ``P``), the Tantivy searcher and
the dense generation of that same publish (the engine guarantees it: see
:meth:`EmbeddedEngine.reader`), and the principals its identity holds,
expanded once when it opened. Every primitive reads that view:

* ``lexical`` / ``vector`` rank chunk ids in the derived index with the ACL as
  a pre-filter, then probe those ids against the catalog's visibility (the
  final check: ids only, no text) — against the selection of visible chunk
  ids the engine holds for this publish, principals and FILTERS (the vector
  pre-filter) when it is there, else with a statement;
* ``chunks`` / ``entities`` hydrate what an answer returns, once;
* sql, aggregates, successors, content, the graph walk and query_graph run
  the shared statements of :mod:`knowledge_store.engines.sql` on the snapshot.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from knowledge_store.engines.base import RankedChunks, Vector
from knowledge_store.engines.sql import statements
from knowledge_store.engines.sql.dialect import SQLITE
from knowledge_store.engines.sql.reader import SqlReader, ms
from knowledge_store.errors import InvalidRequest, ModelMismatch, QueryTimeout, StoreError
from knowledge_store.graphquery.compiler import compile_query
from knowledge_store.graphquery.nodes import Query
from knowledge_store.model import (
    ChunkHit,
    Filters,
    Identity,
    QueryAnswer,
    VectorInfo,
)

if TYPE_CHECKING:
    from knowledge_store.engines.embedded.engine import EmbeddedEngine
    from knowledge_store.engines.embedded.views import View

__all__ = ["EmbeddedReader"]

_PROGRESS_EVERY = 1000  # SQLite VM instructions between two clock checks (query_graph)
_READ_ACTIONS = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
)
#: Candidates fetched beyond k, so that a final check that drops a few still fills k.
_SLACK = 10

#: No filter: what a lexical query carries when the snapshot hides nothing from the reader.
_EVERYTHING = Filters()
#: The visible share of the chunks from which lexical post-filters the plain ranking rather
#: than putting the ACL and FILTERS into the Tantivy query (a MUST or MUST_NOT clause stops
#: its pruning: 2.5× the plain query at 100k and 1M chunks); and the over-fetch margin.
_POST_FILTER_SHARE = 0.5
_POST_FILTER_MARGIN = 1.5


def _failure(action: str, exc: sqlite3.Error) -> StoreError:
    return StoreError(f"{action} failed: {exc}")


def _read_only(action: int, table: str | None, *_: Any) -> int:
    """Let a query_graph statement read, and nothing else.

    The one exception is the check SQLite makes when a table-valued function
    (``json_each``) declares its columns, reported as an UPDATE of sqlite_master;
    that table cannot be written anyway (``writable_schema`` is off).
    """
    if action in _READ_ACTIONS:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_UPDATE and table == "sqlite_master":
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


class EmbeddedReader(SqlReader):
    """See the module docstring. Made by :meth:`EmbeddedEngine.reader`, never directly."""

    dialect = SQLITE
    engine_name = "embedded"
    json_as_text = True

    def __init__(
        self,
        engine: EmbeddedEngine,
        conn: sqlite3.Connection,
        identity: Identity,
        publish: int,
        root: str,
        view: View,
    ) -> None:
        super().__init__(engine, conn, identity, publish, root)
        self._engine: EmbeddedEngine = engine
        self._conn: sqlite3.Connection = conn
        self._lexical = view.lexical
        self._dense = view.dense
        self._view = view

    @property
    def _held(self) -> tuple[str, ...]:
        return self.held

    def _snapshot(self) -> dict[str, Any]:
        return {
            "lexical_watermark": self._lexical.watermark,
            "dense_watermark": None if self._dense is None else self._dense.watermark,
        }

    def _run(self, sql: str, params: Mapping[str, Any] | Sequence[Any]) -> list[Any]:
        self._counted(sql)
        try:  # as _failing, without a context manager's cost on every statement
            return self._conn.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise _failure("reading the catalog", exc) from exc

    @contextmanager
    def _failing(self, action: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise _failure(action, exc) from exc

    def _acl(self) -> dict[str, Any]:
        return SQLITE.held_params(self._held)

    # -- ranking ids -----------------------------------------------------------------------
    def _probed(self, ids: Sequence[int], filters: Filters) -> dict[int, str]:
        """The final check in the catalog: which ids exist in this snapshot, pass filters and
        are visible (with their entity's uid)."""
        if not ids:
            return {}
        found = self._run(*statements.probe_chunks(SQLITE, self._held, ids, filters))
        return {int(r[0]): str(r[1]) for r in found}

    def _owners(self, ids: Sequence[int]) -> dict[int, str]:
        """The uids of those of ``ids`` the engine's in-memory map names (no statement)."""
        return self._engine.owners.owners(ids, self._conn, self._publish)

    def _uids(self, ids: Sequence[int]) -> dict[int, str]:
        """The entity uid of each of ``ids`` that exists in this snapshot."""
        if not ids:
            return {}
        return {int(r[0]): str(r[1]) for r in self._run(*statements.chunk_uids(SQLITE, ids))}

    @staticmethod
    def _passing(ids: Sequence[int], selection: np.ndarray | None) -> Collection[int] | None:
        """Those of ``ids`` in ``selection`` (sorted visible chunk ids); None: every one
        passes (``selection`` None: the snapshot hides nothing)."""
        if selection is None:
            return None
        if not len(selection) or not ids:
            return frozenset()
        wanted = np.asarray(ids, dtype=np.int64)
        at = np.minimum(np.searchsorted(selection, wanted), len(selection) - 1)
        return frozenset(wanted[selection[at] == wanted].tolist())

    def _ranked(
        self,
        found: Sequence[tuple[int, float]],
        passed: Collection[int] | None,
        k: int,
        details: dict[str, Any],
        started: float,
        *,
        hydrate: bool,
        dropped: int,
        uids: Mapping[int, str] | None = None,
        vector: VectorInfo | None = None,
    ) -> RankedChunks:
        """The first ``k`` of ``found`` that passed the final check (``passed``, None: all;
        ``dropped`` of the fetched hits did not), each named by its entity's uid — late, for those
        ``k`` only: from their hits when ``hydrate`` (one statement, which reads the
        text with it: :meth:`chunk_hits`), else from ``uids`` (the catalog's probe named them), else from the
        engine's in-memory map of owners (a statement for any it misses)."""
        kept = list(found[:k]) if passed is None else [h for h in found if h[0] in passed][:k]
        ids = [c for c, _ in kept]
        scores = [s for _, s in kept]
        hits: list[ChunkHit] | None = None
        named: list[str]
        if hydrate:
            ids, hits = self.chunk_hits(ids, scores)
            named = [h.uid for h in hits]
            if len(ids) < len(kept):
                scores = [h.score for h in hits]
        else:
            owners = uids
            if owners is None:
                owners = self._owners(ids)
                if len(owners) < len(ids):  # the map is not read yet, or misses a deleted chunk
                    owners = {**owners, **self._uids([c for c in ids if c not in owners])}
                if vector is not None:
                    details["owners"] = "memory" if self._engine.owners.loaded else "catalog"
            if len(owners) < len(ids):
                scores = [s for c, s in kept if c in owners]
                ids = [c for c in ids if c in owners]
            named = [owners[c] for c in ids]
        details["index_hits"] = len(found)
        details["dropped_by_final_check"] = dropped
        details.setdefault("ms", {})["final_check"] = ms(time.perf_counter() - started)
        return RankedChunks(ids, named, scores, vector, details, hits)

    def lexical(
        self, text: str, k: int, filters: Filters, *, hydrate: bool = False
    ) -> RankedChunks:
        """BM25, the ACL and FILTERS applied one of three ways; then the final check.

        - ``none``: the snapshot hides nothing from this reader — plain BM25, which
          Tantivy prunes (block-max WAND);
        - ``post-filter``: the engine holds the selection of visible chunk ids (this
          snapshot, principals, FILTERS) and it covers at least
          :data:`_POST_FILTER_SHARE` of the chunks — plain BM25 over-fetched by the
          inverse share, then the selection. Exact: the filters' clauses score 0, so
          the first ``k`` passing hits of the plain ranking are the filtered ranking's;
          when the fetch ran out before ``k`` passed (or the ``k``-th ties with the
          last fetched), the ``query`` way runs instead;
        - ``query``: the principals and FILTERS are clauses of the Tantivy query
          (which then scores every match: 2.5× the plain query).

        The final check probes the hits against that selection when the engine holds
        it — no statement — and in the catalog otherwise.
        """
        if self._view.lexical_error is not None:
            raise StoreError(self._view.lexical_error, **self._view.lexical_details)
        started = time.perf_counter()
        views = self._engine.views
        hides = views.hides_any(self, filters)
        known, selection = views.known_visible(self, filters)
        if filters.facets and not known:  # the index has no field for a declared facet
            known, selection = True, views.visible_chunks(self, filters)
        found: list[tuple[int, float]] | None = None
        way = "none" if not hides else "query"
        cut = 0  # hits the post-filter dropped (outside the selection)
        if hides and known and selection is not None:
            share = len(selection) / max(int(self._lexical.searcher.num_docs), 1)
            if share >= _POST_FILTER_SHARE:
                found, cut = self._post_filtered(text, k, selection, share)
                way = "query" if found is None else "post-filter"
        if found is None:
            within = selection if filters.facets and way == "query" else None
            found = self._lexical_search(
                text, k + _SLACK, filters if way == "query" else None, within
            )
        details: dict[str, Any] = {"ms": {"index": ms(time.perf_counter() - started)}}
        details["acl_clause"] = way
        checked = time.perf_counter()
        ids = [c for c, _ in found]
        probed: dict[int, str] | None = None
        passed: Collection[int] | None
        if known:
            passed = self._passing(ids, selection)
        else:
            passed = probed = self._probed(ids, filters)
        details["final_check"] = "visible set" if known else "catalog"
        dropped = cut + (0 if passed is None else sum(1 for c in ids if c not in passed))
        return self._ranked(
            found, passed, k, details, checked, hydrate=hydrate, dropped=dropped, uids=probed
        )

    def word_counts(self, words: Sequence[str], *, everything: bool) -> dict[str, int | None]:
        """How many chunks this reader may read hold each of ``words`` (``LexicalIndex.
        word_counts`` on the pinned searcher); ``everything``: the snapshot hides nothing
        from the reader, so the term dictionary's counts are the reader's."""
        if self._view.lexical_error is not None:
            raise StoreError(self._view.lexical_error, **self._view.lexical_details)
        return self._engine.lexical_index.word_counts(
            words, principals=None if everything else self._held, pinned=self._lexical
        )

    def _lexical_search(
        self,
        text: str,
        limit: int,
        filters: Filters | None,
        within: np.ndarray | None = None,
    ) -> list[tuple[int, float]]:
        """BM25's best ``limit``; with the principals and ``filters`` as clauses, or none;
        ``within``: the chunk ids the catalog selected (a declared facet's filter)."""
        return self._engine.lexical_index.search_ids(
            text,
            limit,
            principals=None if filters is None else self._held,
            filters=_EVERYTHING if filters is None else filters,
            pinned=self._lexical,
            within=None if within is None else within.tolist(),
        )

    def _post_filtered(
        self, text: str, k: int, selection: np.ndarray, share: float
    ) -> tuple[list[tuple[int, float]] | None, int]:
        """The plain ranking's hits in ``selection`` — at least ``k`` of them, all that pass
        above the last score fetched — or None when the fetch cannot tell; and how many
        hits it dropped."""
        limit = int((k + _SLACK) / share * _POST_FILTER_MARGIN) + _SLACK
        found = self._lexical_search(text, limit, None)
        inside = self._passing([c for c, _ in found], selection)
        passing = found if inside is None else [hit for hit in found if hit[0] in inside]
        cut = len(found) - len(passing)
        if len(found) < limit:  # every match was fetched
            return passing, cut
        if len(passing) < k or passing[k - 1][1] <= found[-1][1]:
            return None, 0
        return passing, cut

    def vector(
        self, vector: Vector, k: int, filters: Filters, *, hydrate: bool = False
    ) -> RankedChunks:
        """HNSW (or an exact scan) over the visible chunk ids of this snapshot, the held
        principals and ``filters`` — the pre-filter, computed once per publish — then the
        final check of the hits against that same selection, and their entities' uids
        (read with the records when ``hydrate``)."""
        if self._view.dense_error is not None:
            raise StoreError(self._view.dense_error)
        dense = self._dense
        if dense is None or len(dense) == 0:
            empty = VectorInfo(strategy="exact", scanned=0, exhaustive=True)
            return RankedChunks([], [], [], empty, {"ms": {}}, [] if hydrate else None)
        if vector.shape[-1] != dense.owner.dimension:
            model = self._engine.writer.model()
            raise ModelMismatch(
                f"the query vector has {vector.shape[-1]} dimensions; this store's model"
                f" {model[0] if model else '?'} has {dense.owner.dimension}",
            )
        started = time.perf_counter()
        allowed = self._engine.views.visible_chunks(self, filters)
        t_acl = time.perf_counter()
        ids, scores, info = dense.search(vector, k + _SLACK, allowed=allowed)
        details: dict[str, Any] = {
            "visible_chunks": None if allowed is None else len(allowed),
            "ms": {"acl": ms(t_acl - started), "index": ms(time.perf_counter() - t_acl)},
            "final_check": "visible set",
        }
        checked = time.perf_counter()
        hits: list[int] = ids.tolist()
        found = list(zip(hits, scores.tolist(), strict=True))
        passed = self._passing(hits, allowed)
        dropped = 0 if passed is None else sum(1 for c in hits if c not in passed)
        return self._ranked(
            found, passed, k, details, checked, hydrate=hydrate, dropped=dropped, vector=info
        )

    def any_entity_hidden(self, filters: Filters) -> bool:
        """Whether some entity is unreadable to this reader or fails ``filters``."""
        return bool(self._run(*statements.any_entity_hidden(SQLITE, self._held, filters)))

    def visible_chunk_ids(self, filters: Filters) -> np.ndarray:
        """Sorted ids of the chunks this reader may see that pass ``filters`` (the dense
        pre-filter)."""
        rows = self._run(*statements.visible_chunk_ids(SQLITE, self._held, filters))
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        ids.sort()
        return ids

    def count_chunks(self) -> int:
        return int(self._run("SELECT count(*) FROM chunks", ())[0][0])

    def query_graph(
        self,
        query: Query,
        params: Mapping[str, Any],
        *,
        time_limit_s: float | None = None,
    ) -> QueryAnswer:
        """One compiled statement, read-only (an authorizer), cancelled past the time bound
        (``time_limit_s``, else the engine's)."""
        compiled = compile_query(query, params, self._held, dialect=SQLITE)
        self._counted(compiled.sql)
        if time_limit_s is None:
            time_limit_s = self._engine.graph_time_limit_s
        started = time.perf_counter()
        deadline = started + time_limit_s

        def past_deadline() -> int:
            return 1 if time.perf_counter() > deadline else 0

        conn = self._conn
        conn.set_progress_handler(past_deadline, _PROGRESS_EVERY)
        conn.set_authorizer(_read_only)
        cursor: sqlite3.Cursor | None = None
        try:
            cursor = conn.execute(compiled.sql, compiled.params)
            raw = cursor.fetchmany(compiled.limit + 1)
        except sqlite3.OperationalError as exc:
            if "interrupt" in str(exc).lower():
                raise QueryTimeout(
                    f"the query ran past the {round(time_limit_s * 1000)} ms bound and was"
                    " cancelled; anchor a node with a parameter (e.g. (a {uid: $uid})), lower"
                    " the depth of *1..d, name fewer labels, or add WHERE conditions",
                    limit_ms=round(time_limit_s * 1000),
                    elapsed_ms=round((time.perf_counter() - started) * 1000),
                ) from exc
            raise StoreError(f"query_graph failed in the catalog: {exc}") from exc
        except sqlite3.Error as exc:
            raise StoreError(f"query_graph failed in the catalog: {exc}") from exc
        except (UnicodeEncodeError, OverflowError) as exc:  # a value SQLite cannot bind
            raise InvalidRequest(f"a parameter value cannot be used: {exc}") from exc
        finally:
            if cursor is not None:
                cursor.close()
            conn.set_progress_handler(None, 0)
            conn.set_authorizer(None)
        truncated = len(raw) > compiled.limit
        return QueryAnswer(
            content_root=self._root,
            columns=[c.name for c in compiled.columns],
            rows=[compiled.shape(tuple(r)) for r in raw[: compiled.limit]],
            truncated=truncated,
            warnings=compiled.warnings,
        )
