"""Ways to quantize the bundled model to int8, each against fp32 on the same sample.

Each variant is a model file built here (``bench/.cache/int8-variants/``) from the
cached fp32 export, by onnxruntime's ``quantize_dynamic`` with the shipped options
(MatMul weights, per output channel, 7 bits) and one change:

* ``plain`` — no change: ``onnx:int8-plain``, the model before smoothing;
* ``8-bit weights`` — ``reduce_range=False`` (u8×s8 products can saturate on x86
  CPUs without VNNI, so vectors would depend on the CPU);
* ``fp32 <nodes>`` — those MatMuls left in fp32 (``nodes_to_exclude``);
* ``SmoothQuant α`` — every channel of every weight MatMul's input migrated,
  ``s_j = max|X_j|^α / max|W_j|^(1-α)`` (Xiao et al. 2023);
* ``outliers ×k`` — only channels peaking above k × their tensor's median channel
  peak, ``s_j = peak_j / (k · median)`` (``embedders/smoothing.py``; the shipped
  ``onnx:int8`` is ``outliers ×2``).

Calibration is ``smoothing.CALIBRATION`` (no eval-set text). The sample and the
fp32 reference are ``eval_int8.Sample``'s: random chunks of each store (as ingest
embeds them, batched) and every question (alone, as search does).

    PYTHONPATH=src .venv/bin/python bench/int8_variants.py \\
        --store sqlite-git-faq=/tmp/faq8 --store postgres-docs=/tmp/pgd8 --per-set 300
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from eval_int8 import Sample
from evalsets import CACHE

from knowledge_store.ingest.embedders.core import EmbedderSettings
from knowledge_store.ingest.embedders.export import ensure_model
from knowledge_store.ingest.embedders.onnx import OnnxEmbedder, Tokens
from knowledge_store.ingest.embedders.smoothing import (
    CALIBRATION,
    activation_peaks,
    smooth_outliers,
    weight_matmuls,
)
from knowledge_store.ingest.embedders.st import bundled_model_path

VARIANTS = CACHE / "int8-variants"
LAYERS = range(6)


class FileEmbedder(OnnxEmbedder):
    """The ONNX embedder on a given model file (everything else as ``onnx:int8``)."""

    def __init__(self, path: Path) -> None:
        super().__init__("int8", settings=EmbedderSettings())
        self.path = path

    def _session(self, threads: int) -> Any:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return ort.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])


def smoothquant(source: Path, dest: Path, peaks: dict[str, Any], alpha: float) -> None:
    """SmoothQuant's migration of every channel (the comparison for ``smooth_outliers``)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(source))
    inits, readers = weight_matmuls(model)
    for tensor, nodes in readers.items():
        weights = [numpy_helper.to_array(inits[n.input[1]]) for n in nodes]
        wmax = np.max([np.abs(w).max(axis=1) for w in weights], axis=0)
        scale = (np.maximum(peaks[tensor], 1e-5) ** alpha) / (np.maximum(wmax, 1e-5) ** (1 - alpha))
        scale = scale.astype(np.float32)
        inverse = numpy_helper.from_array(1.0 / scale, name=f"{tensor}/smooth_inverse")
        model.graph.initializer.append(inverse)
        mul = onnx.helper.make_node("Mul", [tensor, inverse.name], [f"{tensor}/smoothed"])
        for node, w in zip(nodes, weights, strict=True):
            rows = (scale[:, None] * w).astype(np.float32)
            inits[node.input[1]].CopyFrom(numpy_helper.from_array(rows, name=node.input[1]))
            node.input[0] = f"{tensor}/smoothed"
        model.graph.node.insert(min(list(model.graph.node).index(n) for n in nodes), mul)
    onnx.save(model, str(dest))


def build(name: str, rewrite: Callable[[Path, Path], None] | None, **options: Any) -> Path:
    """The variant's int8 file: ``rewrite`` the fp32 graph (if given), then quantize."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    out = VARIANTS / f"{name.replace(' ', '_').replace('×', 'x')}.onnx"
    if out.exists():
        return out
    VARIANTS.mkdir(parents=True, exist_ok=True)
    source = ensure_model("fp32")
    if rewrite is not None:
        rewritten = out.with_suffix(".fp32.onnx")
        rewrite(source, rewritten)
        source = rewritten
    settings: dict[str, Any] = {
        "op_types_to_quantize": ["MatMul"],
        "per_channel": True,
        "reduce_range": True,
        "weight_type": QuantType.QInt8,
        **options,
    }
    quantize_dynamic(str(source), str(out), **settings)
    return out


def _smoothed(
    name: str, peaks: dict[str, Any], *, alpha: float | None = None, factor: float = 2.0
) -> Callable[[], Path]:
    """A variant quantized after SmoothQuant (``alpha``) or outlier smoothing (``factor``)."""

    def rewrite(source: Path, dest: Path) -> None:
        if alpha is not None:
            smoothquant(source, dest, peaks, alpha)
        else:
            smooth_outliers(source, dest, peaks, factor)

    return lambda: build(name, rewrite)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--store", action="append", default=[], help="SET=PATH: a built store")
    parser.add_argument("--per-set", type=int, default=300, help="chunks per set")
    parser.add_argument("--only", nargs="*", help="variant names to run")
    args = parser.parse_args()
    stores = {name: Path(path) for name, path in (s.split("=", 1) for s in args.store)}
    tokens = Tokens.from_model_dir(bundled_model_path())
    peaks = activation_peaks(ensure_model("fp32"), [tokens.encode(t) for t in CALIBRATION])

    def ffn2(layers: range) -> list[str]:
        return [f"/bert/encoder/layer.{i}/output/dense/MatMul" for i in layers]

    variants: dict[str, Callable[[], Path]] = {
        "plain": lambda: build("plain", None),
        "8-bit weights": lambda: build("8-bit weights", None, reduce_range=False),
        "fp32 FFN-out layer 0": lambda: build(
            "fp32 FFN-out layer 0", None, nodes_to_exclude=ffn2(range(1))
        ),
        "fp32 FFN-out layers 0-2": lambda: build(
            "fp32 FFN-out layers 0-2", None, nodes_to_exclude=ffn2(range(3))
        ),
        "fp32 FFN-out, all layers": lambda: build(
            "fp32 FFN-out, all layers", None, nodes_to_exclude=ffn2(LAYERS)
        ),
    }
    for alpha in (0.5, 0.7):
        variants[f"SmoothQuant α {alpha}"] = _smoothed(f"SmoothQuant α {alpha}", peaks, alpha=alpha)
    for factor in (1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0):
        variants[f"outliers ×{factor:g}"] = _smoothed(f"outliers ×{factor:g}", peaks, factor=factor)
    sample = Sample.of(stores, args.per_set)
    sample.header()
    for name, make in variants.items():
        if args.only and name not in args.only:
            continue
        sample.row(name, FileEmbedder(make()))


if __name__ == "__main__":
    main()
