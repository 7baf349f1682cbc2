"""The bad-input corpus (tests/bad_inputs.py) through the CLI and the Python API, on both engines.

Prints tried / rejected safely / misbehaved per engine and path. "Rejected
safely": ``invalid_record`` (exit 2 on the CLI) naming line 2 — the bad record
beside a good one — the field and what is wrong, and nothing published.

    .venv/bin/python bench/bad_input.py [--engines embedded,postgres]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from typer.testing import CliRunner

from knowledge_store.engines.embedded.catalog import EMPTY_ROOT
from knowledge_store.ingest.embedders.hashing import HashingEmbedder
from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.cli import app
from tests import postgres_support
from tests.bad_inputs import (
    CASES,
    Tally,
    api_file_problem,
    api_records_problem,
    cli_answer,
    cli_problem,
    write_case,
)


def run(engine: str, folder: Path) -> dict[str, Tally]:
    location = (
        str(folder / "store")
        if engine == "embedded"
        else postgres_support.store_url(postgres_support.fresh_database("bad_input"))
    )
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engines", default="embedded,postgres")
    args = parser.parse_args()
    print(f"{len(CASES)} cases")
    for engine in args.engines.split(","):
        with tempfile.TemporaryDirectory(prefix="ks-bad-input-") as folder:
            for path, tally in run(engine, Path(folder)).items():
                print(tally.line(f"{engine:>9}, {path:<11}"))
                for problem in tally.misbehaved:
                    print("    misbehaved:", problem)


if __name__ == "__main__":
    main()
