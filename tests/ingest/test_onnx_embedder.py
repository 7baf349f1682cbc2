"""The ONNX Runtime embedder (the default) against the PyTorch path, its export, its threads.

The bundled model runs on both runtimes here: ONNX fp32 must give the PyTorch
vectors (the same model_id, so one store serves both), cut long texts into the
same windows, and keep input order through its length-sorted batches and its
tokenizer thread. The export is checked in a fresh cache directory, with two
first uses at once. And the query path must not import torch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from knowledge_store.errors import StoreError
from knowledge_store.ingest.embedders import export
from knowledge_store.ingest.embedders.core import normalise
from knowledge_store.ingest.embedders.onnx import MODEL_IDS, OnnxEmbedder, _providers
from knowledge_store.ingest.embedding import (
    DEFAULT_MODEL_ID,
    EmbedderSettings,
    SentenceTransformerEmbedder,
    cache_id_of,
    open_embedder,
    spec_of,
)
from knowledge_store.store import KnowledgeStore
from tests.conftest import ESTATE

pytestmark = pytest.mark.real_model(
    reason="the ONNX runtime against the PyTorch path, its export and threads"
)

TOPIC = [
    "A B-tree index keeps the keys of a table column sorted, so equality and range lookups"
    " touch few pages.",
    "CREATE INDEX builds the index; the planner then chooses between an index scan and a"
    " sequential scan by estimated cost.",
    "Indexes speed up reads but every insert and update must also maintain them.",
    "A partial index covers only the rows matching a predicate.",
]
ODD = ["", "x", "  leading and trailing spaces  ", "\tTabbed\nlines\n", "CAFÉ naïve 東京 🎉"]
LONG = " ".join([" ".join(TOPIC)] * 12)  # ~1,000 tokens: four windows


@pytest.fixture(scope="module")
def onnx() -> OnnxEmbedder:
    e = open_embedder("onnx:fp32")
    assert isinstance(e, OnnxEmbedder)
    return e


@pytest.fixture(scope="module")
def torch_path() -> SentenceTransformerEmbedder:
    e = open_embedder(f"st:{DEFAULT_MODEL_ID}")
    assert isinstance(e, SentenceTransformerEmbedder)
    return e


def agreement(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1)


def test_fp32_gives_the_pytorch_vectors(onnx, torch_path):
    texts = [*TOPIC, *ODD, LONG, "word " * 300]
    ours, theirs = onnx.embed(texts), torch_path.embed(texts)
    assert ours.shape == theirs.shape == (len(texts), 384)
    assert ours.dtype == np.float32
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    assert agreement(ours, theirs).min() >= 0.9999
    assert onnx.model_id == torch_path.model_id  # one vector space: stores accept both
    assert cache_id_of(onnx) != cache_id_of(torch_path)  # …but the cache keeps them apart


def test_long_texts_are_cut_into_the_pytorch_windows(onnx, torch_path):
    tokens = onnx._loaded(parallel=False)[1]
    [ours] = tokens.pieces([LONG], onnx.overlap)
    [texts] = torch_path.parts([LONG])
    assert len(ours) == len(texts) >= 4
    theirs = torch_path.model.tokenizer(texts, truncation=True, max_length=256)["input_ids"]
    assert ours == theirs
    [[whole]] = tokens.pieces([TOPIC[0]], onnx.overlap)
    assert whole == torch_path.model.tokenizer(TOPIC[0])["input_ids"]


def test_a_query_is_one_forward_pass_with_the_batch_vectors(onnx):
    for text in [TOPIC[1], "", LONG]:
        assert np.allclose(onnx.embed_query(text), onnx.embed([text])[0], atol=1e-5)
    assert onnx.embed([]).shape == (0, 384)


def test_batches_and_the_tokenizer_thread_keep_input_order(onnx):
    small = OnnxEmbedder(batch_size=3, slice_size=5)  # 5 slices: the thread tokenizes ahead
    texts = [f"item {i}: " + "word " * ((i * 7) % 23) + TOPIC[i % 4] for i in range(22)]
    texts.insert(9, LONG)
    reference = np.stack([onnx.embed_query(t) for t in texts])
    assert np.allclose(small.embed(texts, progress=True), reference, atol=1e-5)
    assert not [t for t in threading.enumerate() if t.name == "ks-tokenize"]


def test_a_tokenizer_thread_error_reaches_the_caller(monkeypatch):
    small = OnnxEmbedder(batch_size=2, slice_size=2)
    original = small._slice_batches

    def failing(tokens, start, texts, owners):
        if start >= 4:
            raise RuntimeError("tokenizer broke")
        return original(tokens, start, texts, owners)

    monkeypatch.setattr(small, "_slice_batches", failing)
    with pytest.raises(RuntimeError, match="tokenizer broke"):
        small.embed(TOPIC * 3)
    assert not [t for t in threading.enumerate() if t.name == "ks-tokenize"]


def test_a_model_error_stops_the_tokenizer_thread(monkeypatch):
    small = OnnxEmbedder(batch_size=1, slice_size=1)  # the queue fills at once
    calls = []

    def failing(session, ids, mask):
        calls.append(len(ids))
        raise RuntimeError("the model broke")

    monkeypatch.setattr(small, "_run", failing)
    with pytest.raises(RuntimeError, match="the model broke"):
        small.embed(TOPIC * 4)
    assert calls == [1]
    assert not [t for t in threading.enumerate() if t.name == "ks-tokenize"]


def test_each_int8_model_is_a_vector_space_of_its_own(onnx):
    int8 = open_embedder("onnx:int8")
    plain = open_embedder("onnx:int8-plain")
    assert isinstance(int8, OnnxEmbedder) and isinstance(plain, OnnxEmbedder)
    assert int8.model_id == MODEL_IDS["int8"] == f"{DEFAULT_MODEL_ID}@int8-smoothed"
    # The model of the stores built before smoothing keeps their model_id and cache keys.
    assert plain.model_id == MODEL_IDS["int8-plain"] == f"{DEFAULT_MODEL_ID}@int8"
    assert cache_id_of(plain) == f"{DEFAULT_MODEL_ID}|onnx-int8"
    assert spec_of(int8) == "onnx:int8" and spec_of(plain) == "onnx:int8-plain"
    assert len({cache_id_of(e) for e in (onnx, int8, plain)}) == 3
    assert export.model_file("int8") != export.model_file("int8-plain")
    near = agreement(int8.embed(TOPIC), onnx.embed(TOPIC))
    assert near.min() > 0.8  # close, but not the same vectors
    assert agreement(int8.embed(TOPIC), plain.embed(TOPIC)).min() < 0.9999


def test_the_smoothed_models_name_stands_for_its_recipe():
    from knowledge_store.ingest.embedders import smoothing

    # Calibration texts and factor make the smoothed model: a change of either makes other
    # vectors, which must not share a model_id, cache tag or file with this model's.
    assert smoothing.recipe() == (
        "a1abe498335c61cfafb3465bab53ef5dc558681c3303c1ca0458edc541d0f0d8"
    ), "the smoothing recipe changed: name the new model (MODEL_IDS, _CACHE_TAGS, _FILES)"
    assert MODEL_IDS["int8"].endswith("@int8-smoothed")


def test_smoothing_is_exact_in_fp32_and_brings_int8_closer_to_it(onnx, tmp_path):
    from knowledge_store.ingest.embedders.smoothing import (
        CALIBRATION,
        activation_peaks,
        smooth_outliers,
    )

    fp32_file = export.ensure_model("fp32")
    tokens = onnx._loaded(parallel=False)[1]
    peaks = activation_peaks(fp32_file, [tokens.encode(t) for t in CALIBRATION])
    assert len(peaks) == 6 * 4  # the tensors the weight MatMuls read: 4 a layer
    smoothed = tmp_path / "smoothed.onnx"
    assert smooth_outliers(fp32_file, smoothed, peaks) > 0

    session = ort.InferenceSession(str(smoothed), providers=["CPUExecutionProvider"])
    texts = [*TOPIC, LONG[:900]]
    ids, mask = tokens.pad([tokens.encode(t) for t in texts])
    rewritten = normalise(onnx._run(session, ids, mask))
    assert agreement(rewritten, onnx.embed(texts)).min() > 0.99999  # the same function
    # What it is for: the int8 model quantized after smoothing is nearer fp32 than before.
    questions = [
        "How do I make lookups on a column faster?",
        "why are writes slower after adding an index",
        "what does a partial index store",
    ]
    want = np.concatenate([onnx.embed(TOPIC), np.stack([onnx.embed_query(q) for q in questions])])
    closeness = {}
    for spec in ("onnx:int8", "onnx:int8-plain"):
        e = open_embedder(spec)
        got = np.concatenate([e.embed(TOPIC), np.stack([e.embed_query(q) for q in questions])])
        closeness[spec] = float(agreement(got, want).mean())
    assert 1 - closeness["onnx:int8"] < 0.8 * (1 - closeness["onnx:int8-plain"])


def test_providers_prefer_a_gpu_and_fall_back_to_the_cpu():
    both = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    assert _providers("auto", both) == both
    assert _providers("auto", ["CPUExecutionProvider"]) == ["CPUExecutionProvider"]
    assert _providers("cpu", both) == ["CPUExecutionProvider"]
    assert _providers("gpu", both) == both
    with pytest.raises(StoreError, match="onnxruntime-gpu"):
        _providers("gpu", ["CPUExecutionProvider"])


@pytest.mark.slow
def test_export_once_into_a_fresh_cache_even_when_two_ask_at_once(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    target = export.model_file("fp32", cache=cache)
    assert target.parent.parent == tmp_path / "cache"
    assert target.parent.name.endswith(export.RECIPE)
    found: list[Path] = []
    errors: list[BaseException] = []

    def first_use() -> None:
        try:
            found.append(export.ensure_model("fp32", cache))
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=first_use) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors
    assert found == [target, target] and target.is_file()
    assert sorted(p.name for p in target.parent.iterdir()) == [
        ".lock",
        "export.json",
        "model.onnx",
    ]  # no temporary file left behind
    # Cached now: no second export (a subprocess would fail here).
    monkeypatch.setattr(export.subprocess, "run", None)
    assert export.ensure_model("fp32", cache) == target
    # The digest is memoised: the 90 MB of weights are hashed once per cache.
    assert len(list((tmp_path / "cache" / "digests").iterdir())) == 1
    same = OnnxEmbedder(settings=EmbedderSettings(onnx_cache=cache))
    assert same.embed_query(TOPIC[0]) @ open_embedder("onnx:fp32").embed_query(TOPIC[0]) > 0.99999


def _imported_by(command: list[str], env: dict[str, str]) -> set[str]:
    """Top-level modules a command imported (``-X importtime`` on stderr)."""
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=300,
        env={**env, "PYTHONPROFILEIMPORTTIME": "1"},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    names = set()
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    assert "knowledge_store" in names
    return names


FORBIDDEN = {"torch", "transformers", "sentence_transformers"}


@pytest.mark.real_model(reason="the commands embed with the store's model, the default ONNX one")
def test_no_command_that_embeds_imports_torch(tmp_path, real_embedder):
    store_dir = tmp_path / "store"
    with KnowledgeStore.open(store_dir, embedder=real_embedder) as store:
        store.ingest_records(ESTATE)
    extra = tmp_path / "more.jsonl"
    extra.write_text(
        json.dumps(
            {
                "uid": "note:1",
                "type": "note",
                "title": "Checkpoints",
                "body": "WAL and checkpoints.",
                "source": "notes",
                "acl": ["everyone"],
            }
        )
        + "\n"
    )
    ks = str(Path(sys.executable).with_name("ks"))
    env = {k: v for k, v in os.environ.items() if k != "KS_EMBEDDER"}  # the store's model
    for args in (
        ["search", "how does vacuum reclaim space", "--json"],
        ["vector", "replica lag", "--json"],
        ["ingest", str(extra), "--json"],
    ):
        names = _imported_by([ks, "--store", str(store_dir), *args], env)
        assert not names & FORBIDDEN, (args, names & FORBIDDEN)
    api = (
        "import sys, json\n"
        "from knowledge_store import KnowledgeStore\n"
        f"store = KnowledgeStore.open({str(store_dir)!r})\n"
        "answer = store.search('autovacuum daemon')\n"
        "assert answer.results, 'no results'\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", api], capture_output=True, text=True, timeout=300, check=True
    )
    loaded = set(json.loads(done.stdout))
    assert "onnxruntime" in loaded and "tokenizers" in loaded
    assert not loaded & (FORBIDDEN | {"huggingface_hub"})
