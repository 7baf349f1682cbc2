"""Seed a store's embedding cache from an embedded store's, so ingesting the same corpus
into it embeds nothing — how ``make eval EVAL_SEED=STORE`` reproduces an eval on a new
store (PostgreSQL above all) from the vectors another store already holds.

The target records the source's model (its ``model_id``, dimension and spec) unless it
records one already: ``ks ingest`` then embeds in the source's vector space and finds the
vectors under its keys (``pipeline.cached_vectors``; a target of another model is refused).

    python bench/seed_cache.py SOURCE_DIR TARGET      # TARGET: DIR, pg:DIR or postgresql://…
"""

from __future__ import annotations

import argparse
import sqlite3
from pathlib import Path

import numpy as np

from knowledge_store.store import KnowledgeStore

_BATCH = 2000


def seed_cache(store: KnowledgeStore, source: Path) -> int:
    """Copy the embedding cache of the embedded store at ``source`` into ``store``'s
    (recording the source's model when ``store`` has none); the rows copied."""
    conn = sqlite3.connect(f"file:{source / 'catalog.sqlite'}?mode=ro", uri=True)
    try:
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        rows = conn.execute("SELECT key, vector FROM embedding_cache").fetchall()
    finally:
        conn.close()
    writer = store.engine.writer
    if "model" in meta:
        model = (str(meta["model"]), int(meta["dimension"]))
        recorded = writer.model()
        if recorded is None:
            writer.set_model(*model, str(meta.get("embedder") or model[0]))
        elif recorded != model:
            raise SystemExit(f"the target's vectors are {recorded}, the source's {model}")
    for i in range(0, len(rows), _BATCH):
        writer.cache_embeddings(
            {k: np.frombuffer(v, dtype=np.float32) for k, v in rows[i : i + _BATCH]}
        )
    return len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="an embedded store (a directory)")
    parser.add_argument("target", help="the store to seed: DIR, pg:DIR or postgresql://…")
    args = parser.parse_args()
    with KnowledgeStore.open(args.target) as store:
        print(f"seeded {seed_cache(store, args.source):,} cached vectors into {args.target}")


if __name__ == "__main__":
    main()
