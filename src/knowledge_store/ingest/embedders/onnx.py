"""``onnx:fp32`` / ``onnx:int8`` / ``onnx:int8-plain``: the bundled all-MiniLM-L6-v2 on ONNX Runtime.

The same weights as ``st:sentence-transformers/all-MiniLM-L6-v2``, exported
once to ONNX (:mod:`.export`); tokenized by the Rust ``tokenizers`` library from
the model folder's tokenizer.json, mean-pooled and normalised in numpy. Nothing
here imports torch, transformers or sentence-transformers.

It reproduces the PyTorch path step by step: a text of at most ``max_tokens``
tokens (256, sentence-transformers' ``max_seq_length`` for this model) is
embedded as it is; a longer one is cut at the same token offsets into the same
overlapping windows, each window re-tokenized and truncated as
sentence-transformers does, and the text gets the normalised mean of its
windows. fp32 vectors agree with PyTorch's to cosine ≥ 0.9999 (measured by
bench/bench_embedding.py), so an fp32 ONNX embedder has the same ``model_id``
and reads and writes PyTorch-built stores. int8 (onnxruntime's dynamic
quantization) gives different vectors, so each int8 model has a ``model_id`` of
its own: ``int8`` (outliers smoothed first, :mod:`.smoothing`) ends in
``@int8-smoothed``; ``int8-plain``, the model of the stores built before, in ``@int8``.

``embed`` sorts pieces by token count and pads each batch only to its own
longest; a thread tokenizes the next slice of texts while the model runs on
this one. ``embed_query`` runs one text with no batching at all. Ingest-sized
batches run with as many intra-op threads as the process has cores
(``EmbedderSettings.threads``), a single query with one (see ``_loaded``);
on the CUDA execution provider when onnxruntime has one (``EmbedderSettings.device``:
``auto``, ``cpu`` or ``gpu``), with the CPU as the fallback.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from knowledge_store.errors import InvalidRequest, StoreError
from knowledge_store.ingest.embedders.core import (
    DEFAULT_DIMENSION,
    DEFAULT_MAX_TOKENS,
    DEFAULT_MODEL_ID,
    EmbedderSettings,
    Vectors,
    check_query,
    check_texts,
    combine_windows,
    normalise,
    progress_bar,
    window_starts,
)

__all__ = ["MODEL_IDS", "OnnxEmbedder", "Tokens", "mean_pool"]

Ids = npt.NDArray[np.int64]

#: ``model_id`` by quantization: fp32 gives PyTorch's vectors, each int8 model its own.
#: ``int8-plain`` (no smoothing) keeps ``@int8``: the stores built on it before
#: ``int8`` was smoothed are read and extended as they are (``embedder_for``).
MODEL_IDS = {
    "fp32": DEFAULT_MODEL_ID,
    "int8": f"{DEFAULT_MODEL_ID}@int8-smoothed",
    "int8-plain": f"{DEFAULT_MODEL_ID}@int8",
}
#: What the embedding cache keys each one's vectors on (``…|onnx-int8`` stays the plain
#: model's, which made the vectors cached under it).
_CACHE_TAGS = {"fp32": "onnx-fp32", "int8": "onnx-int8-smoothed", "int8-plain": "onnx-int8"}


def mean_pool(hidden: npt.NDArray[np.float32], mask: Ids) -> Vectors:
    """Mean of the token vectors under the attention mask (sentence-transformers' pooling)."""
    weights = mask.astype(np.float32)
    summed = np.einsum("bth,bt->bh", hidden, weights)
    counts = np.maximum(weights.sum(axis=1, keepdims=True), 1e-9)
    return np.asarray(summed / counts, dtype=np.float32)


class Tokens:
    """The model's Rust tokenizer, used as sentence-transformers uses it.

    tokenizer.json pads and truncates to 128; sentence-transformers pads per
    batch and truncates at ``max_seq_length`` (256): both are switched off here
    and done by :meth:`encode` and :meth:`pad`.
    """

    def __init__(self, tokenizer: Any, max_tokens: int) -> None:
        tokenizer.no_padding()
        tokenizer.no_truncation()
        self.tokenizer = tokenizer
        self.max_tokens = max_tokens
        self.specials = int(tokenizer.num_special_tokens_to_add(False))

    @classmethod
    def from_model_dir(cls, folder: Path, max_tokens: int = DEFAULT_MAX_TOKENS) -> Tokens:
        from tokenizers import Tokenizer

        path = folder / "tokenizer.json"
        try:
            return cls(Tokenizer.from_file(str(path)), max_tokens)
        except Exception as exc:
            raise StoreError(f"cannot read the tokenizer {path}: {exc}") from exc

    def truncate(self, ids: list[int]) -> list[int]:
        """Keep the first tokens and the closing special token, as truncation does."""
        if len(ids) <= self.max_tokens:
            return ids
        return ids[: self.max_tokens - 1] + ids[-1:]

    def encode(self, text: str) -> list[int]:
        ids: list[int] = self.tokenizer.encode(text).ids
        return self.truncate(ids)

    def pad(self, rows: Sequence[Sequence[int]]) -> tuple[Ids, Ids]:
        """``(input_ids, attention_mask)``, padded with 0 to the longest row."""
        width = max(len(r) for r in rows)
        ids = np.zeros((len(rows), width), dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = row
            mask[i, : len(row)] = 1
        return ids, mask

    def fits(self, text: str, ids: Sequence[int]) -> bool:
        """Whether a text is embedded whole (the PyTorch path's test: characters, then tokens)."""
        size = self.max_tokens - self.specials
        return len(text) <= size or len(ids) - self.specials <= size

    def pieces(self, texts: Sequence[str], overlap: int) -> list[list[list[int]]]:
        """The token ids of each text's pieces: one piece when it fits the window.

        A text that does not fit is cut at token offsets into windows of
        ``max_tokens - specials`` tokens sharing ``overlap``; each window's text
        is tokenized again and truncated — what the PyTorch path embeds.
        """
        size = self.max_tokens - self.specials
        out: list[list[list[int]]] = []
        for text, encoding in zip(texts, self.tokenizer.encode_batch(list(texts)), strict=True):
            ids: list[int] = encoding.ids
            if self.fits(text, ids):
                out.append([self.truncate(ids)])
                continue
            offsets = [
                span
                for span, special in zip(
                    encoding.offsets, encoding.special_tokens_mask, strict=True
                )
                if not special
            ]
            windows = [
                text[offsets[s][0] : offsets[s + size - 1][1]]
                for s in window_starts(len(offsets), size, overlap)
            ]
            out.append([self.truncate(e.ids) for e in self.tokenizer.encode_batch(windows)])
        return out


@dataclass
class _Batch:
    rows: list[int]  # piece numbers
    ids: Ids
    mask: Ids
    done: float  # texts this batch completes, for the progress bar


class OnnxEmbedder:
    """The bundled model on ONNX Runtime; the session loads (and exports) on first use."""

    def __init__(
        self,
        quantization: str = "fp32",
        *,
        batch_size: int = 32,
        overlap: int = 32,
        slice_size: int = 128,
        settings: EmbedderSettings | None = None,
    ) -> None:
        if quantization not in MODEL_IDS:
            raise InvalidRequest(
                f"onnx:{quantization} is not a quantization this embedder knows;"
                f" use one of: {', '.join(f'onnx:{q}' for q in MODEL_IDS)}"
            )
        if batch_size < 1 or slice_size < 1:
            raise InvalidRequest("batch_size and slice_size must be at least 1")
        settings = settings or EmbedderSettings()
        self.quantization = quantization
        self.spec = f"onnx:{quantization}"
        self.batch_size = batch_size
        self.overlap = overlap
        self.slice_size = slice_size
        self.device = settings.device
        self.threads = settings.threads or _cores()
        self.cache = settings.onnx_cache
        self._sessions: dict[int, Any] = {}
        self._tokens: Tokens | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_spec(cls, rest: str, settings: EmbedderSettings | None = None) -> OnnxEmbedder:
        return cls(rest.strip() or "fp32", settings=settings)

    def __repr__(self) -> str:
        return f"OnnxEmbedder({self.spec!r})"

    @property
    def model_id(self) -> str:
        return MODEL_IDS[self.quantization]

    @property
    def cache_id(self) -> str:
        """The embedding cache keeps each runtime's vectors apart (they differ slightly)."""
        return f"{DEFAULT_MODEL_ID}|{_CACHE_TAGS[self.quantization]}"

    @property
    def dimension(self) -> int:
        return DEFAULT_DIMENSION

    @property
    def max_tokens(self) -> int:
        return DEFAULT_MAX_TOKENS

    @property
    def providers(self) -> list[str]:
        """The execution providers of the session queries run on."""
        return list(self._loaded(parallel=False)[0].get_providers())

    # -- loading --------------------------------------------------------------------------
    def _loaded(self, *, parallel: bool) -> tuple[Any, Tokens]:
        """A session and the tokenizer; ``parallel``: the one with ``threads`` intra-op threads.

        A single text (``embed_query``) runs on a one-thread session: a short
        text gains little from a second thread, and on a busy machine a pass
        that must wait for both of its threads to be scheduled waits long (p90
        29 ms against 8 ms for one int8 query, measured at load 23 on 2 cores).
        Batches — ingest, a server's micro-batches — run on ``threads``. Each
        session is made on first use, so a process that only searches holds one.
        """
        threads = self.threads if parallel else 1
        session = self._sessions.get(threads)
        if session is None:
            with self._lock:
                if self._tokens is None:
                    from knowledge_store.ingest.embedders.st import bundled_model_path

                    self._tokens = Tokens.from_model_dir(bundled_model_path(), DEFAULT_MAX_TOKENS)
                session = self._sessions.get(threads)
                if session is None:
                    session = self._sessions[threads] = self._session(threads)
        assert self._tokens is not None
        return session, self._tokens

    def _session(self, threads: int) -> Any:
        from knowledge_store.ingest.embedders.export import ensure_model

        path = ensure_model(self.quantization, self.cache)
        try:
            import onnxruntime as ort
        except ImportError as exc:  # pragma: no cover - a core dependency
            raise StoreError(
                "the ONNX embedder needs onnxruntime: pip install knowledge-store"
                " (or onnxruntime-gpu for a GPU)"
            ) from exc
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3
        # Idle pool threads sleep instead of spinning: a spinning thread burns the CPU that
        # the server's other requests (and other processes) need. Measured on 2 loaded cores:
        # ks serve 118-146 req/s without spinning vs 92-105 with it (PyTorch: 89-97), and
        # ingest 27-32 texts/s vs 21-24 (bench/bench_serve.py; docs/embedding.md).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        try:
            return ort.InferenceSession(
                str(path), options, providers=_providers(self.device, ort.get_available_providers())
            )
        except Exception as exc:
            raise StoreError(f"onnxruntime could not load {path}: {exc}", model=str(path)) from exc

    # -- embedding ------------------------------------------------------------------------------
    def _run(self, session: Any, ids: Ids, mask: Ids) -> Vectors:
        hidden = session.run(
            None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        )[0]
        return mean_pool(hidden, mask)

    def embed_query(self, text: str) -> Vectors:
        """One text, one forward pass of its own length (a long text goes through ``embed``)."""
        check_query(text)
        session, tokens = self._loaded(parallel=False)
        encoded: list[int] = tokens.tokenizer.encode(text).ids
        if not tokens.fits(text, encoded):
            vector: Vectors = self.embed([text])[0]
            return vector
        ids = np.asarray([tokens.truncate(encoded)], dtype=np.int64)
        pooled = self._run(session, ids, np.ones_like(ids))
        vector = normalise(pooled)[0]
        return vector

    def embed(self, texts: Sequence[str], *, progress: bool = False) -> Vectors:
        items = check_texts(texts)
        if not items:
            return np.zeros((0, DEFAULT_DIMENSION), dtype=np.float32)
        session, tokens = self._loaded(parallel=len(items) > 1)
        owners: list[int] = []
        parts: list[Vectors] = []
        rows: list[int] = []
        with progress_bar(len(items), enabled=progress) as advance:
            for batch in self._batches(items, tokens, owners):
                parts.append(self._run(session, batch.ids, batch.mask))
                rows.extend(batch.rows)
                advance(batch.done)
        pieces = np.empty((len(owners), DEFAULT_DIMENSION), dtype=np.float32)
        pieces[rows] = np.concatenate(parts)
        return combine_windows(pieces, owners, len(items))

    def _batches(self, items: list[str], tokens: Tokens, owners: list[int]) -> Iterator[_Batch]:
        """Padded batches, longest pieces first within each slice of ``slice_size`` texts.

        With more than one slice, a thread tokenizes ahead (``tokenizers`` and
        onnxruntime both release the GIL), at most two slices ahead.
        """
        slices = [
            (start, items[start : start + self.slice_size])
            for start in range(0, len(items), self.slice_size)
        ]
        if len(slices) == 1:
            yield from self._slice_batches(tokens, *slices[0], owners)
            return
        ahead: queue.Queue[_Batch | BaseException | None] = queue.Queue(
            maxsize=2 * max(1, self.slice_size // self.batch_size)
        )
        stop = threading.Event()

        def offer(item: _Batch | BaseException | None) -> bool:
            """Queue ``item`` unless the consumer has stopped; False once it has."""
            while not stop.is_set():
                try:
                    ahead.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        def produce() -> None:
            try:
                for start, texts in slices:
                    for batch in self._slice_batches(tokens, start, texts, owners):
                        if not offer(batch):
                            return
                offer(None)
            except BaseException as exc:  # handed to the consumer, raised there
                offer(exc)

        worker = threading.Thread(target=produce, name="ks-tokenize", daemon=True)
        worker.start()
        try:
            while (item := ahead.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()
            worker.join()

    def _slice_batches(
        self, tokens: Tokens, start: int, texts: list[str], owners: list[int]
    ) -> Iterator[_Batch]:
        pieces = tokens.pieces(texts, self.overlap)
        first = len(owners)
        flat: list[list[int]] = []
        share: list[float] = []
        for offset, text_pieces in enumerate(pieces):
            owners.extend([start + offset] * len(text_pieces))
            flat.extend(text_pieces)
            share.extend([1.0 / len(text_pieces)] * len(text_pieces))
        # Longest first (stable: ties keep input order): each batch pads to its own longest.
        order = sorted(range(len(flat)), key=lambda j: -len(flat[j]))
        for begin in range(0, len(order), self.batch_size):
            chosen = order[begin : begin + self.batch_size]
            ids, mask = tokens.pad([flat[j] for j in chosen])
            yield _Batch([first + j for j in chosen], ids, mask, sum(share[j] for j in chosen))


def _providers(device: str, available: Sequence[str]) -> list[str]:
    """CUDA first when there is one (and it is not turned off), always the CPU after it."""
    if device == "gpu" and "CUDAExecutionProvider" not in available:
        raise StoreError(
            "the embedding device is gpu, but this onnxruntime has no CUDAExecutionProvider;"
            " install onnxruntime-gpu (docs/embedding.md)",
            available=list(available),
        )
    if device != "cpu" and "CUDAExecutionProvider" in available:
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)
