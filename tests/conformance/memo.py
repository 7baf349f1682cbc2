"""The real embedding model, remembering what it embedded (the suite embeds the same few texts
on two engines, over and over): same vectors, a fraction of the time."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from knowledge_store.ingest.embedding import DelegatingEmbedder, Embedder, open_embedder

_shared: MemoEmbedder | None = None


class MemoEmbedder(DelegatingEmbedder):
    """Delegates to a real :class:`Embedder`; each distinct text is embedded once."""

    def __init__(self, inner: Embedder) -> None:
        super().__init__(inner)
        self._texts: dict[str, np.ndarray] = {}
        self._queries: dict[str, np.ndarray] = {}

    def embed(self, texts: Sequence[str], *, progress: bool = False) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self._texts]
        if missing:
            for text, vector in zip(missing, self.inner.embed(missing), strict=True):
                self._texts[text] = vector
        if not texts:
            return np.zeros((0, self.dimension), np.float32)
        return np.stack([self._texts[t] for t in texts])

    # -- kept between runs (pytest's cache directory) ---------------------------------------
    def load(self, path: Path) -> None:
        """Vectors a previous run saved for this model (a missing or foreign file: nothing)."""
        try:
            with np.load(path, allow_pickle=False) as data:
                if str(data["model"]) != self.model_id:
                    return
                for kind, store in (("t", self._texts), ("q", self._queries)):
                    texts = [str(t) for t in data[f"{kind}_texts"]]
                    store.update(zip(texts, data[f"{kind}_vectors"], strict=True))
        except (OSError, KeyError, ValueError):
            return

    def save(self, path: Path) -> None:
        def pack(store: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
            texts = np.array(list(store), dtype=np.str_)
            vectors = (
                np.stack(list(store.values())).astype(np.float32)
                if store
                else np.zeros((0, self.dimension), np.float32)
            )
            return texts, vectors

        t_texts, t_vectors = pack(self._texts)
        q_texts, q_vectors = pack(self._queries)
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npz")  # one per process (xdist)
        np.savez(
            tmp,
            model=np.array(self.model_id),
            t_texts=t_texts,
            t_vectors=t_vectors,
            q_texts=q_texts,
            q_vectors=q_vectors,
        )
        tmp.replace(path)

    def embed_query(self, text: str) -> np.ndarray:
        if text not in self._queries:
            self._queries[text] = self.inner.embed_query(text)
        return self._queries[text]


def shared() -> MemoEmbedder:
    """One per process."""
    global _shared
    if _shared is None:
        _shared = MemoEmbedder(open_embedder())
    return _shared
