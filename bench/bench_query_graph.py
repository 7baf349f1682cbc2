"""query_graph and the graph primitive on a 100k-entity / 500k-edge synthetic graph.

The graph is written straight into an embedded catalog (entities without
chunks: no embeddings), once, under ``bench/.cache/graph-<n>-<m>/``. Shape:
learning paths ← modules ← units (partOf, with positions), pages with xref,
dependsOn and supersededBy links, code samples (page implementedBy sample,
sample partOf page), a few appliesTo/forRole/teachesSkill/derivedFrom; 88% of
entities readable by everyone, 10% by group:staff, 2% by user:alice only. The
queries run as ``user:bob`` (a member of group:staff).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_query_graph.py            # ~2 min the first time
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_query_graph.py --runs 100
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from knowledge_store.engines.base import PreparedEntity
from knowledge_store.engines.embedded.catalog import Catalog
from knowledge_store.errors import QueryTimeout
from knowledge_store.model import Edge, Entity, Identity

CACHE = Path(__file__).resolve().parent / ".cache"
NO_VECTORS = np.zeros((0, 384), np.float32)


def _acl(rng: random.Random) -> tuple[str, ...]:
    x = rng.random()
    return ("everyone",) if x < 0.88 else ("group:staff",) if x < 0.98 else ("user:alice",)


def build(path: Path, entities: int, edges: int, seed: int = 7) -> dict[str, list[str]]:
    """Write the synthetic graph; returns uids by type (for picking start nodes)."""
    rng = random.Random(seed)
    n_paths = entities // 100
    n_modules = entities // 20
    n_units = entities // 4
    n_samples = entities // 10
    n_pages = entities - n_paths - n_modules - n_units - n_samples
    kinds = {
        "learningPath": [f"lp:{i}" for i in range(n_paths)],
        "module": [f"mod:{i}" for i in range(n_modules)],
        "unit": [f"unit:{i}" for i in range(n_units)],
        "codeSample": [f"sample:{i}" for i in range(n_samples)],
        "page": [f"page:{i}" for i in range(n_pages)],
    }
    out: dict[str, list[tuple[str, str, int | None]]] = {
        uid: [] for uids in kinds.values() for uid in uids
    }
    count = 0

    def link(src: str, label: str, dst: str, pos: int | None = None) -> None:
        nonlocal count
        out[src].append((label, dst, pos))
        count += 1

    for i, m in enumerate(kinds["module"]):
        link(m, "partOf", kinds["learningPath"][i % n_paths], i // n_paths + 1)
    for i, u in enumerate(kinds["unit"]):
        link(u, "partOf", kinds["module"][i % n_modules], i // n_modules + 1)
    for s in kinds["codeSample"]:
        page = kinds["page"][rng.randrange(n_pages)]
        link(s, "partOf", page)
        link(page, "implementedBy", s)
    pages = kinds["page"]
    everything = [u for uids in kinds.values() for u in uids]
    weighted = [
        ("xref", 0.70),
        ("dependsOn", 0.12),
        ("appliesTo", 0.05),
        ("derivedFrom", 0.04),
        ("forRole", 0.03),
        ("teachesSkill", 0.03),
        ("supersededBy", 0.03),
    ]
    labels = [w[0] for w in weighted]
    probs = [w[1] for w in weighted]
    seen: set[tuple[str, str, str]] = set()
    while count < edges:
        label = rng.choices(labels, probs)[0]
        src = rng.choice(pages) if rng.random() < 0.8 else rng.choice(everything)
        dst = rng.choice(pages) if rng.random() < 0.7 else rng.choice(everything)
        if src == dst or (src, label, dst) in seen:
            continue
        seen.add((src, label, dst))
        link(src, label, dst)
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    catalog = Catalog(path / "catalog.sqlite")
    batch: list[PreparedEntity] = []
    for typ, uids in kinds.items():
        for uid in uids:
            day = 1 + rng.randrange(28)
            entity = Entity(
                uid=uid,
                type=typ,
                title=f"{typ} {uid.split(':')[1]}",
                body="",
                source=rng.choice(["learn", "docs", "samples"]),
                status="published",
                created_at=f"2024-01-{day:02d}T00:00:00Z",
                updated_at=f"2024-{1 + rng.randrange(12):02d}-{day:02d}T00:00:00Z",
                href=f"/{typ}/{uid}",
                edges=tuple(Edge(uid, label, dst, pos) for label, dst, pos in out[uid]),
                acl=_acl(rng),
            )
            batch.append(PreparedEntity(entity, (), NO_VECTORS))
            if len(batch) == 10_000:
                catalog.apply_publish(batch, [], kind="ingest")
                batch = []
    if batch:
        catalog.apply_publish(batch, [], kind="ingest")
    with catalog.write() as conn:
        conn.execute(
            "INSERT OR IGNORE INTO memberships(grp, member) VALUES ('group:staff', 'user:bob')"
        )
    catalog.close()
    return {k: v for k, v in kinds.items()}


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p50 = statistics.median(ordered)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return p50, p95


def _time(fn: Callable[[], Any], runs: int) -> tuple[list[float], Any]:
    samples: list[float] = []
    last: Any = None
    for _ in range(runs):
        t0 = time.perf_counter()
        last = fn()
        samples.append((time.perf_counter() - t0) * 1000)
    return samples, last


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--entities", type=int, default=100_000)
    ap.add_argument("--edges", type=int, default=500_000)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--rebuild", action="store_true")
    args = ap.parse_args()

    where = CACHE / f"graph-{args.entities}-{args.edges}"
    marker = where / "built"
    kinds: dict[str, list[str]]
    if args.rebuild or not marker.exists():
        t0 = time.perf_counter()
        kinds = build(where, args.entities, args.edges)
        marker.write_text("ok")
        print(
            f"built {args.entities} entities / {args.edges} edges in {time.perf_counter() - t0:.0f} s",
            file=sys.stderr,
        )
    catalog = Catalog(where / "catalog.sqlite")
    with catalog.read() as conn:
        kinds = {}
        for typ, uid in conn.execute("SELECT type, uid FROM entities"):
            kinds.setdefault(typ, []).append(uid)
        n_edges = conn.execute("SELECT count(*) FROM edges").fetchone()[0]
    catalog.close()
    from knowledge_store.engines.embedded.engine import EmbeddedEngine
    from knowledge_store.store import KnowledgeStore

    store = KnowledgeStore(EmbeddedEngine(where))
    who = Identity("user:bob")
    rng = random.Random(11)
    pick = lambda typ: rng.choice(kinds[typ])  # noqa: E731

    queries: list[tuple[str, str, Callable[[], dict[str, Any]]]] = [
        (
            "1-hop",
            "MATCH (a {uid: $uid})-[:xref]->(b) RETURN b.uid, b.title",
            lambda: {"uid": pick("page")},
        ),
        (
            "3-hop *1..3",
            "MATCH (a {uid: $uid})-[:xref|dependsOn*1..3]->(b) RETURN b.uid, b.type",
            lambda: {"uid": pick("page")},
        ),
        (
            "OPTIONAL MATCH",
            "MATCH (m:module {uid: $uid})<-[r:partOf]-(u:unit)"
            " OPTIONAL MATCH (u)-[:teachesSkill|forRole]->(x)"
            " RETURN u.uid, r.position, x.uid ORDER BY r.position",
            lambda: {"uid": pick("module")},
        ),
        (
            "count + ORDER BY",
            "MATCH (p:learningPath)<-[:partOf]-(m:module) WHERE p.source = $source"
            " RETURN p.uid, count(m) AS modules ORDER BY modules DESC, p.uid LIMIT 10",
            lambda: {"source": rng.choice(["learn", "docs", "samples"])},
        ),
        (
            "truncated",
            "MATCH (a:page)-[:xref]->(b:page) WHERE a.source = $source RETURN a.uid, b.uid LIMIT 50",
            lambda: {"source": rng.choice(["learn", "docs", "samples"])},
        ),
    ]
    rows = []
    for name, text, make in queries:
        timeouts = 0
        sizes: list[int] = []
        truncated = 0

        def once(text: str = text, make: Callable[[], dict[str, Any]] = make) -> Any:
            nonlocal timeouts
            try:
                return store.query_graph(text, make(), identity=who)
            except QueryTimeout:
                timeouts += 1
                return None

        once()  # warm
        samples: list[float] = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            answer = once()
            samples.append((time.perf_counter() - t0) * 1000)
            if answer is not None:
                sizes.append(len(answer.rows))
                truncated += answer.truncated
        p50, p95 = _percentiles(samples)
        rows.append((name, p50, p95, statistics.mean(sizes) if sizes else 0, truncated, timeouts))

    for depth in (1, 2, 3):
        samples, _ = _time(
            lambda depth=depth: store.graph([pick("page")], identity=who, depth=depth, k=10),
            args.runs,
        )
        sizes = []
        capped = 0
        for _ in range(20):
            hits = store.graph([pick("page")], identity=who, depth=depth, k=1000)
            sizes.append(len(hits.hits))
            capped += hits.capped
        p50, p95 = _percentiles(samples)
        rows.append((f"graph depth {depth} (k=10)", p50, p95, statistics.mean(sizes), capped, 0))

    total = sum(len(v) for v in kinds.values())
    print(f"\n{total} entities, {n_edges} edges; {args.runs} runs each, as user:bob\n")
    print(f"{'query':<28}{'p50 ms':>10}{'p95 ms':>10}{'rows':>10}{'trunc/cap':>11}{'timeouts':>10}")
    for name, p50, p95, size, trunc, timeouts in rows:
        print(f"{name:<28}{p50:>10.2f}{p95:>10.2f}{size:>10.1f}{trunc:>11}{timeouts:>10}")
    print(
        "\nrows: mean rows per answer (graph: reachable entities with k=1000, 20 starts);"
        " trunc/cap: answers truncated (query) or fan-out capped (graph)"
    )


if __name__ == "__main__":
    main()
