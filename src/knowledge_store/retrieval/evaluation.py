"""``ks eval`` and the fusion comparison: nDCG@10, Recall@100, MRR@10 (ir-measures).

The lists of a query are computed **once** (:func:`collect`: the query-stage
retrievers through the same code path as ``search``) and every fusion variant
is then scored from them (:func:`run_variant` uses the planner's own
:func:`~knowledge_store.retrieval.search.fuse_stages`). The expand stage
(graph) depends on the seeds a variant's first fusion picks, so its lists are
computed on demand and memoised per seed set.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.progress import Progress

from knowledge_store.errors import InvalidRequest
from knowledge_store.ingest.records import json_objects, read_lines
from knowledge_store.model import DEFAULT_DEPTH, Filters, Identity
from knowledge_store.retrieval.fusion import RankedList, parse_weights
from knowledge_store.retrieval.retrievers import (
    BUILT_IN,
    Request,
    Retriever,
    make_retrievers,
    weighted_retrievers,
)
from knowledge_store.retrieval.search import CANDIDATES, MODES, Fuser, Fusion, fuse_stages

__all__ = [
    "Collected",
    "Variant",
    "collect",
    "compare",
    "evaluate",
    "parse_config",
    "read_qrels",
    "read_queries",
    "read_query_types",
    "run_variant",
    "score_runs",
]

Run = dict[str, dict[str, float]]


def read_queries(path: str | Path) -> list[tuple[str, str]]:
    """``{"qid", "text"}`` lines → ``[(qid, text)]``."""
    expected = 'a JSON object with "qid" and "text"'
    return [(str(o["qid"]), str(o["text"])) for o in json_objects(path, ("qid", "text"), expected)]


def read_qrels(path: str | Path) -> dict[str, dict[str, int]]:
    """TSV ``query-id  corpus-id  score`` (a header line is allowed) → nested dict."""
    qrels: dict[str, dict[str, int]] = {}
    for line_no, line in enumerate(read_lines(path), start=1):
        parts = line.split("\t")
        if not line.strip() or (line_no == 1 and parts[0] == "query-id"):
            continue
        if len(parts) != 3:
            raise InvalidRequest(
                f"{path}:{line_no}: expected 'query-id<TAB>corpus-id<TAB>score'",
                file=str(path),
                line=line_no,
            )
        try:
            qrels.setdefault(parts[0], {})[parts[1]] = int(parts[2])
        except ValueError:
            raise InvalidRequest(
                f"{path}:{line_no}: the score {parts[2]!r} is not an integer",
                file=str(path),
                line=line_no,
            ) from None
    return qrels


def _run_of(ranked: Sequence[str]) -> dict[str, float]:
    return {uid: float(len(ranked) - i) for i, uid in enumerate(ranked)}


def score_runs(
    qrels: Mapping[str, Mapping[str, int]], runs: Mapping[str, Run]
) -> dict[str, dict[str, float]]:
    """Score each named run with nDCG@10, Recall@100, MRR@10."""
    import ir_measures
    from ir_measures import RR, R, nDCG

    measures = {"ndcg@10": nDCG @ 10, "recall@100": R @ 100, "mrr@10": RR @ 10}
    judged = {q: dict(d) for q, d in qrels.items()}
    out: dict[str, dict[str, float]] = {}
    for name, run in runs.items():
        full = {q: run.get(q, {}) for q in judged}
        agg = ir_measures.calc_aggregate(list(measures.values()), judged, full)
        out[name] = {key: round(float(agg[m]), 4) for key, m in measures.items()}
    return out


def per_query_ndcg(
    qrels: Mapping[str, Mapping[str, int]], run: Run, *, cutoff: int = 10
) -> dict[str, float]:
    """nDCG@``cutoff`` of each query (for paired comparisons)."""
    import ir_measures
    from ir_measures import nDCG

    judged = {q: dict(d) for q, d in qrels.items()}
    full = {q: run.get(q, {}) for q in judged}
    return {
        m.query_id: float(m.value) for m in ir_measures.iter_calc([nDCG @ cutoff], judged, full)
    }


@dataclass
class Collected:
    """The query-stage lists of every query, and the memoised expand stage."""

    queries: list[tuple[str, str]]
    lists: dict[str, list[RankedList]]  # qid → query-stage entity lists
    expand: Callable[[tuple[str, ...]], list[RankedList]]
    expand_calls: dict[str, int] = field(default_factory=lambda: {"computed": 0, "reused": 0})


@dataclass(frozen=True)
class Variant:
    """One row of the comparison: a single list alone, or a fusion (± the expand stage)."""

    name: str
    single: str | None = None
    fusion: Fuser | None = None
    expand: bool = True
    #: The query-stage lists this fusion takes (None: every collected one), as a search
    #: with its weights would run them (a list no weight names is not in a default search).
    lists: frozenset[str] | None = None


def collect(
    store: Any,
    queries: Sequence[tuple[str, str]],
    *,
    filters: Filters | None = None,
    identity: Identity | None = None,
    candidates: int = CANDIDATES,
    retrievers: Sequence[str | Retriever] | None = None,
    depth: int = DEFAULT_DEPTH,
    progress: bool = False,
    lists: Mapping[str, list[RankedList]] | None = None,
) -> Collected:
    """Run the query-stage retrievers once per query; expand lazily (memoised by seeds).

    ``lists`` (a previous :attr:`Collected.lists`, e.g. from a cache) skips the
    query stage for the queries it holds.
    """
    who = identity or Identity()
    configured = make_retrievers(retrievers)
    query_stage = [r for r in configured if r.stage == "query"]
    expanders = [r for r in configured if r.stage == "expand"]
    given = filters or Filters()
    if given.pending:  # the store's declared facets, resolved once
        with store.reader(who) as reader:
            given = reader.resolved(given)
    base = Request(None, given, k=candidates, depth=depth)
    found: dict[str, list[RankedList]] = dict(lists or {})
    todo = [(qid, text) for qid, text in queries if qid not in found]
    with Progress(disable=not progress, transient=True) as bar:
        task = bar.add_task("retrieving", total=len(todo))
        for qid, text in todo:
            request = replace(base, text=text)
            out = []
            with store.reader(who) as reader:
                for retriever in query_stage:
                    ranking = retriever.run(reader, request)
                    if ranking.ran:
                        out.append(ranking.entity_list())
            found[qid] = out
            bar.advance(task)

    memo: dict[tuple[str, ...], list[RankedList]] = {}
    calls = {"computed": 0, "reused": 0}

    def expand(seeds: tuple[str, ...]) -> list[RankedList]:
        if seeds in memo:
            calls["reused"] += 1
            return memo[seeds]
        calls["computed"] += 1
        seeded = replace(base, seeds=seeds)
        out = []
        with store.reader(who) as reader:
            for retriever in expanders:
                ranking = retriever.run(reader, seeded)
                if ranking.ran:
                    out.append(ranking.entity_list())
        memo[seeds] = out
        return out

    return Collected(list(queries), found, expand, calls)


def run_variant(collected: Collected, variant: Variant, *, depth: int = CANDIDATES) -> Run:
    """The run of one variant over every collected query (the top ``depth`` uids)."""
    run: Run = {}
    for qid, text in collected.queries:
        lists = collected.lists[qid]
        if variant.single is not None:
            chosen = next((lst for lst in lists if lst.name == variant.single), None)
            if chosen is None:
                seeds_fused = (variant.fusion or Fusion.of(None)).fuse(lists)
                seeds = tuple(f.uid for f in seeds_fused[:10])
                chosen = next(
                    (lst for lst in collected.expand(seeds) if lst.name == variant.single),
                    RankedList(variant.single, []),
                )
            run[qid] = _run_of([uid for uid, _ in chosen.items[:depth]])
            continue
        if variant.lists is not None:
            lists = [lst for lst in lists if lst.name in variant.lists]
        fusion = variant.fusion or Fusion.of(None)
        if isinstance(fusion, Fusion):
            fusion, _ = fusion.for_query(text)
        if variant.expand:
            fused, _, _ = fuse_stages(fusion, lists, collected.expand)
        else:
            fused = fusion.fuse(lists)
        run[qid] = _run_of([f.uid for f in fused[:depth]])
    return run


def evaluate(
    store: Any,
    queries_path: str | Path,
    qrels_path: str | Path,
    *,
    filters: Filters | None = None,
    identity: Identity | None = None,
    mode: str | None = None,
    weights: Mapping[str, float] | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """``ks eval``: lexical alone, vector alone, and fused search as the planner runs it."""
    queries = read_queries(queries_path)
    qrels = read_qrels(qrels_path)
    queries = [(q, t) for q, t in queries if q in qrels]
    if not queries:
        raise InvalidRequest("no query has a judgement in the qrels file")
    collected = collect(
        store,
        queries,
        filters=filters,
        identity=identity,
        progress=progress,
        retrievers=weighted_retrievers(weights),
    )
    fusion = Fusion.of(mode, weights)
    runs = {
        "lexical": run_variant(collected, Variant("lexical", single="lexical")),
        "vector": run_variant(collected, Variant("vector", single="vector")),
        "fused": run_variant(
            collected, Variant("fused", fusion=fusion, expand=fusion.weight("graph") > 0)
        ),
    }
    return {"queries": len(queries), **score_runs(qrels, runs)}


#: Configurations ``ks eval --compare`` accepts besides the fusion modes: one list alone.
SINGLE_LISTS: tuple[str, ...] = ("lexical", "vector")
#: The query field a per-type breakdown reads when none is named.
TYPE_FIELD = "type"


def parse_config(text: str) -> Variant:
    """``MODE`` or ``MODE:LIST=W,…`` (a fusion, as ``--mode``/``--weights``), or ``lexical``/``vector``."""
    name, sep, weights = (part.strip() for part in text.partition(":"))
    choices = (
        f"use MODE or MODE:LIST=W,… with MODE one of {', '.join(MODES)},"
        f" or one list alone: {', '.join(SINGLE_LISTS)}"
    )
    if name in SINGLE_LISTS and not sep:
        return Variant(text, single=name)
    if name not in MODES or (sep and not weights):
        raise InvalidRequest(
            f"--compare: {text!r} is not a configuration; {choices}",
            value=text,
            allowed=[*MODES, *SINGLE_LISTS],
        )
    given = parse_weights(weights) if sep else None
    fusion = Fusion.of(name, given)
    lists = frozenset(weighted_retrievers(given) or BUILT_IN)
    return Variant(text, fusion=fusion, expand=fusion.weight("graph") > 0, lists=lists)


def read_query_types(path: str | Path, field_name: str) -> dict[str, str]:
    """qid → the query's ``field_name`` (its type), from the queries file or, for queries
    without it, from ``queries-meta.jsonl`` beside it (the shared eval sets' layout)."""
    types: dict[str, str] = {}
    meta = Path(path).with_name("queries-meta.jsonl")
    for source in (Path(path), meta):
        if not source.is_file():
            continue
        for obj in json_objects(source, ("qid",), 'a JSON object with "qid"'):
            qid = str(obj["qid"])
            value = obj.get(field_name)
            if qid not in types and value is not None and not isinstance(value, dict | list):
                types[qid] = str(value)
    return types


def compare(
    store: Any,
    queries_path: str | Path,
    qrels_path: str | Path,
    config_a: str,
    config_b: str,
    *,
    filters: Filters | None = None,
    identity: Identity | None = None,
    group_by: str | None = None,
    moved: int = 10,
    progress: bool = False,
) -> dict[str, Any]:
    """``ks eval --compare A B``: both configurations over the same lists, paired.

    Each measure's means and the paired bootstrap 95 % interval of B − A, the
    queries that moved most, and a breakdown per query type when the queries
    carry one (``group_by``, default ``type``; an explicit field no query
    carries is an error).
    """
    from knowledge_store.retrieval.compare import compare_runs

    variant_a, variant_b = parse_config(config_a), parse_config(config_b)
    queries = read_queries(queries_path)
    qrels = read_qrels(qrels_path)
    queries = [(q, t) for q, t in queries if q in qrels]
    if not queries:
        raise InvalidRequest("no query has a judgement in the qrels file")
    field_name = group_by or TYPE_FIELD
    types = read_query_types(queries_path, field_name)
    if group_by and not any(q in types for q, _ in queries):
        raise InvalidRequest(
            f"--group-by: no judged query carries {group_by!r} (in {queries_path} "
            "or a queries-meta.jsonl beside it)",
            field="group_by",
            value=group_by,
        )
    weighted = [v.fusion.weights for v in (variant_a, variant_b) if isinstance(v.fusion, Fusion)]
    collected = collect(
        store,
        queries,
        filters=filters,
        identity=identity,
        progress=progress,
        retrievers=weighted_retrievers(*weighted),
    )
    asked = dict(queries)
    result = compare_runs(
        {q: qrels[q] for q in asked},
        run_variant(collected, variant_a),
        run_variant(collected, variant_b),
        groups={q: types.get(q, "?") for q in asked} if types else None,
        moved=moved,
    )
    out = result.as_dict()
    for row in out["moved"]:
        row["text"] = asked[row["qid"]]
    return {
        "queries": len(queries),
        "a": config_a,
        "b": config_b,
        "group_by": field_name if types else None,
        **out,
    }
