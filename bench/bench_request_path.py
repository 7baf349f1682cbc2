"""What the HTTP request path costs, apart from the store: CPU per request, in process.

Builds the HTTP app over a small store (the serving estate of the tests, on the
hashing embedder: no model) and sends it requests one after another through
``httpx.ASGITransport`` — no socket, no uvicorn, no concurrency: what remains is
FastAPI routing, dependencies (the caller), request validation, the hop to the
store's thread lane, the store call and the answer's serialisation. Reports the
process CPU time per request for each kind, the best of ``--repeat`` runs (a
shared machine pre-empts single runs; CPU time it inflates far less than wall
time). Each ``--side NAME=SRC`` runs in its own process with that ``src`` on its
``PYTHONPATH``, interleaved, so that two versions of the request path compare.

    .venv/bin/python bench/bench_request_path.py --side main=/work/wt/main/src \\
        --side this=src --requests 2000 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
KINDS: dict[str, tuple[str, str, Any]] = {
    "healthz": ("GET", "/healthz", None),
    "content": ("GET", "/v1/content/unit:stats", None),
    "sql": ("POST", "/v1/sql", {"filters": {"type": ["page"]}, "k": 5}),
    "lexical": ("POST", "/v1/lexical", {"query": "replica lag", "k": 5}),
}


def _worker(requests: int, repeat: int) -> dict[str, float]:
    import anyio
    import httpx

    sys.path.insert(0, str(ROOT))
    from knowledge_store.store import KnowledgeStore
    from knowledge_store.surfaces.http import create_app
    from tests.surfaces.serve_estate import BOB, TOKENS, build

    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        store = build(KnowledgeStore.open(Path(tmp) / "store", embedder="hash:64"))
        app = create_app(store, tokens=TOKENS)

        async def run() -> None:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://127.0.0.1", headers=BOB
            ) as http:
                for kind, (method, path, body) in KINDS.items():
                    for _ in range(50):  # warm
                        await http.request(method, path, json=body)
                    best = float("inf")
                    for _ in range(repeat):
                        started = time.process_time()
                        for _ in range(requests):
                            response = await http.request(method, path, json=body)
                            assert response.status_code == 200, response.text
                        best = min(best, time.process_time() - started)
                    out[kind] = round(best * 1000 / requests, 3)

        anyio.run(run)
        store.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--side", action="append", default=[], metavar="NAME=SRC")
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(_worker(args.requests, args.repeat)))
        return
    sides = [s.partition("=")[::2] for s in args.side] or [("this", str(ROOT / "src"))]
    print(
        f"CPU ms per request (best of {args.repeat} × {args.requests}), load {os.getloadavg()[0]:.1f}"
    )
    print(f"{'side':10} {'round':5} " + " ".join(f"{k:>8}" for k in KINDS))
    for round_ in range(args.rounds):
        for name, src in sides[round_ % len(sides) :] + sides[: round_ % len(sides)]:
            env = {**os.environ, "PYTHONPATH": str(Path(src).resolve()), "HF_HUB_OFFLINE": "1"}
            done = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--worker",
                    "--requests",
                    str(args.requests),
                    "--repeat",
                    str(args.repeat),
                ],
                capture_output=True,
                text=True,
                env=env,
                check=False,
            )
            if done.returncode:
                sys.exit(f"{name} failed:\n{done.stderr[-3000:]}")
            found = json.loads(done.stdout.strip().splitlines()[-1])
            print(
                f"{name:10} {round_ + 1:5} " + " ".join(f"{found[k]:8}" for k in KINDS), flush=True
            )


if __name__ == "__main__":
    main()
