"""Outlier smoothing before int8 quantization: ``X·W = (X / s)·(s·W)``, exact in fp32.

Dynamic int8 quantizes each MatMul's activations with one scale for the whole
tensor. In all-MiniLM-L6-v2 a few channels are far larger than the rest (the
input of a layer's feed-forward block reaches 28 in one channel where the
median channel peaks near 2; the GELU output 24 against 1.6), so that one
scale spends most of its 256 steps on them and the other channels get a few.
This rewrites the fp32 graph before quantization: each channel ``j`` whose peak
(over :data:`CALIBRATION`, fp32) exceeds ``OUTLIER_FACTOR`` × the median
channel peak of its tensor is divided by ``s_j = peak_j / (OUTLIER_FACTOR ×
median)`` in one ``Mul`` before the MatMuls that read it, and row ``j`` of each
of their weights is multiplied by ``s_j``. The fp32 model's output is unchanged
(to float rounding); the quantized one's tensor scale shrinks to the bulk of
the channels, and the scaled weight rows are quantized per output channel.

It is SmoothQuant's migration (Xiao et al. 2023) restricted to the outlier
channels, with ``α = 1`` for them: a full per-channel migration (every channel,
``α`` 0.3–0.7) widened the weights' ranges more than it narrowed the
activations' and lost fidelity. Measured on 600 corpus chunks and 1,528
questions (``bench/int8_variants.py``, docs/embedding.md): mean cosine to fp32
0.9932 → 0.9968 on chunks, 0.9920 → 0.9976 on questions; the ``Mul`` nodes
cost about nothing.

The calibration texts are fixed here (questions, prose, code, tables; none from
an eval set), so an export is reproducible: the same weights give the same file.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "CALIBRATION",
    "OUTLIER_FACTOR",
    "activation_peaks",
    "recipe",
    "smooth_outliers",
    "weight_matmuls",
]

#: A channel whose peak exceeds this many times its tensor's median channel peak is scaled.
#: Chosen by fidelity to fp32 on corpus chunks and questions among 1 to 5
#: (``bench/int8_variants.py``, docs/embedding.md).
OUTLIER_FACTOR = 2.5

CALIBRATION: tuple[str, ...] = (
    "How do I undo the last commit without losing my changes?",
    "What is the difference between a process and a thread?",
    "Why does my query get slower as the table grows?",
    "Can two programs write to the same database file at the same time?",
    "where is the configuration file stored",
    "reset password email not arriving",
    "The quick brown fox jumps over the lazy dog.",
    "Returns the number of rows affected by the most recent statement.",
    "An index speeds up lookups on a column at the cost of slower writes and more disk space.",
    "Transactions group several changes so that either all of them take effect or none does.",
    "The function takes two arguments, a path and a mode, and returns a file handle or raises"
    " an error.",
    "Set the environment variable before starting the server; it is read once at startup.",
    "int main(int argc, char **argv) { return run(argc, argv); }",
    "SELECT name, count(*) FROM orders GROUP BY name HAVING count(*) > 10 ORDER BY 2 DESC;",
    "git rebase --interactive HEAD~3",
    "def parse(line: str) -> dict[str, int]: return {k: int(v) for k, v in pairs(line)}",
    "Error: permission denied (publickey). Check that the key is loaded into the agent.",
    "Version 2.4 adds support for streaming uploads and removes the deprecated sync API.",
    "Installation > Requirements\nPython 3.9 or later and a C compiler are required to build"
    " the extension.",
    "Reference > Functions > String functions\nlower(text) converts every character of the"
    " text to lower case.",
    "The museum opened in 1923 and holds paintings, sculpture and a large collection of maps.",
    "She moved to the coast after the war and wrote three novels about fishing villages.",
    "Heat the oil in a pan, add the onions and cook them slowly until they are soft and golden.",
    "The committee will meet on Tuesday to review the budget and vote on the new proposal.",
    "Rain is expected in the north tomorrow, with clear skies and light winds in the south.",
    "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen.",
    "Users report that the app crashes when they rotate the screen during a video call.",
    "Click Save, then choose a folder and a file name; the document keeps its format.",
    "Replication copies every change from the primary server to one or more standby servers,"
    " which can take over if the primary fails. Synchronous replication waits until a standby"
    " has confirmed each commit, so no committed transaction is lost when the primary crashes,"
    " at the price of a longer commit time. Asynchronous replication does not wait, and a"
    " standby may lag behind by a few transactions.",
    "Branches are cheap pointers to commits. Creating one writes a single file; switching"
    " between them rewrites the working tree to match the commit the branch points to. When two"
    " branches have diverged, a merge creates a commit with two parents, while a rebase replays"
    " the commits of one branch on top of the other and produces a linear history.",
    "The cache keeps recently used pages in memory. When it is full, the least recently used"
    " page is evicted; a dirty page is written back to disk first. The size of the cache is set"
    " in pages, and a larger cache helps workloads that read the same data many times, but it"
    " takes memory from other processes on the machine.",
    "To configure logging, create a file named logging.conf next to the program, with one"
    " section per logger. Each logger names its level (DEBUG, INFO, WARNING, ERROR) and its"
    " handlers; a handler writes to the console, a file or a socket, and a formatter decides"
    " what each line looks like, for example the time, the level and the message.",
    "The river rises in the mountains and flows east for four hundred kilometres through"
    " forests and farmland before it reaches the sea. Several towns grew up along its banks,"
    " where boats carried timber and grain downstream, and in spring the melting snow floods"
    " the lower valley almost every year.",
    "Our support team answers questions by email on weekdays. Please include your account"
    " number, the version of the app, and a short description of what you did before the"
    " problem appeared; screenshots help. For billing questions, use the form on the account"
    " page instead, so that the request reaches the right people.",
    "Parameters\n----------\npath : str\n    The file to read.\nencoding : str, optional\n"
    "    The text encoding, utf-8 by default.\n\nReturns\n-------\nlist of str\n"
    "    The lines of the file, without their line endings.",
    "| option | default | meaning |\n|---|---|---|\n| timeout | 30 | seconds to wait |\n"
    "| retries | 3 | attempts before giving up |\n| verbose | false | print every request |",
)


def recipe() -> str:
    """A digest of what the smoothed model is made from: the calibration texts and the factor.

    The smoothed model's ``model_id`` (``…@int8-smoothed``), cache tag and file name stand
    for this recipe; a test pins the digest, so that a change of either comes with a new
    name for the model — its vectors must never mix with the old ones in a store or a cache.
    """
    import hashlib

    return hashlib.sha256("\0".join([*CALIBRATION, repr(OUTLIER_FACTOR)]).encode()).hexdigest()


def weight_matmuls(model: Any) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """The initializers by name, and the MatMuls with a constant weight by the tensor they read."""
    inits = {i.name: i for i in model.graph.initializer}
    readers: dict[str, list[Any]] = {}
    for node in model.graph.node:
        if node.op_type == "MatMul" and node.input[1] in inits:
            readers.setdefault(node.input[0], []).append(node)
    return inits, readers


def activation_peaks(model_path: Path, rows: Sequence[Sequence[int]]) -> dict[str, Any]:
    """Per tensor a weight MatMul reads: the largest ``|value|`` of each channel over ``rows``.

    Each row of token ids runs alone (no padding), on the fp32 model with those
    tensors added to its outputs.
    """
    import onnx
    import onnxruntime as ort

    model = onnx.load(str(model_path))
    _, readers = weight_matmuls(model)
    for name in readers:
        model.graph.output.append(
            onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)
        )
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    peaks: dict[str, Any] = {}
    for row in rows:
        ids = np.asarray([row], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        feed["token_type_ids"] = np.zeros_like(ids)
        for name, value in zip(names, session.run(None, feed), strict=True):
            if name in readers:
                peak = np.abs(value).reshape(-1, value.shape[-1]).max(axis=0)
                peaks[name] = np.maximum(peaks.get(name, 0.0), peak)
    return peaks


def smooth_outliers(
    source: Path, dest: Path, peaks: dict[str, Any], factor: float = OUTLIER_FACTOR
) -> int:
    """Write ``source`` with its outlier channels moved into the weights to ``dest``.

    Returns how many channels were scaled.
    """
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(source))
    inits, readers = weight_matmuls(model)
    scaled = 0
    for tensor, nodes in readers.items():
        peak = np.asarray(peaks[tensor], dtype=np.float64)
        scale = np.maximum(1.0, peak / (factor * float(np.median(peak)))).astype(np.float32)
        if bool((scale == 1.0).all()):
            continue
        scaled += int((scale > 1.0).sum())
        inverse = numpy_helper.from_array(1.0 / scale, name=f"{tensor}/smooth_inverse")
        model.graph.initializer.append(inverse)
        smoothed = f"{tensor}/smoothed"
        mul = onnx.helper.make_node(
            "Mul", [tensor, inverse.name], [smoothed], name=f"{tensor}/smooth"
        )
        for node in nodes:
            weight = inits[node.input[1]]
            rows = scale[:, None] * numpy_helper.to_array(weight)
            weight.CopyFrom(numpy_helper.from_array(rows.astype(np.float32), name=weight.name))
            node.input[0] = smoothed
        first = min(list(model.graph.node).index(n) for n in nodes)
        model.graph.node.insert(first, mul)  # before its readers: the graph stays sorted
    onnx.save(model, str(dest))
    return scaled
