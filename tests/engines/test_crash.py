"""SIGKILL an ingesting process at random points: the store always reopens consistent."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from knowledge_store.engines.embedded.engine import EmbeddedEngine
from knowledge_store.ingest.embedding import Embedder
from knowledge_store.store import KnowledgeStore

WRITER = textwrap.dedent(
    """
    import sys
    from knowledge_store.store import KnowledgeStore
    store = KnowledgeStore.open(sys.argv[1])
    round_ = int(sys.argv[2])
    for batch in range(1000):
        records = [
            {"uid": f"r{round_}-b{batch}-{i}", "type": "page", "title": f"Record {i}",
             "body": f"# Record {i}\\n\\nkiwi batch {batch} item {i} of round {round_}.",
             "acl": ["everyone"]}
            for i in range(6)
        ]
        store.ingest_records(records)
        if batch % 3 == 0:
            store.delete([records[0]["uid"]])
        print("published", batch, flush=True)
    """
)


def _consistent(path: Path, embedder: Embedder) -> int:
    with KnowledgeStore.open(path, embedder=embedder) as store:
        engine = store.engine
        assert isinstance(engine, EmbeddedEngine)
        latest, root = engine.catalog.latest_publish()
        assert store.content_root() == root
        stats = store.stats()
        assert engine.lexical_index.watermark == latest
        assert engine.lexical_index.num_docs() == stats.chunks
        if stats.chunks:
            dense = engine.dense
            assert dense is not None and dense.watermark == latest
            assert len(dense) == stats.chunks
            hits = store.lexical("kiwi", k=1000).hits
            assert len({h.uid for h in hits}) == stats.entities
        return stats.entities


def test_sigkill_during_ingest_leaves_a_consistent_store(
    tmp_path: Path, embedder: Embedder
) -> None:
    path = tmp_path / "store"
    rng = random.Random(7)
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=os.pathsep.join(sys.path))
    published_any = False
    for round_ in range(4):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), str(round_)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            text=True,
        )
        assert proc.stdout is not None
        # wait for the model to load and a first publish, then kill at a random moment
        first = proc.stdout.readline()
        published_any = published_any or first.startswith("published")
        time.sleep(rng.uniform(0.0, 1.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        entities = _consistent(path, embedder)
        assert entities > 0
    assert published_any
