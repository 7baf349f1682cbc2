"""SIGKILL every writer of the embedded engine many times; print tried / failed safely / misbehaved.

Each kill lands at a random moment of a writer running in a loop (ingest,
delete, acl grant, acl revoke, principals load, rebuild); the store is then
reopened and checked against its catalog through every primitive and several
identities (tests/engines/kill_harness.py). "Failed safely": the store opened,
left no file behind and agreed with the catalog. Also counted: kills that left
an index behind the catalog (repaired on open) and kills that left files behind
(removed on open). With ``--corrupt``, each kill is followed by 50 bytes flipped in
one derived-index file picked at random (issue 25, item 9): the reopened store must
move it aside, rebuild it and agree with its catalog all the same.

The writer ``audit`` (issue 29) is the audit log's appender: four threads recording
requests (and now and then a grant), each acknowledged once its append returned; after
each kill every acknowledged record must be in the log with its digest, the chain must
verify and the next append follow it (tests/engines/audit_kill.py). ``--fsync``: with the
log's fsync setting on.

    .venv/bin/python bench/kill_soak.py [--kills 50] [--writers ingest,delete,...,audit] [--seed 11] [--corrupt] [--fsync]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from knowledge_store.ingest.embedding import open_embedder
from tests.engines.audit_kill import audit_soak, seed_audit
from tests.engines.kill_harness import WRITERS, KillFigures, soak


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kills", type=int, default=50, help="kills per writer")
    parser.add_argument("--writers", default=",".join(WRITERS))
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--max-delay", type=float, default=1.0)
    parser.add_argument(
        "--corrupt", action="store_true", help="damage a derived-index file after each kill"
    )
    parser.add_argument("--fsync", action="store_true", help="audit: the log's fsync setting on")
    args = parser.parse_args()
    writers = tuple(w.strip() for w in args.writers.split(",") if w.strip())
    started = time.perf_counter()
    if "audit" in writers:
        writers = tuple(w for w in writers if w != "audit")
        with tempfile.TemporaryDirectory(prefix="ks-kill-soak-audit-") as root:
            location = Path(root) / "store"
            seed_audit(location, fsync=args.fsync)
            got = audit_soak(
                location,
                args.kills,
                random.Random(args.seed),
                max_delay=args.max_delay,
                fsync=args.fsync,
            )
        print(got.line(), f"[{time.perf_counter() - started:.0f} s]", flush=True)
        for problem in got.problems:
            print("    problem:", problem, flush=True)
        if not writers:
            return

    def report(writer: str, got: KillFigures) -> None:
        print(got.line(writer), f"[{time.perf_counter() - started:.0f} s]", flush=True)
        for problem in got.misbehaved:
            print("    misbehaved:", problem, flush=True)

    with tempfile.TemporaryDirectory(prefix="ks-kill-soak-") as root:
        figures = soak(
            Path(root) / "store",
            open_embedder(),
            writers,
            args.kills,
            random.Random(args.seed),
            report=report,
            max_delay=args.max_delay,
            corrupt=args.corrupt,
        )
    total = sum(f.tried for f in figures.values())
    bad = sum(len(f.misbehaved) for f in figures.values())
    print(
        f"{'all writers':>16}: {total} tried / {total - bad} failed safely / {bad} misbehaved"
        f" in {time.perf_counter() - started:.0f} s"
    )


if __name__ == "__main__":
    main()
