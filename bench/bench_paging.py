"""A reader pages through 1,000 results while a writer publishes every second (issue 31):
duplicates and gaps, against the ranking read whole at the first page's content root.

Before the writer starts, each read (lexical, sql, fused search) is read whole at root ``R``
— lexical and sql with ``k=1000``, search as its own cursor's pages of 100 — and, for
lexical and search, the writer is handed the uids of the results ranked 500–999, which it
edits (title changed, still matching) while adding new matching records, one publish a
second. The reader then pages through each with ``k=10`` (100 pages, ``--pause`` seconds
between pages). Printed per read: pages, results, duplicates, gaps (results of ``R``'s
ranking never shown), extras (shown but not in it), publishes during the paging, and the
page latency.

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


def writer(store: str, edit: Path, stop: Path, out: Path) -> None:
    """One publish a second: five new matching records, and the next few to edit."""
    uids = json.loads(edit.read_text())
    published = 0
    with KnowledgeStore.open(store, create=False) as s:
        n = 0
        while not stop.exists():
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
            out.write_text(str(published))
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
        writer(args.store, work / "edit.json", work / "stop", work / "published")
        return
    work.mkdir(parents=True, exist_ok=True)
    for name in ("stop", "published"):
        (work / name).unlink(missing_ok=True)
    print("load", os.getloadavg())
    with KnowledgeStore.open(args.store, create=False) as store:
        whole: dict[str, list[Any]] = {}
        root = store.content_root()
        for name, read in READS.items():
            if name == "search":
                answer = read(store, k=100, cursor="*")
                got = _items(answer)
                while answer.next:
                    answer = read(store, k=100, cursor=answer.next)
                    got += _items(answer)
                whole[name] = got
            else:
                whole[name] = _items(read(store, k=1000))
        assert store.content_root() == root
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
            time.sleep(2)
            for name, read in READS.items():
                before = (
                    int((work / "published").read_text() or 0)
                    if (work / "published").exists()
                    else 0
                )
                answer = read(store, k=10, cursor="*")
                seen, pages, latencies = _items(answer), 1, []
                while answer.next:
                    time.sleep(args.pause)
                    started = time.perf_counter()
                    answer = read(store, k=10, cursor=answer.next)
                    latencies.append(time.perf_counter() - started)
                    seen += _items(answer)
                    pages += 1
                after = int((work / "published").read_text() or 0)
                reference = whole[name]
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
