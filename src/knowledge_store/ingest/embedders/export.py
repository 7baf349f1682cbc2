"""The bundled model as ONNX: exported once from its PyTorch weights, cached by their hash.

::

    python -m knowledge_store.ingest.embedders.export [--quantization fp32|int8|all] [--cache DIR]

``make install`` runs it; otherwise the first use does, in a subprocess, so
the process that embeds never imports torch. Files land in the cache folder
given (``EmbedderSettings.onnx_cache``: ``ks`` passes ``$KS_ONNX_CACHE``, else
``$XDG_CACHE_HOME/knowledge-store/onnx``), else ``~/.cache/knowledge-store/onnx``, under ``<weights sha256>-<recipe>/``:
``model.onnx`` (fp32), ``model-int8-smoothed.onnx`` (``int8``: dynamic int8,
made by onnxruntime's quantizer from the fp32 file after its activation
outliers were moved into the weights, :mod:`.smoothing`) and ``model-int8.onnx``
(``int8-plain``: the same quantizer on the fp32 file as it is — the model of
stores built before smoothing). Both quantize the MatMul weights per output
channel, in 7 bits: ``reduce_range`` keeps the u8×s8 products clear of the
16-bit saturation of CPUs without VNNI, so every x86 CPU computes the same
vectors; per-channel scales took the mean cosine to fp32 from 0.95 to 0.993,
smoothing to 0.997 (docs/embedding.md). Each is written to a temporary file and
renamed into place, under a file lock, so concurrent first uses neither
corrupt it nor export twice. Nothing is downloaded.

The exporter is torch's TorchScript tracer (``dynamo=False``), with eager
attention: for this encoder it has no data-dependent control flow to lose,
it needs no further packages (the dynamo exporter needs onnxscript), and the
export checks itself — the ONNX model must give the PyTorch vectors (cosine
≥ 0.99999) on a padded batch of texts of different lengths before it is kept.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from knowledge_store.errors import InvalidRequest, StoreError
from knowledge_store.ingest.embedders.st import bundled_model_path

__all__ = ["QUANTIZATIONS", "RECIPE", "cache_root", "ensure_model", "model_file"]

#: Bumped whenever the export or a quantization changes what a file holds (a new way of
#: quantizing gets a file, and a ``model_id``, of its own instead: ``int8`` and ``int8-plain``).
RECIPE = "ts17-q2"
QUANTIZATIONS = ("fp32", "int8", "int8-plain")
_FILES = {
    "fp32": "model.onnx",
    "int8": "model-int8-smoothed.onnx",
    "int8-plain": "model-int8.onnx",
}
_EXPORT_TIMEOUT_S = 1800
_PROBE = (
    "How do I create an index on a table column?",
    "VACUUM reclaims storage occupied by dead tuples; the autovacuum daemon automates it.",
    "x",
    "",
)


def cache_root(given: Path | None = None) -> Path:
    """Where exported models are kept: ``given``, else ``~/.cache/knowledge-store/onnx``.

    The library reads no environment: ``ks`` and the servers pass ``$KS_ONNX_CACHE``
    (or ``$XDG_CACHE_HOME/knowledge-store/onnx``) through ``EmbedderSettings.onnx_cache``.
    """
    if given is not None:
        return Path(given).expanduser()
    return Path.home() / ".cache" / "knowledge-store" / "onnx"


def _write_atomically(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def weights_digest(model_dir: Path, cache: Path | None = None) -> str:
    """sha256 of the model's config and weights; memoised by their paths, sizes and mtimes."""
    files = [model_dir / "config.json", model_dir / "model.safetensors"]
    try:
        stats = [f.stat() for f in files]
    except OSError as exc:
        raise StoreError(f"the model files in {model_dir} cannot be read: {exc}") from exc
    stamp_key = "\n".join(
        f"{f.resolve()}|{s.st_size}|{s.st_mtime_ns}" for f, s in zip(files, stats, strict=True)
    )
    stamp = cache_root(cache) / "digests" / hashlib.sha256(stamp_key.encode()).hexdigest()
    try:
        known = stamp.read_text().strip()
        if len(known) == 64:
            return known
    except OSError:
        pass
    digest = hashlib.sha256()
    for f in files:
        with f.open("rb") as handle:
            while block := handle.read(1 << 20):
                digest.update(block)
    value = digest.hexdigest()
    try:
        stamp.parent.mkdir(parents=True, exist_ok=True)
        _write_atomically(stamp, value.encode())
    except OSError:
        pass  # a read-only cache: hash again next time
    return value


def model_file(quantization: str, model_dir: Path | None = None, cache: Path | None = None) -> Path:
    """Where the ONNX file for ``quantization`` is (or will be) cached."""
    if quantization not in QUANTIZATIONS:
        raise InvalidRequest(
            f"unknown quantization {quantization!r}; use one of: {', '.join(QUANTIZATIONS)}"
        )
    source = model_dir or bundled_model_path()
    digest = weights_digest(source, cache)
    return cache_root(cache) / f"{digest[:32]}-{RECIPE}" / _FILES[quantization]


def ensure_model(quantization: str, cache: Path | None = None) -> Path:
    """The cached ONNX file, exported first (in a subprocess) when it is not there yet."""
    path = model_file(quantization, cache=cache)
    if path.is_file():
        return path
    command = [sys.executable, "-m", __name__, "--quantization", quantization]
    command += ["--cache", str(cache_root(cache))]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=_EXPORT_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StoreError(f"exporting the embedding model to ONNX failed: {exc}") from exc
    if done.returncode != 0 or not path.is_file():
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise StoreError(
            "exporting the embedding model to ONNX failed (run `python -m"
            f" {__name__}` to see why): {' | '.join(tail)}",
            cache=str(path.parent),
        )
    return path


# --- the export itself (runs in its own process: it imports torch) ------------------------


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _export_fp32(model_dir: Path, dest: Path) -> None:
    import numpy as np
    import torch
    from transformers import AutoModel

    model: Any = AutoModel.from_pretrained(
        str(model_dir), attn_implementation="eager", local_files_only=True
    ).eval()

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = model

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            out = self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            )
            return out.last_hidden_state

    from knowledge_store.ingest.embedders.onnx import Tokens

    tokens = Tokens.from_model_dir(model_dir)
    ids, mask = tokens.pad([tokens.encode(t) for t in _PROBE])
    example = tuple(torch.from_numpy(a) for a in (ids, mask, np.zeros_like(ids)))
    names = ["input_ids", "attention_mask", "token_type_ids"]
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".model.", suffix=".onnx.tmp")
    os.close(fd)
    try:
        with torch.no_grad():
            expected = Encoder()(*example).numpy()
            torch.onnx.export(
                Encoder(),
                example,
                tmp,
                dynamo=False,
                input_names=names,
                output_names=["last_hidden_state"],
                dynamic_axes={n: {0: "batch", 1: "tokens"} for n in [*names, "last_hidden_state"]},
                opset_version=17,
            )
        _check(Path(tmp), ids, mask, expected)
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    finally:
        Path(tmp).unlink(missing_ok=True)


def _check(path: Path, ids: Any, mask: Any, expected: Any) -> None:
    """The ONNX file must give PyTorch's sentence vectors on the padded probe batch."""
    import numpy as np
    import onnxruntime as ort

    from knowledge_store.ingest.embedders.core import normalise
    from knowledge_store.ingest.embedders.onnx import mean_pool

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(
        None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    )[0]
    agree = np.sum(normalise(mean_pool(got, mask)) * normalise(mean_pool(expected, mask)), axis=1)
    if float(agree.min()) < 0.99999:
        raise StoreError(
            f"the ONNX export disagrees with PyTorch (cosine {float(agree.min()):.6f}); not kept"
        )


def _quantize_int8(fp32: Path, dest: Path, model_dir: Path, *, smoothed: bool) -> None:
    """Dynamic int8 of ``fp32``'s MatMul weights; ``smoothed``: of the graph :mod:`.smoothing`
    rewrites first (its activation outliers moved into the weights)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.stem}.", suffix=".onnx.tmp")
    os.close(fd)
    source = Path(f"{tmp}.fp32")
    try:
        if smoothed:
            from knowledge_store.ingest.embedders.onnx import Tokens
            from knowledge_store.ingest.embedders.smoothing import (
                CALIBRATION,
                activation_peaks,
                smooth_outliers,
            )

            tokens = Tokens.from_model_dir(model_dir)
            peaks = activation_peaks(fp32, [tokens.encode(t) for t in CALIBRATION])
            smooth_outliers(fp32, source, peaks)
        quantize_dynamic(
            str(source if smoothed else fp32),
            tmp,
            op_types_to_quantize=["MatMul"],
            per_channel=True,
            reduce_range=True,
            weight_type=QuantType.QInt8,
        )
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    finally:
        Path(tmp).unlink(missing_ok=True)
        source.unlink(missing_ok=True)


def export(quantization: str, model_dir: Path | None = None, cache: Path | None = None) -> Path:
    """Export (and quantize) into the cache unless it is there; returns the file."""
    source = model_dir or bundled_model_path()
    path = model_file(quantization, source, cache)
    fp32 = path.with_name(_FILES["fp32"])
    with _locked(path.parent):
        if not fp32.is_file():
            _export_fp32(source, fp32)
        if quantization != "fp32" and not path.is_file():
            _quantize_int8(fp32, path, source, smoothed=quantization == "int8")
        about = path.parent / "export.json"
        wanted = json.dumps({"source": str(source), "recipe": RECIPE, "files": _FILES}, indent=2)
        if not about.is_file() or about.read_text(encoding="utf-8") != wanted:
            _write_atomically(about, wanted.encode())
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quantization", choices=[*QUANTIZATIONS, "all"], default="all")
    parser.add_argument("--cache", type=Path, default=None, help="the model cache folder")
    args = parser.parse_args(argv)
    for quantization in QUANTIZATIONS if args.quantization == "all" else [args.quantization]:
        print(export(quantization, cache=args.cache))


if __name__ == "__main__":
    main()
