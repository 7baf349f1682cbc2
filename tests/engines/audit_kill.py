"""SIGKILL the audit writer at random points; then no acknowledged record may be missing.

``kill_audit_once`` starts a child that records requests on four threads (group commits:
reads of the store, and now and then an ACL grant, whose record moves the checkpoint in
the catalog), printing ``acked SEQ DIGEST`` for each record as soon as its append returned
— the moment a surface hands the answer back. The child is killed after a random delay;
``check_audit`` reopens the store: every acknowledged record is in the log with its digest,
the chain verifies from the first record to the head, and the next append follows it.
tests/engines/test_audit_kill.py runs a few kills; bench/kill_soak.py ``--writers audit``
runs the soak.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

from knowledge_store.requests import AuditSettingsRequest
from knowledge_store.store import KnowledgeStore

CHILD = textwrap.dedent(
    """
    import sys, threading
    sys.path.insert(0, sys.argv[3])
    from knowledge_store.store import KnowledgeStore

    store = KnowledgeStore.open(sys.argv[1], embedder="hash:384")
    fsync = sys.argv[2] == "fsync"
    out = threading.Lock()

    def work(thread):
        for i in range(1_000_000):
            change = i % 25 == 24
            operation = "acl_grant" if change else "sql"
            with store.auditor.recording(
                "python", operation, subject="kill-test", identity=f"user:t{thread}",
                admin=change, request={"n": i},
            ) as rec:
                if change:
                    rec.answer = store.grant("k:0", f"user:g{thread}-{i}")
                else:
                    rec.answer = store.sql(identity=f"user:t{thread}", k=3)
            with out:
                print("acked", rec.appended[0], rec.appended[1], flush=True)

    print("ready", flush=True)
    threads = [threading.Thread(target=work, args=(t,), daemon=True) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    """
)


@dataclass
class AuditKills:
    """kills / records acknowledged before them / acknowledged records lost / broken logs."""

    kills: int = 0
    acked: int = 0
    lost: int = 0
    problems: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"{'audit writer':>16}: {self.kills} kills / {self.acked} records acknowledged"
            f" before them / {self.lost} lost / {len(self.problems)} logs that did not verify"
        )


def seed_audit(location: str | Path, *, fsync: bool = False) -> None:
    """A store with one entity to read and grant on, its audit log on."""
    with KnowledgeStore.open(location, embedder="hash:384") as store:
        store.ingest_records(
            [{"uid": "k:0", "type": "page", "title": "Kill", "body": "kiwi", "acl": ["everyone"]}]
        )
        store.audit_settings(AuditSettingsRequest.parse({"fsync": "on" if fsync else "off"}))


def kill_audit_once(
    location: str | Path, rng: random.Random, *, max_delay: float = 1.0, fsync: bool = False
) -> list[tuple[int, str]]:
    """Run the audit writer child and SIGKILL it after a random delay; what it acknowledged."""
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(location), "fsync" if fsync else "", str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    if not first.startswith("ready"):
        proc.kill()
        _, err = proc.communicate(timeout=30)
        raise AssertionError(f"the audit child did not start: {first!r} {err[-2000:]}")
    time.sleep(rng.uniform(0.05, max_delay))
    proc.send_signal(signal.SIGKILL)
    out, err = proc.communicate(timeout=30)
    acked = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "acked":  # a line cut by the kill was never read
            acked.append((int(parts[1]), parts[2]))
    return acked


def check_audit(location: str | Path, acked: list[tuple[int, str]]) -> list[str]:
    """What is wrong with the log after a kill (nothing: ``[]``)."""
    problems: list[str] = []
    with KnowledgeStore.open(location, embedder="hash:384") as store:
        storage = store.engine.audit
        for seq, digest in acked:
            found = storage.record(seq)
            if found is None:
                problems.append(f"acknowledged record {seq} is not in the log")
            elif found.digest != digest:
                problems.append(f"acknowledged record {seq} has another digest in the log")
        verdict = store.audit_verify()
        problems += [f"verify: {p.kind} at {p.seq}: {p.message}" for p in verdict.problems]
        head = storage.head().seq
        with store.auditor.recording(
            "python", "sql", subject="check", identity="everyone", admin=False, request={}
        ) as rec:
            rec.answer = store.sql(k=1)
        if rec.appended is None or rec.appended[0] != head + 1:
            problems.append(f"the next append after the kill is {rec.appended}, not {head + 1}")
    return problems


def audit_soak(
    location: str | Path,
    kills: int,
    rng: random.Random,
    *,
    max_delay: float = 1.0,
    fsync: bool = False,
) -> AuditKills:
    figures = AuditKills()
    for _ in range(kills):
        acked = kill_audit_once(location, rng, max_delay=max_delay, fsync=fsync)
        figures.kills += 1
        figures.acked += len(acked)
        problems = check_audit(location, acked)
        figures.lost += sum("is not in the log" in p or "another digest" in p for p in problems)
        figures.problems += problems
    return figures
