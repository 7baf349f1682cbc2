"""The embedded engine: SQLite catalog + Tantivy (lexical) + HNSW (dense) in one directory.

The catalog is the source of truth. Tantivy and HNSW are derived: every
publish logs what it did to chunks (``publish_ops``) and each derived index
records the publish it has applied (its watermark), so a crash between the
catalog commit and an index commit is caught up on the next open or query.
One writer at a time (a file lock); readers never take it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from rich.progress import Progress

from knowledge_store.engines.base import (
    AclExplanation,
    PreparedEntity,
    PrincipalInfo,
    PublishResult,
    StoreStats,
    Vector,
)
from knowledge_store.engines.embedded import fields
from knowledge_store.engines.embedded import graph as graphs
from knowledge_store.engines.embedded.catalog import Catalog, ChunkRow
from knowledge_store.engines.embedded.dense import DenseIndex, file_watermark
from knowledge_store.engines.embedded.dense import remove_leftovers as remove_dense_leftovers
from knowledge_store.engines.embedded.lexical import LexicalDoc, LexicalIndex
from knowledge_store.engines.embedded.writelock import WriteLock
from knowledge_store.engines.shared import (
    ChunkIds,
    check_prepared,
    check_vectors,
    cycle_error,
    explain_access,
    principal_info,
)
from knowledge_store.engines.sources import SourceSync, SourceView
from knowledge_store.errors import ModelMismatch, NotFound, StoreError
from knowledge_store.model import (
    AggregateAnswer,
    ChunkHit,
    ChunkHits,
    Filters,
    GraphHits,
    Identity,
    QueryAnswer,
    SqlHits,
    VectorInfo,
    check_k,
    check_membership,
    check_principal,
)
from knowledge_store.retrieval.aggregates import check_aggregate
from knowledge_store.retrieval.filters import parse_order

__all__ = ["EmbeddedEngine"]

log = logging.getLogger(__name__)

_DENSE_FILE = "dense.hnsw"
_REBUILD_BATCH = 2000


def _check_model(recorded: tuple[str, int] | None, model: str | None) -> None:
    """A publish of vectors made by ``model`` into a store that records another is refused."""
    if model is not None and recorded is not None and recorded[0] != model:
        raise ModelMismatch(
            f"this store's vectors are now {recorded[0]}, not {model} (it was re-embedded"
            " meanwhile); nothing was published — ingest again",
            store_model=recorded[0],
            model=model,
        )


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


class EmbeddedEngine:
    """The default engine. ``EmbeddedEngine(path)`` opens or creates the store directory."""

    name = "embedded"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the store directory {self.path}: {exc}") from exc
        self.catalog = Catalog(self.path / "catalog.sqlite")
        self._write_lock = WriteLock(self.path)
        self.lexical_index = self._open_lexical()
        self._dense: DenseIndex | None = None
        self._allowed_cache: OrderedDict[tuple[Any, ...], np.ndarray | None] = OrderedDict()
        self._refresh_lock = threading.Lock()
        #: Why the derived indexes could not catch up last time (None: they did).
        self.derived_error: str | None = None
        self.chunk_ids = self.catalog.chunk_ids()
        with self._writer(wait=False) as acquired:
            if acquired:
                self._recover()

    # -- opening the derived indexes --------------------------------------------------
    def _open_lexical(self) -> LexicalIndex:
        where = self.path / "lexical"
        try:
            return LexicalIndex(where)
        except StoreError:
            # A damaged derived index is rebuilt from the catalog, never trusted.
            import shutil

            shutil.rmtree(where, ignore_errors=True)
            return LexicalIndex(where)

    @property
    def dense(self) -> DenseIndex | None:
        """The HNSW index of the store's model (reopened when a re-embedding changed the
        dimension: the file of the old one loads empty, and catching up rebuilds it)."""
        model = self.model()
        if model is None:
            return None
        if self._dense is None or self._dense.dimension != model[1]:
            self._dense = DenseIndex(self.path / _DENSE_FILE, model[1])
        return self._dense

    # -- the single writer ----------------------------------------------------------------
    @contextmanager
    def _writer(self, *, wait: bool = True) -> Iterator[bool]:
        """Hold the store's write lock (see ``writelock``); readers pass ``wait=False``."""
        with self._write_lock.hold(wait=wait) as held:
            yield held

    # -- derived index catch-up ---------------------------------------------------------------
    def _recover(self) -> None:
        """At open, holding the write lock: repair what a killed writer or an older
        version left, then catch the derived indexes up (a failure is logged, never
        raised: the catalog-backed primitives answer regardless)."""
        remove_dense_leftovers(self.path / _DENSE_FILE)
        self.lexical_index.remove_leftovers()
        self.catalog.repair_timestamps()
        self._catch_up_or_log()

    def _catch_up(self, *, persist: bool = True) -> None:
        """Apply every publish the derived indexes have not seen (idempotent).

        Behind means a writer died between its catalog commit and its index
        commits: its leftovers go first (a delete file its Tantivy commit wrote
        without recording it would collide with this commit's).
        """
        latest, _ = self.catalog.latest_publish()
        if self.lexical_index.watermark < latest:
            self.lexical_index.remove_leftovers()
            self._apply_lexical(self.lexical_index.watermark, latest)
        dense = self.dense
        if dense is not None and dense.watermark < latest:
            remove_dense_leftovers(self.path / _DENSE_FILE)
            self._apply_dense(dense, dense.watermark, latest, persist=persist)
        self.derived_error = None

    def _catch_up_or_log(self) -> None:
        """``_catch_up`` for writers: a derived index that can't catch up must not stop a
        publish (deleting the record it chokes on is one) nor an open; readers of that
        index get the error, and ``ks rebuild`` rebuilds it."""
        try:
            self._catch_up()
        except StoreError as exc:
            self.derived_error = exc.message
            log.warning("derived indexes behind the catalog: %s", exc.message)

    def _apply_lexical(self, since: int, latest: int) -> None:
        ops = self.catalog.ops_since(since)
        touched = sorted({op.chunk for op in ops})
        readd = sorted({op.chunk for op in ops if op.op != "del"})
        if touched:
            self.lexical_index.delete_chunks(touched)
        with self.catalog.read() as conn:
            docs = self._lexical_docs(conn, readd)
        self.lexical_index.add(docs)
        self.lexical_index.commit(latest)

    def _lexical_docs(self, conn: Any, chunk_ids: Sequence[int]) -> list[LexicalDoc]:
        """The lexical index's documents for ``chunk_ids``, each with its ACL's principals."""
        rows = self.catalog.chunk_rows(conn, chunk_ids)
        acls = self.catalog.acl_sets_principals(conn, {r.acl_set for r in rows})
        return [_lexical_doc(r, acls.get(r.acl_set, ())) for r in rows]

    def _apply_dense(self, dense: DenseIndex, since: int, latest: int, *, persist: bool) -> None:
        ops = self.catalog.ops_since(since)
        removed = sorted({op.chunk for op in ops if op.op == "del"})
        added = sorted({op.chunk for op in ops if op.op == "add"})
        if removed:
            dense.remove(removed)
        with self.catalog.read() as conn:
            ids, vectors = self.catalog.chunk_vectors(conn, added, dense.dimension)
        if len(ids):
            dense.add(ids, vectors)
        if persist:
            dense.save(latest)
        else:
            dense.mark(latest)

    def _refresh(self) -> None:
        """Before a read: notice publishes made by another process (or a crashed one)."""
        latest, _ = self.catalog.latest_publish()
        if self.lexical_index.watermark >= latest and (
            self.dense is None or self.dense.watermark >= latest
        ):
            return
        with self._refresh_lock:
            try:
                self.lexical_index.reload()
                dense = self.dense
                if dense is not None and dense.watermark < latest:
                    dense.reload_if_newer()
                if self.lexical_index.watermark < latest:
                    with self._writer(wait=False) as acquired:
                        if acquired:  # nobody is writing: a writer died before its commit
                            self.lexical_index.remove_leftovers()
                            self._apply_lexical(self.lexical_index.watermark, latest)
                if dense is not None and dense.watermark < latest:
                    # In memory only: the writer process saves the file.
                    self._apply_dense(dense, dense.watermark, latest, persist=False)
                if self.lexical_index.watermark >= latest:
                    self.derived_error = None
            except StoreError as exc:
                self.derived_error = exc.message
                raise StoreError(
                    f"{exc.message}. The derived indexes are behind the catalog: sql, aggregate,"
                    " graph, query_graph and content still answer; `ks rebuild` rebuilds them",
                    **exc.details,
                ) from exc

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
        check_vectors("the re-embedding", vectors, len(ids), dimension)
        with self._writer():
            self._catch_up_or_log()
            meta = {"model": model_id, "dimension": str(dimension), "embedder": spec}
            _, root = self.catalog.replace_embeddings(ids, vectors, meta, base_root=base_root)
            self._catch_up_or_log()
            return root

    def content_hashes(self, uids: Sequence[str]) -> dict[str, str]:
        return self.catalog.content_hashes(uids)

    def cached_embeddings(self, keys: Sequence[str]) -> dict[str, Vector]:
        return self.catalog.cached_embeddings(keys)

    def cache_embeddings(self, items: Mapping[str, Vector]) -> None:
        if items:
            self.catalog.cache_embeddings(items)

    def publish(
        self,
        upserts: Sequence[PreparedEntity],
        deletes: Sequence[str],
        *,
        kind: str,
        model: str | None = None,
        source: SourceSync | None = None,
    ) -> PublishResult:
        recorded = self.model()
        check_prepared(upserts, None if recorded is None else recorded[1])
        with self._writer():
            _check_model(self.model(), model)
            self._catch_up_or_log()
            result = self.catalog.apply_publish(upserts, deletes, kind=kind, source=source)
            self._catch_up_or_log()
            return result

    def sources(self) -> list[SourceView]:
        return self.catalog.source_views()

    def delete_source(self, name: str) -> PublishResult:
        return self.publish([], [], kind="delete", source=SourceSync.removal(name))

    def crawl_pages(self, source: str) -> dict[str, str]:
        return self.catalog.crawl_pages(source)

    def save_crawl_pages(self, source: str, pages: Mapping[str, str | None]) -> None:
        with self._writer():
            self.catalog.save_crawl_pages(source, pages)

    def delete(self, uids: Sequence[str]) -> str:
        missing = sorted(set(uids) - set(self.catalog.content_hashes(list(uids))))
        if missing:
            raise NotFound(
                f"no entity with uid {', '.join(repr(u) for u in missing[:5])}; nothing was deleted",
                uids=missing,
            )
        return self.publish([], list(uids), kind="delete").root

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
        indexes = {
            "publish": latest,
            "lexical": self.lexical_index.watermark,
            "dense": dense.watermark if dense is not None else on_disk if on_disk >= 0 else None,
            "error": self.derived_error,
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
            extra={"engine": self.name, "path": str(self.path), "indexes": indexes},
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
            try:
                self.lexical_index.clear()
            except StoreError as exc:
                log.warning("rebuild: the lexical index can't be cleared (%s); recreating it", exc)
                self.lexical_index.recreate()
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
                    if dense is not None and len(vids):
                        dense.add(vids, vectors)
                    bar.advance(task, len(part))
            self.lexical_index.commit(latest)
            if dense is not None:
                dense.save(latest)
            self._allowed_cache.clear()
            self.derived_error = None

    def close(self) -> None:
        self.lexical_index.close()
        if self._dense is not None:
            self._dense.close()
        self.catalog.close()

    # -- primitives ---------------------------------------------------------------------------------
    def lexical(self, identity: Identity, text: str, k: int, filters: Filters) -> ChunkHits:
        check_k(k)
        self._refresh()
        started = time.perf_counter()
        with self.catalog.read() as conn:
            _, root = self.catalog.latest_publish(conn)
            held = self.catalog.held_principals(conn, identity.principal)
            t_acl = time.perf_counter()
            found = self.lexical_index.search(text, k + 10, principals=held, filters=filters)
            t_index = time.perf_counter()
            rows = self.catalog.checked_chunks(
                conn, [c for c, _, _ in found], identity.principal, filters
            )
        hits = _hits(((c, s) for c, _, s in found), rows, k, self.chunk_ids)
        explain = {
            "identity": identity.principal,
            "held_principals": len(held),
            "index_hits": len(found),
            "dropped_by_final_check": len(found) - len(rows),
            "ms": {
                "acl": _ms(t_acl - started),
                "index": _ms(t_index - t_acl),
                "final_check": _ms(time.perf_counter() - t_index),
            },
        }
        return ChunkHits(content_root=root, hits=hits, explain=explain)

    def vector(self, identity: Identity, vector: Vector, k: int, filters: Filters) -> ChunkHits:
        check_k(k)
        self._refresh()
        started = time.perf_counter()
        dense = self.dense
        with self.catalog.read() as conn:
            publish, root = self.catalog.latest_publish(conn)
            held = self.catalog.held_principals(conn, identity.principal)
            if dense is None or len(dense) == 0:
                return ChunkHits(root, [], VectorInfo("exact", 0, True), {"ms": {}})
            expected = self.model()
            if expected is not None and vector.shape[-1] != expected[1]:
                raise ModelMismatch(
                    f"the query vector has {vector.shape[-1]} dimensions; this store's model"
                    f" {expected[0]} has {expected[1]}",
                )
            allowed = self._allowed(conn, publish, identity.principal, held, filters)
            t_acl = time.perf_counter()
            ids, scores, info = dense.search(vector, k + 10, allowed=allowed)
            t_index = time.perf_counter()
            rows = self.catalog.checked_chunks(
                conn, [int(i) for i in ids], identity.principal, filters
            )
        hits = _hits(
            zip((int(i) for i in ids), (float(s) for s in scores), strict=True),
            rows,
            k,
            self.chunk_ids,
        )
        explain = {
            "identity": identity.principal,
            "held_principals": len(held),
            "visible_chunks": None if allowed is None else len(allowed),
            "index_hits": len(ids),
            "dropped_by_final_check": len(ids) - len(rows),
            "ms": {
                "acl": _ms(t_acl - started),
                "index": _ms(t_index - t_acl),
                "final_check": _ms(time.perf_counter() - t_index),
            },
        }
        return ChunkHits(content_root=root, hits=hits, vector=info, explain=explain)

    def _allowed(
        self, conn: Any, publish: int, principal: str, held: Sequence[str], filters: Filters
    ) -> np.ndarray | None:
        """Visible chunk ids for the dense pre-filter (None: everything is visible).

        Cached per (publish, held principals, filters). Entity ACLs change only by
        a publish and the held principals are expanded live on every query, so a
        membership change or a revocation gets a new key at once.
        """
        key = (publish, tuple(held), filters)
        if key in self._allowed_cache:
            self._allowed_cache.move_to_end(key)
            return self._allowed_cache[key]
        ids = self.catalog.visible_chunk_ids(conn, principal, filters)
        allowed = None if len(ids) == self.catalog.count_chunks(conn) else ids
        self._allowed_cache[key] = allowed
        while len(self._allowed_cache) > 64:
            self._allowed_cache.popitem(last=False)
        return allowed

    def sql(
        self, identity: Identity, filters: Filters, *, order: str | None = None, k: int = 10
    ) -> SqlHits:
        """Filter on the closed field list, ACL inside the statement (see ``fields``)."""
        return fields.sql_hits(self.catalog, identity, filters, parse_order(order), k)

    def aggregate(
        self, identity: Identity, metric: str, dimension: str | None, filters: Filters
    ) -> AggregateAnswer:
        """A catalog metric × dimension over the visible, filtered slice (see ``aggregates``)."""
        spec = check_aggregate(metric, dimension)
        return fields.aggregate(self.catalog, identity, spec, filters)

    def successors(
        self, identity: Identity, uids: Sequence[str], filters: Filters
    ) -> dict[str, str]:
        """Visible ``supersededBy`` successors of ``uids`` that pass ``filters``."""
        return fields.visible_successors(self.catalog, identity, uids, filters)

    def graph(
        self,
        identity: Identity,
        starts: Sequence[str],
        *,
        depth: int = 1,
        labels: Sequence[str] = (),
        direction: str = "both",
        k: int = 10,
    ) -> GraphHits:
        """Bounded breadth-first traversal through visible entities (see ``graph``)."""
        return graphs.graph_hits(
            self.catalog, identity, starts, depth=depth, labels=labels, direction=direction, k=k
        )

    def query_graph(
        self,
        identity: Identity,
        text: str,
        params: Mapping[str, Any] | None = None,
        *,
        lenient: bool = False,
    ) -> QueryAnswer:
        """query_graph: one bounded, read-only, parameterised statement (see ``graphquery``)."""
        return graphs.run_query_graph(self.catalog, identity, text, params, lenient=lenient)

    def content(self, identity: Identity, uid: str) -> dict[str, Any] | None:
        """One entity with its chunks and its edges to visible entities, or None
        (alike for a missing uid and one the caller may not read; see ``fields``)."""
        return fields.content(self.catalog, identity, uid, self.chunk_ids)

    # -- ACL administration -------------------------------------------------------------------------
    def grant(self, uid: str, principal: str) -> str:
        return self._change_acl(uid, "grant", principal)

    def revoke(self, uid: str, principal: str) -> str:
        return self._change_acl(uid, "revoke", principal)

    def _change_acl(self, uid: str, change: str, principal: str) -> str:
        check_principal(principal)
        with self._writer():
            entity = self.catalog.with_acl(uid, change, principal)
            if entity is None:
                raise NotFound(f"no entity with uid {uid!r}", uid=uid)
            if self.catalog.content_hashes([uid]).get(uid) == entity.content_hash:
                return self.content_root()
            self._catch_up_or_log()
            root = self.catalog.apply_publish([], [], kind=change, acl_only=[entity]).root
            self._catch_up_or_log()
            return root

    def acl_show(self, uid: str) -> tuple[str, ...]:
        with self.catalog.read() as conn:
            entity = self.catalog.load_entity(conn, uid)
        if entity is None:
            raise NotFound(f"no entity with uid {uid!r}", uid=uid)
        return entity.acl

    def acl_explain(self, principal: str, uid: str) -> AclExplanation:
        check_principal(principal)
        with self.catalog.read() as conn:
            entity = self.catalog.load_entity(conn, uid)
            if entity is None:
                raise NotFound(f"no entity with uid {uid!r}", uid=uid)
            held = self.catalog.held_principals(conn, principal)
            return explain_access(
                principal,
                uid,
                entity.acl,
                held,
                lambda entry: self.catalog.path_between(conn, principal, entry),
            )

    def add_member(self, group: str, member: str) -> None:
        check_membership(group, member)
        with self._writer(), self.catalog.write() as conn:
            chain = self.catalog.path_between(conn, group, member)
            if chain is not None:
                raise cycle_error(group, member, chain, bulk=False)
            conn.execute(
                "INSERT OR IGNORE INTO memberships(grp, member) VALUES (?, ?)", (group, member)
            )

    def remove_member(self, group: str, member: str) -> None:
        check_membership(group, member)
        with self._writer(), self.catalog.write() as conn:
            cur = conn.execute(
                "DELETE FROM memberships WHERE grp = ? AND member = ?", (group, member)
            )
            if cur.rowcount == 0:
                raise NotFound(f"{member} is not a direct member of {group}", group=group)

    def principal_show(self, principal: str) -> PrincipalInfo:
        check_principal(principal)
        with self.catalog.read() as conn:
            direct = self.catalog.memberships_of(conn, principal)
            held = self.catalog.held_principals(conn, principal)
            members = self.catalog.members_of(conn, principal)
        return principal_info(principal, direct, held, members)

    def load_memberships(self, pairs: Sequence[tuple[str, str]]) -> dict[str, int]:
        for group, member in pairs:
            check_membership(group, member)
        groups = sorted({g for g, _ in pairs})
        with self._writer(), self.catalog.write() as conn:
            conn.executemany("DELETE FROM memberships WHERE grp = ?", ((g,) for g in groups))
            conn.executemany("INSERT OR IGNORE INTO memberships(grp, member) VALUES (?, ?)", pairs)
            for group, member in pairs:
                if member.startswith("group:"):
                    chain = self.catalog.path_between(conn, group, member)
                    if chain:
                        raise cycle_error(group, member, chain, bulk=True)
        return {"groups": len(groups), "memberships": len(set(pairs))}


def _lexical_doc(row: ChunkRow, acl: tuple[str, ...]) -> LexicalDoc:
    return LexicalDoc(
        chunk_id=row.chunk_id,
        uid=row.uid,
        acl=acl,
        type=row.type,
        source=row.source,
        status=row.status,
        created_at=row.created_at,
        updated_at=row.updated_at,
        title=row.title,
        heading=row.heading,
        text=row.text,
    )


def _hits(
    ranked: Iterator[tuple[int, float]] | Any,
    rows: Mapping[int, ChunkRow],
    k: int,
    chunk_ids: ChunkIds,
) -> list[ChunkHit]:
    hits: list[ChunkHit] = []
    for chunk_id, score in ranked:
        row = rows.get(chunk_id)
        if row is None:
            continue  # the final check dropped it: a lagging index, a revoked ACL
        hits.append(
            ChunkHit(
                uid=row.uid,
                chunk_id=chunk_ids(row.uid, row.ordinal),
                title=row.title,
                type=row.type,
                score=score,
                rank=len(hits) + 1,
                text=row.text,
                heading=row.heading,
                start=row.start,
                end=row.end,
                href=row.href,
            )
        )
        if len(hits) == k:
            break
    return hits
