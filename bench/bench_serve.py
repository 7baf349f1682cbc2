"""A bounded loopback load test of ``ks serve``: REST, then the MCP endpoint.

Starts ``ks serve`` on 127.0.0.1 (a free port) over a store as a subprocess,
then for each surface runs CLIENTS concurrent clients for SECONDS (after a
short warm-up that is not counted), each looping over a fixed mix of
requests — fused search 40 %, graph 20 %, sql 20 %, content 20 % — with the
postgres-docs eval queries and uids from the store. Reports p50/p95/p99
latency (overall and per kind), throughput, the error count (any non-2xx, a
tool error, or an exception; goal zero) and the server process's peak RSS.
Everything stops by itself: the clients at the deadline, the server after.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_serve.py --store .ks/pg15
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_serve.py --store .ks/pg15 \\
        --clients 32 --seconds 60 --json bench/.cache/serve.json
    # before/after: the PyTorch path, or another batching window, on the same store
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_serve.py --store .ks/pg15 --surfaces rest \\
        --embedder st:sentence-transformers/all-MiniLM-L6-v2 --window-ms 0

The REST clients use httpx (async); the MCP clients use the SDK's own client
over streamable HTTP (one session per client, tools/call).
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
from pathlib import Path
from typing import Any

from common import EVAL  # $KS_EVAL_DIR, else ../shared/eval/postgres-docs beside the repo

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
    """``ks serve`` in a subprocess, with its peak RSS sampled every 100 ms."""

    def __init__(self, store: Path, port: int, tokens: Path, env: dict[str, str]) -> None:
        ks = Path(sys.executable).with_name("ks")
        self.url = f"http://127.0.0.1:{port}"
        # kept open for the server's lifetime; read back only if it fails to start
        self.log = tempfile.TemporaryFile("w+")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [str(ks), "--store", str(store), "serve", "--port", str(port), "--tokens", str(tokens)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **env},
        )
        self.peak = 0
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        import psutil

        proc = psutil.Process(self.proc.pid)
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, proc.memory_info().rss)
            except psutil.Error:
                return
            time.sleep(0.1)

    def wait_ready(self, timeout: float = 180) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                sys.exit(f"ks serve exited early:\n{self.log.read()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    self._sampler.start()
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.stop()
        sys.exit("ks serve did not start in time")

    def reset_peak(self) -> None:
        import psutil

        self.peak = psutil.Process(self.proc.pid).memory_info().rss

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

    def report(self, wall: float, peak_rss: int) -> dict[str, Any]:
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
            "peak_rss_mb": round(peak_rss / 2**20, 1),
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
    url: str, clients: int, seconds: float, warmup: float, texts: list[str], uids: list[str]
) -> tuple[Tally, float]:
    import httpx

    tally = Tally()
    limits = httpx.Limits(
        max_connections=clients, max_keepalive_connections=clients, keepalive_expiry=4.0
    )
    async with httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60, limits=limits
    ) as http:
        start = time.monotonic()
        count_from, stop_at = start + warmup, start + warmup + seconds

        async def client(n: int) -> None:
            rng = random.Random(n)
            while (now := time.monotonic()) < stop_at:
                kind = rng.choice(MIX)
                method, path, body = _rest_request(kind, rng, texts, uids)
                t0 = time.perf_counter()
                try:
                    response = await http.request(method, path, json=body)
                    ok, why = response.status_code < 400, response.text
                except httpx.HTTPError as exc:
                    ok, why = False, repr(exc)
                if now >= count_from:
                    tally.add(kind, time.perf_counter() - t0, ok, why)

        await asyncio.gather(*(client(n) for n in range(clients)))
    return tally, seconds


async def run_mcp(
    url: str, clients: int, seconds: float, warmup: float, texts: list[str], uids: list[str]
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

    async def client(n: int) -> None:
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

    await asyncio.gather(*(client(n) for n in range(clients)))
    return tally, seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--store", type=Path, default=ROOT / ".ks" / "pg15")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--surfaces", default="rest,mcp")
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
    if not (args.store / "catalog.sqlite").exists():
        sys.exit(f"no store at {args.store}: build it with `make eval` (the eval corpus)")
    texts, uids = _workload(args.store)
    with tempfile.TemporaryDirectory() as tmp:
        tokens = Path(tmp) / "tokens.jsonl"
        tokens.write_text(json.dumps({"token": TOKEN, "identity": "everyone"}) + "\n")
        out: dict[str, Any] = {
            "store": str(args.store),
            "clients": args.clients,
            "seconds": args.seconds,
            "cpus": os.cpu_count(),
            "load_average_at_start": os.getloadavg()[0],
            "mix": "search 40% · graph 20% · sql 20% · content 20%",
            "server_env": server_env,
        }
        print(f"server env {server_env or '(defaults)'}, load average {os.getloadavg()[0]:.1f}")
        server = Server(args.store, _free_port(), tokens, server_env)
        try:
            server.wait_ready()
            runners = {"rest": run_rest, "mcp": run_mcp}
            for surface in args.surfaces.split(","):
                server.reset_peak()
                print(f"{surface}: {args.clients} clients × {args.seconds:.0f} s …", flush=True)
                tally, wall = asyncio.run(
                    runners[surface](
                        server.url, args.clients, args.seconds, args.warmup, texts, uids
                    )
                )
                out[surface] = tally.report(wall, server.peak)
                r = out[surface]
                print(
                    f"  {r['requests']} requests · {r['throughput_rps']} req/s · p50 {r['p50_ms']} ms"
                    f" · p95 {r['p95_ms']} ms · p99 {r['p99_ms']} ms · errors {r['errors']}"
                    f" · peak RSS {r['peak_rss_mb']} MB",
                    flush=True,
                )
                for kind, k in r["by_kind"].items():
                    print(
                        f"    {kind:8} n={k['n']:6} p50 {k['p50_ms']:7} p95 {k['p95_ms']:7} p99 {k['p99_ms']:7} errors {k['errors']}"
                    )
                for sample in r["error_samples"]:
                    print(f"    error: {sample}")
        finally:
            server.stop()
            out["server_log_problems"] = server.problems()
            for line in out["server_log_problems"]:
                print(f"  server: {line}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
