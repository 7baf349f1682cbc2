"""Do the document loaders lose anything that matters? The PostgreSQL 15 manual as HTML, as
PDF and as DOCX, each ingested into a store of its own and evaluated on the same judged
queries (issue 30's fidelity figure).

The HTML pages come from Debian's ``postgresql-doc-15`` (``apt-get download
postgresql-doc-15; dpkg -x …``); the PDFs from headless Chromium's print-to-PDF, the DOCX
files from pandoc, one file per page under the page's own name (so that the uid matches the
set's ``pg15:<page>``). Only the pages present in all three folders are ingested, and only
the queries whose judged pages are all among them are asked, the same for each format. The
set's qrels name ``pg15:<page>``; a folder's uids are ``<page>``, so the prefix is dropped
from a copy of the qrels in the work folder (nothing of the set is written into the repo).

    nice .venv/bin/python bench/eval_documents.py --html H --pdf P --docx D \\
        --set ../shared/eval/postgres-docs --work /tmp/eval-docs [--limit N]

Prints, per format: files, entities, chunks, ingest seconds, and nDCG@10 / Recall@100 /
MRR@10 of lexical, vector and fused search (``--not-type codeSample``, as the set's
README does).
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


def _pages(folder: Path, suffix: str) -> set[str]:
    return {p.name[: -len(suffix)] for p in folder.iterdir() if p.name.endswith(suffix)}


def _ks(store: Path, *args: str) -> dict:  # type: ignore[type-arg]
    command = [sys.executable, "-m", "knowledge_store.surfaces.cli", "--store", str(store), *args]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--html", type=Path, required=True)
    parser.add_argument("--pdf", type=Path, required=True)
    parser.add_argument("--docx", type=Path, required=True)
    parser.add_argument("--set", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--limit", type=int, default=0, help="at most this many pages (0: all)")
    parser.add_argument("--formats", default="html,pdf,docx")
    args = parser.parse_args()
    sources = {
        "html": (args.html, ".html"),
        "pdf": (args.pdf, ".pdf"),
        "docx": (args.docx, ".docx"),
    }
    pages = set.intersection(*(_pages(folder, suffix) for folder, suffix in sources.values()))
    pages -= {"bookindex", "legalnotice"}
    chosen = sorted(pages)[: args.limit] if args.limit else sorted(pages)
    args.work.mkdir(parents=True, exist_ok=True)
    qrels: dict[str, set[str]] = {}
    for line in (args.set / "qrels.tsv").read_text().splitlines():
        parts = line.split("\t")
        if len(parts) >= 3 and parts[0] != "query-id":
            qrels.setdefault(parts[0], set()).add(parts[1].removeprefix("pg15:"))
    kept = {q for q, relevant in qrels.items() if relevant <= set(chosen)}
    (args.work / "qrels.tsv").write_text(
        "query-id\tcorpus-id\tscore\n"
        + "".join(f"{q}\t{uid}\t1\n" for q in sorted(kept) for uid in sorted(qrels[q]))
    )
    queries = [
        line
        for line in (args.set / "queries.jsonl").read_text().splitlines()
        if line.strip() and json.loads(line)["qid"] in kept
    ]
    (args.work / "queries.jsonl").write_text("\n".join(queries) + "\n")
    print(
        f"{len(chosen)} pages in all three formats; {len(kept)} queries judged on them only;"
        f" load {os.getloadavg()}"
    )
    for name in args.formats.split(","):
        folder, suffix = sources[name]
        home = args.work / name
        home.mkdir(exist_ok=True)
        for page in chosen:
            copy = home / f"{page}{suffix}"
            if not copy.exists():  # a hard link (a symbolic one leads out of the folder)
                try:
                    os.link(folder / f"{page}{suffix}", copy)
                except OSError:
                    shutil.copyfile(folder / f"{page}{suffix}", copy)
        store = args.work / f"store-{name}"
        started = time.monotonic()
        report = _ks(store, "ingest", str(home), "--acl", "everyone", "--skip-invalid", "--json")
        took = time.monotonic() - started
        stats = _ks(store, "stats", "--json")
        figures = _ks(
            store,
            "eval",
            "--queries",
            str(args.work / "queries.jsonl"),
            "--qrels",
            str(args.work / "qrels.tsv"),
            "--not-type",
            "codeSample",
            "--json",
        )
        print(
            f"{name:>5}: {len(chosen)} files, {stats['entities']} entities, {stats['chunks']} chunks,"
            f" ingest {took:.0f} s; rejected {len(report['rejected'])}, skipped {len(report['skipped'])}"
        )
        for mode in ("lexical", "vector", "fused"):
            m = figures[mode]
            print(
                f"       {mode:<8} nDCG@10 {m['ndcg@10']:.4f}  Recall@100 {m['recall@100']:.4f}"
                f"  MRR@10 {m['mrr@10']:.4f}"
            )


if __name__ == "__main__":
    main()
