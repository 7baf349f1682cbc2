"""Ingest throughput, end to end, on each runtime of the bundled model: PyTorch, ONNX fp32, ONNX int8.

The same pages of the eval corpus are ingested into a fresh store (empty
embedding cache) once per runtime, the runtimes alternating over the rounds
so that the machine's drifting load hits all alike; the best round of each
counts. Beside each: the model alone on the same pieces (``Embedder.embed``),
so the pipeline's own share shows (load, validate, chunk, hash, cache,
publish: SQLite, Tantivy, HNSW). Then the re-ingest of the unchanged estate.
CPU seconds (all threads of this process) are shown beside wall seconds: on a
machine shared with other work they measure the work itself, where wall time
also measures the share of the CPUs the run got.

``--engine postgres`` ingests into PostgreSQL instead: one local pgserver instance
(stopped when the bench exits), a fresh schema per store. The hashing embedder
(``--runtimes hash:384``) leaves the model out, so what is measured is the pipeline
and the publish (the write path).

    .venv/bin/python bench/bench_ingest.py [--pages 150] [--rounds 2]
    .venv/bin/python bench/bench_ingest.py --runtimes onnx:fp32,onnx:int8
    .venv/bin/python bench/bench_ingest.py --engine postgres --runtimes hash:384,onnx:fp32
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from common import EVAL, need_eval, table

RUNTIMES = ("st:sentence-transformers/all-MiniLM-L6-v2", "onnx:fp32", "onnx:int8")
SHORT = {
    RUNTIMES[0]: "PyTorch (st:)",
    "onnx:fp32": "ONNX fp32",
    "onnx:int8": "ONNX int8",
    "hash:384": "hashing (no model)",
}


def store_places(engine: str, work: Path) -> Callable[[str], str]:
    """Where each store of the run lives: a directory, or a schema of one local server."""
    if engine == "embedded":
        return lambda name: str(work / name)
    from knowledge_store.engines.postgres.server import local_server_url

    url = local_server_url(work / "pg")  # stopped when this process exits
    joiner = "&" if "?" in url else "?"
    return lambda name: f"{url}{joiner}schema={name.replace('-', '_').lower()}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", type=int, default=150, help="pages of the eval corpus to ingest")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--runtimes", default=",".join(RUNTIMES))
    parser.add_argument("--engine", choices=("embedded", "postgres"), default="embedded")
    args = parser.parse_args()
    need_eval()

    from knowledge_store.ingest.embedding import open_embedder
    from knowledge_store.ingest.pipeline import chunk_entity
    from knowledge_store.ingest.records import record_to_entity
    from knowledge_store.store import KnowledgeStore

    lines = []
    with open(EVAL / "corpus.jsonl", encoding="utf-8") as handle:
        for line in handle:
            if '"codeSample"' in line[:200]:
                continue
            lines.append(line)
            if len(lines) >= args.pages:
                break
    work = Path(tempfile.mkdtemp(prefix="ks-bench-ingest-"))
    place = store_places(args.engine, work)
    sample = work / "sample.jsonl"
    sample.write_text("".join(lines), encoding="utf-8")
    entities = [
        record_to_entity(json.loads(x), file="s", line=i, default_acl=None, source=None)
        for i, x in enumerate(lines)
    ]
    texts = [c.context_text(e.title) for e in entities for c in chunk_entity(e)]

    specs = args.runtimes.split(",")
    embedders = {spec: open_embedder(spec) for spec in specs}
    for embedder in embedders.values():
        embedder.embed(texts[:32])  # load and warm up

    ingest_s = dict.fromkeys(specs, float("inf"))
    ingest_cpu = dict.fromkeys(specs, float("inf"))
    model_s = dict.fromkeys(specs, float("inf"))
    again_s: dict[str, float] = {}
    for round_no in range(args.rounds):
        shift = round_no % len(specs)
        for spec in specs[shift:] + specs[:shift]:
            embedder = embedders[spec]
            started = time.perf_counter()
            embedder.embed(texts)
            model_s[spec] = min(model_s[spec], time.perf_counter() - started)
            where = place(f"store-{round_no}-{spec.replace('/', '_').replace(':', '_')}")
            with KnowledgeStore.open(where, embedder=embedder) as store:
                started, cpu = time.perf_counter(), time.process_time()
                first = store.ingest([sample])
                ingest_s[spec] = min(ingest_s[spec], time.perf_counter() - started)
                ingest_cpu[spec] = min(ingest_cpu[spec], time.process_time() - cpu)
                started = time.perf_counter()
                again = store.ingest([sample])
                again_s[spec] = time.perf_counter() - started
                assert again.added == again.updated == 0
                assert again.content_root == first.content_root
            print(
                f"  round {round_no + 1} {SHORT.get(spec, spec)}:"
                f" {len(texts) / ingest_s[spec]:.1f} chunks/s best so far"
                f" (load {os.getloadavg()[0]:.1f})",
                flush=True,
            )

    base = ingest_s[specs[0]]
    rows = [
        {
            "runtime": SHORT.get(spec, spec),
            "ingest s": ingest_s[spec],
            "ingest chunks/s": len(texts) / ingest_s[spec],
            f"× {SHORT.get(specs[0], specs[0])}": base / ingest_s[spec],
            "chunks per CPU s": len(texts) / ingest_cpu[spec],
            "× (CPU)": ingest_cpu[specs[0]] / ingest_cpu[spec],
            "model only chunks/s": len(texts) / model_s[spec],
            "pipeline share": f"{(1 - model_s[spec] / ingest_s[spec]) * 100:.0f}%",
            "re-ingest s": again_s[spec],
        }
        for spec in specs
    ]
    table(
        rows,
        f"ingest of {len(entities)} pages ({len(texts)} chunks) into {args.engine},"
        f" best of {args.rounds} rounds;"
        f" {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end",
    )


if __name__ == "__main__":
    main()
