"""Sync figures on the PostgreSQL docs set (issue 14): re-sync, a 10% deletion, watch latency.

The corpus (4,193 entities: 1,167 pages and their code samples) is split into one
JSON Lines file per page (the page and its samples) in a temporary folder, and
synced as source ``pgdocs`` with the default embedder. Printed:

1. the first sync (seconds, texts embedded — with ``--seed-cache`` the vectors
   come from another store's embedding cache, so a machine without one doesn't
   spend minutes embedding);
2. a re-sync of the unchanged folder: seconds, texts embedded (zero), deleted (zero);
3. a sync after deleting 10% of the files: seconds, deleted, and that exactly the
   entities of those files are gone — on lexical, vector, sql, graph, query_graph,
   aggregate and content — while a sample of the survivors is still found;
4. watch: a page saved with a new word → the first ``lexical`` query that finds it,
   p50/p90 over 20 saves.

    python bench/bench_sync.py [--store DIR|pg:DIR|postgresql://…] [--seed-cache STORE_DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import need_eval
from seed_cache import seed_cache

from knowledge_store.errors import NotFound
from knowledge_store.model import Filters
from knowledge_store.store import KnowledgeStore

SOURCE = "pgdocs"


def split_corpus(corpus: Path, folder: Path) -> dict[str, list[str]]:
    """One ``.jsonl`` file per page (with its code samples); file name → uids."""
    by_page: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in corpus.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        by_page[record["uid"].partition("#")[0]].append(record)
    files: dict[str, list[str]] = {}
    for page, records in by_page.items():
        name = page.replace(":", "_").replace("/", "_") + ".jsonl"
        (folder / name).write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8"
        )
        files[name] = [r["uid"] for r in records]
    return files


class Counter:
    """Counts the texts the store's embedder embeds."""

    def __init__(self, store: KnowledgeStore) -> None:
        self.texts = 0
        embedder = store.embedder
        inner = embedder.embed

        def embed(texts: Any, **kw: Any) -> Any:
            self.texts += len(texts)
            return inner(texts, **kw)

        embedder.embed = embed  # type: ignore[method-assign]


def sync(store: KnowledgeStore, folder: Path, **kw: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    report = store.ingest([folder], source=SOURCE, acl=["everyone"], sync=True, **kw)
    return time.perf_counter() - started, report


def gone_everywhere(
    store: KnowledgeStore, gone: list[str], kept: list[str], titles: dict[str, str]
) -> dict[str, Any]:
    """Which primitives still give a deleted uid (all must be empty), and that kept ones stay."""
    rng = random.Random(7)
    sample_gone = rng.sample(gone, min(60, len(gone)))
    sample_kept = rng.sample(kept, 60)
    found: dict[str, set[str]] = defaultdict(set)
    kept_found: dict[str, int] = defaultdict(int)
    for uid in sample_gone + sample_kept:
        title = titles[uid]
        hits = {
            "lexical": {h.uid for h in store.lexical(title, k=50).hits},
            "vector": {h.uid for h in store.vector(title, k=50).hits},
        }
        for name, uids in hits.items():
            if uid in sample_gone and uid in uids:
                found[name].add(uid)
            if uid in sample_kept and uid in uids:
                kept_found[name] += 1
    sql_hits = store.sql(Filters.build(uid=gone[:1000]), k=1000).hits
    found["sql"] = {h.uid for h in sql_hits}
    for uid in gone:
        try:
            store.content(uid)
            found["content"].add(uid)
        except NotFound:
            pass
    for uid in gone[:200]:
        rows = store.query_graph("MATCH (a) WHERE a.uid = $u RETURN a.uid", {"u": uid}).rows
        found["query_graph"] |= {str(r[0]) for r in rows}
    # graph: from every surviving neighbour of a sampled deleted page (kept pages link to them).
    starts = [u for u in kept if "#" not in u][:300]
    for i in range(0, len(starts), 50):
        hits = store.graph(starts[i : i + 50], depth=1, k=1000).hits
        found["graph"] |= {h.uid for h in hits} & set(gone)
    kept_content = sum(1 for uid in sample_kept if store.content(uid))
    return {
        "still_found": {name: sorted(uids)[:5] for name, uids in found.items() if uids},
        "kept_found_by_title_of_60": dict(kept_found),
        "kept_content_of_60": kept_content,
    }


def watch_latency(store: KnowledgeStore, folder: Path, files: dict[str, list[str]]) -> list[float]:
    stop = threading.Event()
    thread = threading.Thread(
        target=store.watch,
        args=([folder],),
        kwargs={"source": SOURCE, "acl": ["everyone"], "stop": stop, "quiet_ms": 300},
        daemon=True,
    )
    thread.start()
    time.sleep(20)  # the initial sync (nothing changed) is over
    names = sorted(files)[:20]
    samples = []
    for i, name in enumerate(names):
        path = folder / name
        lines = path.read_text(encoding="utf-8").splitlines()
        first = json.loads(lines[0])
        word = f"zqxwatch{i}"
        first["body"] += f"\n\n{word}\n"
        lines[0] = json.dumps(first, ensure_ascii=False)
        saved = time.perf_counter()
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        while True:
            if any(h.uid == first["uid"] for h in store.lexical(word, k=5).hits):
                samples.append(time.perf_counter() - saved)
                break
            if time.perf_counter() - saved > 120:
                raise SystemExit(f"save {i} was never seen")
            time.sleep(0.02)
    stop.set()
    thread.join(timeout=120)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", help="a store location (default: a temporary embedded one)")
    parser.add_argument("--seed-cache", type=Path, help="an embedded store to take vectors from")
    args = parser.parse_args()
    eval_dir = need_eval()
    with tempfile.TemporaryDirectory(prefix="ks-sync-") as tmp:
        folder = Path(tmp) / "pgdocs"
        folder.mkdir()
        files = split_corpus(eval_dir / "corpus.jsonl", folder)
        titles = {
            (r := json.loads(line))["uid"]: r["title"]
            for line in (eval_dir / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
        }
        where = args.store or str(Path(tmp) / "store")
        print(f"store {where}: {len(files):,} files, {len(titles):,} entities", flush=True)
        with KnowledgeStore.open(where) as store:
            if args.seed_cache:
                print(f"seeded {seed_cache(store, args.seed_cache):,} cached vectors", flush=True)
            counter = Counter(store)
            seconds, report = sync(store, folder, progress=False)
            print(
                f"first sync: {seconds:.1f} s, added {report.added}, embedded {counter.texts:,}",
                flush=True,
            )
            counter.texts = 0
            seconds, report = sync(store, folder)
            print(
                f"re-sync unchanged: {seconds:.2f} s, unchanged {report.unchanged},"
                f" embedded {counter.texts}, deleted {report.deleted},"
                f" root unchanged {report.content_root == store.content_root()}",
                flush=True,
            )
            rng = random.Random(14)
            doomed_files = rng.sample(sorted(files), len(files) // 10)
            gone = sorted(uid for name in doomed_files for uid in files[name])
            for name in doomed_files:
                (folder / name).unlink()
            counter.texts = 0
            seconds, report = sync(store, folder)
            views = {v.source: v for v in store.sources()}
            exact = report.deleted == len(gone) and report.deleted_uids == gone[:100]
            print(
                f"sync after deleting {len(doomed_files)} files ({len(gone)} entities):"
                f" {seconds:.2f} s, deleted {report.deleted}, exactly those {exact},"
                f" embedded {counter.texts}, source now {views[SOURCE].entities}",
                flush=True,
            )
            kept = sorted(set(titles) - set(gone))
            check = gone_everywhere(store, gone, kept, titles)
            print(f"deleted entities still found: {check['still_found'] or 'none'}", flush=True)
            print(
                f"survivors found by their title (of 60): {check['kept_found_by_title_of_60']},"
                f" content {check['kept_content_of_60']}",
                flush=True,
            )
            counts = [(r.key, r.value) for r in store.aggregate("count", "source").rows]
            print(f"aggregate count by source: {counts}", flush=True)
            samples = watch_latency(
                store, folder, {n: files[n] for n in files if n not in doomed_files}
            )
            print(
                f"watch save → first query that sees it: p50 {statistics.median(samples):.2f} s,"
                f" p90 {sorted(samples)[int(0.9 * (len(samples) - 1))]:.2f} s,"
                f" max {max(samples):.2f} s over {len(samples)} saves",
                flush=True,
            )


if __name__ == "__main__":
    main()
