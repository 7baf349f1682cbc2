"""Two versions of knowledge-store (and the raw libraries) side by side, interleaved, in one run.

Each side is a worker process with its own ``PYTHONPATH`` and its own copy of a
store (versions may rewrite an index on open, so never share one copy). The
driver sends every worker the same queries in small rounds, rotating who goes
first, so all sides see the same machine load; each worker times its own calls.

Figures per side: cold open (``KnowledgeStore.open`` + the first lexical and the
first vector answer, imports and model loading excluded; the OS page cache is
warm, it cannot be dropped here), fused search p50/p95 with the query embedding
excluded (the embedder answers from vectors computed before timing), ``lexical``
and ``vector`` at each ``--k`` (same query vectors on every side), RSS after
opening and the peak (RssFile, the mapped dense index, apart). ``--raw`` adds raw
tantivy (which reads each hit's stored text) and raw faiss HNSW (ids only) built
from the same chunks (bench_primitives.py), and two more for the vector rows:
``raw+text``, raw faiss plus one plain SQLite statement for the hits' uid and
text, the least an answer with text costs; and ``raw+answer``, raw faiss plus one
plain statement for every field the store's vector answer carries (its hydration
columns, the same join), as plain rows: what hand-written glue around faiss must
at least do to give the same answer. Neither applies an ACL (the store applies
the caller's before ranking, under one snapshot). The load average is printed with the
figures: the machine is shared. ``--repeat N`` keeps each query's best of N runs
(pre-emption by other work inflates single samples), and each query's process
CPU time is reported too (what the call costs, whatever else runs). ``--opens N``
times N more cold opens per side, each in a fresh process, alternating
(``cold_open@s``: median and max, in seconds).

    # issue 12's figures: a worktree of the old commit beside this one, and one
    # copy of a replicated store per side (bench_search.py --replicate-to builds one)
    KS_EVAL_DIR=/work/shared/eval/postgres-docs .venv/bin/python bench/bench_sides.py \\
        --raw --k 10 --k 100 --queries 300 --repeat 3 --opens 3 \\
        --side before=/work/wt/h12before/src:.ks/100k-before \\
        --side after=/work/wt/h12b/src:.ks/100k-after --json bench/results/sides-100k.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


# -- the worker ---------------------------------------------------------------------------
def _memory() -> dict[str, float]:
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            fields[key] = int(value.split()[0]) / 1024  # MiB
    return {
        "rss_mib": fields["VmRSS"],
        "peak_mib": fields["VmHWM"],
        # RssFile: mapped file pages (the dense index, the catalog readers' map): the OS's
        # page cache, shared and reclaimable; RssAnon: the process's own memory
        "anon_mib": fields["RssAnon"],
        "file_mib": fields["RssFile"],
    }


class Worker:
    """One side: a knowledge-store version on its store, or the raw libraries."""

    def __init__(self, store: Path, raw: bool) -> None:
        import faiss
        import numpy as np

        faiss.omp_set_num_threads(1)
        self.np = np
        self.raw = raw
        self.texts: list[str] = []
        self.vectors: list[Any] = []
        self.info: dict[str, Any] = {}
        if raw:
            sys.path.insert(0, str(HERE))
            from bench_primitives import _chunks, raw_faiss, raw_tantivy

            started = time.perf_counter()
            docs, ids, matrix = _chunks(store)
            self.lexical_fn = raw_tantivy(docs)
            self.vector_fn = raw_faiss(matrix)
            self.vector_text_fn = raw_text(store, ids, self.vector_fn, _TEXT_COLUMNS)
            self.vector_answer_fn = raw_text(store, ids, self.vector_fn, _ANSWER_COLUMNS)
            self.info["build_s"] = time.perf_counter() - started
            return
        from knowledge_store.model import Filters
        from knowledge_store.store import KnowledgeStore

        try:  # the docs filter; the keyword changed in issue 12
            self.docs = Filters.build(not_type=("codeSample",))
        except TypeError:
            self.docs = Filters.build(not_types=("codeSample",))
        started = time.perf_counter()
        self.store = KnowledgeStore.open(store)
        opened = time.perf_counter()
        self.store.lexical("vacuum freeze", k=10)
        lexical = time.perf_counter()
        self.store.vector(np.ones(self.store.stats().dimension or 384, np.float32) / 20, k=10)
        done = time.perf_counter()
        self.info.update(
            open_s=opened - started,
            first_lexical_s=lexical - opened,
            first_vector_s=done - lexical,
            cold_open_s=done - started,
            chunks=self.store.stats().chunks,
            after_open=_memory(),
        )

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [self.store.embedder.embed_query(t).tolist() for t in texts]

    def load(self, texts: list[str], vectors: list[list[float]]) -> None:
        self.texts = texts
        self.vectors = [self.np.asarray(v, dtype=self.np.float32) for v in vectors]
        if not self.raw:
            self.store.embedder.embed_query("load the model")  # every side's RSS holds it
            self.info["with_model"] = _memory()
            by_text = dict(zip(texts, self.vectors, strict=True))
            embedder = self.store.embedder
            embedder.embed_query = by_text.__getitem__  # type: ignore[method-assign]

    def call(self, kind: str, k: int, i: int) -> object:
        if self.raw:
            if kind == "lexical":
                return self.lexical_fn(self.texts[i], k)
            if kind == "vector_text":
                return self.vector_text_fn(self.vectors[i], k)
            if kind == "vector_answer":
                return self.vector_answer_fn(self.vectors[i], k)
            return self.vector_fn(self.vectors[i], k)
        if kind == "lexical":
            return self.store.lexical(self.texts[i], k=k)
        if kind == "vector":
            return self.store.vector(self.vectors[i], k=k)
        if kind == "search":
            return self.store.search(self.texts[i], k=k)
        return self.store.search(self.texts[i], k=k, filters=self.docs)  # search_docs

    def run(self, kind: str, k: int, items: list[int], repeat: int = 1) -> list[list[float]]:
        """``[wall s, CPU s]`` per query, each the best of ``repeat`` runs.

        The process CPU time is what the call costs whatever else the machine runs;
        the wall time is what a caller waits, pre-emption by other work included.
        """
        samples = []
        for i in items:
            wall = cpu = float("inf")
            for _ in range(repeat):
                started, cpu_started = time.perf_counter(), time.process_time()
                self.call(kind, k, i)
                cpu = min(cpu, time.process_time() - cpu_started)
                wall = min(wall, time.perf_counter() - started)
            samples.append([wall, cpu])
        return samples


#: What ``raw+text`` reads of each hit: the least an answer with text needs (raw tantivy
#: reads the same from its stored documents).
_TEXT_COLUMNS = "c.id, e.uid, c.text"
#: What ``raw+answer`` reads: every field of the store's vector answer, as the store's own
#: hydration statement reads it (``CHUNK_COLUMNS`` as of issue 12, spelled out: the floor
#: stays the same whatever the store's own statement becomes).
_ANSWER_COLUMNS = (
    'c.id, e.uid, e.title, e.type, e.href, c.text, c.heading, c.start, c."end", c.ordinal'
)


def raw_text(store: Path, ids: Any, search: Any, columns: str) -> Any:
    """Raw faiss plus one plain SQLite statement reading ``columns`` of the hits (chunks
    ``c`` joined to their entities ``e``), returned as plain rows. No ACL, no snapshot
    held across the two, nothing built but the rows: the floor under the store's vector
    primitive (``raw+text``: its text; ``raw+answer``: every field its answer carries)."""
    import sqlite3

    conn = sqlite3.connect(store / "catalog.sqlite", check_same_thread=False)
    statement = (
        f"SELECT {columns} FROM chunks AS c JOIN entities AS e ON e.id = c.entity"
        " WHERE c.id IN (SELECT value FROM json_each(?))"
    )

    def run(vector: Any, k: int) -> object:
        _scores, rows = search(vector, k)
        chunk_ids = [int(ids[r]) for r in rows[0] if r >= 0]
        return conn.execute(statement, (json.dumps(chunk_ids),)).fetchall()

    return run


def worker_main(store: Path, raw: bool) -> None:
    out = sys.stdout
    sys.stdout = sys.stderr  # library chatter must not corrupt the protocol
    worker = Worker(store, raw)
    out.write(json.dumps({"info": worker.info}) + "\n")
    out.flush()
    for line in sys.stdin:
        msg = json.loads(line)
        op = msg["op"]
        if op == "embed":
            reply: Any = worker.embed(msg["texts"])
        elif op == "load":
            reply = worker.load(msg["texts"], msg["vectors"])
        elif op == "run":
            reply = worker.run(msg["kind"], msg["k"], msg["items"], msg["repeat"])
        elif op == "memory":
            reply = _memory()
        else:
            return
        out.write(json.dumps({"reply": reply}) + "\n")
        out.flush()


# -- the driver ---------------------------------------------------------------------------
class Side:
    def __init__(self, name: str, src: str, store: Path, raw: bool = False) -> None:
        self.name = name
        env = dict(os.environ, PYTHONPATH=src, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
        env.setdefault("OMP_NUM_THREADS", "1")
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(store)]
        self.proc = subprocess.Popen(
            cmd + (["--raw"] if raw else []),
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.info: dict[str, Any] = self._read()["info"]

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            sys.exit(f"worker {self.name} died (exit {self.proc.wait()})")
        result: dict[str, Any] = json.loads(line)
        return result

    def ask(self, **msg: Any) -> Any:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()
        return self._read()["reply"]

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))] * 1000


def interleave(sides: list[Side], kind: str, k: int, n: int, args: argparse.Namespace) -> dict:
    """Every side runs the same queries, ``args.rounds`` at a time, rotating the order."""
    rounds, repeat = args.rounds, args.repeat
    for side in sides:
        side.ask(op="run", kind=kind, k=k, items=list(range(min(args.warm, n))), repeat=1)
    samples: dict[str, list[list[float]]] = {s.name: [] for s in sides}
    for turn, first in enumerate(range(0, n, rounds)):
        items = list(range(first, min(n, first + rounds)))
        for j in range(len(sides)):
            side = sides[(turn + j) % len(sides)]
            samples[side.name] += side.ask(op="run", kind=kind, k=k, items=items, repeat=repeat)
    out: dict[str, Any] = {
        name: {
            "p50": pct([w for w, _ in s], 0.5),
            "p95": pct([w for w, _ in s], 0.95),
            "cpu_p50": pct([c for _, c in s], 0.5),
            "cpu_p95": pct([c for _, c in s], 0.95),
            "n": len(s),
        }
        for name, s in samples.items()
    }
    out["load1"] = os.getloadavg()[0]  # at the end of this figure
    return out


def cold_opens(specs: list[str], times: int) -> dict[str, Any]:
    """Open each side's store ``times`` more times, each in a fresh process, alternating."""
    seconds: dict[str, list[float]] = {}
    for turn in range(times):
        for j in range(len(specs)):
            name, _, rest = specs[(turn + j) % len(specs)].partition("=")
            src, _, store = rest.partition(":")
            side = Side(name, src, Path(store))
            seconds.setdefault(name, []).append(side.info["cold_open_s"])
            side.close()
    out: dict[str, Any] = {
        n: {"p50": sorted(s)[len(s) // 2], "p95": max(s)} for n, s in seconds.items()
    }
    out["load1"] = os.getloadavg()[0]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--side", action="append", default=[], help="NAME=SRC:STORE")
    parser.add_argument("--raw", action="store_true", help="add raw tantivy and raw faiss")
    parser.add_argument("--k", type=int, action="append")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=10, help="queries per turn")
    parser.add_argument("--warm", type=int, default=20)
    parser.add_argument("--opens", type=int, default=3, help="extra cold opens per side")
    parser.add_argument(
        "--repeat", type=int, default=1, help="time each query N times, keep the best"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.worker:
        worker_main(args.worker, args.raw)
        return
    sys.path.insert(0, str(HERE))
    from common import queries

    texts = [t for _, t in queries(args.queries)]
    load_start = os.getloadavg()
    sides = []
    for spec in args.side:
        name, _, rest = spec.partition("=")
        src, _, store = rest.partition(":")
        sides.append(Side(name, src, Path(store)))
    # the raw libraries on the last side's chunks (its src only lends faiss parameters)
    raw = Side("raw", src, Path(store), raw=True) if args.raw else None
    vectors = sides[-1].ask(op="embed", texts=texts)
    everyone = sides + ([raw] if raw else [])
    for side in everyone:
        side.ask(op="load", texts=texts, vectors=vectors)
    n = len(texts)
    figures: dict[str, Any] = {"info": {s.name: s.info for s in everyone}}
    figures["cold_open@s"] = cold_opens(args.side, args.opens)
    for k in args.k or [10, 100]:
        for kind in ("lexical", "vector"):
            figures[f"{kind}@{k}"] = interleave(everyone, kind, k, n, args)
        if raw:  # raw faiss + the hits' text, + every field of the answer (plain rows)
            for base, kind in (("raw+text", "vector_text"), ("raw+answer", "vector_answer")):
                figures[f"vector@{k}"][base] = interleave([raw], kind, k, n, args)["raw"]
    for kind in ("search", "search_docs"):
        figures[f"{kind}@10"] = interleave(sides, kind, 10, n, args)
    figures["memory"] = {s.name: s.ask(op="memory") for s in everyone}
    figures["loadavg"] = {"start": load_start, "end": os.getloadavg()}
    for side in everyone:
        side.close()
    report(figures, [s.name for s in everyone])
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=1))


def report(figures: dict[str, Any], names: list[str]) -> None:
    info = figures["info"]
    print(f"load average: start {figures['loadavg']['start']}, end {figures['loadavg']['end']}")
    for name in names:
        print(f"{name}: {json.dumps(info[name])}  memory at end {figures['memory'][name]}")
    print(f"{'figure':<16}" + "".join(f"{n + ' p50':>14}{n + ' p95':>14}" for n in names))
    _table(figures, names, "", with_load=True)
    print("CPU time of the process per query (ms, best of --repeat): p50 / p95")
    _table(figures, names, "cpu_", with_load=False)


#: What each side is divided by: raw tantivy / faiss, and (vector rows) raw faiss with the
#: hits' text, or with every field of the answer.
_BASES = ("raw", "raw+text", "raw+answer")


def _table(figures: dict[str, Any], names: list[str], prefix: str, *, with_load: bool) -> None:
    """One row per timed figure: each side's ``{prefix}p50`` / ``{prefix}p95``, and ÷ raw."""
    p50, p95 = f"{prefix}p50", f"{prefix}p95"
    for key, row in figures.items():
        if "@" not in key or p50 not in row.get(names[0], {}):
            continue
        cells = "".join(
            f"{row[n][p50]:14.2f}{row[n][p95]:14.2f}" if n in row else f"{'':>28}" for n in names
        )
        ratios = ""
        for base in _BASES:
            if base in row:
                ratios += "  " + " ".join(
                    f"{n}/{base} {row[n][p50] / row[base][p50]:.1f}x" for n in names if n != "raw"
                )
        for base in _BASES[1:]:
            if base in row:
                ratios += f"  ({base} p50 {row[base][p50]:.2f} p95 {row[base][p95]:.2f})"
        load = f"  load {row['load1']:.1f}" if with_load else ""
        print(f"{key:<16}{cells}{ratios}{load}")


if __name__ == "__main__":
    main()
