"""Throughput of ``Embedder.embed()`` against raw ``SentenceTransformer.encode``.

Texts: ~300 real 800-character chunks of the PostgreSQL 15 manual
(``../shared/eval/postgres-docs/corpus.jsonl``, pages cut at whitespace).
Both paths run the same loaded model in the same process, alternating, so the
difference is the embedder's own work: the length check and tokenizer pass
for windowing, sorting, per-batch calls, normalisation, the progress bar.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_embedding.py            # ~1.5 min on 2 idle cores
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_embedding.py --texts 100 --rounds 1 --long 0
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
from common import EVAL

ROOT = Path(__file__).resolve().parent.parent
CORPUS = EVAL / "corpus.jsonl"  # $KS_EVAL_DIR, else ../shared/eval/postgres-docs


def load_texts(path: Path, size: int = 800) -> Iterator[str]:
    """Chunks of about ``size`` characters from the manual's pages, cut at whitespace.

    At most three per page, so that the sample spreads over many pages.
    """
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            record = json.loads(line)
            if record["type"] not in ("section", "chapter", "refentry"):
                continue
            body = " ".join(record["body"].split())
            start = 0
            for _ in range(3):
                if start + size > len(body):
                    break
                end = body.rfind(" ", start, start + size)
                end = start + size if end <= start else end
                yield body[start:end]
                start = end + 1


def measure(
    runs: dict[str, Callable[[list[str]], np.ndarray]],
    texts: list[str],
    *,
    rounds: int,
    slice_size: int,
) -> tuple[dict[str, tuple[float, float]], dict[str, np.ndarray]]:
    """Median (wall, CPU) seconds per method over ``rounds``; methods alternate slice by slice.

    On a shared machine the load drifts; running every method on the same
    slice back to back (in a rotating order) makes the drift hit all alike.
    """
    names = list(runs)
    totals: dict[str, list[float]] = {name: [] for name in names}
    cpu_totals: dict[str, list[float]] = {name: [] for name in names}
    outputs: dict[str, list[np.ndarray]] = {}
    for round_no in range(rounds):
        spent = dict.fromkeys(names, 0.0)
        cpu = dict.fromkeys(names, 0.0)
        parts: dict[str, list[np.ndarray]] = {name: [] for name in names}
        for i, start in enumerate(range(0, len(texts), slice_size)):
            piece = texts[start : start + slice_size]
            shift = (round_no + i) % len(names)
            for name in names[shift:] + names[:shift]:
                began, began_cpu = time.perf_counter(), time.process_time()
                parts[name].append(runs[name](piece))
                spent[name] += time.perf_counter() - began
                cpu[name] += time.process_time() - began_cpu
        for name in names:
            totals[name].append(spent[name])
            cpu_totals[name].append(cpu[name])
        outputs = parts
    medians = {
        name: (statistics.median(totals[name]), statistics.median(cpu_totals[name]))
        for name in names
    }
    return medians, {name: np.concatenate(out) for name, out in outputs.items()}


def table(title: str, texts: list[str], medians: dict[str, tuple[float, float]], base: str) -> None:
    print(f"\n{title}")
    print(f"{'method':<32}{'wall s':>8}{'texts/s':>9}{'overhead':>10}{'CPU s':>8}{'overhead':>10}")
    base_wall, base_cpu = medians[base]
    for name, (wall, cpu) in medians.items():
        print(
            f"{name:<32}{wall:>8.2f}{len(texts) / wall:>9.1f}{(wall / base_wall - 1) * 100:>9.1f}%"
            f"{cpu:>8.2f}{(cpu / base_cpu - 1) * 100:>9.1f}%"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--texts", type=int, default=300)
    parser.add_argument("--long", type=int, default=30, help="texts over the window (0: skip)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--slice", type=int, default=100, help="texts per alternation")
    args = parser.parse_args()

    import torch

    from knowledge_store.ingest.embedding import SentenceTransformerEmbedder, open_embedder

    embedder = open_embedder()
    assert isinstance(embedder, SentenceTransformerEmbedder)
    model = embedder.model
    batch = embedder.batch_size
    window = embedder.max_tokens - 2

    fitting: list[str] = []
    longer: list[str] = []
    for text in load_texts(args.corpus):
        tokens = len(model.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])
        if tokens <= window and len(fitting) < args.texts:
            fitting.append(text)
        elif tokens > window and len(longer) < args.long:
            longer.append(text)
        if len(fitting) >= args.texts and len(longer) >= args.long:
            break

    def raw(texts: list[str]) -> np.ndarray:
        out = model.encode(
            texts, batch_size=batch, normalize_embeddings=True, show_progress_bar=False
        )
        return np.asarray(out, dtype=np.float32)

    runs: dict[str, Callable[[list[str]], np.ndarray]] = {
        "SentenceTransformer.encode": raw,
        "Embedder.embed()": embedder.embed,
        "Embedder.embed(progress=True)": lambda texts: embedder.embed(texts, progress=True),
    }
    raw(fitting[:batch])  # warm up
    embedder.embed(fitting[:batch])

    chars = statistics.mean(len(t) for t in fitting)
    print(
        f"model {embedder.model_id}, batch {batch}, torch threads {torch.get_num_threads()},"
        f" {os.cpu_count()} CPUs (load average {os.getloadavg()[0]:.1f}); median of"
        f" {args.rounds} rounds, methods alternating every {args.slice} texts"
    )
    medians, outputs = measure(runs, fitting, rounds=args.rounds, slice_size=args.slice)
    table(
        f"{len(fitting)} chunks within the {embedder.max_tokens}-token window"
        f" ({chars:.0f} chars on average)",
        fitting,
        medians,
        "SentenceTransformer.encode",
    )
    same = np.sum(outputs["Embedder.embed()"] * outputs["SentenceTransformer.encode"], axis=1)
    print(f"min cosine(embed(), encode) over these texts: {same.min():.6f}")
    check = []
    for _ in range(3):
        began = time.process_time()
        embedder.parts(fitting)
        check.append(time.process_time() - began)
    print(
        f"the window check alone (embed()'s extra tokenizer pass): {min(check):.3f} CPU s"
        f" = {min(check) / medians['SentenceTransformer.encode'][1] * 100:.2f}% of encode's CPU time"
    )

    if longer:
        pieces = sum(len(p) for p in embedder.parts(longer))
        medians, _ = measure(
            {name: runs[name] for name in list(runs)[:2]},
            longer,
            rounds=args.rounds,
            slice_size=args.slice,
        )
        table(
            f"{len(longer)} chunks over the window: encode truncates them,"
            f" embed() embeds all {pieces} windows",
            longer,
            medians,
            "SentenceTransformer.encode",
        )


if __name__ == "__main__":
    main()
