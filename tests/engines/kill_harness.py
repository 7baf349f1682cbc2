"""SIGKILL every writer of the embedded engine at random points, then check the store.

docs/architecture.md promises that a crash between the catalog commit and the
derived indexes' commits is repaired on the next open. ``kill_once`` starts a
child process that runs one writer (:data:`WRITERS`) in a loop, kills it after a
random delay, and ``check_store`` reopens the store and checks that it agrees
with its catalog through every primitive. tests/engines/test_crash.py runs a few
kills per writer; bench/kill_soak.py runs many and prints the figures.

The child never loads the model: every text it ingests was embedded when the
store was seeded (the catalog caches vectors by text).

With ``corrupt``, each kill is followed by damage below the store (issue 25, item 9):
50 bytes flipped in one derived-index file picked at random (a lexical segment file,
``meta.json`` or the dense file, :func:`corrupt_once`). The reopened store must move
it aside, rebuild it and agree with its catalog all the same.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from knowledge_store.engines.embedded.engine import EmbeddedEngine
from knowledge_store.ingest.embedding import Embedder
from knowledge_store.store import KnowledgeStore

WRITERS: tuple[str, ...] = ("ingest", "delete", "grant", "revoke", "principals load", "rebuild")
UIDS = 40
VARIANTS = 3
REVOCABLE = 12  # user:r0 … user:r11 in every seeded ACL, for the revoke writer
IDENTITIES = ("everyone", "user:a", "group:g", "user:m3", "user:r5")


def record(n: int, variant: int, *, revocable: bool = True) -> dict[str, Any]:
    """Entity ``c:n`` in one of its variants (its text was embedded when seeding)."""
    acl = [["everyone"], ["group:g"], ["user:a", "group:h"]][n % 3]
    if revocable:
        acl = [*acl, *(f"user:r{j}" for j in range(REVOCABLE))]
    return {
        "uid": f"c:{n}",
        "type": "page" if n % 2 else "note",
        "title": f"Crash {n}",
        "body": f"# Crash {n}\n\nkiwi {n} in variant {variant}.",
        "created_at": f"{2000 + n:04d}-01-01",
        "acl": acl,
        "edges": [{"label": "xref", "to": f"c:{(n + 1) % UIDS}"}],
    }


def seed(path: Path, embedder: Embedder) -> None:
    """Every uid in every variant once (embedding each text), then variant 0 with full ACLs."""
    with KnowledgeStore.open(path, embedder=embedder) as store:
        for variant in range(VARIANTS):
            store.ingest_records([record(n, variant) for n in range(UIDS)])
        store.ingest_records([record(n, 0) for n in range(UIDS)])
        store.load_memberships([("group:g", "user:m3"), ("group:h", "group:g")])


def reseed(path: Path, embedder: Embedder) -> None:
    """Put back what delete and revoke used up (all texts are cached: nothing is embedded)."""
    with KnowledgeStore.open(path, embedder=embedder) as store:
        store.ingest_records([record(n, 0) for n in range(UIDS)])


CHILD = textwrap.dedent(
    """
    import random, sys
    sys.path.insert(0, sys.argv[4])
    from knowledge_store.store import KnowledgeStore
    from tests.engines.kill_harness import UIDS, VARIANTS, REVOCABLE, record

    path, writer, rng = sys.argv[1], sys.argv[2], random.Random(int(sys.argv[3]))
    store = KnowledgeStore.open(path)
    uids = [f"c:{n}" for n in range(UIDS)]
    print("ready", flush=True)
    for i in range(100_000):
        present = sorted(store.engine.writer.content_hashes(uids))
        if writer == "ingest":
            picked = rng.sample(range(UIDS), 6)
            store.ingest_records([record(n, rng.randrange(VARIANTS), revocable=False) for n in picked])
        elif writer == "delete":
            if not present:
                break
            store.delete([rng.choice(present)])
        elif writer == "grant":
            store.grant(rng.choice(present), f"user:k{i}")
        elif writer == "revoke":
            uid = rng.choice(present)
            held = [p for p in store.acl_show(uid) if p.startswith("user:r")]
            if held:
                store.revoke(uid, rng.choice(held))
        elif writer == "principals load":
            store.load_memberships([("group:g", f"user:m{i}"), ("group:g", f"user:m{i + 1}")])
        elif writer == "rebuild":
            store.rebuild()
        print("done", i, flush=True)
    print("exhausted", flush=True)
    """
)


@dataclass
class KillFigures:
    """tried / failed safely / misbehaved for one writer, and what the kills left behind."""

    tried: int = 0
    safe: int = 0
    misbehaved: list[str] = field(default_factory=list)
    behind: int = 0  # the catalog was ahead of a derived index at the kill (repaired on open)
    leftovers: int = 0  # temp or orphan index files were there at the kill (removed on open)
    corrupted: int = 0  # kills followed by bytes flipped in a derived-index file

    def line(self, writer: str) -> str:
        damaged = f", {self.corrupted} with an index file damaged" if self.corrupted else ""
        return (
            f"{writer:>16}: {self.tried} tried / {self.safe} failed safely /"
            f" {len(self.misbehaved)} misbehaved  ({self.behind} left an index behind,"
            f" {self.leftovers} left files behind{damaged})"
        )


def _watermarks(path: Path) -> tuple[int, int, int | None]:
    """(catalog's latest publish, lexical watermark, dense watermark) read from the files."""
    import json
    import struct

    with sqlite3.connect(path / "catalog.sqlite") as conn:
        row = conn.execute("SELECT coalesce(max(id), 0) FROM publishes").fetchone()
    latest = int(row[0])
    try:
        lexical = int(json.loads((path / "lexical" / "ks-lexical.json").read_text())["watermark"])
    except (OSError, ValueError, KeyError):
        lexical = -1
    dense: int | None = None
    try:
        with (path / "dense.hnsw").open("rb") as fh:
            fh.read(8)
            (length,) = struct.unpack("<I", fh.read(4))
            dense = int(json.loads(fh.read(length))["watermark"])
    except (OSError, ValueError, KeyError, struct.error):
        dense = None
    return latest, lexical, dense


def leftover_files(path: Path) -> list[str]:
    lexical = path / "lexical"
    found = [*path.glob("dense.hnsw.tmp*"), *lexical.glob(".tmp*"), *lexical.glob("*.tmp*")]
    return sorted({p.name for p in found})


def corrupt_once(path: Path, rng: random.Random) -> str:
    """Flip 50 bytes of one derived-index file of the store, picked at random; its name."""
    lexical = path / "lexical"
    files = [p for p in lexical.iterdir() if _SEGMENT_FILE.fullmatch(p.name)]
    files += [lexical / "meta.json", path / "dense.hnsw"]
    target = rng.choice(sorted(p for p in files if p.is_file() and p.stat().st_size))
    data = bytearray(target.read_bytes())
    for _ in range(50):
        data[rng.randrange(len(data))] ^= 0xFF
    target.write_bytes(bytes(data))
    return target.name


#: The files of a Tantivy segment (``<uuid>.<component>``, ``<uuid>.<opstamp>.del``).
_SEGMENT_FILE = re.compile(r"[0-9a-f]{32}\.(?:idx|pos|term|store|fast|fieldnorm|\d+\.del)")


def _forget_quarantined(path: Path) -> None:
    """Delete the damaged indexes the reopened store moved aside (the operator's job)."""
    for moved in path.glob("*.damaged-*"):
        if moved.is_dir():
            shutil.rmtree(moved)
        else:
            moved.unlink()


def kill_once(path: Path, writer: str, rng: random.Random, *, max_delay: float = 1.0) -> bool:
    """Run ``writer`` in a child and SIGKILL it after a random delay; False if it finished first."""
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), writer, str(rng.randrange(1 << 30)), str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()
    if not first.startswith("ready"):
        proc.kill()
        _, err = proc.communicate(timeout=30)
        raise AssertionError(f"the {writer} child did not start: {first!r} {err[-2000:]}")
    time.sleep(rng.uniform(0.0, max_delay))
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.stdout is not None
    rest = proc.stdout.read()
    proc.stdout.close()
    if proc.stderr is not None:
        proc.stderr.close()
    return "exhausted" not in rest


def check_store(path: Path, embedder: Embedder) -> None:
    """Reopen the store: it must open, leave nothing behind, and agree with its catalog
    through every primitive (raises AssertionError saying where it does not)."""
    with KnowledgeStore.open(path, embedder=embedder) as store:
        engine = store.engine
        assert isinstance(engine, EmbeddedEngine)
        assert not leftover_files(path), f"left behind after open: {leftover_files(path)}"
        latest, root = engine.catalog.latest_publish()
        assert store.content_root() == root
        assert engine.lexical_index.watermark == latest, "lexical watermark behind"
        with engine.catalog.read() as conn:
            chunk_ids = set(engine.catalog.all_chunk_ids(conn))
        from knowledge_store.model import Filters

        indexed = engine.lexical_index.search("kiwi", 1_000_000, principals=None, filters=Filters())
        assert {c for c, _, _ in indexed} == chunk_ids, "lexical documents ≠ catalog chunks"
        assert engine.lexical_index.num_docs() == len(chunk_ids)
        dense = engine.dense
        if chunk_ids:
            assert dense is not None and dense.watermark == latest, "dense watermark behind"
            generation = dense.generation()
            live = set(int(i) for i in generation.row_ids[generation.live])
            assert live == chunk_ids, "dense rows ≠ catalog chunks"
        stats = store.stats()
        assert stats.chunks == len(chunk_ids)
        assert stats.extra["indexes"]["error"] is None
        query = embedder.embed_query("kiwi")
        for who in IDENTITIES:
            visible = {h.uid for h in store.sql(identity=who, k=1000).hits}
            assert {h.uid for h in store.lexical("kiwi", identity=who, k=1000).hits} == visible, who
            assert {h.uid for h in store.vector(query, identity=who, k=1000).hits} == visible, who
            assert {r.uid for r in store.search("kiwi", identity=who, k=100).results} == visible
            (count,) = store.aggregate("count", identity=who).rows
            assert count.value == len(visible), who
            rows = store.query_graph("MATCH (n) RETURN count(*)", identity=who).rows
            assert rows == [[len(visible)]], who
            for uid in sorted(visible)[:3]:
                hits = store.graph([uid], identity=who, k=100).hits
                assert {h.uid for h in hits} <= visible, who
                content = store.content(uid, identity=who)
                lexical_ids = {
                    h.chunk_id
                    for h in store.lexical("kiwi", identity=who, k=1000).hits
                    if h.uid == uid
                }
                assert {c.chunk_id for c in content.chunks} == lexical_ids, uid
        members = store.principal_show("group:g").members
        assert len(members) in (1, 2), f"group:g has the members {members}: a half-done load"


def soak(
    path: Path,
    embedder: Embedder,
    writers: tuple[str, ...],
    kills: int,
    rng: random.Random,
    report: Callable[[str, KillFigures], None] | None = None,
    *,
    max_delay: float = 1.0,
    corrupt: bool = False,
) -> dict[str, KillFigures]:
    """``kills`` kills of each writer on one store (seeded first); the figures per writer.
    ``corrupt``: each kill is followed by 50 bytes flipped in a derived-index file.

    A store that misbehaved is replaced by a copy of the freshly seeded one, so that
    one wedged store doesn't count against every later kill.
    """
    pristine = path.with_name(path.name + "-seeded")
    if not (path / "catalog.sqlite").exists():
        seed(path, embedder)
    if not pristine.exists():
        shutil.copytree(path, pristine)
    figures = {writer: KillFigures() for writer in writers}
    for writer in writers:
        got = figures[writer]
        while got.tried < kills:
            if writer in ("delete", "revoke") and got.tried % 5 == 0:
                reseed(path, embedder)
            try:
                finished_first = not kill_once(path, writer, rng, max_delay=max_delay)
            except AssertionError as exc:  # the writer could not even open the store
                got.tried += 1
                got.misbehaved.append(f"the store does not open: {str(exc)[-300:]}")
                _replace(path, pristine)
                continue
            if finished_first:
                reseed(path, embedder)
                continue
            latest, lexical, dense = _watermarks(path)
            got.behind += lexical < latest or (dense is not None and dense < latest)
            got.leftovers += bool(leftover_files(path))
            got.tried += 1
            damaged = ""
            if corrupt:
                damaged = f" (after damaging {corrupt_once(path, rng)})"
                got.corrupted += 1
            try:
                check_store(path, embedder)
            except BaseException as exc:  # every way a reopened store can misbehave (a panic too)
                if isinstance(exc, KeyboardInterrupt):
                    raise
                got.misbehaved.append(f"{type(exc).__name__}{damaged}: {str(exc)[:300]}")
                _replace(path, pristine)
            else:
                got.safe += 1
            _forget_quarantined(path)
        if report is not None:
            report(writer, got)
    return figures


def _replace(path: Path, pristine: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(pristine, path)
