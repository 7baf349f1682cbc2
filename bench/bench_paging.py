"""A reader pages through 1,000 results while a writer publishes every second (issue 31):
duplicates and gaps, against the ranking read whole at the first page's content root.

The writer is handed the uids of fused search's results ranked 500–999 before it starts; it
edits three of them a publish (title changed, still matching) and adds five new matching
records, one publish a second. For each read (lexical, sql, fused search) the writer is held
between two publishes while the read is read whole — lexical and sql with ``k=1000``, search
as its own cursor's pages of 100 — and its first page of 10 is read, both at one root ``R``;
then the writer goes on and the reader pages through the rest with ``k=10`` (100 pages,
``--pause`` seconds between pages). Printed per read: pages, results, duplicates, gaps
(results of ``R``'s ranking never shown), extras (shown but not in it), whether the order is
``R``'s, the publishes during the paging, and the page latency.

    python bench/bench_paging.py STORE [--pause 0.05]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from knowledge_store.store import KnowledgeStore

WORD = "replication"


def _key(item: Any) -> Any:
    return getattr(item, "chunk_id", None) or item.uid  # a chunk: its public id (uid, ordinal)


def _items(answer: Any) -> list[Any]:
    return [_key(x) for x in getattr(answer, "hits", None) or getattr(answer, "results", [])]


READS = {
    "lexical": lambda s, **kw: s.lexical(WORD, **kw),
    "sql": lambda s, **kw: s.sql({"type": ["section", "refentry", "codeSample"]}, **kw),
    "search": lambda s, **kw: s.search(WORD, **kw),
}


def _whole(store: Any, name: str, read: Any) -> tuple[list[Any], str]:
    """``name``'s ranking read whole (to the bound of 1,000), and the root it was read at."""
    if name != "search":
        answer = read(store, k=1000)
        return _items(answer), answer.content_root
    answer = read(store, k=100, cursor="*")  # search's k is at most 100: its own pages
    got, root = _items(answer), answer.content_root
    while answer.next:
        answer = read(store, k=100, cursor=answer.next)
        got += _items(answer)
    return got, root


def writer(store: str, work: Path) -> None:
    """One publish a second: five new matching records, and the next few to edit; while
    ``hold`` exists, none (``held`` echoes its token: the bench reads at one root)."""
    uids = json.loads((work / "edit.json").read_text())
    stop, hold, held, out = (work / n for n in ("stop", "hold", "held", "published"))
    published = 0
    with KnowledgeStore.open(store, create=False) as s:
        n = 0
        while not stop.exists():
            try:
                held.write_text(hold.read_text())
                time.sleep(0.02)
                continue
            except FileNotFoundError:
                pass  # not held
            started = time.perf_counter()
            new = [
                {
                    "uid": f"bench-paging:{os.getpid()}:{n}:{j}",
                    "type": "section",
                    "title": f"Replication note {n}.{j}",
                    "body": f"{WORD} {WORD} {WORD}: a new note, {n}.{j}",
                    "acl": ["everyone"],
                }
                for j in range(5)
            ]
            s.ingest_records(new)
            targets = uids[n * 3 : n * 3 + 3]
            if targets:  # edited through an export: with their parents and samples, as stored
                buffer = io.StringIO()
                s.export(buffer, filters={"uid": targets})
                records = [json.loads(line) for line in buffer.getvalue().splitlines()]
                for record in records:
                    if record["uid"] in targets:
                        record["title"] = f"{record['title']} (edited {n})"
                s.ingest_records(records)
            published += 1
            partial = out.with_suffix(".partial")
            partial.write_text(str(published))
            partial.replace(out)  # the bench reads it while this writes
            n += 1
            time.sleep(max(0.0, 1.0 - (time.perf_counter() - started)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store")
    parser.add_argument("--pause", type=float, default=0.05)
    parser.add_argument("--role")
    parser.add_argument("--work", type=Path, default=Path("/tmp/ks-bench-paging"))
    args = parser.parse_args()
    work = args.work
    if args.role == "writer":
        writer(args.store, work)
        return
    work.mkdir(parents=True, exist_ok=True)
    for name in ("stop", "published", "hold", "held"):
        (work / name).unlink(missing_ok=True)
    print("load", os.getloadavg())
    with KnowledgeStore.open(args.store, create=False) as store:
        ranked = store.search(WORD, k=100, cursor="*")
        edit = [r.uid for r in ranked.results]  # the next pages' entities: edited meanwhile
        answer = ranked
        while answer.next and len(edit) < 1000:
            answer = store.search(WORD, k=100, cursor=answer.next)
            edit += [r.uid for r in answer.results]
        (work / "edit.json").write_text(json.dumps(edit[500:]))
        writer_process = subprocess.Popen(
            [sys.executable, __file__, args.store, "--role", "writer", "--work", str(work)]
        )
        try:
            while not (work / "published").exists():
                time.sleep(0.1)  # the writer has published once: it is running
            for name, read in READS.items():
                (work / "hold").write_text(name)
                while not (work / "held").exists() or (work / "held").read_text() != name:
                    time.sleep(0.02)
                reference, root = _whole(store, name, read)
                answer = read(store, k=10, cursor="*")
                assert answer.content_root == root, "the writer published while held"
                (work / "hold").unlink()
                before = int((work / "published").read_text())
                seen, pages, latencies = _items(answer), 1, []
                while answer.next:
                    time.sleep(args.pause)
                    started = time.perf_counter()
                    answer = read(store, k=10, cursor=answer.next)
                    latencies.append(time.perf_counter() - started)
                    seen += _items(answer)
                    pages += 1
                after = int((work / "published").read_text())
                latencies.sort()
                print(
                    json.dumps(
                        {
                            "read": name,
                            "pages": pages,
                            "results": len(seen),
                            "ranked_at_R": len(reference),
                            "duplicates": len(seen) - len(set(seen)),
                            "gaps": len(set(reference) - set(seen)),
                            "extras": len(set(seen) - set(reference)),
                            "same_order": seen == reference[: len(seen)],
                            "publishes_while_paging": after - before,
                            "page_p50_ms": round(latencies[len(latencies) // 2] * 1000, 2),
                            "page_p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000, 2),
                        }
                    ),
                    flush=True,
                )
        finally:
            (work / "stop").touch()
            writer_process.wait()
    print("load", os.getloadavg())


if __name__ == "__main__":
    main()
