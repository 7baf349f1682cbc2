"""Checking the lexical index's files never mistakes another process's commit for damage.

A reader checks the files of the commit ``meta.json`` names; a writer in another process
may commit meanwhile, and a merge's commit deletes the segments it merged — so a file of
the commit read a moment ago can be gone. Reported as damage, the reader would stop
reading a sound index until a rebuild that nobody would run. Here a child process
publishes in a loop (merges included) while readers open the store and search it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from knowledge_store.ingest.embedding import Embedder
from knowledge_store.store import KnowledgeStore
from tests.engines.kill_harness import CHILD, seed


def test_readers_never_take_a_concurrent_commit_for_damage(
    tmp_path: Path, embedder: Embedder
) -> None:
    path = tmp_path / "store"
    seed(path, embedder)
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    writer = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), "ingest", "5", str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        text=True,
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline().startswith("ready")
        deadline = time.monotonic() + 20
        opened = searched = 0
        with KnowledgeStore.open(path, embedder=embedder) as long_lived:
            while time.monotonic() < deadline:
                with KnowledgeStore.open(path, embedder=embedder) as fresh:  # checks every file
                    assert fresh.engine.lexical_index.damage is None  # type: ignore[union-attr]
                    assert fresh.lexical("kiwi", k=5).hits
                opened += 1
                for _ in range(5):  # reloads, checking the segments committed since
                    assert long_lived.lexical("kiwi", k=5).hits
                    searched += 1
                assert long_lived.engine.lexical_index.damage is None  # type: ignore[union-attr]
        assert opened >= 3 and searched >= 15
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)
        if writer.stdout is not None:
            writer.stdout.close()
    assert not list(path.glob("*.damaged-*"))
