"""The store's writer, written once for every engine: :class:`CatalogWriter`.

The ingest pipeline and the store write through it — the model, the embedding cache,
publishes and deletions, sources and crawl state, the figures. What it needs of an engine
is the small :class:`~knowledge_store.engines.base.Writer` protocol: the catalog's dialect
and transactions, its :class:`~.write.ChunkStore`, and the few things only the engine can
do (a publish with its derived indexes, a re-embedding, stats, rebuild, check).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from knowledge_store.engines.shared import check_vectors, deletion
from knowledge_store.engines.sql.acl import derived_from
from knowledge_store.engines.sql.batch import BatchScope
from knowledge_store.engines.sql.sources import (
    Executes,
    SourceSync,
    read_crawl_pages,
    read_sources,
    read_uid_prefix,
    write_crawl_pages,
)
from knowledge_store.engines.sql.write import (
    Batch,
    Reembedding,
    latest_publish,
    stored_hashes,
    write_meta,
)
from knowledge_store.errors import ModelMismatch
from knowledge_store.model import CheckReport, SourceSummary, StoreStats, compose_context

if TYPE_CHECKING:
    from knowledge_store.engines.base import PreparedEntity, Published, Vector, Writer

__all__ = ["CatalogWriter"]

#: The ``meta`` keys of the store's model.
_MODEL_KEYS = ("model", "dimension", "embedder")
#: Embedding cache rows a statement writes (two parameters each: within SQLite's 32,766).
_CACHED_ROWS = 1000


class CatalogWriter:
    """Publishes, the model, the embedding cache, sources, figures and rebuilds of a store,
    over its engine's :class:`~knowledge_store.engines.base.Writer`."""

    def __init__(self, engine: Writer) -> None:
        self._engine = engine
        self._d = engine.dialect

    # -- the model ---------------------------------------------------------------------------------
    def _meta(self, keys: Sequence[str]) -> dict[str, str]:
        sql = f"SELECT key, value FROM meta WHERE {self._d.in_array('key', 'keys')}"
        with self._engine.connection() as conn:
            rows = conn.execute(sql, {"keys": self._d.bind_array(list(keys))}).fetchall()
        return {str(k): str(v) for k, v in rows}

    def model(self) -> tuple[str, int] | None:
        """``(model id, dimension)`` of the store's vectors; None before its first vectors.
        Read every time: another process may re-embed the store."""
        meta = self._meta(_MODEL_KEYS[:2])
        if "model" not in meta or "dimension" not in meta:
            return None
        return meta["model"], int(meta["dimension"])

    def model_spec(self) -> str | None:
        """The spec of the embedder the store's vectors were made with."""
        return self._meta(_MODEL_KEYS[2:]).get("embedder")

    def set_model(self, model_id: str, dimension: int, spec: str) -> None:
        """Record the store's model, once; another model is refused (ModelMismatch)."""
        current = self.model()
        if current is None:
            with self._engine.writing() as conn:
                if self._recorded(conn) is None:
                    meta = dict(zip(_MODEL_KEYS, (model_id, str(dimension), spec), strict=True))
                    write_meta(conn, self._d, meta)
                    self._engine.chunk_store.set_dimension(conn, dimension)
                    return
            current = self.model()
        if current is not None and current != (model_id, dimension):
            raise ModelMismatch(
                f"this store was built with {current[0]} ({current[1]} dimensions);"
                f" it cannot mix in {model_id} ({dimension} dimensions). Use the store's"
                " model, or ingest into a new store",
                store_model=current[0],
                store_dimension=current[1],
                model=model_id,
                dimension=dimension,
            )

    def _recorded(self, conn: Executes) -> str | None:
        sql = f"SELECT value FROM meta WHERE key = {self._d.param('key')}"
        row = conn.execute(sql, {"key": "model"}).fetchone()
        return None if row is None else str(row[0])

    # -- the embedding cache -------------------------------------------------------------------------
    def cached_embeddings(self, keys: Sequence[str]) -> dict[str, Vector]:
        sql = f"SELECT key, vector FROM embedding_cache WHERE {self._d.in_array('key', 'keys')}"
        with self._engine.connection() as conn:
            rows = conn.execute(sql, {"keys": self._d.bind_array(list(keys))}).fetchall()
        return {str(k): np.frombuffer(bytes(v), dtype=np.float32) for k, v in rows}

    def cache_embeddings(self, items: Mapping[str, Vector]) -> None:
        """Cache ``items`` (a key cached already keeps its vector): a statement per
        :data:`_CACHED_ROWS` rows, each its own transaction — no store lock is taken."""
        p = self._d.param
        pairs = list(items.items())
        with self._engine.connection() as conn:
            for start in range(0, len(pairs), _CACHED_ROWS):
                part = pairs[start : start + _CACHED_ROWS]
                values = ", ".join(f"({p(f'k{i}')}, {p(f'v{i}')})" for i in range(len(part)))
                params: dict[str, object] = {}
                for i, (key, vector) in enumerate(part):
                    params[f"k{i}"] = key
                    params[f"v{i}"] = np.asarray(vector, dtype=np.float32).tobytes()
                conn.execute(
                    f"INSERT INTO embedding_cache (key, vector) VALUES {values}"
                    " ON CONFLICT (key) DO NOTHING",
                    params,
                )

    # -- what the store holds --------------------------------------------------------------------------
    def content_root(self) -> str:
        with self._engine.connection() as conn:
            return latest_publish(conn)[1]

    def content_hashes(self, uids: Sequence[str]) -> dict[str, str]:
        """uid → content hash of the stored ones of ``uids``."""
        with self._engine.connection() as conn:
            return stored_hashes(conn, self._d, uids)

    def is_empty(self) -> bool:
        with self._engine.connection() as conn:
            return conn.execute("SELECT 1 FROM chunks LIMIT 1").fetchone() is None

    def chunk_contexts(self, after: int, limit: int) -> list[tuple[int, str]]:
        """``(chunk id, embedded text)`` of up to ``limit`` chunks with ids above ``after``."""
        p = self._d.param
        sql = (
            "SELECT c.id, e.title, c.heading, c.text FROM chunks AS c"
            f" JOIN entities AS e ON e.id = c.entity WHERE c.id > {p('after')}"
            f" ORDER BY c.id LIMIT {p('limit')}"
        )
        with self._engine.reading() as conn:
            rows = conn.execute(sql, {"after": after, "limit": limit}).fetchall()
        return [
            (int(i), compose_context(title, json.loads(h) if isinstance(h, str) else h, text))
            for i, title, h, text in rows
        ]

    # -- publishes -------------------------------------------------------------------------------------
    def publish(
        self,
        upserts: Sequence[PreparedEntity],
        deletes: Sequence[str],
        *,
        kind: str,
        model: str | None = None,
        source: SourceSync | None = None,
        scope: BatchScope | None = None,
    ) -> Published:
        """One publish (see :class:`~.write.Batch`)."""
        return self._engine.publish(Batch(upserts, deletes, kind, model, source, scope))

    def delete(self, uids: Sequence[str]) -> Published:
        """Delete ``uids`` and what was split off them (``shared.deletion``) as one publish;
        a uid the store does not hold fails the whole delete (NotFound)."""
        with self._engine.reading() as conn:
            stored = stored_hashes(conn, self._d, list(uids))
            doomed = deletion(uids, stored, lambda uid: derived_from(conn, self._d, uid))
        return self._engine.publish(Batch(deletes=doomed, kind="delete"))

    def delete_source(self, name: str) -> Published:
        """Every entity of source ``name``, its row and its crawl state, gone in one publish."""
        return self._engine.publish(Batch(kind="delete", source=SourceSync.removal(name)))

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
        """Every chunk's vector and the recorded model, as one publish (kind ``reembed``).

        ``ids`` must be every chunk of the store at ``base_root``; a store that has moved
        on since is refused (StoreError), and nothing changes.
        """
        check_vectors("the re-embedding", vectors, len(ids), dimension)
        meta = dict(zip(_MODEL_KEYS, (model_id, str(dimension), spec), strict=True))
        matrix = np.asarray(vectors, dtype=np.float32)
        return self._engine.replace_embeddings(Reembedding(ids, matrix, meta, base_root))

    # -- sources and crawl state (engines.sql.sources) ---------------------------------------------------
    def sources(self) -> list[SourceSummary]:
        """Every source: what it holds now (all entities: an administration view) and its row."""
        with self._engine.reading() as conn:
            return read_sources(conn, self._d)

    def crawl_pages(self, source: str) -> dict[str, str]:
        """The crawl state remembered for ``source``: url → PageState as JSON."""
        with self._engine.reading() as conn:
            return read_crawl_pages(conn, self._d, source)

    def source_uid_prefix(self, name: str) -> str | None:
        """The uid prefix of source ``name``'s folder pages (``sources.read_uid_prefix``)."""
        with self._engine.reading() as conn:
            return read_uid_prefix(conn, self._d, name)

    def save_crawl_pages(self, source: str, pages: Mapping[str, str | None]) -> None:
        """Remember (JSON) or forget (None) each url's crawl state, in one transaction."""
        with self._engine.writing() as conn:
            write_crawl_pages(conn, self._d, source, pages)

    # -- the engine's own ------------------------------------------------------------------------------
    def stats(self) -> StoreStats:
        return self._engine.stats()

    def rebuild(self, *, progress: bool = False) -> None:
        self._engine.rebuild(progress=progress)

    def check(self) -> CheckReport:
        return self._engine.check()
