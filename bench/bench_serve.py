"""A bounded loopback load test of ``ks serve``: REST, then the MCP endpoint; before/after in one run.

Starts ``ks serve`` on 127.0.0.1 (a free port) over a store as a subprocess,
then for each surface runs CLIENTS concurrent clients for SECONDS (after a
short warm-up that is not counted), each looping over a fixed mix of
requests — fused search 40 %, graph 20 %, sql 20 %, content 20 % — with the
postgres-docs eval queries and uids from the store. Reports p50/p95/p99
latency (overall and per kind), throughput, the error count (any non-2xx, a
tool error, or an exception; goal zero), the server's memory — its whole
process tree, supervisor and workers: peak summed RSS, each process's peak
RSS, peak summed PSS (shared pages counted once) — and the CPU the server and
the load generator spent per request over the counted window (a figure that a
busy, shared machine inflates far less than latency or throughput).
Everything stops by itself: the clients at the deadline, the server after.

Each ``--side NAME=SRC:STORE[:ARGS]`` is one server to measure: the ``src`` folder
of a knowledge-store checkout (its ``PYTHONPATH``; empty: this one), a store
that version can read (a copy per version: versions may rewrite an index on
open) and more ``ks serve`` arguments. Sides run one at a time, never side by
side; ``--rounds N`` runs them all N times, rotating the order, so that every
side sees the same machine. The REST load generator is ``--client raw`` (HTTP/1.1
over asyncio streams, bench/loadgen.py: ~0.5 CPU-ms a request) or ``httpx``
(several CPU-ms a request: on 2 cores the generator then takes a large share of
the CPUs from the server it measures).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_serve.py --store .ks/pg15
    # issue 13's serving figures: the commit before issue 13 (PyTorch) against this one,
    # one process and the default workers (one per core), 32 clients × 60 s, twice each
    git worktree add --detach /work/wt/before ba743da
    KS_EVAL_DIR=/work/shared/eval/postgres-docs .venv/bin/python bench/bench_serve.py \\
        --surfaces rest --clients 32 --seconds 60 --rounds 2 \\
        --side before=/work/wt/before/src:.ks/before \\
        --side after-w1=$PWD/src:.ks/after:"--workers 1" --side after=$PWD/src:.ks/after \\
        --json bench/results/serve-sides-raw.json
    # the batching window or the PyTorch path on this version
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_serve.py --store .ks/pg15 --surfaces rest \\
        --embedder st:sentence-transformers/all-MiniLM-L6-v2 --window-ms 0

``.ks/before`` is the eval corpus ingested by that commit (PyTorch vectors; its
``meta.embedder`` row reads ``default``), ``.ks/after`` by this one (``make eval``
builds ``.ks/pg15``). The MCP clients use the SDK's own client over streamable
HTTP (one session per client, tools/call).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from common import EVAL  # $KS_EVAL_DIR, else ../shared/eval/postgres-docs beside the repo
from loadgen import HttpxClient, RawHttp

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent

TOKEN = "bench-token-0000000000"
MIX = ("search",) * 4 + ("graph",) * 2 + ("sql",) * 2 + ("content",) * 2
TYPES = ("section", "refentry", "chapter", "codeSample", "appendix")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _workload(store: Path, limit: int = 500) -> tuple[list[str], list[str]]:
    texts = []
    with (EVAL / "queries.jsonl").open(encoding="utf-8") as f:
        for line in f:
            texts.append(json.loads(line)["text"])
    conn = sqlite3.connect(f"file:{store / 'catalog.sqlite'}?mode=ro", uri=True)
    uids = [u for (u,) in conn.execute("SELECT uid FROM entities ORDER BY id")]
    conn.close()
    rng = random.Random(7)
    return rng.sample(texts, min(limit, len(texts))), rng.sample(uids, min(limit, len(uids)))


class Server:
    """``ks serve`` in a subprocess (its worker processes too), its memory sampled every 100 ms.

    ``src``: the ``src`` folder of the knowledge-store to serve (``PYTHONPATH``; default
    this checkout's, as installed); ``args``: more ``ks serve`` arguments (``--workers 2``).
    Memory is the process tree's — the supervisor and every worker: the peak of the
    summed RSS, each process's peak RSS, and the summed PSS (proportional set size:
    pages shared between processes, a mapped index or the libraries, counted once in
    all), sampled each second.
    """

    def __init__(
        self,
        store: Path,
        port: int,
        tokens: Path,
        env: dict[str, str],
        *,
        src: Path | None = None,
        args: Sequence[str] = (),
    ) -> None:
        ks = Path(sys.executable).with_name("ks")
        self.url = f"http://127.0.0.1:{port}"
        # kept open for the server's lifetime; read back only if it fails to start
        self.log = tempfile.TemporaryFile("w+")  # noqa: SIM115
        paths = {**os.environ, **env}
        if src is not None:
            paths["PYTHONPATH"] = str(src)
        self.proc = subprocess.Popen(
            [
                str(ks),
                "--store",
                str(store),
                "serve",
                "--port",
                str(port),
                "--tokens",
                str(tokens),
                *list(args),
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**paths, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"},
        )
        self.peak = 0  # the process tree's summed RSS
        self.peak_pss = 0
        self.peak_each: dict[int, int] = {}
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)

    def tree(self) -> list[Any]:
        import psutil

        try:
            root = psutil.Process(self.proc.pid)
            return [root, *root.children(recursive=True)]
        except psutil.Error:
            return []

    def _sample(self) -> None:
        import psutil

        tick = 0
        while not self._stop.is_set():
            total = pss = 0
            for proc in self.tree():
                try:
                    rss = proc.memory_info().rss
                    if tick % 10 == 0:
                        pss += _pss(proc.pid)
                except (psutil.Error, OSError):
                    continue
                total += rss
                self.peak_each[proc.pid] = max(self.peak_each.get(proc.pid, 0), rss)
            self.peak = max(self.peak, total)
            if tick % 10 == 0:
                self.peak_pss = max(self.peak_pss, pss)
            tick += 1
            time.sleep(0.1)

    def cpu_seconds(self) -> float:
        """User + system CPU seconds of the live process tree so far."""
        import psutil

        spent = 0.0
        for proc in self.tree():
            try:
                times = proc.cpu_times()
            except psutil.Error:
                continue
            spent += times.user + times.system
        return spent

    def wait_ready(self, timeout: float = 180) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                sys.exit(f"ks serve exited early:\n{self.log.read()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    self._wait_workers(deadline)
                    self._sampler.start()
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.stop()
        sys.exit("ks serve did not start in time")

    def _wait_workers(self, deadline: float) -> None:
        """Every worker has started (its startup line is in the log), not only the first."""
        workers = 1
        for flag in ("--workers",):
            if flag in self.proc.args:
                workers = int(self.proc.args[self.proc.args.index(flag) + 1])
        while time.monotonic() < deadline:
            self.log.seek(0)
            if self.log.read().count("Application startup complete") >= workers:
                return
            time.sleep(0.3)

    def reset_peak(self) -> None:
        self.peak = self.peak_pss = 0
        self.peak_each = {}

    def memory(self) -> dict[str, Any]:
        each = sorted(self.peak_each.values(), reverse=True)
        return {
            "peak_rss_mb": round(self.peak / 2**20, 1),
            "peak_pss_mb": round(self.peak_pss / 2**20, 1),
            "processes": len(each),
            "peak_rss_each_mb": [round(x / 2**20, 1) for x in each],
        }

    def stop(self) -> None:
        self._stop.set()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)

    def problems(self) -> list[str]:
        """The server log's warnings and errors (first 10)."""
        self.log.seek(0)
        lines = self.log.read().splitlines()
        return [x for x in lines if any(w in x for w in ("ERROR", "WARNING", "Traceback"))][:10]


def _pss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    return 0


class Meter:
    """CPU seconds the server and this client spend over the counted window."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.marks: list[tuple[float, float, float]] = []

    def mark(self) -> None:
        self.marks.append((time.monotonic(), self.server.cpu_seconds(), time.process_time()))

    def report(self, requests: int) -> dict[str, float]:
        if len(self.marks) < 2 or not requests:
            return {}
        (t0, s0, c0), (t1, s1, c1) = self.marks[0], self.marks[-1]
        wall = t1 - t0
        return {
            "server_cpu_ms_per_request": round((s1 - s0) * 1000 / requests, 2),
            "client_cpu_ms_per_request": round((c1 - c0) * 1000 / requests, 2),
            "server_cores_busy": round((s1 - s0) / wall, 2),
            "client_cores_busy": round((c1 - c0) / wall, 2),
        }


class Tally:
    def __init__(self) -> None:
        self.latency: dict[str, list[float]] = defaultdict(list)
        self.errors: dict[str, int] = defaultdict(int)
        self.samples: list[str] = []

    def add(self, kind: str, seconds: float, ok: bool, why: str = "") -> None:
        self.latency[kind].append(seconds)
        if not ok:
            self.errors[kind] += 1
            if len(self.samples) < 5:
                self.samples.append(f"{kind}: {why[:200]}")

    def report(self, wall: float, memory: dict[str, Any]) -> dict[str, Any]:
        every = [x for xs in self.latency.values() for x in xs]

        def pct(xs: list[float]) -> dict[str, float]:
            ordered = sorted(xs)

            def at(p: float) -> float:
                return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000, 1)

            return {"n": len(ordered), "p50_ms": at(0.50), "p95_ms": at(0.95), "p99_ms": at(0.99)}

        return {
            "requests": len(every),
            "seconds": round(wall, 1),
            "throughput_rps": round(len(every) / wall, 1),
            **pct(every),
            "errors": sum(self.errors.values()),
            "error_samples": self.samples,
            **memory,
            "by_kind": {
                k: {**pct(v), "errors": self.errors[k]} for k, v in sorted(self.latency.items())
            },
        }


def _rest_request(
    kind: str, rng: random.Random, texts: list[str], uids: list[str]
) -> tuple[str, str, Any]:
    if kind == "search":
        return "POST", "/v1/search", {"query": rng.choice(texts), "k": 10}
    if kind == "graph":
        return "POST", "/v1/graph", {"starts": [rng.choice(uids)], "depth": rng.choice((1, 2))}
    if kind == "sql":
        return (
            "POST",
            "/v1/sql",
            {"filters": {"type": [rng.choice(TYPES)]}, "order": "title:asc", "k": 20},
        )
    from urllib.parse import quote

    return "GET", f"/v1/content/{quote(rng.choice(uids), safe='')}", None


async def run_rest(
    url: str,
    clients: int,
    seconds: float,
    warmup: float,
    texts: list[str],
    uids: list[str],
    meter: Meter | None = None,
    client: str = "raw",
) -> tuple[Tally, float]:
    """CLIENTS loops of requests; ``client``: ``raw`` (one keep-alive HTTP/1.1 connection
    per client over asyncio streams: a load generator that costs the shared CPUs little)
    or ``httpx`` (httpx's async client, several times the CPU per request)."""
    tally = Tally()
    start = time.monotonic()
    count_from, stop_at = start + warmup, start + warmup + seconds
    send = RawHttp(url, TOKEN) if client == "raw" else HttpxClient(url, clients, TOKEN)

    async def one(n: int) -> None:
        rng = random.Random(n)
        while (now := time.monotonic()) < stop_at:
            kind = rng.choice(MIX)
            method, path, body = _rest_request(kind, rng, texts, uids)
            t0 = time.perf_counter()
            try:
                status, text = await send.request(n, method, path, body)
                ok, why = status < 400, text
            except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
                ok, why = False, repr(exc)
            except Exception as exc:  # httpx's errors
                ok, why = False, repr(exc)
            if now >= count_from:
                tally.add(kind, time.perf_counter() - t0, ok, why)

    async def marks() -> None:
        if meter is None:
            return
        await asyncio.sleep(max(0.0, count_from - time.monotonic()))
        meter.mark()
        await asyncio.sleep(max(0.0, stop_at - time.monotonic()))
        meter.mark()

    try:
        await asyncio.gather(marks(), *(one(n) for n in range(clients)))
    finally:
        await send.close()
    return tally, seconds


async def run_mcp(
    url: str,
    clients: int,
    seconds: float,
    warmup: float,
    texts: list[str],
    uids: list[str],
    meter: Meter | None = None,
    client: str = "",
) -> tuple[Tally, float]:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    tally = Tally()
    start = time.monotonic()
    count_from, stop_at = start + warmup, start + warmup + seconds

    def call(kind: str, rng: random.Random) -> tuple[str, dict[str, Any]]:
        if kind == "search":
            return "search", {"query": rng.choice(texts), "k": 10}
        if kind == "graph":
            return "graph", {"starts": [rng.choice(uids)], "depth": rng.choice((1, 2))}
        if kind == "sql":
            return "sql", {"filters": {"type": [rng.choice(TYPES)]}, "order": "title:asc", "k": 20}
        return "fetch_content", {"uid": rng.choice(uids), "max_chars": 4000}

    async def one(n: int) -> None:
        rng = random.Random(1000 + n)
        http = httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {TOKEN}"}, timeout=httpx2.Timeout(60)
        )
        try:
            async with Client(streamable_http_client(f"{url}/mcp", http_client=http)) as session:
                while (now := time.monotonic()) < stop_at:
                    kind = rng.choice(MIX)
                    name, arguments = call(kind, rng)
                    t0 = time.perf_counter()
                    try:
                        result = await session.call_tool(name, arguments)
                        ok = not result.is_error
                        why = result.content[0].text if result.content else ""
                    except Exception as exc:  # a protocol or transport failure counts
                        ok, why = False, repr(exc)
                    if now >= count_from:
                        tally.add(kind, time.perf_counter() - t0, ok, why)
        except Exception as exc:
            tally.add("session", 0.0, False, repr(exc))

    async def marks() -> None:
        if meter is None:
            return
        await asyncio.sleep(max(0.0, count_from - time.monotonic()))
        meter.mark()
        await asyncio.sleep(max(0.0, stop_at - time.monotonic()))
        meter.mark()

    await asyncio.gather(marks(), *(one(n) for n in range(clients)))
    return tally, seconds


def _side(spec: str) -> tuple[str, Path | None, Path, list[str]]:
    """``NAME=SRC:STORE[:ARGS]`` → (name, src or None, store, extra ``ks serve`` arguments)."""
    name, _, rest = spec.partition("=")
    src, _, rest = rest.partition(":")
    store, _, extra = rest.partition(":")
    if not name or not store:
        sys.exit(f"--side {spec!r}: write NAME=SRC:STORE[:ARGS] (SRC may be empty: this checkout)")
    return name, Path(src).resolve() if src else None, Path(store), extra.split()


def _run_side(
    args: argparse.Namespace,
    side: tuple[str, Path | None, Path, list[str]],
    tokens: Path,
    server_env: dict[str, str],
    texts: list[str],
    uids: list[str],
) -> dict[str, Any]:
    name, src, store, extra = side
    load = os.getloadavg()
    print(
        f"[{name}] src {src or '(installed)'} · store {store} · serve {' '.join(extra) or '-'}"
        f" · load {load[0]:.1f}",
        flush=True,
    )
    out: dict[str, Any] = {
        "side": name,
        "src": str(src),
        "store": str(store),
        "serve_args": extra,
        "load_average_at_start": load,
    }
    server = Server(store, _free_port(), tokens, server_env, src=src, args=extra)
    try:
        server.wait_ready()
        runners = {"rest": run_rest, "mcp": run_mcp}
        for surface in args.surfaces.split(","):
            server.reset_peak()
            meter = Meter(server)
            print(f"  {surface}: {args.clients} clients × {args.seconds:.0f} s …", flush=True)
            tally, wall = asyncio.run(
                runners[surface](
                    server.url,
                    args.clients,
                    args.seconds,
                    args.warmup,
                    texts,
                    uids,
                    meter,
                    args.client,
                )
            )
            r = out[surface] = tally.report(wall, server.memory())
            r.update(meter.report(r["requests"]))
            print(
                f"    {r['requests']} requests · {r['throughput_rps']} req/s · p50 {r['p50_ms']} ms"
                f" · p95 {r['p95_ms']} ms · p99 {r['p99_ms']} ms · errors {r['errors']}"
                f"\n    peak RSS {r['peak_rss_mb']} MB in {r['processes']} process(es)"
                f" {r['peak_rss_each_mb']} · peak PSS {r['peak_pss_mb']} MB"
                f"\n    server CPU {r.get('server_cpu_ms_per_request')} ms/request"
                f" ({r.get('server_cores_busy')} cores busy) · client CPU"
                f" {r.get('client_cpu_ms_per_request')} ms/request",
                flush=True,
            )
            for kind, k in r["by_kind"].items():
                print(
                    f"      {kind:8} n={k['n']:6} p50 {k['p50_ms']:7} p95 {k['p95_ms']:7} p99 {k['p99_ms']:7} errors {k['errors']}"
                )
            for sample in r["error_samples"]:
                print(f"      error: {sample}")
    finally:
        server.stop()
        out["server_log_problems"] = server.problems()
        for line in out["server_log_problems"]:
            print(f"    server: {line}")
    out["load_average_at_end"] = os.getloadavg()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--store", type=Path, default=ROOT / ".ks" / "pg15")
    parser.add_argument(
        "--side",
        action="append",
        default=[],
        metavar="NAME=SRC:STORE[:ARGS]",
        help="a server to measure: its src folder (PYTHONPATH; empty: this checkout), its store,"
        " and more `ks serve` arguments ('--workers 2'); repeat for before/after in one run",
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="run every side this many times, rotating the order"
    )
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--surfaces", default="rest,mcp")
    parser.add_argument(
        "--client", choices=("raw", "httpx"), default="raw", help="the REST load generator"
    )
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--embedder",
        default=None,
        help="the server's embedder spec ($KS_EMBEDDER), e.g. st:sentence-transformers/all-MiniLM-L6-v2",
    )
    parser.add_argument(
        "--window-ms", type=float, default=None, help="query batching window ($KS_EMBED_WINDOW_MS)"
    )
    args = parser.parse_args()
    server_env = {}
    if args.embedder:
        server_env["KS_EMBEDDER"] = args.embedder
    if args.window_ms is not None:
        server_env["KS_EMBED_WINDOW_MS"] = str(args.window_ms)
    sides = [_side(x) for x in args.side] or [("server", None, args.store, [])]
    for _, _, store, _ in sides:
        if not (store / "catalog.sqlite").exists():
            sys.exit(f"no store at {store}: build it with `make eval` (the eval corpus)")
    texts, uids = _workload(sides[0][2])
    out: dict[str, Any] = {
        "clients": args.clients,
        "seconds": args.seconds,
        "client": args.client,
        "cpus": os.cpu_count(),
        "load_average_at_start": os.getloadavg(),
        "mix": "search 40% · graph 20% · sql 20% · content 20%",
        "server_env": server_env,
        "runs": [],
    }
    print(f"server env {server_env or '(defaults)'}, load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        tokens = Path(tmp) / "tokens.jsonl"
        tokens.write_text(json.dumps({"token": TOKEN, "identity": "everyone"}) + "\n")
        for round_ in range(args.rounds):
            order = sides[round_ % len(sides) :] + sides[: round_ % len(sides)]
            for side in order:
                run = _run_side(args, side, tokens, server_env, texts, uids)
                out["runs"].append({"round": round_ + 1, **run})
    out["load_average_at_end"] = os.getloadavg()
    _summary(out["runs"], args.surfaces.split(","))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2))


def _summary(runs: list[dict[str, Any]], surfaces: list[str]) -> None:
    print(
        "\nside        round surface  req/s   p50 ms   p95 ms  server CPU ms/req  RSS MB (each)  PSS MB"
    )
    for run in runs:
        for surface in surfaces:
            r = run.get(surface)
            if r:
                print(
                    f"{run['side']:11} {run['round']:5} {surface:7} {r['throughput_rps']:6}"
                    f" {r['p50_ms']:8} {r['p95_ms']:8} {r.get('server_cpu_ms_per_request', '-'):>18}"
                    f"  {r['peak_rss_mb']} {r['peak_rss_each_mb']}  {r['peak_pss_mb']}"
                )


if __name__ == "__main__":
    main()
