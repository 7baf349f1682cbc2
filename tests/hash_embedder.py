"""A deterministic, model-free embedder for tests about storage, not about vectors (STYLE 17).

Each word is hashed into one of ``dimension`` buckets; the counts, L2-normalised,
are the vector (a text with no word gets a fixed unit vector, never zero).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

_WORD = re.compile(r"\w+")


class HashEmbedder:
    model_id = "test:hash-words-64"
    dimension = 64
    max_tokens = 512

    def _one(self, text: str) -> np.ndarray:
        vector = np.zeros(self.dimension, dtype=np.float32)
        for word in _WORD.findall(text.lower())[:20_000]:
            digest = hashlib.blake2b(word.encode("utf-8", "replace"), digest_size=4).digest()
            vector[int.from_bytes(digest, "big") % self.dimension] += 1.0
        if not vector.any():
            vector[0] = 1.0
        return vector / np.linalg.norm(vector)

    def embed(self, texts: Sequence[str], *, progress: bool = False) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return np.stack([self._one(text) for text in texts])

    def embed_query(self, text: str) -> np.ndarray:
        return self._one(text)
