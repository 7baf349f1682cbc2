"""The similarity floor of the search page's "weak match" marker, measured on eval sets.

The page marks a result that only the vector list found (no word of the query
in it) when its best chunk's cosine similarity is below ``VECTOR_FLOOR``
(surfaces/page.py). This script measures where that floor should sit. For each
eval set (a folder with corpus.jsonl, queries.jsonl, qrels.tsv, ingested into
an embedded store — built on first use):

* **relevant**: the cosine of each query's best relevant entity, when the
  vector list finds one in its top 100 — what a floor must not mark;
* **top, not relevant**: the cosine of the top entity when it is not relevant;
* **off-topic**: the top cosine of the *other* sets' queries (and of any
  ``--off-topic`` query file) against this store, which holds nothing that
  answers them — what a floor should mark.

It prints percentiles of each and, for candidate floors, the share of each that
falls below.

    .venv/bin/python bench/vector_floor.py --not-type codeSample \\
        --set ../shared/eval/postgres-docs=.ks/pg15 \\
        --off-topic ../shared/eval/sqlite-git-faq/queries.jsonl
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

FLOORS = (0.20, 0.25, 0.30, 0.35, 0.40, 0.45, 0.50)


@dataclass
class EvalSet:
    folder: Path
    store: Path
    queries: list[tuple[str, str]]
    qrels: dict[str, set[str]]


def _load(spec: str) -> EvalSet:
    from knowledge_store.retrieval.evaluation import read_qrels, read_queries

    folder, _, store = spec.partition("=")
    path = Path(folder)
    for name in ("corpus.jsonl", "queries.jsonl", "qrels.tsv"):
        if not (path / name).is_file():
            sys.exit(f"{path / name} is missing: --set takes EVAL_DIR=STORE_DIR")
    qrels: dict[str, set[str]] = {}
    for qid, judged in read_qrels(path / "qrels.tsv").items():
        qrels[qid] = {uid for uid, score in judged.items() if score > 0}
    return EvalSet(
        path, Path(store or f".ks/{path.name}"), read_queries(path / "queries.jsonl"), qrels
    )


def _top_entities(
    store: object, vectors: Sequence[object], not_types: tuple[str, ...]
) -> list[dict[str, float]]:
    """uid → best chunk cosine, for the top 100 chunks of each query vector."""
    from knowledge_store.model import Filters

    filters = Filters.build(not_type=list(not_types))
    out = []
    for vector in vectors:
        hits = store.vector(vector, k=100, filters=filters)  # type: ignore[attr-defined]
        best: dict[str, float] = {}
        for hit in hits.hits:
            best.setdefault(hit.uid, float(hit.score))
        out.append(best)
    return out


def _pct(values: Sequence[float]) -> str:
    if not values:
        return "n=0"
    ordered = sorted(values)

    def at(p: float) -> float:
        return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]

    return (
        f"n={len(values):5d}  p5 {at(0.05):.3f}  p10 {at(0.10):.3f}  p25 {at(0.25):.3f}"
        f"  median {statistics.median(values):.3f}  p90 {at(0.90):.3f}"
    )


def _below(values: Sequence[float], floor: float) -> str:
    return f"{100 * sum(v < floor for v in values) / len(values):5.1f} %" if values else "    —"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", action="append", required=True, metavar="EVAL_DIR=STORE_DIR")
    parser.add_argument(
        "--off-topic",
        action="append",
        default=[],
        metavar="QUERIES.jsonl",
        help="more queries that no set's store answers",
    )
    parser.add_argument(
        "--not-type", action="append", default=[], help="leave a type out (e.g. codeSample)"
    )
    args = parser.parse_args()
    from knowledge_store.retrieval.evaluation import read_queries
    from knowledge_store.store import KnowledgeStore

    sets = [_load(spec) for spec in args.set]
    extra = [q for path in args.off_topic for q in read_queries(path)]
    not_types = tuple(args.not_type)
    for target in sets:
        with KnowledgeStore.open(target.store) as store:
            if store.is_empty:
                print(f"building {target.store} from {target.folder} (embeds once)", flush=True)
                store.ingest([target.folder / "corpus.jsonl"], progress=True)
            texts = [text for _, text in target.queries]
            tops = _top_entities(store, store.embedder.embed(texts), not_types)
            relevant: list[float] = []
            top_wrong: list[float] = []
            for (qid, _), best in zip(target.queries, tops, strict=True):
                judged = target.qrels.get(qid, set())
                found = [score for uid, score in best.items() if uid in judged]
                if found:
                    relevant.append(max(found))
                if best:
                    top_uid = max(best, key=lambda u: best[u])
                    if top_uid not in judged:
                        top_wrong.append(best[top_uid])
            others = extra + [q for other in sets if other is not target for q in other.queries]
            off_tops = _top_entities(store, store.embedder.embed([t for _, t in others]), not_types)
            families: dict[str, list[float]] = {}
            for (qid, _), best in zip(others, off_tops, strict=True):
                if best:
                    families.setdefault(_family(qid), []).append(max(best.values()))
        rows = {"relevant (best)": relevant, "top, not relevant": top_wrong}
        rows.update({f"other: {name}": tops_ for name, tops_ in sorted(families.items())})
        print(f"\n== {target.folder.name}: {len(texts)} queries on its own corpus")
        for name, values in rows.items():
            print(f"  {name:22s} {_pct(values)}")
        print("  share below the floor:")
        print("  floor  " + "".join(f"{name[:22]:>24s}" for name in rows))
        for floor in FLOORS:
            print(f"  {floor:.2f}   " + "".join(f"{_below(v, floor):>24s}" for v in rows.values()))


def _family(qid: str) -> str:
    """A query set's name from its ids: ``git-faq-003`` → ``git-faq``."""
    return re.sub(r"[-_]?q?\d+$", "", qid) or qid


if __name__ == "__main__":
    main()
