"""The store knows its vectors: model specs, compatible runtimes, ``model_mismatch``, re-embedding.

Both engines. A store records the model_id of its vectors and the spec that
made them; ONNX fp32 and PyTorch share a model_id (their vectors agree to
cosine ≥ 0.9999) and use each other's stores; int8 does not, and is refused
until the store is re-embedded in place — one publish, resumable through the
embedding cache, refused when the store moves on meanwhile.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from knowledge_store.errors import InvalidRequest, ModelMismatch, StoreError
from knowledge_store.ingest import pipeline
from knowledge_store.ingest.embedders.onnx import MODEL_IDS
from knowledge_store.ingest.embedding import (
    DEFAULT_MODEL_ID,
    cache_id_of,
    embedding_key,
    open_embedder,
)
from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.serve import open_store
from tests import postgres_support
from tests.conftest import ESTATE

pytestmark = pytest.mark.real_model(
    reason="changing a store's model: fp32 and int8 vectors of the bundled model"
)

ENGINES = ("embedded", "postgres")


@pytest.fixture(scope="module")
def fp32():
    """The fp32 vector space, whatever the default is: the tests move stores off it."""
    return open_embedder("onnx:fp32")


@pytest.fixture(scope="module")
def pg_database() -> str:
    return postgres_support.fresh_database("reembed")


@pytest.fixture(params=ENGINES)
def location(request: pytest.FixtureRequest, tmp_path: Path, pg_database: str) -> str:
    if request.param == "embedded":
        return str(tmp_path / "store")
    return postgres_support.store_url(pg_database)


def test_a_new_store_records_the_spec_and_the_model(location, fp32):
    with KnowledgeStore.open(location, embedder=fp32) as store:
        store.ingest_records(ESTATE)
        assert store.engine.writer.model() == (DEFAULT_MODEL_ID, 384)
        assert store.engine.writer.model_spec() == "onnx:fp32"
    with KnowledgeStore.open(location) as reopened:  # no embedder given: the recorded one
        assert reopened.embedder is open_embedder("onnx:fp32")
        assert reopened.stats().model == DEFAULT_MODEL_ID


def test_pytorch_and_onnx_fp32_read_each_others_stores(tmp_path):
    torch_path = open_embedder(f"st:{DEFAULT_MODEL_ID}")
    with KnowledgeStore.open(tmp_path / "s", embedder=torch_path) as store:
        store.ingest_records(ESTATE[:3])
        assert store.engine.writer.model_spec() == f"st:{DEFAULT_MODEL_ID}"
    with KnowledgeStore.open(tmp_path / "s") as store:
        assert store.embedder is open_embedder("onnx:fp32")  # read on ONNX: same vectors
        top = store.vector("the autovacuum daemon", k=1).hits[0]
        assert top.uid == "guide:vacuum"
        store.ingest_records(ESTATE[3:])  # and written on ONNX, accepted
        assert store.stats().entities == 5


def test_a_legacy_store_that_says_default_is_read_on_onnx(tmp_path, fp32):
    with KnowledgeStore.open(tmp_path / "s", embedder=fp32) as store:
        store.ingest_records(ESTATE)
        with store.engine.catalog.write() as conn:  # what stores built before ONNX record
            store.engine.catalog.set_meta("embedder", "default", conn)
    with KnowledgeStore.open(tmp_path / "s") as store:
        assert store.embedder is open_embedder("onnx:fp32")


def _vacuumed(store: KnowledgeStore) -> bool:
    """Whether ``chunks`` was vacuumed (the statistics reach other sessions within ~1 s)."""
    for _ in range(50):
        row = (
            store.engine.db.conn()
            .execute(
                "SELECT last_vacuum IS NOT NULL FROM pg_stat_user_tables WHERE relname = 'chunks'"
                " AND schemaname = %s",
                (store.engine.db.schema,),
            )
            .fetchone()
        )
        if row and row[0]:
            return True
        time.sleep(0.1)
    return False


def test_int8_vectors_are_refused_then_reembedded_in_place(location, fp32, monkeypatch):
    with KnowledgeStore.open(location, embedder=fp32) as store:
        store.ingest_records(ESTATE)
        before = store.content_root()
        fp32_hit = store.vector("replica lag", identity="user:sam", k=1).hits[0]

    with KnowledgeStore.open(location, embedder="onnx:int8") as wrong:
        with pytest.raises(ModelMismatch) as info:
            wrong.search("replica lag")
        assert info.value.to_dict()["error"]["code"] == "model_mismatch"
        assert "ks rebuild --reembed --embedder onnx:int8" in info.value.message
        with pytest.raises(ModelMismatch):
            wrong.ingest_records([{**ESTATE[0], "body": "changed"}])
    monkeypatch.setenv("KS_EMBEDDER", "onnx:int8")  # the CLI's way to choose
    with open_store(location) as store:
        with pytest.raises(ModelMismatch):
            _ = store.embedder
        root = store.reembed("onnx:int8")
        assert root != before
        assert store.engine.writer.model() == (MODEL_IDS["int8"], 384)
        assert store.engine.writer.model_spec() == "onnx:int8"
        assert store.stats().entities == 5  # the content is the same
        hit = store.vector("replica lag", identity="user:sam", k=1).hits[0]
        assert hit.uid == fp32_hit.uid
        assert hit.score != pytest.approx(fp32_hit.score, abs=1e-6)  # new vectors
        assert store.search("vacuum", k=3).results
        if store.engine.name == "postgres":  # the old vectors' row versions are vacuumed away
            assert _vacuumed(store)
    monkeypatch.delenv("KS_EMBEDDER")
    with open_store(location) as store:  # the store now says int8
        assert store.embedder is open_embedder("onnx:int8")
        with pytest.raises(ModelMismatch):  # and refuses fp32 vectors
            KnowledgeStore(store.engine, embedder=fp32).ingest_records(
                [{**ESTATE[0], "body": "changed"}]
            )


def test_a_store_on_the_plain_int8_model_keeps_it_until_it_is_re_embedded(tmp_path):
    # Stores built before int8 was smoothed record "…@int8": they are read and extended on
    # the plain model, never mixed with the smoothed model's vectors, and re-embed onto it.
    plain = open_embedder("onnx:int8-plain")
    with KnowledgeStore.open(tmp_path / "s", embedder=plain) as store:
        store.ingest_records(ESTATE[:3])
        with store.engine.catalog.write() as conn:  # the spec those stores recorded
            store.engine.catalog.set_meta("embedder", "onnx:int8", conn)
        before = store.vector("the autovacuum daemon", k=1).hits[0]
    assert store.engine.writer.model() == (f"{DEFAULT_MODEL_ID}@int8", 384)
    with KnowledgeStore.open(tmp_path / "s") as store:
        assert store.embedder is plain
        assert store.vector("the autovacuum daemon", k=1).hits[0] == before
        store.ingest_records(ESTATE[3:])
        assert store.stats().entities == 5
    with (
        KnowledgeStore.open(tmp_path / "s", embedder="onnx:int8") as smoothed,
        pytest.raises(ModelMismatch, match="ks rebuild --reembed --embedder onnx:int8"),
    ):
        smoothed.search("vacuum")
    with KnowledgeStore.open(tmp_path / "s") as store:
        store.reembed("onnx:int8")
        assert store.engine.writer.model() == (MODEL_IDS["int8"], 384)
        assert store.embedder is open_embedder("onnx:int8")
        assert store.vector("the autovacuum daemon", k=1).hits[0].uid == before.uid


def test_reembed_is_one_publish_and_every_vector_is_the_new_models(tmp_path, fp32):
    with KnowledgeStore.open(tmp_path / "s", embedder=fp32) as store:
        store.ingest_records(ESTATE)
        (publishes,) = store.engine.catalog.execute("SELECT count(*) FROM publishes")[0]
        store.reembed("onnx:int8")
        rows = store.engine.catalog.execute(
            "SELECT kind FROM publishes ORDER BY id DESC LIMIT 1"
        ) + store.engine.catalog.execute("SELECT count(*) FROM publishes")
        assert rows[0][0] == "reembed" and rows[1][0] == publishes + 1
        int8 = open_embedder("onnx:int8")
        contexts = store.engine.writer.chunk_contexts(0, 1000)
        with store.engine.catalog.read() as conn:
            ids, stored = store.engine.catalog.chunk_vectors(conn, [c for c, _ in contexts])
        expected = int8.embed([text for _, text in contexts])
        assert list(ids) == [c for c, _ in contexts]
        assert np.allclose(stored, expected, atol=1e-5)


def test_an_interrupted_reembed_resumes_from_the_cache(tmp_path, fp32, monkeypatch):
    with KnowledgeStore.open(tmp_path / "s", embedder=fp32) as store:
        store.ingest_records(ESTATE)
        int8 = open_embedder("onnx:int8")
        chunks = store.engine.writer.chunk_contexts(0, 1000)
        assert len(chunks) > 4
        monkeypatch.setattr(pipeline, "EMBED_BATCH", 2)
        calls: list[int] = []
        resumed = False
        real = int8.embed

        class Interrupted(Exception):
            pass

        def flaky(texts, *, progress=False):
            calls.append(len(texts))
            if len(calls) == 2 and not resumed:
                raise Interrupted
            return real(texts, progress=progress)

        monkeypatch.setattr(int8, "embed", flaky)
        with pytest.raises(Interrupted):
            store.reembed(int8)
        assert store.engine.writer.model()[0] == DEFAULT_MODEL_ID  # nothing replaced
        keys = [embedding_key(cache_id_of(int8), t) for _, t in chunks]
        assert len(store.engine.writer.cached_embeddings(keys)) == 2  # the first batch was kept
        calls.clear()
        resumed = True
        store.reembed(int8)
        assert sum(calls) == len(set(keys)) - 2  # the rest only
        assert store.engine.writer.model()[0] == MODEL_IDS["int8"]


def test_a_store_that_moved_on_is_not_reembedded(location, fp32):
    with KnowledgeStore.open(location, embedder=fp32) as store:
        store.ingest_records(ESTATE)
        int8 = open_embedder("onnx:int8")
        contexts = store.engine.writer.chunk_contexts(0, 1000)
        ids = [c for c, _ in contexts]
        vectors = int8.embed([t for _, t in contexts])
        stale = store.content_root()
        store.ingest_records([{**ESTATE[0], "body": "VACUUM, rewritten."}])
        with pytest.raises(StoreError, match="changed while it was being re-embedded"):
            store.engine.writer.replace_embeddings(
                ids,
                vectors,
                model_id=int8.model_id,
                dimension=384,
                spec="onnx:int8",
                base_root=stale,
            )
        assert store.engine.writer.model()[0] == DEFAULT_MODEL_ID


def test_a_publish_of_another_models_vectors_is_refused(location, fp32):
    with KnowledgeStore.open(location, embedder=fp32) as store:
        store.ingest_records(ESTATE[:1])
        with pytest.raises(ModelMismatch, match="re-embedded"):
            store.engine.writer.publish([], ["guide:vacuum"], kind="delete", model="other-model")
        assert store.stats().entities == 1


def test_reembedding_keeps_the_dimension(tmp_path, fp32):
    with KnowledgeStore.open(tmp_path / "s", embedder=fp32) as store:
        store.ingest_records(ESTATE[:2])
        with pytest.raises(InvalidRequest, match="keeps the dimension"):
            store.reembed("hash:64")
        assert store.engine.writer.model() == (DEFAULT_MODEL_ID, 384)


def test_cli_rebuild_reembed(tmp_path, fp32):
    import os
    import subprocess
    import sys

    with KnowledgeStore.open(tmp_path / "s", embedder=fp32) as store:
        store.ingest_records(ESTATE)
    ks = str(Path(sys.executable).with_name("ks"))
    env = {k: v for k, v in os.environ.items() if k != "KS_EMBEDDER"}

    def run(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [ks, "--store", str(tmp_path / "s"), *args],
            capture_output=True,
            text=True,
            timeout=300,
            env={**env, **extra},
            check=False,
        )

    refused = run("search", "vacuum", "--json", KS_EMBEDDER="onnx:int8")
    assert refused.returncode == 2
    assert json.loads(refused.stdout)["error"]["code"] == "model_mismatch"
    assert run("rebuild", "--embedder", "onnx:int8").returncode == 2  # only with --reembed
    done = run("rebuild", "--reembed", "--embedder", "onnx:int8", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["model"] == MODEL_IDS["int8"]
    found = run("search", "vacuum", "--json")
    assert found.returncode == 0 and json.loads(found.stdout)["results"]
