"""The ingest pipeline: diff by content hash → chunk → embed (cached) → one publish.

Engine-agnostic. A batch publishes everything or nothing: records are
validated before any work, and the engine writes the publish in one
transaction. An unchanged estate embeds nothing and publishes nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from knowledge_store.engines.base import PreparedEntity, Published, Vector
from knowledge_store.engines.sql.batch import BatchScope
from knowledge_store.engines.sql.sources import SourceSync
from knowledge_store.engines.sql.writer import CatalogWriter
from knowledge_store.errors import BatchRejected, Rejection
from knowledge_store.ingest.chunking import bounded_spans, chunk_markdown
from knowledge_store.ingest.embedding import Embedder, cache_id_of, embedding_key
from knowledge_store.ingest.loaders.files import Skipped
from knowledge_store.model import DELETED_UIDS_SHOWN, Chunk, Entity, IngestReport, SkippedPath

__all__ = ["EMBED_BATCH", "cached_vectors", "chunk_entity", "embed_and_cache", "ingest_entities"]

#: Texts embedded (and cached) per step.
EMBED_BATCH = 256


def chunk_entity(entity: Entity) -> tuple[Chunk, ...]:
    """The chunks of an entity's body; a body with no chunkable text is one chunk."""
    chunks = tuple(chunk_markdown(entity.body))
    if chunks:
        return chunks
    body = entity.body
    return tuple(
        Chunk(ordinal=ordinal, text=body[start:end], heading=(), start=start, end=end)
        for ordinal, (start, end, _) in enumerate(bounded_spans(body, [(0, len(body), ())]))
    )


@dataclass
class _Pending:
    entity: Entity
    chunks: tuple[Chunk, ...]
    keys: list[str]


def cached_vectors(
    engine: CatalogWriter, embedder: Embedder, texts: dict[str, str]
) -> dict[str, Vector]:
    """The cached vectors of ``texts`` (keyed ``embedding_key(cache_id_of(embedder), text)``).

    A vector another runtime of the same model cached counts too: one ``model_id`` is one
    vector space (what a store checks), and a runtime whose ``cache_id`` is the model id
    (PyTorch, ``st:``) keys on it — so a store built on PyTorch, read on ONNX fp32, or a
    new store seeded from its cache finds its vectors instead of embedding them again.
    Those are cached under this embedder's keys as well.
    """
    found = engine.cached_embeddings(list(texts))
    if embedder.model_id == cache_id_of(embedder) or len(found) == len(texts):
        return found
    other = {embedding_key(embedder.model_id, texts[k]): k for k in texts if k not in found}
    moved = {other[key]: v for key, v in engine.cached_embeddings(list(other)).items()}
    if moved:
        engine.cache_embeddings(moved)
        found.update(moved)
    return found


def embed_and_cache(
    engine: CatalogWriter,
    embedder: Embedder,
    texts: dict[str, str],
    *,
    progress: bool,
    label: str = "embedding",
) -> dict[str, np.ndarray]:
    """Embed in batches, caching each batch at once: an interrupted ingest keeps its work."""
    keys = list(texts)
    out: dict[str, np.ndarray] = {}
    with Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("chunks"),
        TimeRemainingColumn(),
        disable=not progress,
        transient=True,
    ) as bar:
        task = bar.add_task("embedding", total=len(keys))
        for i in range(0, len(keys), EMBED_BATCH):
            part = keys[i : i + EMBED_BATCH]
            embedded = embedder.embed([texts[k] for k in part])
            fresh = {
                k: np.asarray(v, dtype=np.float32) for k, v in zip(part, embedded, strict=True)
            }
            engine.cache_embeddings(fresh)
            out.update(fresh)
            bar.advance(task, len(part))
    return out


def _skipped(paths: Sequence[Skipped]) -> list[SkippedPath]:
    return [SkippedPath(path=s.path, reason=s.reason) for s in paths]


def ingest_entities(
    engine: CatalogWriter,
    embedder: Embedder,
    embedder_spec: str,
    entities: Sequence[Entity],
    *,
    rejected: Sequence[Rejection] = (),
    skipped: Sequence[Skipped] = (),
    skip_invalid: bool = False,
    progress: bool = False,
    source: SourceSync | None = None,
    allow_move: bool = False,
) -> IngestReport:
    """Publish ``entities`` as one batch (see module docstring); ``skipped`` is reported as is.

    With ``source``, the publish writes the source's row, and a sync deletes what
    the source holds beyond ``source.present`` — in the same publish, even when no
    entity of the batch changed. An entity another source holds is refused
    (``SourceTakeoverRefused``) unless ``allow_move``; a page written again takes its
    derived entities (its code samples) to exactly those of the batch, with its ACL
    (``engines.sql.batch``).
    """
    if rejected and not skip_invalid:
        raise BatchRejected(list(rejected))
    existing = engine.content_hashes([e.uid for e in entities])
    changed = [e for e in entities if existing.get(e.uid) != e.content_hash]
    unchanged = len(entities) - len(changed)
    kind = "sync" if source is not None and source.sync else "ingest"
    scope = BatchScope(holds=frozenset(e.uid for e in entities), allow_move=allow_move)
    if source is not None:
        # what the load found unchanged without reading it (304s), and the batch's own
        source = dataclasses.replace(source, unchanged_before=source.unchanged_before + unchanged)
        if not changed:
            published = engine.publish([], [], kind=kind, source=source, scope=scope)
            return _report(published, len(entities), rejected, skipped)
    if not changed:
        return IngestReport(
            content_root=engine.content_root(),
            added=0,
            updated=0,
            unchanged=unchanged,
            deleted=0,
            rejected=list(rejected),
            skipped=_skipped(skipped),
        )
    engine.set_model(embedder.model_id, embedder.dimension, embedder_spec)

    cache_id = cache_id_of(embedder)
    pending: list[_Pending] = []
    contexts: dict[str, str] = {}
    for entity in changed:
        chunks = chunk_entity(entity)
        texts = [c.context_text(entity.title) for c in chunks]
        keys = [embedding_key(cache_id, text) for text in texts]
        contexts.update(zip(keys, texts, strict=True))
        pending.append(_Pending(entity, chunks, keys))

    vectors = cached_vectors(engine, embedder, contexts)
    missing = {key: text for key, text in contexts.items() if key not in vectors}
    if missing:
        vectors.update(embed_and_cache(engine, embedder, missing, progress=progress))

    prepared = [
        PreparedEntity(
            entity=p.entity,
            chunks=p.chunks,
            vectors=np.stack([vectors[k] for k in p.keys]).astype(np.float32),
        )
        for p in pending
    ]
    published = engine.publish(
        prepared, [], kind=kind, model=embedder.model_id, source=source, scope=scope
    )
    unreadable = _unreadable([e for e in changed if not e.acl])
    return _report(published, len(entities), rejected, skipped, unreadable)


#: How many uids a warning names.
_NAMED = 5


def _unreadable(entities: Sequence[Entity]) -> tuple[str, ...]:
    """A warning when the batch wrote entities with an empty ACL (``"acl": []``): no one but an
    admin can read them until a grant, which is easy to do by mistake and silent otherwise."""
    if not entities:
        return ()
    uids = ", ".join(e.uid for e in entities[:_NAMED]) + (", …" if len(entities) > _NAMED else "")
    return (
        f"{len(entities)} entit{'y has' if len(entities) == 1 else 'ies have'} an empty ACL"
        f" ([]), so no one can read {'it' if len(entities) == 1 else 'them'} until a grant: {uids}",
    )


def _report(
    published: Published,
    entities: int,
    rejected: Sequence[Rejection],
    skipped: Sequence[Skipped],
    warnings: tuple[str, ...] = (),
) -> IngestReport:
    # The counts are the publish's own (planned in its transaction), not a guess from before it.
    return IngestReport(
        content_root=published.root,
        added=published.added,
        updated=published.updated,
        unchanged=entities - published.added - published.updated,
        deleted=published.deleted,
        deleted_uids=list(published.deleted_uids[:DELETED_UIDS_SHOWN]),
        rejected=list(rejected),
        skipped=_skipped(skipped),
        warnings=warnings,
    )
