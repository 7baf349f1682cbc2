"""How our chunks differ from the naive dense baseline's passages — tokens, prefix, code, tables.

For each shared eval set (pages only: code samples are never judged) prints,
for the store's chunk texts (``chunk_entity`` + ``context_text``) and for the
BASELINES.md passages (``dense_units.baseline_units``):

* the length distribution in model tokens (the text as embedded, prefix included);
* how many exceed the model window (254 tokens): ours are embedded as the
  mean of their windows, the baseline's are cut at the window;
* what the prefix holds (title, heading path) and how many tokens it takes;
* what kind of block dominates each over-window chunk (a code fence, a table,
  prose) and how many pages own one;
* per page, how many units there are and how long the page is.

    PYTHONPATH=src .venv/bin/python bench/chunk_profile.py [--sets NAME ...]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dense_units import baseline_units
from evalsets import WINDOW, EvalSet, eval_sets

from knowledge_store.ingest.chunking import scan_blocks, token_counter
from knowledge_store.ingest.pipeline import chunk_entity
from knowledge_store.ingest.records import record_to_entity


def percentiles(values: Sequence[int]) -> str:
    a = np.asarray(values)
    p = np.percentile(a, [10, 50, 90, 99])
    return (
        f"n={len(a):,} mean {a.mean():.0f}  p10 {p[0]:.0f}  p50 {p[1]:.0f}  p90 {p[2]:.0f}"
        f"  p99 {p[3]:.0f}  max {a.max()}  > {WINDOW}: {(a > WINDOW).sum():,}"
        f" ({(a > WINDOW).mean():.1%})"
    )


def kind_of(text: str) -> str:
    """The dominant kind of a chunk: ``code`` (mostly fenced), ``table`` (mostly pipe rows), ``prose``."""
    blocks = scan_blocks(text)
    size = max(1, sum(b.end - b.start for b in blocks))
    fenced = sum(b.end - b.start for b in blocks if b.kind == "fence")
    lines = [line for line in text.splitlines() if line.strip()]
    piped = sum(len(line) for line in lines if line.lstrip().startswith("|"))
    if fenced * 2 >= size:
        return "code"
    if piped * 2 >= size:
        return "table"
    return "prose"


def profile(eval_set: EvalSet) -> None:
    count = token_counter()
    ours: list[int] = []
    prefix: list[int] = []
    body: list[int] = []
    kinds: Counter[str] = Counter()
    long_kinds: Counter[str] = Counter()
    long_pages: set[str] = set()
    with_path = 0
    per_page: list[int] = []
    for page in eval_set.pages:
        entity = record_to_entity(
            page, file="corpus.jsonl", line=None, default_acl=("everyone",), source=None
        )
        chunks = chunk_entity(entity)
        per_page.append(len(chunks))
        for c in chunks:
            text = c.context_text(entity.title)
            n = count(text)
            ours.append(n)
            body.append(count(c.text))
            prefix.append(n - body[-1])
            with_path += text.count("\n") > 0 and text.split("\n", 2)[1] != c.text.split("\n", 1)[0]
            kind = kind_of(c.text)
            kinds[kind] += 1
            if n > WINDOW:
                long_kinds[kind] += 1
                long_pages.add(page["uid"])
    base = [count(t) for _, t in (u for p in eval_set.pages for u in baseline_units(p))]
    base_pages = Counter(u for p in eval_set.pages for u, _ in baseline_units(p))
    page_tokens = [count(p["body"]) for p in eval_set.pages]
    print(f"\n== {eval_set.name}: {len(eval_set.pages):,} pages")
    print(f"  page bodies (tokens):          {percentiles(page_tokens)}")
    print(f"  ours, as embedded:             {percentiles(ours)}")
    print(f"  ours, chunk text alone:        {percentiles(body)}")
    print(f"  ours, prefix (title + path):   {percentiles(prefix)}")
    print(f"  baseline passages, as embedded:{percentiles(base)}")
    print(
        f"  units per page: ours mean {np.mean(per_page):.1f} (max {max(per_page)}),"
        f" baseline mean {np.mean(list(base_pages.values())):.1f}"
        f" (max {max(base_pages.values())})"
    )
    print(f"  chunk kinds: {dict(kinds)}; over the window: {dict(long_kinds)}")
    print(f"  pages owning an over-window chunk: {len(long_pages):,}")
    words = [n for n in ours if n > WINDOW]
    windows = sum(-(-n // (WINDOW - 32)) for n in words)
    print(
        f"  over-window chunks embed as {windows:,} windows (mean {windows / max(1, len(words)):.1f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="*")
    args = parser.parse_args()
    for eval_set in eval_sets(args.sets):
        profile(eval_set)


if __name__ == "__main__":
    main()
