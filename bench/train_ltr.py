"""Does a learned reranker earn its place? LightGBM LambdaMART, leave-one-set-out.

Candidates per query: the union of the store's vector and lexical lists
(top 100 each, code samples excluded), the lists ``bench/eval_adaptive.py``
collected (``bench/.cache/lists-*.pickle``). Features per candidate:

* each list's reciprocal rank and raw score (cosine; BM25, and BM25 over the
  list's top score), present or not; the RRF and convex fused scores;
* title and heading matches (share of the query's words in the title, in the
  section headings; the query equal to the title);
* graph: degree, links (partOf/xref) to the other top-10 fused results;
  ``supersededBy`` (no edge of that label exists in either shared corpus, so
  it is constant there);
* the entity type (one-hot over both corpora's types), body length, and the
  query's own features (words, question form, identifier count).

Validation: train on one shared set, test on the other — both ways. The
reranker would ship only if it beats the fusion default on the held-out set
every time (paired bootstrap 95 % interval above 0); otherwise it stays off.

    PYTHONPATH=src .venv/bin/python bench/train_ltr.py
    PYTHONPATH=src .venv/bin/python bench/train_ltr.py --model bench/results/ltr.txt  # all sets
"""

from __future__ import annotations

import argparse
import math
import pickle
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from evalsets import CACHE, EvalSet, eval_sets

from knowledge_store.retrieval.adaptive import query_features
from knowledge_store.retrieval.compare import paired_bootstrap, per_query
from knowledge_store.retrieval.fusion import RankedList, convex, rrf

_WORDS = re.compile(r"[a-z0-9_]+")
_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "do",
        "does",
        "for",
        "from",
        "how",
        "i",
        "in",
        "is",
        "it",
        "of",
        "on",
        "or",
        "the",
        "to",
        "what",
        "why",
    ]
)

FEATURES = (
    "vector_rr", "vector_score", "vector_present",
    "lexical_rr", "lexical_score", "lexical_rel", "lexical_present",
    "rrf", "convex",
    "title_share", "title_equal", "heading_share",
    "degree", "links_to_top", "superseded",
    "log_length", "q_words", "q_question", "q_identifiers",
)  # fmt: skip


def words(text: str) -> set[str]:
    return {w for w in _WORDS.findall(text.lower()) if w not in _STOP}


@dataclass
class Corpus:
    titles: dict[str, str]
    headings: dict[str, set[str]]
    types: dict[str, str]
    lengths: dict[str, int]
    links: dict[str, set[str]]
    superseded: set[str]

    @classmethod
    def of(cls, eval_set: EvalSet) -> Corpus:
        links: dict[str, set[str]] = {}
        superseded = set()
        for r in eval_set.records:
            for e in r.get("edges") or []:
                target = e.get("target") or e.get("to")
                if not target:
                    continue
                if e.get("label") == "supersededBy":
                    superseded.add(r["uid"])
                links.setdefault(r["uid"], set()).add(target)
                links.setdefault(target, set()).add(r["uid"])
        return cls(
            {r["uid"]: r["title"] for r in eval_set.records},
            {
                r["uid"]: words(" ".join((r.get("attributes") or {}).get("headings") or []))
                for r in eval_set.records
            },
            {r["uid"]: r["type"] for r in eval_set.records},
            {r["uid"]: len(r["body"]) for r in eval_set.records},
            links,
            superseded,
        )


def load_lists(eval_set: EvalSet) -> dict[str, list[RankedList]]:
    path = CACHE / f"lists-{eval_set.store.name}.pickle"  # the default embedder's store
    if not path.exists():
        sys.exit(f"{path} is missing: run bench/eval_adaptive.py first (it collects the lists)")
    with path.open("rb") as handle:
        lists: dict[str, list[RankedList]] = pickle.load(handle)["lists"]
    return lists


def features(
    text: str, lists: Sequence[RankedList], corpus: Corpus, types: Sequence[str]
) -> tuple[list[str], np.ndarray]:
    """(candidate uids, feature matrix) of one query."""
    by = {lst.name: lst for lst in lists if lst.name in ("vector", "lexical")}
    pair = list(by.values())
    fused_rrf = {f.uid: f.score for f in rrf(pair)}
    fused_cvx = {f.uid: f.score for f in convex(pair, weights={"vector": 0.5, "lexical": 0.5})}
    top = sorted(fused_rrf, key=lambda u: -fused_rrf[u])[:10]
    q = words(text)
    qf = query_features(text)
    uids = list(fused_rrf)
    rows = []
    lex_top = by["lexical"].items[0][1] if "lexical" in by and by["lexical"].items else 1.0
    for uid in uids:
        row: list[float] = []
        for name in ("vector", "lexical"):
            lst = by.get(name)
            ranks = lst.ranks() if lst else {}
            scores = dict(lst.items) if lst else {}
            rank = ranks.get(uid)
            row += [1.0 / rank if rank else 0.0, scores.get(uid, 0.0)]
            if name == "lexical":
                row.append(scores.get(uid, 0.0) / lex_top if lex_top else 0.0)
            row.append(1.0 if rank else 0.0)
        title = words(corpus.titles.get(uid, ""))
        linked = corpus.links.get(uid, set())
        row += [
            fused_rrf[uid],
            fused_cvx.get(uid, 0.0),
            len(q & title) / len(q) if q else 0.0,
            1.0 if corpus.titles.get(uid, "").lower() == text.lower().strip() else 0.0,
            len(q & corpus.headings.get(uid, set())) / len(q) if q else 0.0,
            math.log1p(len(linked)),
            float(sum(1 for t in top if t != uid and t in linked)),
            1.0 if uid in corpus.superseded else 0.0,
            math.log1p(corpus.lengths.get(uid, 0)),
            float(qf.words),
            1.0 if qf.natural_language else 0.0,
            float(len(qf.identifiers)),
        ]
        row += [1.0 if corpus.types.get(uid) == t else 0.0 for t in types]
        rows.append(row)
    return uids, np.asarray(rows, dtype=np.float64)


@dataclass
class Dataset:
    eval_set: EvalSet
    qids: list[str]
    uids: list[list[str]]
    x: np.ndarray
    y: np.ndarray
    group: list[int]


def dataset(eval_set: EvalSet, types: Sequence[str]) -> Dataset:
    corpus = Corpus.of(eval_set)
    lists = load_lists(eval_set)
    qids, all_uids, xs, ys, group = [], [], [], [], []
    for qid, text in eval_set.queries:
        uids, x = features(text, lists[qid], corpus, types)
        judged = eval_set.qrels.get(qid, {})
        qids.append(qid)
        all_uids.append(uids)
        xs.append(x)
        ys.append(np.asarray([judged.get(u, 0) for u in uids]))
        group.append(len(uids))
    return Dataset(eval_set, qids, all_uids, np.vstack(xs), np.concatenate(ys), group)


def train(data: Sequence[Dataset], seed: int = 0) -> Any:
    import lightgbm as lgb

    model = lgb.LGBMRanker(
        objective="lambdarank",
        n_estimators=200,
        learning_rate=0.05,
        num_leaves=15,
        min_child_samples=20,
        subsample=0.8,
        subsample_freq=1,
        colsample_bytree=0.8,
        random_state=seed,
        verbose=-1,
        n_jobs=1,
    )
    model.fit(
        np.vstack([d.x for d in data]),
        np.concatenate([d.y for d in data]),
        group=[g for d in data for g in d.group],
    )
    return model


def runs(data: Dataset, scores: np.ndarray) -> dict[str, dict[str, float]]:
    out = {}
    at = 0
    for qid, uids in zip(data.qids, data.uids, strict=True):
        part = scores[at : at + len(uids)]
        at += len(uids)
        out[qid] = {u: float(s) for u, s in zip(uids, part, strict=True)}
    return out


def column(name: str) -> int:
    return FEATURES.index(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="train on every set and write the model here")
    args = parser.parse_args()
    sets = eval_sets()
    types = sorted({r["type"] for s in sets for r in s.records})
    data = {s.name: dataset(s, types) for s in sets}
    print(f"features: {len(FEATURES) + len(types)} ({', '.join(FEATURES)}, type one-hot)")
    wins = []
    for held in data.values():
        trained = [d for name, d in data.items() if name != held.eval_set.name]
        model = train(trained)
        reranked = runs(held, model.predict(held.x))
        reference = runs(held, held.x[:, column("rrf")])
        cvx = runs(held, held.x[:, column("convex")])
        a = per_query(held.eval_set.qrels, reference)
        b = per_query(held.eval_set.qrels, reranked)
        c = per_query(held.eval_set.qrels, cvx)
        delta = paired_bootstrap([b["ndcg@10"][q] - a["ndcg@10"][q] for q in a["ndcg@10"]])
        delta_c = paired_bootstrap([b["ndcg@10"][q] - c["ndcg@10"][q] for q in c["ndcg@10"]])
        wins.append(delta.low > 0 and delta_c.low > 0)
        trained_on = "+".join(d.eval_set.name for d in trained)
        print(
            f"train {trained_on:>15} → test {held.eval_set.name:<15}"
            f"  rrf {_mean(a['ndcg@10']):.4f}  convex {_mean(c['ndcg@10']):.4f}"
            f"  LambdaMART {_mean(b['ndcg@10']):.4f}"
            f"  Δ vs rrf {delta}  Δ vs convex {delta_c}"
        )
        importance = sorted(
            zip([*FEATURES, *types], model.feature_importances_, strict=True), key=lambda t: -t[1]
        )
        print("   top features: " + ", ".join(f"{n} {v}" for n, v in importance[:8]))
    print(
        "verdict: "
        + ("wins on every held-out set" if all(wins) else "does NOT win on every held-out set: off")
    )
    if args.model:
        model = train(list(data.values()))
        model.booster_.save_model(args.model)
        print(f"model trained on every set written to {args.model}")


def _mean(values: Mapping[str, float]) -> float:
    return sum(values.values()) / len(values)


if __name__ == "__main__":
    main()
