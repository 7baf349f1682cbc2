"""Embedders against the real bundled model (PyTorch and ONNX), and an OpenAI-compatible
endpoint over a real socket."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest

from knowledge_store.errors import InvalidRequest, StoreError
from knowledge_store.ingest.embedders.onnx import MODEL_IDS
from knowledge_store.ingest.embedding import (
    DEFAULT_MODEL_ID,
    DEFAULT_SPEC,
    DelegatingEmbedder,
    Embedder,
    EmbedderSettings,
    HashingEmbedder,
    OnnxEmbedder,
    OpenAIEmbedder,
    SentenceTransformerEmbedder,
    cache_id_of,
    embedding_key,
    open_embedder,
)

TOPIC = [
    "A B-tree index keeps the keys of a table column sorted, so equality and range lookups"
    " touch few pages.",
    "CREATE INDEX builds the index; the planner then chooses between an index scan and a"
    " sequential scan by estimated cost.",
    "Indexes speed up reads but every insert and update must also maintain them, which"
    " costs write throughput.",
    "A partial index covers only the rows matching a predicate, and an expression index"
    " stores a computed value.",
]


@pytest.fixture(scope="module")
def minilm() -> SentenceTransformerEmbedder:
    """The bundled model on PyTorch (the reference)."""
    e = open_embedder(f"st:{DEFAULT_MODEL_ID}")
    assert isinstance(e, SentenceTransformerEmbedder)
    _ = e.model  # load once for the module
    return e


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


# --- the bundled model ------------------------------------------------------------------


@pytest.mark.real_model(reason="the bundled model itself: its identity, vectors and windows")
def test_default_embedder_identity():
    e = open_embedder()
    assert e is open_embedder("default") is open_embedder(None) is open_embedder(DEFAULT_SPEC)
    assert isinstance(e, Embedder)
    assert isinstance(e, OnnxEmbedder)
    assert e.model_id == MODEL_IDS[e.quantization]
    assert DEFAULT_MODEL_ID == "sentence-transformers/all-MiniLM-L6-v2"
    assert e.dimension == 384
    assert e.max_tokens == 256


@pytest.mark.real_model(reason="the bundled model itself: its identity, vectors and windows")
def test_the_bundled_model_on_pytorch_is_st_by_name(minilm):
    assert minilm is open_embedder("st:all-MiniLM-L6-v2")
    assert minilm.model_id == DEFAULT_MODEL_ID
    assert minilm.spec == f"st:{DEFAULT_MODEL_ID}"
    assert minilm.max_tokens == minilm.model.get_max_seq_length() == 256


@pytest.mark.real_model(reason="the bundled model itself: its identity, vectors and windows")
def test_vectors_are_normalised_float32(minilm):
    vectors = minilm.embed(["hello world", "a cat sat on the mat", ""])
    assert vectors.shape == (3, 384)
    assert vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    query = minilm.embed_query("hello world")
    assert query.shape == (384,)
    assert query.dtype == np.float32
    assert np.allclose(query, vectors[0], atol=1e-5)
    assert minilm.embed([]).shape == (0, 384)


@pytest.mark.real_model(reason="the bundled model itself: its identity, vectors and windows")
def test_deterministic(minilm):
    texts = ["PostgreSQL vacuum reclaims storage", "write-ahead log"]
    assert np.array_equal(minilm.embed(texts), minilm.embed(texts))


@pytest.mark.real_model(reason="the bundled model itself: its identity, vectors and windows")
def test_similar_texts_are_closer(minilm):
    query, near, far = minilm.embed(
        [
            "How do I create an index on a table column?",
            "CREATE INDEX builds an index on the chosen column of a table.",
            "Mix two cups of flour with butter and bake for forty minutes.",
        ]
    )
    assert cosine(query, near) > cosine(query, far) + 0.2


@pytest.mark.real_model(reason="the bundled model itself: its identity, vectors and windows")
def test_batches_keep_input_order(minilm, monkeypatch):
    texts = [f"item {i}: " + "word " * ((i * 7) % 23) + TOPIC[i % 4] for i in range(12)]
    reference = minilm.model.encode(texts, normalize_embeddings=True)  # restores order itself
    monkeypatch.setattr(minilm, "batch_size", 3)
    batched = minilm.embed(texts, progress=True)
    assert batched.shape == (12, 384)
    assert np.all(np.sum(batched * reference, axis=1) > 0.9999)
    assert np.allclose(batched[5], minilm.embed_query(texts[5]), atol=1e-5)


@pytest.mark.real_model(reason="the bundled model itself: its identity, vectors and windows")
def test_long_text_is_embedded_in_windows(minilm):
    paragraph = " ".join(TOPIC)
    long_text = " ".join([paragraph] * 35)  # 88 tokens each: ~3,080
    tokens = len(minilm.model.tokenizer(long_text, add_special_tokens=False, verbose=False)[0])
    assert tokens >= 3000

    [short], [parts] = minilm.parts([paragraph]), minilm.parts([long_text])
    assert short == [paragraph]  # within the window: embedded as it is
    assert len(parts) >= 3000 // 254
    window = minilm.max_tokens - 2
    for part in parts:
        assert len(minilm.model.tokenizer(part, add_special_tokens=False)[0]) <= window + 2
    assert long_text.startswith(parts[0]) and long_text.endswith(parts[-1])

    vectors = minilm.embed(["first", long_text, "last"])
    assert vectors.shape == (3, 384)
    assert np.linalg.norm(vectors[1]) == pytest.approx(1.0, abs=1e-5)
    assert cosine(vectors[1], minilm.embed_query(parts[0])) > 0.5
    assert np.allclose(vectors[0], minilm.embed_query("first"), atol=1e-5)


def test_embedding_key():
    assert embedding_key("m", "text") == hashlib.sha256(b"m\0text").hexdigest()
    assert embedding_key("m", "text") != embedding_key("n", "text")
    assert embedding_key("m", "text") != embedding_key("m", "text ")


# --- specs ------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", ["bogus", "mpnet:x", "http://host/v1", "st"])
def test_unknown_spec_lists_the_valid_forms(spec):
    with pytest.raises(InvalidRequest) as info:
        open_embedder(spec)
    message = info.value.message
    assert "default" in message
    assert "st:NAME_OR_PATH" in message
    assert "openai:BASE_URL#MODEL" in message
    assert "onnx:int8" in message
    assert "hash:DIMENSION" in message


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("st:", "needs a model name"),
        ("openai:http://127.0.0.1:9/v1", "BASE_URL#MODEL"),
        ("openai:#model", "BASE_URL#MODEL"),
        ("openai:ftp://host/v1#model", "http:// or https://"),
        ("onnx:int4", "onnx:fp32, onnx:int8"),
        ("hash:many", "number of dimensions"),
        ("hash:2", "8 to 4096"),
    ],
)
def test_malformed_specs(spec, match):
    with pytest.raises(InvalidRequest, match=match):
        open_embedder(spec)


def test_st_spec_model_ids(tmp_path):
    # Neither loads a model: loading is lazy.
    named = open_embedder("st:sentence-transformers/all-mpnet-base-v2")
    assert named.model_id == "sentence-transformers/all-mpnet-base-v2"
    model_dir = tmp_path / "my-model"
    model_dir.mkdir()
    assert SentenceTransformerEmbedder.from_spec(str(model_dir)).model_id == "st:my-model"
    broken = SentenceTransformerEmbedder.from_spec(str(model_dir))
    with pytest.raises(InvalidRequest, match="could not load"):
        _ = broken.dimension


# --- an OpenAI-compatible endpoint over a real socket -----------------------------------


class EmbeddingServer:
    """``POST /v1/embeddings`` answered by the real bundled model (stdlib http.server)."""

    def __init__(self, model):
        self.model = model
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(
                    {"path": self.path, "body": body, "auth": self.headers.get("Authorization")}
                )
                if self.path != "/v1/embeddings":
                    return self.answer(404, {"error": "no such path"})
                if body["model"] == "boom":
                    return self.answer(500, {"error": {"message": "the GPU caught fire"}})
                if body["model"] == "garbage":
                    return self.answer(200, {"data": "not a list"})
                vectors = server.model.encode(body["input"], convert_to_numpy=True)
                data = [
                    {"object": "embedding", "index": i, "embedding": v.tolist()}
                    for i, v in enumerate(vectors)
                ]
                self.answer(200, {"object": "list", "data": data[::-1], "model": body["model"]})

            def answer(self, status, payload):
                raw = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, format, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def server(minilm) -> Iterator[EmbeddingServer]:
    s = EmbeddingServer(minilm.model)
    yield s
    s.close()


@pytest.mark.real_model(reason="an OpenAI-compatible endpoint serving the bundled model")
def test_openai_embedder_against_a_real_endpoint(server, minilm):
    remote = open_embedder(
        f"openai:{server.base_url}#text-embedding-minilm", EmbedderSettings(api_key="sekret")
    )
    assert isinstance(remote, OpenAIEmbedder)
    assert remote.model_id == "openai:text-embedding-minilm"
    server.requests.clear()

    assert remote.dimension == 384  # discovered with one probe text
    assert len(server.requests) == 1
    assert len(server.requests[0]["body"]["input"]) == 1

    texts = [f"{TOPIC[i % 4]} (note {i})" for i in range(66)]
    vectors = remote.embed(texts)
    assert vectors.shape == (66, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    local = minilm.embed(texts)
    assert np.all(np.sum(vectors * local, axis=1) > 0.9999)  # order restored, sorted by index

    batches = server.requests[1:]
    assert sorted(len(r["body"]["input"]) for r in batches) == [2, 64]
    assert all(r["path"] == "/v1/embeddings" for r in batches)
    assert all(r["body"]["model"] == "text-embedding-minilm" for r in batches)
    assert all(r["auth"] == "Bearer sekret" for r in server.requests)
    assert remote.embed_query(texts[0]) == pytest.approx(vectors[0], abs=1e-5)
    remote.close()


@pytest.mark.real_model(reason="an OpenAI-compatible endpoint serving the bundled model")
def test_openai_long_text_is_split_by_characters(server, minilm):
    remote = OpenAIEmbedder(server.base_url, "minilm", max_tokens=64)
    [parts] = remote.parts([" ".join(TOPIC * 5)])
    assert len(parts) > 1 and all(len(p) <= 256 for p in parts)
    vector = remote.embed_query(" ".join(TOPIC * 5))
    assert vector.shape == (384,)
    assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-5)
    assert cosine(vector, minilm.embed_query(parts[0])) > 0.5
    remote.close()


def test_openai_error_status_is_a_store_error(server):
    remote = OpenAIEmbedder(server.base_url, "boom")
    with pytest.raises(StoreError) as info:
        remote.embed(["anything"])
    assert "HTTP 500" in info.value.message
    assert "the GPU caught fire" in info.value.message
    assert info.value.details["status"] == 500
    assert info.value.to_dict()["error"]["code"] == "store_error"


def test_openai_malformed_body_and_wrong_path(server):
    with pytest.raises(StoreError, match="malformed"):
        OpenAIEmbedder(server.base_url, "garbage").embed(["x"])
    with pytest.raises(StoreError, match="HTTP 404"):
        OpenAIEmbedder(server.base_url + "/nope", "m").embed(["x"])


def test_openai_unreachable_endpoint():
    probe = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = probe.server_address[1]
    probe.server_close()  # nothing listens there now
    with pytest.raises(StoreError, match="could not be reached"):
        OpenAIEmbedder(f"http://127.0.0.1:{port}/v1", "m", timeout=5).embed(["x"])


# --- the hashing embedder (for tests that do not measure vectors) ------------------------


def test_hashing_embedder_is_deterministic_and_normalised():
    e = open_embedder("hash:64")
    assert isinstance(e, HashingEmbedder)
    assert e is open_embedder("hash:64")
    assert (e.model_id, e.dimension, e.spec) == ("hash:64", 64, "hash:64")
    assert open_embedder("hash:").dimension == 384
    texts = ["VACUUM reclaims storage", "vacuum RECLAIMS storage!", "bake a cake", ""]
    vectors = e.embed(texts)
    assert vectors.shape == (4, 64) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    assert np.array_equal(vectors[3], np.eye(64, dtype=np.float32)[0])  # no words: one axis
    assert np.allclose(vectors[0], vectors[1])  # case and punctuation do not count
    assert np.allclose(e.embed_query(texts[0]), vectors[0])
    # the same vectors in another process: the buckets do not depend on Python's hash seed
    import subprocess
    import sys

    code = (
        "from knowledge_store.ingest.embedding import open_embedder;"
        "print(open_embedder('hash:64').embed_query('VACUUM reclaims storage').tolist())"
    )
    other = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "123"},
    )
    assert np.allclose(json.loads(other.stdout), vectors[0])


def test_a_store_embedded_by_hashing_takes_a_text_without_words(tmp_path):
    """It gave such a text the zero vector, which the engines refuse ("all-zero")."""
    from knowledge_store.store import KnowledgeStore

    record = {
        "uid": "a",
        "type": "page",
        "title": "---",
        "body": "--- !!! ---",
        "acl": ["everyone"],
    }
    with KnowledgeStore.open(tmp_path / "s", embedder="hash:64") as store:
        assert store.ingest_records([record]).added == 1
        assert [h.uid for h in store.vector("!!!").hits] == ["a"]


def test_hashing_texts_sharing_words_are_closer():
    e = open_embedder("hash:384")
    query, near, far = e.embed(
        ["create an index on a column", "CREATE INDEX on the column of a table", "bake a cake"]
    )
    assert cosine(query, near) > cosine(query, far)


class _OtherRuntime(DelegatingEmbedder):
    """The same model (same ``model_id``: the same vectors) on a runtime that keys the
    embedding cache on its own id, as ONNX fp32 does beside PyTorch; counts what it embeds."""

    def __init__(self, inner: Embedder) -> None:
        super().__init__(inner)
        self.embedded = 0

    @property
    def cache_id(self) -> str:
        return f"{self.model_id}|other-runtime"

    def embed(self, texts: Sequence[str], *, progress: bool = False) -> np.ndarray:
        self.embedded += len(texts)
        return self.inner.embed(texts, progress=progress)


def test_vectors_another_runtime_of_the_model_cached_are_not_embedded_again(
    tmp_path: Path,
) -> None:
    """A store built on one runtime (its cache keyed on the model id, as PyTorch keys it),
    ingested again on another runtime of the same model, reuses the cached vectors: `make
    eval` on a store seeded from a PyTorch-built store's cache embedded everything again."""
    from knowledge_store.store import KnowledgeStore

    records = [
        {"uid": f"doc{i}", "type": "page", "title": f"Doc {i}", "body": f"text number {i}"}
        for i in range(5)
    ]
    built_on = open_embedder("hash:64")
    assert cache_id_of(built_on) == built_on.model_id
    with KnowledgeStore.open(tmp_path / "s", embedder=built_on) as store:
        store.ingest_records(records, acl=["everyone"])
        before = store.vector("text number 3", k=1).hits[0].uid
        store.delete([r["uid"] for r in records])
    other = _OtherRuntime(built_on)
    with KnowledgeStore.open(tmp_path / "s", embedder=other) as store:
        store.ingest_records(records, acl=["everyone"])
        assert other.embedded == 0
        assert store.vector("text number 3", k=1).hits[0].uid == before
        store.delete([r["uid"] for r in records])
        store.ingest_records(records, acl=["everyone"])
    assert other.embedded == 0
