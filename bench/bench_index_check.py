"""What checking the lexical index's files costs when a process opens it (issue 25, item 9).

Every process that opens a store checks the CRC32 footer of each file of the committed
Tantivy index before Tantivy reads it (``engines/embedded/lexfiles.damage``). This builds
a lexical index of N synthetic chunks (Zipf-distributed words, ~250 a chunk: the size of
the docs' chunks), then prints its size, the check alone (warm page cache, best of 5),
and ``LexicalIndex(path)`` opened with and without the check (best of 5 each, interleaved).

    .venv/bin/python bench/bench_index_check.py [--chunks 100000] [--index DIR]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from knowledge_store.engines.embedded import lexfiles
from knowledge_store.engines.embedded.lexical import LexicalDoc, LexicalIndex

_VOCABULARY = 50_000
_WORDS = 250
_BATCH = 10_000


def build(path: Path, chunks: int) -> None:
    rng = np.random.default_rng(7)
    words = [f"w{i}" for i in range(_VOCABULARY)]
    index = LexicalIndex(path)
    for start in range(0, chunks, _BATCH):
        docs = []
        for chunk in range(start, min(start + _BATCH, chunks)):
            picks = np.minimum(rng.zipf(1.2, _WORDS), _VOCABULARY) - 1
            docs.append(
                LexicalDoc(
                    chunk_id=chunk + 1,
                    uid=f"doc:{chunk // 4}",
                    acl=("everyone",),
                    type="page",
                    source="bench",
                    status="",
                    created_at=None,
                    updated_at=None,
                    title=f"Title {chunk // 4}",
                    heading=(),
                    text=" ".join(words[p] for p in picks),
                )
            )
        index.add(docs)
        index.commit(start // _BATCH + 1)
    index.close()


def best(call: object, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()  # type: ignore[operator]
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--index", type=Path, help="an index directory to use (built if absent)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ks-index-check-") as tmp:
        path = args.index or Path(tmp) / "lexical"
        if not (path / "meta.json").exists():
            started = time.perf_counter()
            build(path, args.chunks)
            print(f"built {args.chunks:,} chunks in {time.perf_counter() - started:.0f} s")
        size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
        files = len(list(path.iterdir()))
        assert not lexfiles.damage(path)
        check = best(lambda: lexfiles.damage(path))
        checked = best(lambda: LexicalIndex(path).close())
        original = lexfiles.damage
        lexfiles.damage = lambda *a, **k: []  # type: ignore[assignment]
        try:
            unchecked = best(lambda: LexicalIndex(path).close())
        finally:
            lexfiles.damage = original
        print(
            f"index {size / 1e6:.0f} MB in {files} files · check {check * 1e3:.0f} ms"
            f" ({size / 1e9 / check:.1f} GB/s) · open {unchecked * 1e3:.0f} ms unchecked,"
            f" {checked * 1e3:.0f} ms checked · {os.cpu_count()} cores,"
            f" load {os.getloadavg()[0]:.1f}"
        )


if __name__ == "__main__":
    main()
