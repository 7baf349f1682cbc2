"""Pluggable embedders: text → L2-normalised float32 vectors.

An embedder is named by a *spec*; the store records the spec it was built with
and the ``model_id`` of its vectors:

=====================================  ==========================================================
spec                                   embedder
=====================================  ==========================================================
``None`` / ``"default"``               :data:`DEFAULT_SPEC`
``"onnx:fp32"``                        the bundled all-MiniLM-L6-v2 on ONNX Runtime (offline)
``"onnx:int8"``                        the same, dynamically quantized to int8 after
                                       its activation outliers are smoothed into the weights
``"onnx:int8-plain"``                  the int8 model before smoothing (``…@int8``: the
                                       stores built on it keep it until re-embedded)
``"st:NAME_OR_PATH"``                  any sentence-transformers model on PyTorch;
                                       ``st:sentence-transformers/all-MiniLM-L6-v2`` is the
                                       bundled one
``"openai:BASE_URL#MODEL"``            an OpenAI-compatible ``POST BASE_URL/embeddings``
``"hash:DIMENSION"``                   deterministic feature hashing — for tests only
=====================================  ==========================================================

``model_id`` names a vector space: two embedders with the same ``model_id``
give interchangeable vectors. ONNX fp32 and PyTorch agree to cosine ≥ 0.9999
on every chunk of the PostgreSQL manual, so they share one; each int8 model has
its own (``…@int8-smoothed``, ``…@int8`` for the plain one). A store opened without an embedder uses the fastest one for the
``model_id`` it records (:func:`embedder_for`), so a store built on PyTorch
is searched on ONNX with no re-embedding.

Long texts are embedded in windows and averaged (``embedders/core.py``);
models load lazily, once per process: ``open_embedder`` caches by spec.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable

from knowledge_store.errors import InvalidRequest
from knowledge_store.ingest.embedders.core import (
    DEFAULT_MODEL_ID,
    DelegatingEmbedder,
    Embedder,
    EmbedderSettings,
    Vectors,
    WindowedEmbedder,
    cache_id_of,
    spec_of,
)
from knowledge_store.ingest.embedders.hashing import HashingEmbedder
from knowledge_store.ingest.embedders.microbatch import MicroBatchingEmbedder
from knowledge_store.ingest.embedders.onnx import MODEL_IDS, OnnxEmbedder
from knowledge_store.ingest.embedders.openai import OpenAIEmbedder
from knowledge_store.ingest.embedders.st import SentenceTransformerEmbedder

__all__ = [
    "DEFAULT_MODEL_ID",
    "DEFAULT_SPEC",
    "EMBEDDER_SPECS",
    "DelegatingEmbedder",
    "Embedder",
    "EmbedderSettings",
    "HashingEmbedder",
    "MicroBatchingEmbedder",
    "OnnxEmbedder",
    "OpenAIEmbedder",
    "SentenceTransformerEmbedder",
    "Vectors",
    "WindowedEmbedder",
    "cache_id_of",
    "embedder_for",
    "embedding_key",
    "open_embedder",
    "spec_of",
]

#: What ``default`` means, chosen by measurement (docs/embedding.md): on the PostgreSQL docs
#: eval, int8's vector and fused nDCG@10 stay within 0.005 of the PyTorch path's.
DEFAULT_SPEC = "onnx:int8"

#: The spec forms ``open_embedder`` accepts, as shown in error messages.
EMBEDDER_SPECS: tuple[str, ...] = (
    "default",
    "onnx:fp32",
    "onnx:int8",
    "onnx:int8-plain",
    "st:NAME_OR_PATH",
    "openai:BASE_URL#MODEL",
    "hash:DIMENSION",
)


def embedding_key(model_id: str, text: str) -> str:
    """The embedding cache key: sha256 hex of ``model_id + "\\0" + text``.

    The pipeline passes :func:`cache_id_of` the embedder as ``model_id``.
    """
    return hashlib.sha256(f"{model_id}\0{text}".encode()).hexdigest()


_SCHEMES: dict[str, Callable[[str, EmbedderSettings], Embedder]] = {
    "onnx": lambda rest, settings: OnnxEmbedder.from_spec(rest, settings),
    "st": lambda rest, _: SentenceTransformerEmbedder.from_spec(rest),
    "openai": lambda rest, settings: OpenAIEmbedder.from_spec(rest, api_key=settings.api_key),
    "hash": lambda rest, _: HashingEmbedder.from_spec(rest),
}
_CACHE: dict[tuple[str, EmbedderSettings], Embedder] = {}
_CACHE_LOCK = threading.Lock()


def _canonical(spec: str | None) -> str:
    key = "" if spec is None else spec.strip()
    if key in ("", "default"):
        return DEFAULT_SPEC
    if key == "onnx":
        return "onnx:fp32"
    return key


def open_embedder(spec: str | None = None, settings: EmbedderSettings | None = None) -> Embedder:
    """The embedder named by ``spec``, created once per process and settings (models load on
    first use). ``settings``: how it runs (device, threads, model cache, API key)."""
    key = _canonical(spec)
    settings = settings or EmbedderSettings()
    with _CACHE_LOCK:
        cached = _CACHE.get((key, settings))
        if cached is not None:
            return cached
        scheme, sep, rest = key.partition(":")
        factory = _SCHEMES.get(scheme) if sep else None
        if factory is None:
            raise InvalidRequest(
                f"unknown embedder {key!r}; use one of: {', '.join(EMBEDDER_SPECS)}",
                spec=key,
                allowed=list(EMBEDDER_SPECS),
            )
        embedder = factory(rest, settings)  # cheap: models load on first use
        # Two names of one embedder (st:all-MiniLM-L6-v2, st:sentence-transformers/…)
        # share one instance, so the model loads once.
        embedder = _CACHE.setdefault((spec_of(embedder), settings), embedder)
        _CACHE[(key, settings)] = embedder
        return embedder


#: The embedder that reads a vector space fastest, by ``model_id``.
_FASTEST = {model_id: f"onnx:{quantization}" for quantization, model_id in MODEL_IDS.items()}


def embedder_for(
    model_id: str, spec: str | None, settings: EmbedderSettings | None = None
) -> Embedder:
    """The embedder for a store whose vectors are ``model_id``, built with ``spec``.

    The bundled model's vector spaces are read on ONNX, whatever runtime built
    them (same ``model_id``, same vectors); any other model by its recorded spec.
    """
    fastest = _FASTEST.get(model_id)
    if fastest is not None:
        return open_embedder(fastest, settings)
    return open_embedder(spec, settings)
