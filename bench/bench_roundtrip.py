"""Export → ingest round trip across engines: embedded → PostgreSQL → embedded (issue 31).

``ks export`` of SOURCE (an embedded store), ingested into a new ``pg:`` store, exported
again and ingested into a new embedded store; each target's embedding cache is seeded from
SOURCE first (``bench/seed_cache.py``), so nothing is embedded again and the vectors are
the same. Prints, per store: entities, chunks, edges, the content digest, the export's
size and time, the ingest's time — and, with ``--eval DIR``, the ``make eval`` table of
SOURCE and of each copy (``ks eval --not-type codeSample``).

    python bench/bench_roundtrip.py SOURCE WORK [--eval ../shared/eval/postgres-docs]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from seed_cache import seed_cache

from knowledge_store.store import KnowledgeStore


def _store_figures(location: str) -> dict[str, Any]:
    with KnowledgeStore.open(location, create=False) as store:
        stats = store.stats()
        return {
            "entities": stats.entities,
            "chunks": stats.chunks,
            "edges": sum(stats.edges.values()),
            "digest": store.digest(),
        }


def _export(location: str, out: Path) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    with KnowledgeStore.open(location, create=False) as store, out.open("w") as handle:
        report = store.export(handle)
    with (
        KnowledgeStore.open(location, create=False) as store,
        out.with_suffix(".members").open("w") as handle,
    ):
        store.export_principals(handle)
    return time.perf_counter() - started, report.model_dump()


def _ingest(source: Path, records: Path, location: str) -> float:
    with KnowledgeStore.open(location) as store:
        seed_cache(store, source)
        started = time.perf_counter()
        store.ingest([records])
        members = [
            (m["group"], m["member"])
            for m in map(json.loads, records.with_suffix(".members").read_text().splitlines())
        ]
        if members:
            store.load_memberships(members)
        return time.perf_counter() - started


def _eval(location: str, folder: Path) -> dict[str, Any]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "knowledge_store.surfaces.cli",
            "--store",
            location,
            "eval",
            "--queries",
            str(folder / "queries.jsonl"),
            "--qrels",
            str(folder / "qrels.tsv"),
            "--not-type",
            "codeSample",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
        env={k: v for k, v in os.environ.items() if k != "KS_EMBEDDER"},
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="an embedded store")
    parser.add_argument("work", type=Path, help="a new directory for the copies and exports")
    parser.add_argument("--eval", type=Path, help="an eval set: run ks eval on every store")
    args = parser.parse_args()
    if args.work.exists():
        shutil.rmtree(args.work)
    args.work.mkdir(parents=True)
    steps = [
        ("source (embedded)", str(args.source)),
        ("PostgreSQL", f"pg:{args.work / 'pg'}"),
        ("embedded again", str(args.work / "last")),
    ]
    rows = []
    previous = None
    for n, (label, location) in enumerate(steps):
        row: dict[str, Any] = {"store": label}
        if previous is not None:
            row["ingest_s"] = round(_ingest(args.source, previous, location), 1)
        figures = _store_figures(location)
        records = args.work / f"export-{n}.jsonl"
        took, report = _export(location, records)
        row.update(figures)
        row["export_s"] = round(took, 1)
        row["export_MB"] = round(records.stat().st_size / 1e6, 1)
        row["export_digest_equal"] = report["digest"] == figures["digest"]
        if args.eval is not None:
            fused = _eval(location, args.eval)["fused"]
            row.update({f"fused {k}": round(v, 4) for k, v in fused.items()})
        rows.append(row)
        print(json.dumps(row), flush=True)
        previous = records
    same = {k for k in rows[0] if all(r.get(k) == rows[0].get(k) for r in rows)}
    print("equal on every store:", ", ".join(sorted(same - {"store"})))
    print(
        "exports identical:",
        (args.work / "export-1.jsonl").read_bytes() == (args.work / "export-2.jsonl").read_bytes(),
    )


if __name__ == "__main__":
    main()
