"""The corruption corpus (tests/engines/corruption.py) on every engine, through the CLI.

Before issue 25, item 9: 50 flipped bytes in one lexical segment file made every
command fail (a ``.term`` file: a Rust panic through the CLI), and a changed byte in
the catalog's payload went unseen. Now a damaged derived index is moved aside and
rebuilt from the catalog when the store opens, every command answers as before, and
``ks check`` reports what was damaged — in the catalog too — with its uids.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from knowledge_store.ingest.embedding import Embedder
from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.cli import app
from tests.engines import corruption
from tests.engines.corruption import Tally

runner = CliRunner()


def _cli(location: str) -> corruption.Cli:
    def run(*args: str) -> tuple[int, Any]:
        result = runner.invoke(app, ["--store", location, *args])
        out = result.stdout.strip()
        try:
            return result.exit_code, json.loads(out) if out else None
        except ValueError:
            return result.exit_code, out

    return run


def test_every_corruption_is_found_and_fails_safely(
    engine: Any, embedder: Embedder, tmp_path: Path
) -> None:
    engine_kind = str(engine.kind)
    tally = Tally()
    pristine: Path | None = None
    before: dict[str, Any] = {}
    for n, case in enumerate(corruption.cases(engine_kind)):
        if engine_kind == "embedded":  # one seeded store, copied for every case
            if pristine is None:
                pristine = tmp_path / "seeded"
                with KnowledgeStore.open(pristine, embedder=embedder) as store:
                    corruption.seed(store)
                before = corruption.answers(_cli(str(pristine)))
            location = str(tmp_path / f"case-{n}")
            shutil.copytree(pristine, location)
        else:
            location = str(engine.location())
            with KnowledgeStore.open(location, embedder=embedder) as store:
                corruption.seed(store)
            before = corruption.answers(_cli(location))
        case.damage(location, random.Random(n))
        tally.record(case.name, corruption.case_problem(case, _cli(location), before))
    print(tally.line(f"{engine_kind:>9}, corruption"))
    assert not tally.misbehaved, "\n".join(tally.misbehaved)
