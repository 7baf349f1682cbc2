"""What every embedder shares: input checks, windows over long texts, normalisation, progress.

A text longer than the model window is cut into overlapping windows of
``max_tokens`` minus the special tokens; every window is embedded and the text
gets the normalised mean of its window vectors — one vector per text. A text
within the window is embedded as it is. :class:`WindowedEmbedder` is that core
for backends that embed *texts* (sentence-transformers, an HTTP endpoint);
the ONNX backend embeds *token ids* and shares the helpers below.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from knowledge_store.errors import InvalidRequest, StoreError

if TYPE_CHECKING:
    from rich.progress import Task

__all__ = [
    "DEFAULT_DIMENSION",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_MODEL_ID",
    "DEVICES",
    "DelegatingEmbedder",
    "Embedder",
    "EmbedderSettings",
    "Vectors",
    "WindowedEmbedder",
    "cache_id_of",
    "check_query",
    "check_texts",
    "combine_windows",
    "normalise",
    "progress_bar",
    "spec_of",
    "window_starts",
]

Vectors = npt.NDArray[np.float32]

#: ``model_id`` of the bundled model: stable across machines (never a filesystem path).
DEFAULT_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_DIMENSION = 384
#: sentence-transformers' ``max_seq_length`` for this model (sentence_bert_config.json);
#: its tokenizer.json says 128, which sentence-transformers overrides.
DEFAULT_MAX_TOKENS = 256
#: Where the ONNX embedder runs: CUDA when onnxruntime has it (``auto``), or as named.
DEVICES = ("auto", "cpu", "gpu")
Device = Literal["auto", "cpu", "gpu"]


@dataclass(frozen=True)
class EmbedderSettings:
    """How embedders run, beyond their spec — given by the caller, never read from the
    environment (``ks`` and the servers map ``KS_ONNX_*`` and ``KS_EMBEDDINGS_API_KEY``
    here: :mod:`knowledge_store.surfaces.environment`).

    ``device``/``threads``: the ONNX embedder's execution provider and intra-op
    threads (None: one per core it may use); ``onnx_cache``: where exported ONNX
    models are kept (None: ``~/.cache/knowledge-store/onnx``); ``api_key``: the
    Bearer token of an ``openai:`` endpoint.
    """

    device: Device = "auto"
    threads: int | None = None
    onnx_cache: Path | None = None
    api_key: str | None = None

    def __post_init__(self) -> None:
        if self.device not in DEVICES:
            raise InvalidRequest(
                f"the embedding device {self.device!r} is not one of: {', '.join(DEVICES)}",
                field="device",
                allowed=list(DEVICES),
            )
        if self.threads is not None and (isinstance(self.threads, bool) or self.threads < 1):
            raise InvalidRequest(
                f"the embedder's threads must be a whole number ≥ 1, not {self.threads!r}",
                field="threads",
            )


@runtime_checkable
class Embedder(Protocol):
    """What the store needs from an embedding model.

    Embedders may also have ``spec`` (the string that opens them again; the
    store records it) and ``cache_id`` (what the embedding cache keys on, by
    default ``model_id``): read them with :func:`spec_of` and :func:`cache_id_of`.
    """

    @property
    def model_id(self) -> str:
        """Names the vector space: equal model_ids give interchangeable vectors."""
        ...

    @property
    def dimension(self) -> int: ...

    @property
    def max_tokens(self) -> int:
        """The model window in tokens; longer texts are embedded in parts."""
        ...

    def embed(self, texts: Sequence[str], *, progress: bool = False) -> Vectors:
        """``(len(texts), dimension)`` float32, L2-normalised, in input order."""
        ...

    def embed_query(self, text: str) -> Vectors:
        """``(dimension,)`` float32, L2-normalised."""
        ...


def spec_of(embedder: Embedder) -> str:
    """The spec that opens ``embedder`` again (its ``model_id`` when it has none)."""
    spec = getattr(embedder, "spec", None)
    return spec if isinstance(spec, str) and spec else embedder.model_id


def cache_id_of(embedder: Embedder) -> str:
    """What the embedding cache keys ``embedder``'s vectors on (default: its ``model_id``)."""
    cache_id = getattr(embedder, "cache_id", None)
    return cache_id if isinstance(cache_id, str) and cache_id else embedder.model_id


class DelegatingEmbedder:
    """An :class:`Embedder` wrapping another: the same model, its calls passed on.

    Subclasses change how ``embed``/``embed_query`` reach ``inner`` (a slot
    limit, a memo, a batch) and keep its identity.
    """

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    @property
    def max_tokens(self) -> int:
        return self.inner.max_tokens

    @property
    def spec(self) -> str:
        return spec_of(self.inner)

    @property
    def cache_id(self) -> str:
        return cache_id_of(self.inner)

    def embed(self, texts: Sequence[str], *, progress: bool = False) -> Vectors:
        return self.inner.embed(texts, progress=progress)

    def embed_query(self, text: str) -> Vectors:
        return self.inner.embed_query(text)


def check_texts(texts: Sequence[str]) -> list[str]:
    """``texts`` as a list, every item a str (a bare str is refused: use ``embed_query``)."""
    if isinstance(texts, str):
        raise InvalidRequest("embed() takes a sequence of texts; use embed_query(text)")
    items = list(texts)
    for position, text in enumerate(items):
        if not isinstance(text, str):
            raise InvalidRequest(
                f"text {position} is a {type(text).__name__}, not a str", position=position
            )
    return items


def check_query(text: str) -> str:
    if not isinstance(text, str):
        raise InvalidRequest(f"a query is a str, not a {type(text).__name__}")
    return text


def normalise(vectors: Vectors) -> Vectors:
    """Row-wise L2 normalisation; an all-zero row stays zero."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0.0] = 1.0
    return np.asarray(vectors / norms, dtype=np.float32)


def window_starts(length: int, size: int, overlap: int) -> list[int]:
    """Starts of windows of ``size`` covering ``range(length)``, ``overlap`` shared.

    The last window ends at ``length`` exactly, so every window is full and the
    windows can be averaged with equal weights.
    """
    if length <= size:
        return [0]
    stride = max(1, size - overlap)
    starts = list(range(0, length - size, stride))
    starts.append(length - size)
    return starts


def combine_windows(pieces: Vectors, owners: Sequence[int], count: int) -> Vectors:
    """One vector per text from one raw vector per piece (``owners[j]``: the text of piece j).

    Pieces are normalised; a text of several windows gets the normalised mean of them.
    """
    pieces = normalise(pieces)
    if len(owners) == count:  # no text was split: pieces are in input order
        return pieces
    summed = np.zeros((count, pieces.shape[1]), dtype=np.float32)
    np.add.at(summed, np.asarray(owners), pieces)
    return normalise(summed)


class WindowedEmbedder(ABC):
    """The core for backends that embed texts: windows, length-sorted batches, progress.

    Subclasses give ``_encode`` (a batch of texts that fit the window → raw
    vectors) and ``parts`` (how a text is cut into windows).
    """

    batch_size: int

    def __init__(self, model_id: str, *, spec: str, batch_size: int) -> None:
        if batch_size < 1:
            raise InvalidRequest(f"batch_size must be at least 1, not {batch_size}")
        self._model_id = model_id
        self.spec = spec
        self.batch_size = batch_size

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def cache_id(self) -> str:
        """What the embedding cache keys on: ``model_id`` (one runtime per model here)."""
        return self._model_id

    @property
    @abstractmethod
    def dimension(self) -> int: ...

    @property
    @abstractmethod
    def max_tokens(self) -> int: ...

    @abstractmethod
    def parts(self, texts: Sequence[str]) -> list[list[str]]:
        """The pieces each text is embedded as: ``[text]`` when it fits the window."""

    @abstractmethod
    def _encode(self, batch: list[str]) -> Vectors:
        """Embed texts that fit the window, one row each (need not be normalised)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec!r})"

    def embed(self, texts: Sequence[str], *, progress: bool = False) -> Vectors:
        items = check_texts(texts)
        if not items:
            return np.zeros((0, self.dimension), dtype=np.float32)

        pieces = self.parts(items)
        owners = [i for i, text_pieces in enumerate(pieces) for _ in text_pieces]
        flat = [piece for text_pieces in pieces for piece in text_pieces]
        # Longest first (stable: ties keep input order): batches pad little.
        order = sorted(range(len(flat)), key=lambda j: -len(flat[j]))
        share = [1.0 / len(pieces[owner]) for owner in owners]

        vectors: Vectors | None = None
        with progress_bar(len(items), enabled=progress) as advance:
            for start in range(0, len(order), self.batch_size):
                batch = order[start : start + self.batch_size]
                out = self._encode([flat[j] for j in batch])
                if out.ndim != 2 or out.shape[0] != len(batch):
                    raise StoreError(
                        f"{self.model_id} answered {out.shape} for a batch of {len(batch)} texts"
                    )
                if vectors is None:
                    vectors = np.empty((len(flat), out.shape[1]), dtype=np.float32)
                vectors[batch] = out
                advance(sum(share[j] for j in batch))
        assert vectors is not None
        return combine_windows(vectors, owners, len(items))

    def embed_query(self, text: str) -> Vectors:
        vector: Vectors = self.embed([check_query(text)])[0]
        return vector


@contextmanager
def progress_bar(total: int, *, enabled: bool) -> Iterator[Callable[[float], None]]:
    """Yield ``advance(texts_done)``; draws a rich bar on stderr when enabled."""
    if not enabled:
        yield lambda _done: None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        Progress,
        ProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.text import Text

    class RateColumn(ProgressColumn):
        def render(self, task: Task) -> Text:
            speed = task.finished_speed or task.speed
            return Text(
                "" if speed is None else f"{speed:,.1f} texts/s", style="progress.data.speed"
            )

    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed:,.0f}/{task.total:,.0f} texts"),
        RateColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(stderr=True)) as bar:
        task = bar.add_task("embedding", total=total)

        def advance(done: float) -> None:
            bar.advance(task, done)

        yield advance
        bar.update(task, completed=total)
