"""Shared pieces of the benchmarks: the eval set, a real-text store, replicated big stores.

Big corpora are the eval store's real chunks replicated under distinct uids,
with their real vectors plus small Gaussian noise (renormalised) — never
random vectors.
"""

from __future__ import annotations

import json
import os
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
EVAL = Path(os.environ.get("KS_EVAL_DIR", ROOT.parent / "shared" / "eval" / "postgres-docs"))
CACHE = ROOT / "bench" / ".cache"
PG15_STORE = Path(os.environ.get("KS_PG15_STORE", ROOT / ".ks" / "pg15"))


def need_eval() -> Path:
    if not (EVAL / "corpus.jsonl").exists():
        sys.exit(f"the eval set is not at {EVAL}; set KS_EVAL_DIR")
    return EVAL


def pg15_store(progress: bool = True) -> Path:
    """The eval corpus ingested into an embedded store (built once, then reused)."""
    from knowledge_store.store import KnowledgeStore

    need_eval()
    with KnowledgeStore.open(PG15_STORE) as store:
        if store.stats().entities < 4193:
            print(f"building {PG15_STORE} (embeds ~14k chunks once; cached afterwards)")
            store.ingest([EVAL / "corpus.jsonl"], progress=progress)
    return PG15_STORE


def queries(limit: int | None = None) -> list[tuple[str, str]]:
    from knowledge_store.retrieval.evaluation import read_queries

    out = read_queries(need_eval() / "queries.jsonl")
    return out[:limit] if limit else out


def percentiles(samples: Sequence[float]) -> dict[str, float]:
    ordered = sorted(samples)

    def at(p: float) -> float:
        return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]

    return {
        "p50": at(0.50) * 1000,
        "p95": at(0.95) * 1000,
        "mean": statistics.fmean(ordered) * 1000,
        "qps": len(ordered) / sum(ordered) if sum(ordered) else float("inf"),
    }


def timed(fn: Callable[[], Any], repeat: int = 1) -> tuple[float, Any]:
    best = float("inf")
    result = None
    for _ in range(repeat):
        started = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - started)
    return best, result


@contextmanager
def stopwatch(label: str) -> Iterator[None]:
    started = time.perf_counter()
    yield
    print(f"  {label}: {time.perf_counter() - started:.1f} s", flush=True)


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {str(n) for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def entity_bodies_sql(conn: sqlite3.Connection) -> tuple[str, str]:
    """``(join, table alias)`` that read entity ``e``'s ``body`` and ``attributes`` in an
    embedded catalog of any schema: 2 moved them to ``entity_bodies``, 1 has them inline."""
    if "entity_bodies" in _tables(conn):
        return " JOIN entity_bodies AS b ON b.entity = e.id", "b"
    return "", "e"


def chunk_vectors_sql(conn: sqlite3.Connection) -> tuple[str, str]:
    """``(join, column)`` that read chunk ``c``'s vector in an embedded catalog of any
    schema: 3 moved it to ``chunk_vectors``, older ones have it in the chunk row."""
    if "chunk_vectors" in _tables(conn):
        return " JOIN chunk_vectors AS v ON v.id = c.id", "v.embedding"
    return "", "c.embedding"


def source_chunks(store_path: Path) -> list[dict[str, Any]]:
    """Every entity of a store with its chunks and vectors (admin read, no ACL)."""
    conn = sqlite3.connect(store_path / "catalog.sqlite")
    entities: dict[int, dict[str, Any]] = {}
    bodies, b = entity_bodies_sql(conn)
    vectors, vector = chunk_vectors_sql(conn)
    for row in conn.execute(
        f"SELECT e.id, e.uid, e.type, e.title, {b}.body, e.source, e.status, e.created_at,"
        f" e.updated_at, e.href FROM entities AS e{bodies} ORDER BY e.id"
    ):
        entities[row[0]] = {
            "uid": row[1],
            "type": row[2],
            "title": row[3],
            "body": row[4],
            "source": row[5],
            "status": row[6],
            "created_at": row[7],
            "updated_at": row[8],
            "href": row[9],
            "chunks": [],
        }
    for entity, ordinal, text, heading, start, end, blob in conn.execute(
        f'SELECT c.entity, c.ordinal, c.text, c.heading, c.start, c."end", {vector}'
        f" FROM chunks AS c{vectors} ORDER BY c.id"
    ):
        entities[entity]["chunks"].append(
            (ordinal, text, tuple(json.loads(heading)), start, end, np.frombuffer(blob, np.float32))
        )
    conn.close()
    return [e for e in entities.values() if e["chunks"]]


def replicated_batches(
    target_chunks: int,
    acl: Callable[[int, int], Sequence[str]] = lambda copy, i: ("everyone",),
    *,
    noise: float = 0.015,
    seed: int = 7,
    batch: int = 5000,
) -> list[list[Any]]:
    """The eval store's entities replicated to ~``target_chunks`` chunks, in publish batches.

    Copy 0 keeps the real uids and vectors; later copies get ``uid~N`` and their vectors
    plus Gaussian noise (renormalised). Deterministic for a seed.
    """
    from knowledge_store.engines.base import PreparedEntity
    from knowledge_store.model import Chunk, Entity

    src = source_chunks(pg15_store(progress=False))
    rng = np.random.default_rng(seed)
    made = copy = 0
    out: list[list[Any]] = []
    pending: list[Any] = []
    while made < target_chunks:
        for i, ent in enumerate(src):
            if made >= target_chunks:
                break
            chunks = tuple(
                Chunk(ordinal=o, text=t, heading=h, start=s, end=e)
                for o, t, h, s, e, _ in ent["chunks"]
            )
            vectors = np.stack([v for *_, v in ent["chunks"]]).astype(np.float32)
            if copy:
                vectors = vectors + rng.normal(0, noise, vectors.shape).astype(np.float32)
                vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            entity = Entity(
                uid=ent["uid"] if copy == 0 else f"{ent['uid']}~{copy}",
                type=ent["type"],
                title=ent["title"],
                body=ent["body"],
                source=ent["source"],
                status=ent["status"],
                created_at=ent["created_at"],
                updated_at=ent["updated_at"],
                href=ent["href"],
                acl=tuple(sorted(set(acl(copy, i)))),
            )
            pending.append(PreparedEntity(entity, chunks, vectors))
            made += len(chunks)
            if len(pending) >= batch:
                out.append(pending)
                pending = []
        copy += 1
    if pending:
        out.append(pending)
    return out


def build_replicated_store(
    dst: Path,
    target_chunks: int,
    *,
    noise: float = 0.015,
    acl: Callable[[int, int], Sequence[str]] = lambda copy, i: ("everyone",),
    seed: int = 7,
    batch: int = 5000,
) -> Path:
    """A store of ~``target_chunks`` real chunks: the eval store replicated (see module doc)."""
    from knowledge_store.engines.embedded.engine import EmbeddedEngine

    marker = dst / "bench-built.json"
    if marker.exists() and json.loads(marker.read_text())["target_chunks"] == target_chunks:
        return dst
    batches = replicated_batches(target_chunks, acl, noise=noise, seed=seed, batch=batch)
    engine = EmbeddedEngine(dst)
    model = EmbeddedEngine(PG15_STORE).model()
    assert model is not None
    engine.writer.set_model(model[0], model[1], "default")
    started = time.perf_counter()
    made = 0
    for pending in batches:
        engine.writer.publish(pending, [], kind="ingest")
        made += sum(len(p.chunks) for p in pending)
        print(f"  {made:,} chunks ({time.perf_counter() - started:.0f} s)", flush=True)
    engine.close()
    marker.write_text(json.dumps({"target_chunks": target_chunks, "chunks": made}))
    return dst


def table(rows: list[dict[str, Any]], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title)
    for key in rows[0]:
        t.add_column(key)
    for row in rows:
        t.add_row(*(f"{v:.3f}" if isinstance(v, float) else str(v) for v in row.values()))
    Console().print(t)
