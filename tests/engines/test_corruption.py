"""The corruption corpus (tests/engines/corruption.py) on every engine, through the CLI.

Before issue 25, item 9: 50 flipped bytes in one lexical segment file made every
command fail (a ``.term`` file: a Rust panic through the CLI), and a changed byte in
the catalog's payload went unseen. Now a damaged derived index is moved aside and
rebuilt from the catalog when the store opens, every command answers as before, and
``ks check`` reports what was damaged — in the catalog too — with its uids.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from knowledge_store.ingest.embedding import Embedder
from knowledge_store.surfaces.cli import app
from tests.engines import corruption

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
    kind = str(engine.kind)

    def new_location(name: str) -> str:
        return str(tmp_path / name) if kind == "embedded" else str(engine.location())

    tally = corruption.run_corpus(kind, new_location, embedder, _cli)
    print(tally.line(f"{kind:>9}, corruption"))
    assert tally.tried == len(corruption.cases(kind))
    assert not tally.misbehaved, "\n".join(tally.misbehaved)
