"""What checking an OAuth access token adds to a request, beside the token-file path.

Canaille (the tests' IdP, ``tests/surfaces/idp.py``) issues a real access token
(RS512); the server's keys are fetched once before timing. In one run, one
after another, REPEAT times each:

1. ``Access.resolve`` alone — the token file's digest lookup, then the JWT
   (header, cached key, signature, claims, mapping);
2. a whole cheap request in process (``GET /v1/capabilities`` through
   ``httpx.ASGITransport``) with each token.

Prints p50/p95 in microseconds and the JWT's added p50.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_auth.py --repeat 2000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from knowledge_store.ingest.embedding import open_embedder  # noqa: E402
from knowledge_store.store import KnowledgeStore  # noqa: E402
from knowledge_store.surfaces.access import Access  # noqa: E402
from knowledge_store.surfaces.auth import TokenTable  # noqa: E402
from knowledge_store.surfaces.http import create_app  # noqa: E402
from knowledge_store.surfaces.oidc import ClaimsMapping, OidcSettings, OidcValidator  # noqa: E402
from tests.surfaces.idp import Idp  # noqa: E402
from tests.surfaces.serve_estate import TOKENS, build  # noqa: E402

RESOURCE = "http://127.0.0.1:8000"


def _pct(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_us": round(ordered[len(ordered) // 2] * 1e6, 1),
        "p95_us": round(ordered[int(len(ordered) * 0.95)] * 1e6, 1),
    }


async def _resolve(access: Access, token: str, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        await access.resolve(token)
        out.append(time.perf_counter() - start)
    return out


async def _requests(app: Any, token: str, repeat: int) -> list[float]:
    import httpx

    out = []
    transport = httpx.ASGITransport(app=app)
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as c:
        for _ in range(repeat):
            start = time.perf_counter()
            answer = await c.get("/v1/capabilities", headers=headers)
            out.append(time.perf_counter() - start)
            assert answer.status_code == 200, answer.text
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=2000)
    args = parser.parse_args()
    with Idp(RESOURCE) as idp, tempfile.TemporaryDirectory() as tmp:
        idp.user("ann", "sre")
        jwt_token = idp.token("ann")
        validator = OidcValidator(OidcSettings(idp.issuer, RESOURCE, ClaimsMapping()))
        assert validator.keys.prefetch() is None
        access = Access(TokenTable.of(TOKENS), validator)
        file_token = "tok-ann-0001"
        with KnowledgeStore.open(Path(tmp) / "store", embedder=open_embedder("hash:64")) as store:
            app = create_app(build(store), tokens=TOKENS, oidc=validator)
            out: dict[str, Any] = {"load_average": round(os.getloadavg()[0], 1)}
            for name, token in (("token_file", file_token), ("jwt", jwt_token)):
                asyncio.run(_resolve(access, token, 50))  # warm
                out[f"resolve_{name}"] = _pct(asyncio.run(_resolve(access, token, args.repeat)))
            for name, token in (("token_file", file_token), ("jwt", jwt_token)):
                asyncio.run(_requests(app, token, 50))
                out[f"request_{name}"] = _pct(asyncio.run(_requests(app, token, args.repeat)))
    out["jwt_added_p50_us"] = round(
        out["resolve_jwt"]["p50_us"] - out["resolve_token_file"]["p50_us"], 1
    )
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
