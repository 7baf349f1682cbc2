"""One request must not starve the others: a cheap probe's latency while clients abuse the server.

Two parts, both printed as figures:

1. **The limits corpus** (``tests/surfaces/limits_corpus.py``), in process over the
   serving test estate: every hostile request (bodies over the bound, honest,
   chunked or lying about their length; GraphQL with hundreds of aliases, too
   many fields, deep nesting, 10,001 tokens, a fragment bomb; FILTERS lists one
   over the bound on every route) and the requests just within the bounds —
   counted as tried / failed safely / misbehaved, with the slowest refusal.
2. **The probe under abuse**: ``ks serve`` on 127.0.0.1 over a store (default:
   the eval corpus, ``.ks/pg15``) as a subprocess. A probe process sends a cheap
   search (``POST /v1/search``, an eval query, k=10) one after another, first
   alone (idle) and then while CLIENTS abuser processes' connections loop over
   the most expensive requests the bounds allow: a GraphQL document of
   MAX_GRAPHQL_FIELDS aliased searches (k=100, a 4,000-character query, 1,000
   uids as filter), REST searches (k=50, the same query and filter), query_graph
   traversals at the time bound, depth-3 graphs from 100 starts, sql at k=1000
   with 1,000 uids and daily trends. Reports the probe's p50/p95/p99 idle and
   under abuse, their ratio (goal: p99 within 3×), the abusers' throughput and
   the server's peak RSS.

3. **Connections and sessions** (``--attacks mcp-flood,slowloris``): the same probe,
   idle and then during each attack, against ``ks serve`` with a token file of
   four callers (the probe's, the attacker's reader token, another reader, an
   admin). ``mcp-flood``: FLOOD handshake-era (2025) MCP ``initialize`` calls with
   the attacker's one token, 64 at a time; then a fresh session for another
   reader and for the admin (their HTTP status) and the server's RSS before and
   after. ``slowloris``: SOCKETS connections that each send a request line and
   then one header line every 5 s, never finishing the headers, reopened when
   the server closes them; reports how long the server let one live (the
   longest, and how many were still open at the end of the window).
   ``--src DIR`` serves another checkout's ``src`` (the before side).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_abuse.py
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_abuse.py --store .ks/pg15 \\
        --clients 10 --seconds 30 --json bench/.cache/abuse.json
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_abuse.py --skip-corpus --skip-probe \\
        --store .ks/docs --attacks mcp-flood,slowloris --seconds 60
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench_serve import TOKEN, Server, _free_port, _workload  # noqa: E402

from knowledge_store.model import (  # noqa: E402
    MAX_FILTER_VALUES,
    MAX_GRAPHQL_FIELDS,
)

LONG_QUERY_CHARS = 4000


# -- part 1: the limits corpus -------------------------------------------------------------------
def run_corpus() -> dict[str, Any]:
    """Every corpus case in process over the serving estate: tried / failed safely / misbehaved."""
    from knowledge_store.ingest.embedding import open_embedder
    from knowledge_store.store import KnowledgeStore
    from knowledge_store.surfaces.http import create_app
    from tests.surfaces import limits_corpus
    from tests.surfaces.serve_estate import TOKENS, build
    from tests.surfaces.test_request_limits import send

    groups: dict[str, dict[str, Any]] = {}
    with (
        tempfile.TemporaryDirectory() as tmp,
        KnowledgeStore.open(Path(tmp) / "store", embedder=open_embedder()) as store,
    ):
        app = create_app(build(store), tokens=TOKENS)
        for case in limits_corpus.cases():
            group = case.id.split("-", 1)[0]
            tally = groups.setdefault(
                group, {"tried": 0, "failed_safely": 0, "answered": 0, "misbehaved": [], "ms": {}}
            )
            start = time.perf_counter()
            try:
                status, body = send(app, case)
                wrong = limits_corpus.verdict(case, status, body)
            except Exception as exc:  # a crash is a misbehaviour too
                wrong = f"{type(exc).__name__}: {exc}"
            tally["ms"][case.id] = round((time.perf_counter() - start) * 1000, 1)
            tally["tried"] += 1
            if wrong is not None:
                tally["misbehaved"].append(f"{case.id}: {wrong}")
            elif case.refused:
                tally["failed_safely"] += 1
            else:
                tally["answered"] += 1
    return groups


# -- part 2: the probe under abuse -----------------------------------------------------------------
def _abuse_requests(texts: list[str], uids: list[str]) -> list[tuple[str, str, Any]]:
    rng = random.Random(11)
    long_query = " ".join(rng.choice(texts) for _ in range(200))[:LONG_QUERY_CHARS]
    filter_uids = rng.sample(uids, min(MAX_FILTER_VALUES, len(uids)))
    starts = rng.sample(uids, 100)
    fields = " ".join(
        f"s{i}: search(query: $q, k: 100, filters: {{uid: $u}}) {{ results {{ uid score"
        " evidence { text } } }"
        for i in range(MAX_GRAPHQL_FIELDS)
    )
    graphql = {
        "query": f"query ($q: String!, $u: [String!]) {{ {fields} }}",
        "variables": {"q": long_query, "u": filter_uids},
    }
    return [
        ("POST", "/graphql", graphql),
        ("POST", "/v1/search", {"query": long_query, "k": 50, "filters": {"uid": filter_uids}}),
        (
            "POST",
            "/v1/query_graph",
            {"query": "MATCH (a)-[*1..4]-(b) RETURN a.uid, b.uid LIMIT 1000", "params": {}},
        ),
        ("POST", "/v1/graph", {"starts": starts, "depth": 3, "k": 100}),
        ("POST", "/v1/sql", {"filters": {"uid": filter_uids}, "k": 1000}),
        (
            "POST",
            "/v1/aggregate",
            {"metric": "count", "dimension": "updated_at:day", "filters": {"uid": filter_uids}},
        ),
    ]


def _abuser(url: str, requests: list[tuple[str, str, Any]], seconds: float, out: Any) -> None:
    import httpx

    async def one(client: httpx.AsyncClient, offset: int, counts: dict[str, list[int]]) -> None:
        deadline = time.monotonic() + seconds
        i = offset
        while time.monotonic() < deadline:
            method, path, body = requests[i % len(requests)]
            i += 1
            done = counts.setdefault(path, [0, 0])
            try:
                response = await client.request(method, path, json=body)
                done[0 if response.status_code < 400 else 1] += 1
            except httpx.HTTPError:
                done[1] += 1

    async def main() -> dict[str, list[int]]:
        counts: dict[str, list[int]] = {}
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=300) as client:
            await one(client, os.getpid(), counts)
        return counts

    out.put(asyncio.run(main()))


def _probe(url: str, texts: list[str], seconds: float, out: Any) -> None:
    import httpx

    latencies: list[float] = []
    errors = 0
    rng = random.Random(5)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=url, headers=headers, timeout=300) as client:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            body = {"query": rng.choice(texts), "k": 10}
            start = time.perf_counter()
            try:
                ok = client.post("/v1/search", json=body).status_code == 200
            except httpx.HTTPError:
                ok = False
            latencies.append(time.perf_counter() - start)
            errors += not ok
    out.put({"latencies": latencies, "errors": errors})


def _pct(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)

    def at(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000, 1)

    return {"n": len(ordered), "p50_ms": at(0.50), "p95_ms": at(0.95), "p99_ms": at(0.99)}


def run_probe(store: Path, clients: int, seconds: float, warmup: float) -> dict[str, Any]:
    texts, uids = _workload(store)
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        tokens = Path(tmp) / "tokens.jsonl"
        tokens.write_text(json.dumps({"token": TOKEN, "identity": "everyone"}) + "\n")
        server = Server(store, _free_port(), tokens, {})
        try:
            server.wait_ready()
            results = ctx.Queue()
            warm = ctx.Process(target=_probe, args=(server.url, texts, warmup, results))
            warm.start()
            results.get()
            warm.join()
            print(f"idle: the probe alone for {seconds:.0f} s …", flush=True)
            idle = ctx.Process(target=_probe, args=(server.url, texts, seconds, results))
            idle.start()
            idle_result = results.get()
            idle.join()
            server.reset_peak()
            print(f"abuse: the probe and {clients} abusers for {seconds:.0f} s …", flush=True)
            requests = _abuse_requests(texts, uids)
            abusers = [
                ctx.Process(target=_abuser, args=(server.url, requests, seconds, results))
                for _ in range(clients)
            ]
            for process in abusers:
                process.start()
            time.sleep(min(2.0, seconds / 10))  # the abusers are at work before the probe starts
            probe = ctx.Process(target=_probe, args=(server.url, texts, seconds, results))
            probe.start()
            outcomes = [results.get() for _ in range(clients + 1)]
            for process in [*abusers, probe]:
                process.join()
            peak = server.peak
        finally:
            server.stop()
    busy = next(o for o in outcomes if "latencies" in o)
    abuse: dict[str, list[int]] = {}
    for outcome in outcomes:
        if "latencies" not in outcome:
            for path, (ok, failed) in outcome.items():
                total = abuse.setdefault(path, [0, 0])
                total[0] += ok
                total[1] += failed
    idle_p, busy_p = _pct(idle_result["latencies"]), _pct(busy["latencies"])
    return {
        "store": str(store),
        "clients": clients,
        "seconds": seconds,
        "cpus": os.cpu_count(),
        "load_average_at_start": round(os.getloadavg()[0], 1),
        "probe_idle": {**idle_p, "errors": idle_result["errors"]},
        "probe_under_abuse": {**busy_p, "errors": busy["errors"]},
        "p99_ratio": round(busy_p["p99_ms"] / idle_p["p99_ms"], 2),
        "abusers_answered_failed": {path: tuple(v) for path, v in sorted(abuse.items())},
        "server_peak_rss_mb": round(peak / 2**20, 1),
    }


# -- part 3: connections and sessions -------------------------------------------------------------
FLOODER = "bench-flood-reader-0001"
OTHER = "bench-other-reader-0002"
ADMIN = "bench-admin-0003"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "bench-abuse", "version": "0"},
    },
}


def _open_session(url: str, token: str) -> int:
    """A fresh 2025 MCP session for ``token``: the HTTP status of its ``initialize``."""
    import httpx

    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
    }
    try:
        return httpx.post(f"{url}/mcp", json=INITIALIZE, headers=headers, timeout=30).status_code
    except httpx.HTTPError:
        return -1


def _flood(url: str, calls: int, out: Any) -> None:
    """``calls`` initialize requests with one reader token, 64 in flight; tallies the statuses."""
    import httpx

    async def main() -> dict[str, Any]:
        statuses: dict[str, int] = {}
        todo = iter(range(calls))
        headers = {
            "Authorization": f"Bearer {FLOODER}",
            "Accept": "application/json, text/event-stream",
        }
        start = time.monotonic()
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60, limits=limits) as c:

            async def worker() -> None:
                for _ in todo:
                    try:
                        status = str((await c.post("/mcp", json=INITIALIZE)).status_code)
                    except httpx.HTTPError as exc:
                        status = type(exc).__name__
                    statuses[status] = statuses.get(status, 0) + 1

            await asyncio.gather(*(worker() for _ in range(64)))
        return {"statuses": statuses, "seconds": round(time.monotonic() - start, 1)}

    out.put(asyncio.run(main()))


def _slowloris(url: str, sockets: int, seconds: float, out: Any) -> None:
    """``sockets`` connections that never finish their headers (one header line every 5 s),
    reopened when the server closes them; how long the server let each live."""
    from urllib.parse import urlsplit

    where = urlsplit(url)
    host, port = where.hostname or "127.0.0.1", where.port or 80

    async def one(lifetimes: list[float], still_open: list[int]) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            opened = time.monotonic()
            try:
                reader, writer = await asyncio.open_connection(host, port)
                writer.write(f"POST /v1/search HTTP/1.1\r\nHost: {host}:{port}\r\n".encode())
                n = 0
                while time.monotonic() < deadline:
                    try:
                        data = await asyncio.wait_for(reader.read(1024), timeout=5)
                    except TimeoutError:
                        writer.write(f"X-Drip-{n}: {n}\r\n".encode())  # never the blank line
                        n += 1
                        continue
                    if not data:  # the server closed it
                        break
                else:
                    still_open.append(1)
                    writer.close()
                    return
                lifetimes.append(time.monotonic() - opened)
                writer.close()
            except OSError:
                await asyncio.sleep(1)

    async def main() -> dict[str, Any]:
        lifetimes: list[float] = []
        still_open: list[int] = []
        await asyncio.gather(*(one(lifetimes, still_open) for _ in range(sockets)))
        ordered = sorted(lifetimes)
        return {
            "closed_by_server": len(ordered),
            "open_at_the_end": len(still_open),
            "lifetime_p50_s": round(ordered[len(ordered) // 2], 1) if ordered else None,
            "lifetime_max_s": round(ordered[-1], 1) if ordered else None,
        }

    out.put(asyncio.run(main()))


def _rss_mb(server: Server) -> float:
    total = 0
    for proc in server.tree():
        try:
            total += proc.memory_info().rss
        except Exception:
            continue
    return round(total / 2**20, 1)


def run_attack(
    store: Path,
    attack: str,
    *,
    seconds: float,
    warmup: float,
    src: Path | None,
    flood: int,
    sockets: int,
) -> dict[str, Any]:
    """The probe idle, then during one attack (``mcp-flood`` or ``slowloris``)."""
    if attack not in ("mcp-flood", "slowloris"):
        raise SystemExit(f"unknown attack {attack!r}; use mcp-flood or slowloris")
    texts, _ = _workload(store)
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        tokens = Path(tmp) / "tokens.jsonl"
        lines = [
            {"token": TOKEN, "identity": "everyone"},
            {"token": FLOODER, "identity": "user:flood"},
            {"token": OTHER, "identity": "user:other"},
            {"token": ADMIN, "identity": "user:root", "admin": True},
        ]
        tokens.write_text("".join(json.dumps(line) + "\n" for line in lines))
        server = Server(store, _free_port(), tokens, {}, src=src)
        try:
            server.wait_ready()
            results = ctx.Queue()
            warm = ctx.Process(target=_probe, args=(server.url, texts, warmup, results))
            warm.start()
            results.get()
            warm.join()
            load = round(os.getloadavg()[0], 1)
            idle = ctx.Process(target=_probe, args=(server.url, texts, seconds, results))
            idle.start()
            idle_result = results.get()
            idle.join()
            rss_before = _rss_mb(server)
            attacker = (
                ctx.Process(target=_flood, args=(server.url, flood, results))
                if attack == "mcp-flood"
                else ctx.Process(target=_slowloris, args=(server.url, sockets, seconds, results))
            )
            attacker.start()
            time.sleep(2.0)  # the attack is under way before the probe starts
            probe = ctx.Process(target=_probe, args=(server.url, texts, seconds, results))
            probe.start()
            outcomes = [results.get(), results.get()]
            attacker.join()
            probe.join()
            busy = next(o for o in outcomes if "latencies" in o)
            report = next(o for o in outcomes if "latencies" not in o)
            if attack == "mcp-flood":
                report["session_after_flood"] = {
                    "another_reader": _open_session(server.url, OTHER),
                    "admin": _open_session(server.url, ADMIN),
                    "the_flooder": _open_session(server.url, FLOODER),
                }
                report["rss_mb_before_after"] = (rss_before, _rss_mb(server))
        finally:
            server.stop()
    idle_p, busy_p = _pct(idle_result["latencies"]), _pct(busy["latencies"])
    return {
        "store": str(store),
        "src": str(src) if src else "this checkout",
        "seconds": seconds,
        "load_average_at_start": load,
        "probe_idle": {**idle_p, "errors": idle_result["errors"]},
        "probe_under_attack": {**busy_p, "errors": busy["errors"]},
        "p99_ratio": round(busy_p["p99_ms"] / idle_p["p99_ms"], 2),
        "attack": report,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--store", type=Path, default=None, help="default: the eval corpus store")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--skip-corpus", action="store_true")
    parser.add_argument("--skip-probe", action="store_true")
    parser.add_argument(
        "--attacks", default="", help="comma-separated: mcp-flood, slowloris (part 3)"
    )
    parser.add_argument("--flood", type=int, default=10_000, help="initialize calls (mcp-flood)")
    parser.add_argument("--sockets", type=int, default=800, help="connections (slowloris)")
    parser.add_argument("--src", type=Path, default=None, help="serve this src folder instead")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    out: dict[str, Any] = {}
    if not args.skip_corpus:
        print("the limits corpus, in process …", flush=True)
        out["corpus"] = run_corpus()
        for group, t in out["corpus"].items():
            slowest = max(t["ms"], key=t["ms"].get)
            slowest = max(t["ms"], key=t["ms"].get)
            print(
                f"  {group:8} tried {t['tried']:3} · failed safely {t['failed_safely']:3}"
                f" · answered within bounds {t['answered']:3} · misbehaved {len(t['misbehaved'])}"
                f" · slowest {slowest} {t['ms'][slowest]} ms",
                flush=True,
            )
            for line in t["misbehaved"]:
                print(f"    misbehaved: {line}")
    if not args.skip_probe:
        if args.store is None:
            from common import pg15_store

            args.store = pg15_store()
        r = out["probe"] = run_probe(args.store, args.clients, args.seconds, args.warmup)
        for name in ("probe_idle", "probe_under_abuse"):
            p = r[name]
            print(
                f"  {name:18} n={p['n']:5} p50 {p['p50_ms']:8} ms · p95 {p['p95_ms']:8} ms"
                f" · p99 {p['p99_ms']:8} ms · errors {p['errors']}"
            )
        print(f"  p99 under abuse / idle: {r['p99_ratio']}× (goal ≤ 3×)")
        for path, (ok, failed) in r["abusers_answered_failed"].items():
            print(f"    abuser {path:18} answered {ok:5} · failed {failed}")
        print(
            f"  server peak RSS {r['server_peak_rss_mb']} MB · load average {r['load_average_at_start']}"
        )
    if args.attacks:
        if args.store is None:
            from common import pg15_store

            args.store = pg15_store()
        out["attacks"] = {}
        for attack in args.attacks.split(","):
            r = out["attacks"][attack] = run_attack(
                args.store,
                attack,
                seconds=args.seconds,
                warmup=args.warmup,
                src=args.src,
                flood=args.flood,
                sockets=args.sockets,
            )
            print(f"  {attack}: load average {r['load_average_at_start']}")
            for name in ("probe_idle", "probe_under_attack"):
                p = r[name]
                print(
                    f"    {name:19} n={p['n']:5} p50 {p['p50_ms']:8} ms · p95 {p['p95_ms']:8} ms"
                    f" · p99 {p['p99_ms']:8} ms · errors {p['errors']}"
                )
            print(f"    p99 under attack / idle: {r['p99_ratio']}×")
            for key, value in r["attack"].items():
                print(f"    {key}: {value}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
