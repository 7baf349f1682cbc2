"""Tune the lexical index (Tantivy BM25) on the postgres-docs eval set.

Pages only (``codeSample`` excluded), chunked into ~800-character
paragraph-based passages (the lead's chunker when it exists), indexed with
``LexicalIndex``, searched with k=100, folded to pages (best chunk) and scored
with nDCG@10 / Recall@100 / MRR@10 against the page-level qrels.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/tune_lexical.py            # every variant
    HF_HUB_OFFLINE=1 .venv/bin/python bench/tune_lexical.py --only default

The chunk loader is shared with ``bench/bench_vector.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from common import EVAL  # $KS_EVAL_DIR, else ../shared/eval/postgres-docs beside the repo

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


@dataclass(frozen=True)
class BenchChunk:
    chunk_id: int
    uid: str
    title: str
    heading: tuple[str, ...]
    text: str

    def context(self) -> str:
        path = " > ".join(h for h in self.heading if h and h != self.title)
        return f"{self.title}\n{path}\n{self.text}" if path else f"{self.title}\n{self.text}"


def _simple_chunks(body: str, size: int = 800) -> Iterator[tuple[tuple[str, ...], str]]:
    """Paragraph-based ~``size``-character chunks that never cross a heading."""
    path: list[tuple[int, str]] = []
    buf: list[str] = []

    def flush() -> Iterator[tuple[tuple[str, ...], str]]:
        text = "\n\n".join(buf).strip()
        buf.clear()
        if text:
            yield tuple(h for _, h in path), text

    in_fence = False
    for para in re.split(r"\n\s*\n", body):
        stripped = para.strip()
        match = None if in_fence or "\n" in stripped else _HEADING.match(stripped)
        if para.count("```") % 2 == 1:
            in_fence = not in_fence
        if match:
            yield from flush()
            level = len(match.group(1))
            path = [(lv, h) for lv, h in path if lv < level] + [(level, match.group(2))]
            continue
        pieces = [para]
        if len(para) > size:  # split a long paragraph on whitespace
            pieces, rest = [], para
            while len(rest) > size:
                cut = rest.rfind(" ", 0, size)
                cut = size if cut <= 0 else cut
                pieces.append(rest[:cut])
                rest = rest[cut:].lstrip()
            pieces.append(rest)
        for piece in pieces:
            if buf and sum(len(b) for b in buf) + len(piece) > size:
                yield from flush()
            buf.append(piece)
    yield from flush()


def load_chunks(prefer_lead: bool = True) -> tuple[list[BenchChunk], str]:
    """Chunk every page of the corpus; returns the chunks and the chunker's name.

    With ``prefer_lead`` the store's own chunker is used when it exists, else the
    simple ~800-character one.
    """
    chunk_markdown = None
    if prefer_lead:
        with contextlib.suppress(ImportError):
            from knowledge_store.ingest.chunking import chunk_markdown
    chunks: list[BenchChunk] = []
    name = "simple-800"
    with (EVAL / "corpus.jsonl").open() as fh:
        for line in fh:
            rec = json.loads(line)
            if rec["type"] == "codeSample":
                continue
            parts: list[tuple[tuple[str, ...], str]] | None = None
            if chunk_markdown is not None:
                try:
                    parts = [(tuple(c.heading), c.text) for c in chunk_markdown(rec["body"])]
                    name = "lead-chunk_markdown"
                except Exception as exc:  # the lead's chunker may have another signature
                    print(f"lead chunker unusable ({exc!r}); using simple-800", file=sys.stderr)
                    chunk_markdown = None
            if parts is None:
                parts = list(_simple_chunks(rec["body"]))
            for heading, text in parts or [((), rec["title"])]:
                chunks.append(BenchChunk(len(chunks) + 1, rec["uid"], rec["title"], heading, text))
    return chunks, name


def load_queries() -> tuple[list[tuple[str, str]], dict[str, set[str]]]:
    queries = [
        (q["qid"], q["text"])
        for q in map(json.loads, (EVAL / "queries.jsonl").read_text().splitlines())
    ]
    qrels: dict[str, set[str]] = {}
    for line in (EVAL / "qrels.tsv").read_text().splitlines()[1:]:
        qid, doc, score = line.split("\t")
        if int(score) > 0:
            qrels.setdefault(qid, set()).add(doc)
    return queries, qrels


def fold(hits: list[tuple[str, float]]) -> list[str]:
    """Chunk hits (best first) → page uids, best chunk per page."""
    return list(dict.fromkeys(uid for uid, _ in hits))


def evaluate(runs: dict[str, list[str]], qrels: dict[str, set[str]]) -> dict[str, float]:
    """Binary nDCG@10 (log2), Recall@100, MRR@10 averaged over every judged query."""
    ndcg = recall = mrr = 0.0
    for qid, rel in qrels.items():
        ranked = runs.get(qid, [])
        dcg = sum(1 / math.log2(i + 2) for i, d in enumerate(ranked[:10]) if d in rel)
        idcg = sum(1 / math.log2(i + 2) for i in range(min(len(rel), 10)))
        ndcg += dcg / idcg
        recall += len(rel & set(ranked[:100])) / len(rel)
        mrr += next((1 / (i + 1) for i, d in enumerate(ranked[:10]) if d in rel), 0.0)
    n = len(qrels)
    return {"ndcg@10": ndcg / n, "recall@100": recall / n, "mrr@10": mrr / n}


def evaluate_ir_measures(
    runs: dict[str, list[str]], qrels: dict[str, set[str]]
) -> dict[str, float]:
    import ir_measures
    from ir_measures import MRR, R, nDCG

    qrel_list = [ir_measures.Qrel(q, d, 1) for q, ds in qrels.items() for d in ds]
    run_list = [
        ir_measures.ScoredDoc(q, d, float(len(ds) - i))
        for q, ds in runs.items()
        for i, d in enumerate(ds[:100])
    ]
    agg = ir_measures.calc_aggregate([nDCG @ 10, R @ 100, MRR @ 10], qrel_list, run_list)
    return {"ndcg@10": agg[nDCG @ 10], "recall@100": agg[R @ 100], "mrr@10": agg[MRR @ 10]}


def run_variant(
    name: str, options: dict[str, object], chunks: list[BenchChunk]
) -> dict[str, float]:
    from knowledge_store.engines.embedded import analysis
    from knowledge_store.engines.embedded.lexical import LexicalDoc, LexicalIndex
    from knowledge_store.model import Filters, relevance

    def knobs(key: str) -> object:  # the boosts are both engines' (model.relevance)
        return relevance if hasattr(relevance, key) else analysis

    queries, qrels = load_queries()
    with tempfile.TemporaryDirectory() as tmp:
        saved = {k: getattr(knobs(k), k) for k in options}
        for key, value in options.items():
            setattr(knobs(key), key, value)
        try:
            index = LexicalIndex(Path(tmp) / "lex")
            t0 = time.perf_counter()
            index.add(
                LexicalDoc(
                    chunk_id=c.chunk_id,
                    uid=c.uid,
                    acl=("everyone",),
                    type="section",
                    source="postgresql-docs",
                    status="published",
                    created_at=None,
                    updated_at=None,
                    title=c.title,
                    heading=c.heading,
                    text=c.text,
                )
                for c in chunks
            )
            index.commit(1)
            build = time.perf_counter() - t0
            runs: dict[str, list[str]] = {}
            t0 = time.perf_counter()
            for qid, text in queries:
                hits = index.search(text, 100, principals=["everyone"], filters=Filters())
                runs[qid] = fold([(uid, s) for _, uid, s in hits])
            per_query = (time.perf_counter() - t0) / len(queries) * 1000
            index.close()
        finally:
            for key, value in saved.items():
                setattr(knobs(key), key, value)
    try:
        scores = evaluate_ir_measures(runs, qrels)
    except ImportError:
        scores = evaluate(runs, qrels)
    scores.update(build_s=build, ms_per_query=per_query)
    return scores


# Each variant overrides module-level knobs of knowledge_store.model.relevance (the field
# boosts) or knowledge_store.engines.embedded.analysis (the analyzers).
VARIANTS: dict[str, dict[str, object]] = {
    "default (title 0.25, identifiers for codes)": {},
    "no-stopwords": {"USE_STOPWORDS": False},
    "no-identifier-field": {"IDENTIFIER_BOOST": 0.0},
    "identifier-boost-2": {"IDENTIFIER_BOOST": 2.0},
    "identifier-field-for-every-token": {"IDENTIFIER_ONLY_CODES": False},
    "no-title-field": {"TITLE_BOOST": 0.0},
    "title-boost-0.5": {"TITLE_BOOST": 0.5},
    "title-boost-1": {"TITLE_BOOST": 1.0},
    "words-split-underscore": {"WORD_PATTERN": r"[^\W_]+"},
}


def grid() -> dict[str, dict[str, object]]:
    """Every combination of the knobs that mattered one at a time."""
    out: dict[str, dict[str, object]] = {}
    for split in (False, True):
        for codes in (False, True):
            for title in (0.0, 0.25, 0.5):
                for ident in (1.0, 1.5, 2.0, 3.0):
                    name = (
                        f"title={title} ident={ident}{' codes-only' if codes else ''}"
                        f"{' split_' if split else ''}"
                    )
                    options: dict[str, object] = {
                        "TITLE_BOOST": title,
                        "IDENTIFIER_BOOST": ident,
                        "IDENTIFIER_ONLY_CODES": codes,
                    }
                    if split:
                        options["WORD_PATTERN"] = r"[^\W_]+"
                    out[name] = options
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", help="run only variants named so (prefix)")
    parser.add_argument("--grid", action="store_true", help="the full grid of knobs instead")
    args = parser.parse_args()
    variants = grid() if args.grid else VARIANTS
    chunks, chunker = load_chunks()
    print(f"{len(chunks)} chunks ({chunker}) from {len({c.uid for c in chunks})} pages")
    print("| variant | nDCG@10 | Recall@100 | MRR@10 | build s | ms/query |")
    print("|---|---|---|---|---|---|")
    for name, options in variants.items():
        if args.only and not any(name.startswith(o) for o in args.only):
            continue
        s = run_variant(name, options, chunks)
        print(
            f"| {name} | {s['ndcg@10']:.4f} | {s['recall@100']:.4f} | {s['mrr@10']:.4f}"
            f" | {s['build_s']:.1f} | {s['ms_per_query']:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
