"""Dense pseudo-relevance feedback (issue 16, stop 20): a second vector search from the query
moved towards its first results.

Rocchio on the query vector: ``q' = normalise(q + β × mean(v_1 … v_n))``, where the
``v_i`` are chunk vectors of the first results — either the vector list's top ``n``
chunks (dense PRF), or the best chunk (by cosine with ``q``) of each of the top ``n``
pages of today's fused ranking (both lists agree on what the query is about). The
second search is the store's own vector primitive (HNSW, ``codeSample`` excluded);
its chunks fold to pages as the vector retriever folds them, replace the store's
vector list, and fused search is the default fusion with the graph stage — the same
code as ``ks eval``. Δ nDCG@10 with paired bootstrap intervals per set and macro.

    PYTHONPATH=$PWD/src:$PWD/bench .venv/bin/python bench/eval_prf.py \
        --set /tmp/h20/pg15 /work/shared/eval/postgres-docs \
        --set /tmp/h20/faq /work/shared/eval/sqlite-git-faq

Reads the lists cached by ``bench/eval_fields.py`` / ``bench/eval_pagelex.py`` (same ``--work``).
"""

from __future__ import annotations

import argparse
import sqlite3
from pathlib import Path

import numpy as np
from common import chunk_vectors_sql
from eval_pagelex import (
    FILTERS,
    Scores,
    fused_run,
    print_macro,
    report_row,
    store_lists,
    swap,
    with_lists,
)

from knowledge_store.model import Identity
from knowledge_store.retrieval.compare import per_query
from knowledge_store.retrieval.evaluation import (
    Collected,
    Variant,
    run_variant,
)
from knowledge_store.retrieval.fusion import RankedList
from knowledge_store.store import KnowledgeStore

ASKED = 100


def chunk_vectors(store_path: str) -> tuple[dict[int, int], np.ndarray, dict[str, list[int]]]:
    """Chunk id → row, the float32 vectors, and each page's rows."""
    conn = sqlite3.connect(f"file:{store_path}/catalog.sqlite?mode=ro", uri=True)
    vectors, vector = chunk_vectors_sql(conn)  # catalog schema 3 or older
    rows = conn.execute(
        f"SELECT c.id, e.uid, {vector} FROM chunks c JOIN entities e ON e.id = c.entity{vectors}"
    ).fetchall()
    conn.close()
    matrix = np.stack([np.frombuffer(blob, dtype=np.float32) for _, _, blob in rows])
    pages: dict[str, list[int]] = {}
    for i, (_, uid, _) in enumerate(rows):
        pages.setdefault(uid, []).append(i)
    return {cid: i for i, (cid, _, _) in enumerate(rows)}, matrix, pages


def measure(store_path: str, set_dir: str, work: Path) -> dict[str, dict[str, Scores]]:
    name = Path(set_dir).name
    row_of, matrix, pages = chunk_vectors(store_path)
    out: dict[str, dict[str, Scores]] = {}
    with KnowledgeStore.open(store_path) as store:
        base, queries, qrels = store_lists(store, store_path, set_dir, work)
        today = fused_run(base)

        def score(label: str, col: Collected) -> None:
            out[label] = {
                "lexical": per_query(qrels, run_variant(col, Variant("v", single="vector"))),
                "fused": per_query(qrels, fused_run(col)),
            }
            report_row(name, label, out)  # its "lexical" column is the vector list here

        score("today", base)
        with store.reader(Identity()) as reader:

            def search(vector: np.ndarray) -> tuple[list[tuple[str, float]], list[int]]:
                ranked = reader.engine.vector(vector.astype(np.float32), ASKED, FILTERS)
                best: dict[str, float] = {}
                for uid, s in zip(ranked.uids, ranked.scores, strict=True):
                    best.setdefault(uid, float(s))
                return list(best.items()), list(ranked.ids)

            first = {}
            for qid, text in queries:
                q = np.asarray(reader.embed(text), dtype=np.float32)
                first[qid] = (q, *search(q))

            def variant(label: str, feedback: dict[str, np.ndarray], beta: float) -> None:
                lists = {}
                for qid, ls in base.lists.items():
                    q = first[qid][0]
                    moved = q + beta * feedback[qid].mean(axis=0)
                    items, _ = search(moved / np.linalg.norm(moved))
                    lists[qid] = swap(ls, "vector", RankedList("vector", items))
                score(label, with_lists(base, lists))

            control = {
                qid: swap(ls, "vector", RankedList("vector", first[qid][1]))
                for qid, ls in base.lists.items()
            }
            score("vector search again (control)", with_lists(base, control))
            for n in (3, 5):
                dense = {q: matrix[[row_of[c] for c in first[q][2][:n]]] for q in first}
                fused = {}
                for qid, _ in queries:
                    rows = []
                    for uid in list(today[qid])[:n]:
                        mine = pages[uid]
                        rows.append(mine[int(np.argmax(matrix[mine] @ first[qid][0]))])
                    fused[qid] = matrix[rows]
                for beta in (0.25, 0.5, 1.0):
                    variant(f"dense PRF, top {n} chunks, β {beta:g}", dense, beta)
                    variant(f"fused PRF, top {n} pages, β {beta:g}", fused, beta)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--set", nargs=2, action="append", metavar=("STORE", "SET_DIR"), required=True
    )
    parser.add_argument("--work", type=Path, default=Path("/tmp/eval_fields"))
    args = parser.parse_args()
    scores = {Path(d).name: measure(s, d, args.work) for s, d in args.set}
    print_macro(scores)


if __name__ == "__main__":
    main()
