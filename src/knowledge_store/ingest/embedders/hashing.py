"""``hash:[DIMENSION]``: a deterministic feature-hashing embedder, for tests only.

Each lower-cased word of a text adds ±1 to one of ``dimension`` buckets
(blake2b of the word picks the bucket and the sign); the sum is L2-normalised.
A text with no word (or whose signs cancel) gets the first axis, never the zero
vector, which no index can rank by and the engines refuse.
Texts that share words are closer than texts that share none, which is all a
test about permissions, SQL or graphs needs from vectors — with no model to
load, the same vectors on every machine, and microseconds per text. It knows
nothing about meaning: never build a store for people to search with it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

from knowledge_store.errors import InvalidRequest
from knowledge_store.ingest.embedders.core import Vectors, check_query, check_texts, normalise

__all__ = ["HashingEmbedder"]

_WORD = re.compile(r"\w+")


class HashingEmbedder:
    """Signed feature hashing of words into ``dimension`` buckets (see the module docstring)."""

    def __init__(self, dimension: int = 384) -> None:
        if not 8 <= dimension <= 4096:
            raise InvalidRequest(
                f"a hash: embedder has 8 to 4096 dimensions, not {dimension}; e.g. hash:384"
            )
        self._dimension = dimension
        self.spec = f"hash:{dimension}"
        self._buckets: dict[str, tuple[int, float]] = {}

    @classmethod
    def from_spec(cls, rest: str) -> HashingEmbedder:
        text = rest.strip()
        if not text:
            return cls()
        if not text.isdigit():
            raise InvalidRequest(f"'hash:{rest}' needs a number of dimensions, e.g. hash:384")
        return cls(int(text))

    def __repr__(self) -> str:
        return f"HashingEmbedder({self.spec!r})"

    @property
    def model_id(self) -> str:
        return self.spec

    @property
    def cache_id(self) -> str:
        return self.spec

    @property
    def dimension(self) -> int:
        return self._dimension

    @property
    def max_tokens(self) -> int:
        """No window: every word of a text counts, however long it is."""
        return 1 << 30

    def _bucket(self, word: str) -> tuple[int, float]:
        found = self._buckets.get(word)
        if found is None:
            digest = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "big")
            found = (digest % self._dimension, 1.0 if digest >> 63 else -1.0)
            if len(self._buckets) < 1 << 20:
                self._buckets[word] = found
        return found

    def embed(self, texts: Sequence[str], *, progress: bool = False) -> Vectors:
        items = check_texts(texts)
        out = np.zeros((len(items), self._dimension), dtype=np.float32)
        for row, text in enumerate(items):
            for word in _WORD.findall(text.lower()):
                column, sign = self._bucket(word)
                out[row, column] += sign
        out[~out.any(axis=1), 0] = 1.0
        return normalise(out)

    def embed_query(self, text: str) -> Vectors:
        vector: Vectors = self.embed([check_query(text)])[0]
        return vector
