"""``ks backup`` of a running store: time, size, the readers' latency during it, restore time,
and backups killed at random points (issue 31).

A reader process runs lexical and sql reads in a loop (alone first: the baseline), then a
writer process publishes five records every second beside it (``--seconds`` of reads with
the writer, once it has published twice), then ``ks backup`` runs beside both. The reads
that overlapped the backup give its p50/p99 next to the two baselines'. The backup is
restored (timed) and checked to be one of the writer's publishes. Then ``--kills`` backups
are killed (SIGKILL) at a uniformly random point of 1.2 times the first run's time; each that left a backup
behind is restored and checked the same way, and each that left none is counted.

    python bench/bench_backup.py STORE WORK [--seconds 15] [--kills 5]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from knowledge_store.store import KnowledgeStore

WORDS = ["vacuum", "replication", "index", "checkpoint", "trigger", "partition", "lock", "wal"]


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    if not ordered:
        return {"n": 0}

    def at(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))] * 1000, 2)

    return {"n": len(ordered), "p50_ms": at(0.5), "p99_ms": at(0.99)}


def reader(store: str, out: Path, stop: Path) -> None:
    """Reads until ``stop`` exists; ``[start, seconds]`` of each read into ``out``."""
    rows = []
    with KnowledgeStore.open(store, create=False) as s:
        i = 0
        while not stop.exists():
            word = WORDS[i % len(WORDS)]
            started = time.time()
            t0 = time.perf_counter()
            if i % 2:
                s.lexical(word, k=10)
            else:
                s.sql({"type": ["section"]}, k=10)
            rows.append([started, time.perf_counter() - t0])
            i += 1
    out.write_text(json.dumps(rows))


def writer(store: str, out: Path, stop: Path) -> None:
    """Publishes five records every second until ``stop`` exists; each root into ``out``."""
    roots = []
    with KnowledgeStore.open(store, create=False) as s:
        roots.append(s.content_root())
        n = 0
        while not stop.exists():
            started = time.perf_counter()
            records = [
                {
                    "uid": f"bench-backup:{os.getpid()}:{n}:{j}",
                    "type": "note",
                    "title": f"Backup bench note {n}.{j}",
                    "body": f"A note written during a backup, number {n}.{j}: {WORDS[j]}.",
                    "acl": ["everyone"],
                }
                for j in range(5)
            ]
            roots.append(s.ingest_records(records).content_root)
            partial = out.with_suffix(".partial")
            partial.write_text(json.dumps(roots))
            partial.replace(out)  # the bench reads it while this writes
            n += 1
            time.sleep(max(0.0, 1.0 - (time.perf_counter() - started)))


def _spawn(role: str, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, __file__, "--role", role, *args])


def _ks(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "knowledge_store.surfaces.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _restore(backup: Path, target: Path) -> tuple[float, dict[str, Any]]:
    shutil.rmtree(target, ignore_errors=True)
    started = time.perf_counter()
    done = _ks("restore", str(backup), "--store", str(target), "--json")
    out, err = done.communicate()
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"restore failed: {out.decode()} {err.decode()}")
    return took, json.loads(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store")
    parser.add_argument("work", type=Path)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--role", choices=["reader", "writer"])
    args = parser.parse_args()
    if args.role == "reader":
        reader(args.store, args.work / "reads.json", args.work / "stop")
        return
    if args.role == "writer":
        writer(args.store, args.work / "roots.json", args.work / "stop")
        return
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    stop = args.work / "stop"
    print("load", os.getloadavg())

    # 1. the readers alone
    reads = _spawn("reader", args.store, str(args.work))
    time.sleep(args.seconds)
    stop.touch()
    reads.wait()
    baseline = [d for _, d in json.loads((args.work / "reads.json").read_text())]
    stop.unlink()
    print("reads alone:", _percentiles(baseline[len(baseline) // 10 :]), flush=True)

    # 2. readers and a writer, and a backup beside them
    reads = _spawn("reader", args.store, str(args.work))
    writes = _spawn("writer", args.store, str(args.work))
    roots_file = args.work / "roots.json"
    while not roots_file.exists() or len(json.loads(roots_file.read_text() or "[]")) < 3:
        time.sleep(0.2)  # the writer has published twice: its model is loaded, it is steady
    writer_only = time.time()
    time.sleep(args.seconds)
    began = time.time()
    backup = _ks("--store", args.store, "backup", str(args.work / "backup"), "--json")
    out, err = backup.communicate()
    ended = time.time()
    time.sleep(2)
    if backup.returncode != 0:
        raise SystemExit(f"backup failed: {out.decode()} {err.decode()}")
    report = json.loads(out)

    # 3. backups killed at random points, the writer still publishing
    rng = random.Random(31)
    killed = []
    took = ended - began
    for n in range(args.kills):
        dest = args.work / f"killed-{n}"
        process = _ks("--store", args.store, "backup", str(dest))
        time.sleep(rng.uniform(0.0, 1.2 * took))  # some finish first: the rename is a point too
        process.send_signal(signal.SIGKILL)
        process.wait()
        killed.append(dest)
    stop.touch()
    reads.wait()
    writes.wait()
    timed = json.loads((args.work / "reads.json").read_text())
    with_writer = [d for t, d in timed if writer_only <= t < began]
    during = [d for t, d in timed if began <= t <= ended]
    roots = json.loads(roots_file.read_text())
    print(
        json.dumps(
            {
                "backup_s": round(took, 1),
                "ks_backup_reports_s": report["seconds"],
                "bytes": report["bytes"],
                "files": len(report["files"]),
                "publish": report["publish"],
                "root_published": report["content_root"] in roots,
                "writer_publishes_before_it": (
                    roots.index(report["content_root"]) if report["content_root"] in roots else None
                ),
                "reads_with_the_writer": _percentiles(with_writer),
                "reads_during_backup": _percentiles(during),
            }
        ),
        flush=True,
    )
    restore_s, restored = _restore(args.work / "backup", args.work / "restored")
    print(
        json.dumps(
            {
                "restore_s": round(restore_s, 1),
                "restored_root_is_the_backups": restored["content_root"] == report["content_root"],
                "caught_up": restored["caught_up"],
            }
        ),
        flush=True,
    )
    outcomes = {"left_nothing": 0, "restored_to_a_publish": 0, "restored_elsewhere": 0}
    for dest in killed:
        if not dest.exists():
            outcomes["left_nothing"] += 1
            continue
        _, got = _restore(dest, args.work / "restored-killed")
        key = "restored_to_a_publish" if got["content_root"] in roots else "restored_elsewhere"
        outcomes[key] += 1
    leftovers = sorted(p.name for p in args.work.iterdir() if ".partial-" in p.name)
    print(json.dumps({"kills": args.kills, **outcomes, "partial_dirs_left": len(leftovers)}))
    print("load", os.getloadavg())


if __name__ == "__main__":
    main()
