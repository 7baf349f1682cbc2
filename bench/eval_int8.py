"""int8 against fp32: which side of the gap is the query's, which the documents'; fidelity, speed.

``sides``: exact cosine over a store's chunks (code samples excluded, as both
sets' READMEs ask), top-100 chunks folded to pages as the store's vector list
is, for every combination documents × queries of the embedders given and fp32,
on each shared set; the fused list is the store's default fusion over that
vector list and the store's own lexical list (graph stage included,
``eval_engines._fused``). Every row is compared paired with fp32 × fp32, and
its vector list's agreement with fp32 × fp32's is counted: overlap@10 (pages
the two top 10s share) — the fidelity measure with statistical power, where
nDCG over 28 questions has none. Queries are embedded as search embeds them,
alone (``embed_query``); chunk vectors come from the content-hash cache
(``evalsets.VectorCache``), as ingest embeds them (batched). A built store of
the set gives the chunk list, the lexical lists and the graph.

``fidelity``: cosine to fp32 on random chunks of each store and on every
question, and the speed of each embedder (chunks per second through ``embed``,
one ``embed_query``'s median), the embedders in turn, round after round.

    PYTHONPATH=src .venv/bin/python bench/eval_int8.py sides \\
        --store sqlite-git-faq=/tmp/faq8 --store postgres-docs=/tmp/pgd8
    PYTHONPATH=src .venv/bin/python bench/eval_int8.py fidelity \\
        --store sqlite-git-faq=/tmp/faq8 --store postgres-docs=/tmp/pgd8 --per-set 500
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sqlite3
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from eval_engines import _fused
from eval_pagelex import FILTERS
from evalsets import CACHE, EvalSet, VectorCache, eval_sets

from knowledge_store.model import compose_context
from knowledge_store.retrieval.compare import paired_bootstrap, per_query
from knowledge_store.retrieval.evaluation import collect
from knowledge_store.retrieval.fusion import RankedList, fold_chunks
from knowledge_store.store import KnowledgeStore

Run = dict[str, dict[str, float]]
REFERENCE = "onnx:fp32"
DEPTH = 100  # chunks the store's vector list asks for (k × CHUNKS_PER_ENTITY)
MEASURES = ("ndcg@10", "recall@100", "mrr@10")


@dataclass
class Chunks:
    """A store's judged chunks (code samples left out): owner uid and the embedded text."""

    uids: list[str]
    texts: list[str]


def store_chunks(store: Path) -> Chunks:
    """Every chunk of a built store whose entity is not a code sample, as ingest embedded it."""
    conn = sqlite3.connect(f"file:{store / 'catalog.sqlite'}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT e.uid, e.title, c.heading, c.text FROM chunks c JOIN entities e"
            " ON e.id = c.entity WHERE e.type != 'codeSample' ORDER BY c.id"
        ).fetchall()
    finally:
        conn.close()
    return Chunks(
        [r[0] for r in rows], [compose_context(r[1], json.loads(r[2]), r[3]) for r in rows]
    )


def query_vectors(texts: Sequence[str], name: str, embedder: Any, spec: str) -> np.ndarray:
    """Each query embedded alone (``embed_query``), cached by the texts and the embedder's
    ``cache_id`` (which names its model)."""
    from knowledge_store.ingest.embedding import cache_id_of

    digest = hashlib.sha256("\0".join([cache_id_of(embedder), *texts]).encode()).hexdigest()
    path = CACHE / f"queries-{name}-{_short(spec)}-{digest[:16]}.npy"
    if path.exists():
        return np.asarray(np.load(path), dtype=np.float32)
    out = np.stack([embedder.embed_query(t) for t in texts]).astype(np.float32)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, out)
    return out


def vector_lists(
    queries: Sequence[str], q: np.ndarray, docs: np.ndarray, uids: Sequence[str]
) -> dict[str, RankedList]:
    """Exact top-``DEPTH`` chunks per query, folded to pages (the store's vector list)."""
    scores = q @ docs.T
    top = np.argpartition(-scores, DEPTH, axis=1)[:, :DEPTH]
    out = {}
    for i, qid in enumerate(queries):
        order = top[i][np.argsort(-scores[i, top[i]], kind="stable")]
        folded = fold_chunks([(uids[j], int(j), float(scores[i, j])) for j in order])
        out[qid] = RankedList("vector", [(u, s) for u, s, _ in folded])
    return out


def overlap(a: RankedList, b: RankedList, depth: int = 10) -> float:
    """Pages two lists share in their top ``depth``, over the most either could share (a
    list of top-100 chunks can fold to fewer than ``depth`` pages)."""
    top_a = {u for u, _ in a.items[:depth]}
    top_b = {u for u, _ in b.items[:depth]}
    return len(top_a & top_b) / max(1, min(depth, max(len(top_a), len(top_b))))


def _run(lists: Mapping[str, RankedList]) -> Run:
    return {
        q: {u: float(len(lst.items) - i) for i, (u, _) in enumerate(lst.items)}
        for q, lst in lists.items()
    }


def lexical_lists(store: Path, queries: Sequence[tuple[str, str]]) -> Any:
    """The store's lexical list per query, and its memoised graph stage."""
    handle = KnowledgeStore.open(store)
    return handle, collect(handle, queries, filters=FILTERS, retrievers=["lexical", "graph"])


def sides(eval_set: EvalSet, store: Path, specs: Sequence[str]) -> None:
    """Every combination docs × queries of ``specs`` on one set: figures, paired Δ against
    fp32 × fp32, and each vector list's agreement with fp32 × fp32's."""
    queries = eval_set.queries
    qids = [q for q, _ in queries]
    chunks = store_chunks(store)
    specs = list(dict.fromkeys([*specs, REFERENCE]))
    docs = {k: VectorCache(k).vectors(chunks.texts, label=k) for k in specs}
    qvec = {
        k: query_vectors([t for _, t in queries], eval_set.name, VectorCache(k).embedder, k)
        for k in specs
    }
    handle, collected = lexical_lists(store, queries)
    try:
        combos = {
            (d, q): vector_lists(qids, qvec[q], docs[d], chunks.uids) for d in specs for q in specs
        }
        reference = combos[(REFERENCE, REFERENCE)]
        scored: dict[tuple[str, str], dict[str, dict[str, dict[str, float]]]] = {}
        for key, vec in combos.items():
            fused = _fused(
                queries, collected.lists, {q: [v] for q, v in vec.items()}, collected.expand
            )
            scored[key] = {
                "vector": per_query(eval_set.qrels, _run(vec)),
                "fused": per_query(eval_set.qrels, fused),
            }
        print(f"\n## {eval_set.name} ({len(queries)} queries, {len(chunks.uids):,} chunks)\n")
        print(
            "| docs | queries | list | nDCG@10 | R@100 | MRR@10 | Δ nDCG@10 vs fp32 × fp32"
            " | overlap@10 |"
        )
        print("|---|---|---|---|---|---|---|---|")
        base = scored[(REFERENCE, REFERENCE)]
        agreement = {
            key: [overlap(vec[i], reference[i]) for i in qids] for key, vec in combos.items()
        }
        for (d, q), lists in scored.items():
            agree = np.mean(agreement[(d, q)])
            for lst in ("vector", "fused"):
                means = [np.mean(list(lists[lst][m].values())) for m in MEASURES]
                delta = paired_bootstrap(
                    [lists[lst]["ndcg@10"][i] - base[lst]["ndcg@10"][i] for i in qids]
                )
                print(
                    f"| {_short(d)} | {_short(q)} | {lst} | "
                    + " | ".join(f"{m:.4f}" for m in means)
                    + f" | {delta} | {agree:.3f} |"
                )
        first = (specs[0], specs[0])
        for spec in specs[1:]:
            if spec != REFERENCE:
                change = [
                    a - b for a, b in zip(agreement[(spec, spec)], agreement[first], strict=True)
                ]
                print(
                    f"\noverlap@10 with fp32 × fp32, {_short(spec)} × {_short(spec)} −"
                    f" {_short(specs[0])} × {_short(specs[0])}: {paired_bootstrap(change)}"
                )
    finally:
        handle.close()


def _short(spec: str) -> str:
    return spec.removeprefix("onnx:")


def _cosines(got: np.ndarray, want: np.ndarray) -> str:
    c = np.sum(got * want, axis=1)
    return f"{c.mean():.5f} | {c.min():.4f} | {np.percentile(c, 1):.4f}"


def sample_texts(stores: Mapping[str, Path], per_set: int) -> tuple[list[str], list[str]]:
    """``per_set`` random chunks of each set's store (always the same ones) and every question."""
    chunks: list[str] = []
    questions: list[str] = []
    for eval_set in eval_sets(list(stores)):
        texts = store_chunks(stores[eval_set.name]).texts
        chunks += random.Random(0).sample(texts, min(per_set, len(texts)))
        questions += [t for _, t in eval_set.queries]
    return chunks, questions


@dataclass
class Sample:
    """Random chunks of each set's store and every question, with their fp32 vectors."""

    chunks: list[str]
    questions: list[str]
    want_chunks: np.ndarray
    want_queries: np.ndarray

    @classmethod
    def of(cls, stores: Mapping[str, Path], per_set: int) -> Sample:
        chunks, questions = sample_texts(stores, per_set)
        reference = VectorCache(REFERENCE)
        want = query_vectors(questions, "fidelity", reference.embedder, REFERENCE)
        return cls(chunks, questions, reference.vectors(chunks, label="fp32 sample"), want)

    def header(self) -> None:
        print(f"\n{len(self.chunks)} chunks, {len(self.questions)} questions\n")
        print("| embedder | chunks: mean cos | min | 1st pct | queries: mean cos | min | 1st pct |")
        print("|---|---|---|---|---|---|---|")

    def row(self, name: str, embedder: Any) -> None:
        """Chunks embedded as ingest embeds them (``embed``), questions as search does."""
        got_chunks = np.asarray(embedder.embed(self.chunks), dtype=np.float32)
        got_queries = np.stack([embedder.embed_query(t) for t in self.questions])
        print(
            f"| {name} | {_cosines(got_chunks, self.want_chunks)}"
            f" | {_cosines(got_queries, self.want_queries)} |",
            flush=True,
        )


def fidelity(
    stores: Mapping[str, Path], specs: Sequence[str], per_set: int, rounds: int, timed: int
) -> None:
    """Cosine to fp32 on ``per_set`` random chunks of each store and every question; speed.

    Chunks are embedded as ingest embeds them (``embed``: length-sorted batches of 32),
    queries as search does (``embed_query``, alone). Speed: the sample's chunks per second
    through ``embed`` and the median ``embed_query`` of ``timed`` questions, every embedder
    in turn, ``rounds`` times (the machine's drifting load hits all alike).
    """
    sample = Sample.of(stores, per_set)
    embedders = {k: VectorCache(k).embedder for k in dict.fromkeys([*specs, REFERENCE])}
    sample.header()
    for spec in specs:
        sample.row(_short(spec), embedders[spec])
    chunks, questions = sample.chunks, sample.questions
    # Dynamic int8 quantizes activations with one scale per pass: a text's vector depends a
    # little on what it is batched with (a server's micro-batches). Questions in batches of 64
    # (random order) against each alone:
    order = random.Random(1).sample(range(len(questions)), len(questions))
    print("\n| embedder | questions in batches of 64 vs alone: mean cos | min |")
    print("|---|---|---|")
    for spec in specs:
        embedder = embedders[spec]
        alone = np.stack([embedder.embed_query(questions[i]) for i in order])
        batched = np.concatenate(
            [
                embedder.embed([questions[i] for i in order[j : j + 64]])
                for j in range(0, len(order), 64)
            ]
        )
        same = np.sum(alone * batched, axis=1)
        print(f"| {_short(spec)} | {same.mean():.5f} | {same.min():.4f} |")
    # Is it the batching that costs ingest's chunks fidelity? Each chunk alone, to fp32:
    print("\n| embedder | chunks one at a time: mean cos to fp32 | min | 1st pct |")
    print("|---|---|---|---|")
    for spec in specs:
        embedder = embedders[spec]
        one = np.concatenate([embedder.embed([text]) for text in chunks])
        print(f"| {_short(spec)} | {_cosines(one, sample.want_chunks)} |")
    if rounds > 0:
        speed(embedders, chunks, questions[:timed], rounds)


def speed(
    embedders: Mapping[str, Any], chunks: Sequence[str], questions: Sequence[str], rounds: int
) -> None:
    """Chunks per second through ``embed`` (wall and CPU: the process's CPU seconds, which a
    busy machine's other work does not inflate) and one ``embed_query``'s median, every
    embedder in turn, ``rounds`` times."""
    wall: dict[str, list[float]] = {k: [] for k in embedders}
    cpu: dict[str, list[float]] = {k: [] for k in embedders}
    latency: dict[str, list[float]] = {k: [] for k in embedders}
    for embedder in embedders.values():  # sessions made, caches warm
        embedder.embed(list(chunks[:64]))
        embedder.embed_query(questions[0])
    for _ in range(rounds):
        for spec, embedder in embedders.items():
            started, used = time.perf_counter(), time.process_time()
            embedder.embed(chunks)
            wall[spec].append(len(chunks) / (time.perf_counter() - started))
            cpu[spec].append(len(chunks) / (time.process_time() - used))
            spent = []
            for text in questions:
                started = time.perf_counter()
                embedder.embed_query(text)
                spent.append(time.perf_counter() - started)
            latency[spec].append(statistics.median(spent) * 1000)
    print(f"\nspeed, {rounds} rounds (load average {os.getloadavg()[0]:.1f} at the end)\n")
    print(
        "| embedder | chunks/s per round | median | chunks per CPU-second | median"
        " | one query p50 ms per round | median |"
    )
    print("|---|---|---|---|---|---|---|")
    for spec in embedders:
        print(
            f"| {_short(spec)} | {' · '.join(f'{r:.1f}' for r in wall[spec])}"
            f" | {statistics.median(wall[spec]):.1f}"
            f" | {' · '.join(f'{r:.1f}' for r in cpu[spec])}"
            f" | {statistics.median(cpu[spec]):.1f}"
            f" | {' · '.join(f'{v:.2f}' for v in latency[spec])}"
            f" | {statistics.median(latency[spec]):.2f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("command", choices=["sides", "fidelity", "speed"])
    parser.add_argument(
        "--store", action="append", default=[], help="SET=PATH: a built store of the set"
    )
    parser.add_argument("--specs", default="onnx:int8-plain,onnx:int8", help="int8 embedders")
    parser.add_argument("--per-set", type=int, default=500, help="fidelity: chunks per set")
    parser.add_argument("--rounds", type=int, default=3, help="speed rounds (0: none)")
    parser.add_argument("--timed", type=int, default=300, help="speed: queries timed")
    args = parser.parse_args()
    stores = {name: Path(path) for name, path in (s.split("=", 1) for s in args.store)}
    specs = [s.strip() for s in args.specs.split(",") if s.strip()]
    if args.command == "fidelity":
        fidelity(stores, specs, args.per_set, args.rounds, args.timed)
        return
    if args.command == "speed":
        chunks, questions = sample_texts(stores, args.per_set)
        embedders = {k: VectorCache(k).embedder for k in dict.fromkeys([*specs, REFERENCE])}
        speed(embedders, chunks, questions[: args.timed], args.rounds)
        return
    for eval_set in eval_sets(list(stores)):
        sides(eval_set, stores[eval_set.name], specs)


if __name__ == "__main__":
    main()
