"""A declared facet's filter and aggregate next to a built-in field's, on one store (issue 31).

Declares ``--name`` (a keyword facet read from ``attributes[--attribute]``; its backfill
timed) unless the store has it, then times, ``--runs`` times each and alternately, the same
question asked of a built-in field and of the declared facet — on the PostgreSQL docs stores
the facet ``docbook_class`` (``attributes.docbookClass``) holds nearly what ``type`` holds
(``sect1`` ↔ ``section``): sql filtered, aggregate by it, lexical and vector filtered. The
vector reads take a fixed query vector (no embedding in the figure). Prints p50/p99 ms.

    python bench/bench_facets.py STORE [--runs 200]      # STORE: DIR, pg:DIR, postgresql://…
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from knowledge_store.store import KnowledgeStore


def _figures(samples: list[float]) -> dict[str, float]:
    samples = sorted(samples)
    return {
        "p50_ms": round(samples[len(samples) // 2] * 1000, 3),
        "p99_ms": round(samples[min(len(samples) - 1, int(len(samples) * 0.99))] * 1000, 3),
    }


def _timed_pair(
    first: Callable[[], Any], second: Callable[[], Any], runs: int
) -> tuple[dict[str, float], dict[str, float]]:
    """Both timed ``runs`` times, alternately (a shared machine's load falls on both alike)."""
    first(), second()
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(runs):
        for fn, samples in ((first, times[0]), (second, times[1])):
            started = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - started)
    return _figures(times[0]), _figures(times[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store")
    parser.add_argument("--name", default="docbook_class")
    parser.add_argument("--attribute", default="docbookClass")
    parser.add_argument("--value", default="sect1")
    parser.add_argument("--builtin", default="type=section")
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    field, _, value = args.builtin.partition("=")
    print("load", os.getloadavg())
    with KnowledgeStore.open(args.store, create=False) as store:
        if args.name not in {f.name for f in store.declared_facets()}:
            started = time.perf_counter()
            info = store.declare_facet(args.name, "keyword", attribute=args.attribute)
            declared = next(f for f in info.facets if f.name == args.name)
            print(
                json.dumps(
                    {
                        "declared": args.name,
                        "backfill_s": round(time.perf_counter() - started, 2),
                        "entities": declared.entities,
                        "values": declared.values,
                        "chunks": store.stats().chunks,
                    }
                ),
                flush=True,
            )
        builtin = {field: [value]}
        facet = {args.name: [args.value]}
        matching = {  # how many entities each filter selects (nearly the same on the docs)
            "built-in": store.aggregate("count", filters=builtin).pairs(),
            "declared": store.aggregate("count", filters=facet).pairs(),
        }
        vector = store.embedder.embed_query("how to configure streaming replication")
        questions: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
            "sql k=10": (
                lambda: store.sql(builtin, k=10),
                lambda: store.sql(facet, k=10),
            ),
            "sql k=100": (
                lambda: store.sql(builtin, k=100),
                lambda: store.sql(facet, k=100),
            ),
            "aggregate count by it": (
                lambda: store.aggregate("count", field),
                lambda: store.aggregate("count", args.name),
            ),
            "lexical k=10 filtered": (
                lambda: store.lexical("streaming replication", k=10, filters=builtin),
                lambda: store.lexical("streaming replication", k=10, filters=facet),
            ),
            "vector k=10 filtered": (
                lambda: store.vector(np.asarray(vector), k=10, filters=builtin),
                lambda: store.vector(np.asarray(vector), k=10, filters=facet),
            ),
        }
        for name, (built_in, declared_one) in questions.items():
            times = _timed_pair(built_in, declared_one, args.runs)
            row = {"read": name, "built-in": times[0], "declared": times[1]}
            print(json.dumps(row), flush=True)
        print(json.dumps({"entities_matching": matching}))
    print("load", os.getloadavg())


if __name__ == "__main__":
    main()
