"""Crawl a local copy of the PostgreSQL 15 HTML documentation: pages/s, then a re-crawl of the
unchanged site (requests sent vs 304s), and optionally `ks eval` on the crawled store.

The HTML is Debian's ``postgresql-doc-15`` (the package the shared eval set was built from),
fetched with ``apt-get download`` and unpacked with ``dpkg-deb -x`` into bench/.cache (never
installed, never committed), then served from 127.0.0.1 by a small threaded HTTP server that
answers conditional requests (ETag / If-None-Match, Last-Modified / If-Modified-Since). Its
robots.txt disallows the two pages the eval set left out (bookindex.html: the index the queries
come from; legalnotice.html), so the crawled corpus is the eval set's.

    .venv/bin/python bench/bench_crawl.py [--html DIR] [--concurrency 8] [--delay 0]
    .venv/bin/python bench/bench_crawl.py --eval /tmp/ks-crawl --compare [--lexical-only]
    .venv/bin/python bench/bench_crawl.py --abuse

``--abuse`` runs the hostile-site corpus instead (tests/ingest/crawl_abuse.py: traversal
through ``..``, redirects and robots.txt off the origin, gzip bombs, slow drips): tried /
failed safely / misbehaved, each case's seconds and the process's peak RSS after it.

Page uids are ``pg15:<file name without .html>`` (``uid_prefix="pg15:"``): the eval set's.
"""

from __future__ import annotations

import argparse
import functools
import json
import mimetypes
import re
import subprocess
import tempfile
import threading
import time
import zlib
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from email.utils import formatdate, parsedate_to_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import numpy as np
from common import CACHE, EVAL, table

PACKAGE = "postgresql-doc-15=15.20-0+deb12u1"
ROBOTS = "User-agent: *\nDisallow: /html/bookindex.html\nDisallow: /html/legalnotice.html\n"


def postgres_html(where: Path) -> Path:
    """The package's html/ folder, downloaded and unpacked once into ``where``."""
    html = where / "usr" / "share" / "doc" / "postgresql-doc-15" / "html"
    if not html.is_dir():
        where.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as download:
            subprocess.run(["apt-get", "download", PACKAGE], cwd=download, check=True)
            (deb,) = Path(download).glob("*.deb")
            subprocess.run(["dpkg-deb", "-x", str(deb), str(where)], check=True)
    return html


class FolderHandler(BaseHTTPRequestHandler):
    """Files under ``root`` with ETag and Last-Modified, answering conditional GETs with 304."""

    def __init__(self, *args: object, root: Path, statuses: Counter[int], **kw: object) -> None:
        self.root = root
        self.statuses = statuses
        super().__init__(*args, **kw)  # type: ignore[arg-type]

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.statuses[status] += 1
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        path = unquote(urlsplit(self.path).path)
        if path == "/robots.txt":
            return self._send(200, ROBOTS.encode(), {"Content-Type": "text/plain"})
        file = (self.root / path.lstrip("/")).resolve()
        if file.is_dir():
            file = file / "index.html"
        if not file.is_relative_to(self.root) or not file.is_file():
            return self._send(404, b"not found", {"Content-Type": "text/plain"})
        stat = file.stat()
        etag = f'"{stat.st_mtime_ns:x}-{stat.st_size:x}"'
        modified = formatdate(stat.st_mtime, usegmt=True)
        validators = {"ETag": etag, "Last-Modified": modified}
        match = self.headers.get("If-None-Match")
        since = self.headers.get("If-Modified-Since")
        if match is not None:
            fresh = etag in (tag.strip() for tag in match.split(","))
        else:
            fresh = since is not None and parsedate_to_datetime(since).timestamp() >= int(
                stat.st_mtime
            )
        if fresh:
            return self._send(304, b"", validators)
        kind = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
        return self._send(200, file.read_bytes(), {"Content-Type": kind, **validators})


@contextmanager
def serve(root: Path) -> Iterator[tuple[str, Counter[int]]]:
    statuses: Counter[int] = Counter()
    handler = functools.partial(FolderHandler, root=root.resolve(), statuses=statuses)
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", statuses
    finally:
        server.shutdown()
        server.server_close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--html", type=Path, help="a folder of HTML docs (default: PostgreSQL 15)")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds between requests")
    parser.add_argument(
        "--eval",
        type=Path,
        metavar="DIR",
        help="ingest the crawled pages into a new store under DIR and `ks eval` it",
    )
    parser.add_argument(
        "--pages-only",
        action="store_true",
        help="with --eval: leave code samples out of the stores (the set judges pages only;"
        " a quarter fewer chunks to embed)",
    )
    parser.add_argument(
        "--compare", action="store_true", help="with --eval: the JSONL corpus too, side by side"
    )
    parser.add_argument(
        "--lexical-only",
        action="store_true",
        help="with --eval: embed with word hashes instead of the model (minutes, not an hour);"
        " only the lexical figures then mean anything",
    )
    parser.add_argument(
        "--abuse", action="store_true", help="run the hostile-site corpus and print its figures"
    )
    args = parser.parse_args()
    if args.abuse:
        abuse()
        return

    from knowledge_store.ingest.crawl import CrawlLimits
    from knowledge_store.ingest.crawl_state import MemoryCrawlState
    from knowledge_store.ingest.loaders import load_paths
    from knowledge_store.ingest.loaders.web import WebOptions

    html = args.html or postgres_html(CACHE / "postgresql-doc-15")
    pages = sum(1 for _ in html.glob("*.html"))
    state = MemoryCrawlState()
    web = WebOptions(
        limits=CrawlLimits(
            max_pages=10_000, delay_s=args.delay, concurrency=args.concurrency, max_depth=50
        ),
        uid_prefix="pg15:",
        state=state,
    )
    rows = []
    with serve(html.parent) as (origin, statuses):
        start = f"{origin}/{html.name}/index.html"
        runs = {}
        for name in ("first crawl", "re-crawl, nothing changed"):
            statuses.clear()
            began = time.perf_counter()
            load = load_paths([start], format="web", source=None, default_acl=["everyone"], web=web)
            seconds = time.perf_counter() - began
            report = load.crawls[0]
            report.save(state)
            runs[name] = load
            stats = report.stats
            read = stats.pages + stats.not_modified
            rows.append(
                {
                    "run": name,
                    "seconds": seconds,
                    "pages/s": read / seconds,
                    "requests": stats.requests,
                    "200": statuses[200],
                    "304": statuses[304],
                    "404": statuses[404],
                    "records": len(load.records),
                    "unchanged uids": len(load.unchanged),
                    "rejected": len(load.rejections),
                }
            )
    table(
        rows,
        f"{pages} HTML files under {html}; concurrency {args.concurrency}, delay {args.delay} s",
    )
    first = runs["first crawl"]
    for rejection in first.rejections[:5]:
        print("rejected:", rejection.describe())
    if args.eval:
        entities = [
            record.entity
            for record in first.records
            if not (args.pages_only and record.derived_from)
        ]
        crawled = ingest_and_eval(args.eval / "crawled", entities, lexical_only=args.lexical_only)
        jsonl = None
        if args.compare:
            corpus: Path | list[Any] = EVAL / "corpus.jsonl"
            if args.pages_only:
                lines = (EVAL / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
                corpus = [r for r in map(json.loads, lines) if r["type"] != "codeSample"]
            jsonl = ingest_and_eval(args.eval / "jsonl", corpus, lexical_only=args.lexical_only)
        compare(crawled, jsonl, args.lexical_only)


def abuse() -> None:
    """The hostile-site corpus: tried / failed safely / misbehaved, seconds and peak RSS."""
    import resource
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.ingest.crawl_abuse import CASES, problem, run, sites

    misbehaved = []
    print("the hostile-site corpus (tests/ingest/crawl_abuse.py)")
    print(f"  {'case':32} {'verdict':14} {'seconds':>8} {'peak RSS MB':>12} {'requests':>9}")
    for case in CASES:
        with sites() as (site, other):
            outcome = run(case, site, other)
            wrong = problem(case, outcome)
        if wrong is not None:
            misbehaved.append(f"{case.name}: {wrong}")
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(
            f"  {case.name:32} {'misbehaved' if wrong else 'failed safely':14}"
            f" {outcome.seconds:8.2f} {peak:12.0f} {len(outcome.site.log):9}",
            flush=True,
        )
    print(
        f"{len(CASES)} tried / {len(CASES) - len(misbehaved)} failed safely /"
        f" {len(misbehaved)} misbehaved"
    )
    for line in misbehaved:
        print("  misbehaved:", line)


class TokenHashEmbedder:
    """Word-count vectors hashed into 256 dimensions: no model, for ``--lexical-only`` runs.

    Its vectors carry no meaning: only the lexical figures of such a run say anything.
    """

    model_id = "bench:token-hash-256"
    dimension = 256
    max_tokens = 1_000_000

    def embed(self, texts: Sequence[str], *, progress: bool = False) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                out[row, zlib.crc32(word.encode()) % self.dimension] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return out / norms

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed([text])[0]


def ingest_and_eval(
    where: Path, entities: list[Any] | Path, *, lexical_only: bool
) -> dict[str, Any]:
    """Ingest (records, or a JSONL file) into the store at ``where``; ``ks eval`` it, code
    samples left out (the set's judgements are pages)."""
    from knowledge_store.model import Filters
    from knowledge_store.retrieval.evaluation import evaluate
    from knowledge_store.store import KnowledgeStore

    embedder = TokenHashEmbedder() if lexical_only else None
    with KnowledgeStore.open(where, embedder=embedder) as store:
        began = time.perf_counter()
        if isinstance(entities, Path):
            report = store.ingest([entities], progress=True)
        else:
            report = store.ingest_records(entities, progress=True)
        print(f"ingested into {where} in {time.perf_counter() - began:.0f} s: {report.to_dict()}")
        return evaluate(
            store,
            EVAL / "queries.jsonl",
            EVAL / "qrels.tsv",
            filters=Filters.build(not_types=["codeSample"]),
        )


def compare(crawled: dict[str, Any], jsonl: dict[str, Any] | None, lexical_only: bool) -> None:
    lists = ("lexical",) if lexical_only else ("lexical", "vector", "fused")
    rows = []
    for name in lists:
        row: dict[str, Any] = {"list": name, "crawled nDCG@10": crawled[name]["ndcg@10"]}
        if jsonl is not None:
            row["JSONL nDCG@10"] = jsonl[name]["ndcg@10"]
            row["difference"] = crawled[name]["ndcg@10"] - jsonl[name]["ndcg@10"]
        row["crawled Recall@100"] = crawled[name]["recall@100"]
        if jsonl is not None:
            row["JSONL Recall@100"] = jsonl[name]["recall@100"]
        rows.append(row)
    table(rows, f"ks eval, {crawled['queries']} queries, code samples excluded")


if __name__ == "__main__":
    main()
