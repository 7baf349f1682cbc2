"""The bad-input corpus (tests/bad_inputs.py) through the CLI and the Python API, on both engines.

Prints tried / rejected safely / misbehaved per engine and path. "Rejected
safely": ``invalid_record`` (exit 2 on the CLI) naming line 2 — the bad record
beside a good one — the field and what is wrong, and nothing published.

Then the corruption corpus (tests/engines/corruption.py): bad bytes below the store —
flipped in its index files and its catalog's payload, rows changed behind its back.
"Failed safely": ``ks check`` finds the damage, every command answers (or, where the
damage is random, says ``store_error``), ``ks rebuild`` works and repairs what is derived.

Then the bad files (``FILE_CASES``: a page nesting 200,000 deep, a 2 GB sparse
Markdown file …), each in a folder beside a good page, through a real ``ks ingest
--skip-invalid`` process: the outcome, the wall-clock seconds and the process's
peak RSS per case.

    .venv/bin/python bench/bad_input.py [--engines embedded,postgres] [--files-only]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from typer.testing import CliRunner

from knowledge_store.engines.sql.publish import EMPTY_ROOT
from knowledge_store.ingest.embedders.hashing import HashingEmbedder
from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.cli import app
from tests import postgres_support
from tests.bad_inputs import (
    CASES,
    FILE_CASES,
    FileCase,
    Tally,
    api_file_problem,
    api_records_problem,
    cli_answer,
    cli_problem,
    file_report_problem,
    write_case,
    write_file_case,
)
from tests.engines import corruption


def run(engine: str, folder: Path) -> dict[str, Tally]:
    location = _location(engine, folder)
    runner = CliRunner()

    def cli(*args: str) -> tuple[int, Any]:
        result = runner.invoke(app, ["--store", location, *args])
        return cli_answer(result.exit_code, result.stdout_bytes)

    tallies = {"cli": Tally(), "api file": Tally(), "api records": Tally()}
    with KnowledgeStore.open(location, embedder=HashingEmbedder()) as store:

        def unchanged() -> str | None:
            return None if store.content_root() == EMPTY_ROOT else "something was published"

        for case in CASES:
            path = write_case(case, folder)
            tallies["cli"].record(case.name, cli_problem(case, cli, path) or unchanged())
            problem = api_file_problem(case, lambda p: store.ingest([p]), path)
            tallies["api file"].record(case.name, problem or unchanged())
            if not case.text_only and case.parsed() is not None:
                problem = api_records_problem(case, store.ingest_records)
                tallies["api records"].record(case.name, problem or unchanged())
    return tallies


def run_corruption(engine: str, folder: Path) -> corruption.Tally:
    runner = CliRunner()
    database = None if engine == "embedded" else postgres_support.fresh_database("corruption")

    def new_location(name: str) -> str:
        if database is None:
            return str(folder / name)
        return postgres_support.store_url(database)

    def cli_of(location: str) -> Any:
        def cli(*args: str) -> tuple[int, Any]:
            result = runner.invoke(app, ["--store", location, *args])
            out = result.stdout.strip()
            try:
                return result.exit_code, json.loads(out) if out else None
            except ValueError:
                return result.exit_code, out

        return cli

    return corruption.run_corpus(engine, new_location, HashingEmbedder(), cli_of)


def _location(engine: str, folder: Path) -> str:
    if engine == "embedded":
        return str(folder / "store")
    return postgres_support.store_url(postgres_support.fresh_database("bad_input"))


def _ks(location: str, *args: str) -> tuple[int, Any, float, int]:
    """``ks`` in a process of its own: exit code, JSON answer, seconds, peak RSS in bytes."""
    env = {**os.environ, "KS_EMBEDDER": "hash:384"}
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "knowledge_store.surfaces.cli", "--store", location, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    assert process.stdout is not None
    out = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.monotonic() - started
    try:
        answer = json.loads(out) if out.strip() else None
    except ValueError:
        answer = out.decode(errors="replace")
    return process.returncode, answer, seconds, usage.ru_maxrss * 1024


def run_files(engine: str, folder: Path) -> Tally:
    """Each file case in a real ``ks ingest --skip-invalid`` process; prints its figures."""
    location = _location(engine, folder)
    tally = Tally()
    for case in FILE_CASES:
        home = write_file_case(case, folder)
        code, answer, seconds, rss = _ks(
            location, "ingest", str(home), "--acl", "everyone", "--skip-invalid", "--json"
        )
        problem = (
            f"exit {code}: {str(answer)[:200]}"
            if code != 0 or not isinstance(answer, dict)
            else file_report_problem(case, answer, home)
        )
        tally.record(case.name, problem)
        _print_case(case, problem, seconds, rss)
    return tally


def _print_case(case: FileCase, problem: str | None, seconds: float, rss: int) -> None:
    outcome = case.outcome if problem is None else "MISBEHAVED"
    print(f"    {case.name:<45} {outcome:<10} {seconds:6.2f} s  {rss / 1024**2:7.1f} MiB peak RSS")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engines", default="embedded,postgres")
    parser.add_argument("--files-only", action="store_true")
    args = parser.parse_args()
    print(f"{len(CASES)} record cases, {len(FILE_CASES)} file cases; load: {os.getloadavg()}")
    for engine in args.engines.split(","):
        with tempfile.TemporaryDirectory(prefix="ks-bad-input-") as folder:
            if not args.files_only:
                for path, tally in run(engine, Path(folder)).items():
                    print(tally.line(f"{engine:>9}, {path:<11}"))
                    for problem in tally.misbehaved:
                        print("    misbehaved:", problem)
        with tempfile.TemporaryDirectory(prefix="ks-bad-files-") as folder:
            print(f"{engine:>9}, files (ks ingest FOLDER --skip-invalid, one process each):")
            tally = run_files(engine, Path(folder))
            print(tally.line(f"{engine:>9}, {'files':<11}"))
            for problem in tally.misbehaved:
                print("    misbehaved:", problem)
    if args.files_only:
        return
    for engine in args.engines.split(","):
        with tempfile.TemporaryDirectory(prefix="ks-corruption-") as folder:
            got = run_corruption(engine, Path(folder))
            print(got.line(f"{engine:>9}, corruption ({len(corruption.cases(engine))} cases)"))
            for problem in got.misbehaved:
                print("    misbehaved:", problem)


if __name__ == "__main__":
    main()
