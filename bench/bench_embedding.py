"""The bundled model on each runtime: agreement with PyTorch, batch throughput, one-query latency,
and the cold ``ks search`` a person waits for.

Texts: ~300 real 800-character chunks of the PostgreSQL 15 manual
(``../shared/eval/postgres-docs/corpus.jsonl``, pages cut at whitespace) and
30 longer than the model window. Runtimes alternate slice by slice, so the
machine's drifting load hits all alike.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_embedding.py
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_embedding.py --texts 100 --rounds 1 --long 0
    # the cold CLI: `ks --store STORE search …` 10 times per runtime (KS_EMBEDDER)
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_embedding.py --only cli \\
        --cli onnx:fp32=.ks/pg15-fp32 --cli onnx:int8=.ks/pg15-int8 \\
        --cli st:sentence-transformers/all-MiniLM-L6-v2=.ks/pg15-fp32
    # agreement over every chunk of built stores (the first is the reference), and
    # 1,000 of its chunks embedded again on ONNX fp32
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_embedding.py --only stores \\
        --stores .ks/pg15-torch .ks/pg15-int8 --sample 1000 --runtimes onnx:fp32
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
from common import EVAL, chunk_vectors_sql

ROOT = Path(__file__).resolve().parent.parent
CORPUS = EVAL / "corpus.jsonl"  # $KS_EVAL_DIR, else ../shared/eval/postgres-docs
QUERIES = CORPUS.with_name("queries.jsonl")
TORCH = "st:sentence-transformers/all-MiniLM-L6-v2"
RUNTIMES = (TORCH, "onnx:fp32", "onnx:int8")


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
    """Median (wall, CPU) seconds per method over ``rounds``; methods alternate slice by slice."""
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


def agreement_line(name: str, cos: np.ndarray) -> str:
    return (
        f"{name:<34} min {cos.min():.6f}  p1 {np.percentile(cos, 1):.6f}"
        f"  mean {cos.mean():.6f}  (n={len(cos)})"
    )


def throughput(args: argparse.Namespace, embedders: dict[str, object]) -> None:
    from knowledge_store.ingest.embedding import SentenceTransformerEmbedder

    torch_path = embedders[TORCH]
    assert isinstance(torch_path, SentenceTransformerEmbedder)
    tokenizer = torch_path.model.tokenizer
    window = torch_path.max_tokens - 2
    fitting: list[str] = []
    longer: list[str] = []
    for text in load_texts(args.corpus):
        tokens = len(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])
        if tokens <= window and len(fitting) < args.texts:
            fitting.append(text)
        elif tokens > window and len(longer) < args.long:
            longer.append(text)
        if len(fitting) >= args.texts and len(longer) >= args.long:
            break

    def raw(texts: list[str]) -> np.ndarray:
        out = torch_path.model.encode(
            texts, batch_size=32, normalize_embeddings=True, show_progress_bar=False
        )
        return np.asarray(out, dtype=np.float32)

    runs: dict[str, Callable[[list[str]], np.ndarray]] = {"SentenceTransformer.encode": raw}
    runs.update({spec: e.embed for spec, e in embedders.items()})  # type: ignore[attr-defined]
    for run in runs.values():
        run(fitting[:32])  # warm up
    for label, texts in (("within the window", fitting), ("over the window", longer)):
        if not texts:
            continue
        medians, outputs = measure(runs, texts, rounds=args.rounds, slice_size=args.slice)
        chars = statistics.mean(len(t) for t in texts)
        print(
            f"\n{len(texts)} chunks {label} ({chars:.0f} chars on average), median of"
            f" {args.rounds} rounds; load average {os.getloadavg()[0]:.1f}"
        )
        print(f"{'method':<44}{'wall s':>8}{'texts/s':>9}{'× PyTorch':>11}{'CPU s':>8}")
        base = medians[TORCH][0]
        for name, (wall, cpu) in medians.items():
            print(f"{name:<44}{wall:>8.2f}{len(texts) / wall:>9.1f}{base / wall:>11.2f}{cpu:>8.2f}")
        reference = outputs[TORCH]
        for spec in embedders:
            if spec != TORCH:
                cos = np.sum(outputs[spec] * reference, axis=1)
                print(agreement_line(f"cosine({spec}, PyTorch)", cos))

    onnx = embedders.get("onnx:fp32")
    if onnx is not None:
        tokens = onnx._loaded(parallel=False)[1]  # type: ignore[attr-defined]
        began = time.process_time()
        tokens.pieces(fitting, 32)
        spent = time.process_time() - began
        print(
            f"tokenizing the {len(fitting)} chunks (Rust tokenizers, the work the thread overlaps):"
            f" {spent:.3f} CPU s"
        )


def query_latency(args: argparse.Namespace, embedders: dict[str, object]) -> None:
    texts = [json.loads(line)["text"] for line in QUERIES.open(encoding="utf-8")][: args.queries]
    print(
        f"\none query text, embed_query, {len(texts)} eval queries each (load {os.getloadavg()[0]:.1f})"
    )
    samples: dict[str, list[float]] = {spec: [] for spec in embedders}
    for e in embedders.values():
        e.embed_query("warm up")  # type: ignore[attr-defined]
    for text in texts:  # interleaved: the load hits all alike
        for spec, e in embedders.items():
            began = time.perf_counter()
            e.embed_query(text)  # type: ignore[attr-defined]
            samples[spec].append(time.perf_counter() - began)
    for spec, xs in samples.items():
        ms = np.asarray(xs) * 1000
        print(
            f"  {spec:<44} p50 {np.percentile(ms, 50):6.2f} ms  p95 {np.percentile(ms, 95):6.2f} ms"
            f"  mean {ms.mean():6.2f} ms"
        )


def cold_cli(args: argparse.Namespace) -> None:
    ks = str(Path(sys.executable).with_name("ks"))
    text = "how do I reclaim the space of deleted rows"
    print(
        f"\ncold `ks --store STORE search {text!r}`: the whole process, {args.cli_runs} runs"
        " (its CPU time is near what the wall time is on an idle machine)"
    )
    for item in args.cli:
        spec, _, store = item.partition("=")
        env = {**os.environ, "KS_EMBEDDER": spec}
        walls, cpus, peaks = [], [], []
        for _ in range(args.cli_runs):
            began = time.perf_counter()
            with tempfile.TemporaryFile() as errors:
                child = subprocess.Popen(
                    [ks, "--store", store, "search", text, "--json"],
                    stdout=subprocess.DEVNULL,
                    stderr=errors,
                    env=env,
                )
                _, status, usage = os.wait4(child.pid, 0)  # this child's own rusage
                walls.append(time.perf_counter() - began)
                cpus.append(usage.ru_utime + usage.ru_stime)
                peaks.append(usage.ru_maxrss / 1024)
                if os.waitstatus_to_exitcode(status) != 0:
                    errors.seek(0)
                    tail = errors.read()[-800:].decode(errors="replace")
                    sys.exit(f"ks failed for {spec}: {tail}")
        print(
            f"  {spec:<44} wall median {statistics.median(walls):5.2f} s  min {min(walls):5.2f} s"
            f"  max {max(walls):5.2f} s · CPU (user+sys) median {statistics.median(cpus):5.2f} s"
            f" · peak RSS {max(peaks):.0f} MB  (load {os.getloadavg()[0]:.1f}; store {store})"
        )


def store_vectors(store: Path) -> dict[tuple[str, int], np.ndarray]:
    conn = sqlite3.connect(f"file:{store / 'catalog.sqlite'}?mode=ro", uri=True)
    vectors, vector = chunk_vectors_sql(conn)
    rows = conn.execute(
        f"SELECT e.uid, c.ordinal, {vector} FROM chunks AS c"
        f" JOIN entities AS e ON e.id = c.entity{vectors}"
    )
    out = {(u, int(o)): np.frombuffer(b, dtype=np.float32) for u, o, b in rows}
    conn.close()
    return out


def stores(args: argparse.Namespace) -> None:
    reference, *others = args.stores
    ref = store_vectors(Path(reference))
    print(f"\nagreement over every chunk, against {reference} ({len(ref)} chunks)")
    for other in others:
        vectors = store_vectors(Path(other))
        keys = sorted(set(ref) & set(vectors))
        cos = np.array([float(ref[k] @ vectors[k]) for k in keys])
        print(agreement_line(str(other), cos))


def sampled(args: argparse.Namespace) -> None:
    """Every k-th chunk of the reference store, embedded again on each runtime."""
    from knowledge_store.engines.embedded.engine import EmbeddedEngine
    from knowledge_store.ingest.embedding import open_embedder

    reference = Path(args.stores[0])
    engine = EmbeddedEngine(reference)
    contexts = engine.writer.chunk_contexts(0, 1_000_000)
    step = max(1, len(contexts) // args.sample)
    chosen = contexts[::step][: args.sample]
    with engine.catalog.read() as conn:
        ids, stored = engine.catalog.chunk_vectors(conn, [c for c, _ in chosen])
    engine.close()
    assert list(ids) == [c for c, _ in chosen]
    print(f"\n{len(chosen)} chunks (every {step}th) embedded again, against {reference}'s vectors")
    for spec in args.runtimes.split(","):
        vectors = open_embedder(spec).embed([text for _, text in chosen])
        print(agreement_line(spec, np.sum(vectors * stored, axis=1)))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--texts", type=int, default=300)
    parser.add_argument("--long", type=int, default=30, help="texts over the window (0: skip)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--slice", type=int, default=100, help="texts per alternation")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--runtimes", default=",".join(RUNTIMES))
    parser.add_argument("--only", choices=["throughput", "queries", "cli", "stores"])
    parser.add_argument("--cli", action="append", default=[], metavar="SPEC=STORE")
    parser.add_argument("--cli-runs", type=int, default=10)
    parser.add_argument("--stores", nargs="+", default=[])
    parser.add_argument(
        "--sample", type=int, default=0, help="with --stores: embed N chunks of the first again"
    )
    args = parser.parse_args()

    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    if args.only in (None, "throughput", "queries"):
        from knowledge_store.ingest.embedding import open_embedder

        embedders: dict[str, object] = {s: open_embedder(s) for s in args.runtimes.split(",")}
        if args.only in (None, "throughput"):
            throughput(args, embedders)
        if args.only in (None, "queries"):
            query_latency(args, embedders)
    if args.cli:
        cold_cli(args)
    if args.stores:
        stores(args)
    if args.stores and args.sample:
        sampled(args)


if __name__ == "__main__":
    main()
