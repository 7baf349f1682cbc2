"""Re-embed a store in place: every chunk again with another embedder, as one publish.

``ks rebuild --reembed [--embedder SPEC]`` → :meth:`KnowledgeStore.reembed`.
The chunks' texts are read page by page; vectors come from the embedding cache
where it has them (keyed by the new embedder's ``cache_id``) and go into it
batch by batch as they are made, so an interrupted re-embed resumes where it
stopped. Then one publish replaces every vector and records the new model. A
store that changed meanwhile is refused, and the next run finds its vectors
cached. The dimension stays: a model of another dimension needs a new store.
"""

from __future__ import annotations

import numpy as np

from knowledge_store.engines.sql.writer import CatalogWriter
from knowledge_store.errors import InvalidRequest
from knowledge_store.ingest.embedding import Embedder, cache_id_of, embedding_key, spec_of
from knowledge_store.ingest.pipeline import cached_vectors, embed_and_cache

__all__ = ["reembed_store"]

_PAGE = 5000


def reembed_store(engine: CatalogWriter, embedder: Embedder, *, progress: bool = False) -> str:
    """Replace every vector of ``engine`` with ``embedder``'s; returns the new content root."""
    recorded = engine.model()
    spec = spec_of(embedder)
    if recorded is None:
        engine.set_model(embedder.model_id, embedder.dimension, spec)
        return engine.content_root()
    if recorded[1] != embedder.dimension:
        raise InvalidRequest(
            f"{spec} makes {embedder.dimension}-dimensional vectors and this store holds"
            f" {recorded[1]}-dimensional ones: re-embedding in place keeps the dimension;"
            " ingest the sources into a new store instead",
            store_dimension=recorded[1],
            dimension=embedder.dimension,
        )
    base_root = engine.content_root()
    cache_id = cache_id_of(embedder)
    ids: list[int] = []
    keys: list[str] = []
    texts: dict[str, str] = {}
    after = 0
    while page := engine.chunk_contexts(after, _PAGE):
        for chunk_id, context in page:
            key = embedding_key(cache_id, context)
            ids.append(chunk_id)
            keys.append(key)
            texts.setdefault(key, context)
        after = page[-1][0]
    vectors = cached_vectors(engine, embedder, texts)
    missing = {key: text for key, text in texts.items() if key not in vectors}
    if missing:
        vectors.update(
            embed_and_cache(engine, embedder, missing, progress=progress, label="re-embedding")
        )
    matrix = (
        np.stack([vectors[k] for k in keys]).astype(np.float32)
        if keys
        else np.zeros((0, embedder.dimension), dtype=np.float32)
    )
    return engine.replace_embeddings(
        ids,
        matrix,
        model_id=embedder.model_id,
        dimension=embedder.dimension,
        spec=spec,
        base_root=base_root,
    )
