"""``ks eval --compare A B``: paired intervals, moved queries, per-type breakdown, bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from knowledge_store.errors import InvalidRequest
from knowledge_store.retrieval.evaluation import parse_config
from knowledge_store.surfaces.cli import app
from tests.conftest import ESTATE

pytestmark = pytest.mark.real_model(
    reason="which queries a comparison moves is what the default model ranks"
)

runner = CliRunner(env={"KS_EMBEDDER": None})  # not the suite's hashing: the default model

QUERIES = [
    {"qid": "1", "text": "autovacuum", "type": "term"},
    {"qid": "2", "text": "pg_stat_activity", "type": "term"},
    {"qid": "3", "text": "how do I see which queries are running?", "type": "question"},
    {"qid": "4", "text": "why is my replica behind the primary?", "type": "question"},
]
QRELS = {"1": "guide:vacuum", "2": "guide:monitoring", "3": "guide:monitoring", "4": "ticket:1042"}


def ks(store: Path, *args: str) -> tuple[int, Any]:
    result = runner.invoke(app, ["--store", str(store), *args])
    stdout = result.stdout.strip()
    try:
        return result.exit_code, json.loads(stdout) if stdout else None
    except ValueError:
        return result.exit_code, stdout


@pytest.fixture(scope="module")
def eval_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(store, queries, qrels): the estate ingested as ``everyone`` reads it."""
    root = tmp_path_factory.mktemp("compare")
    estate = root / "estate.jsonl"
    estate.write_text("".join(json.dumps(r) + "\n" for r in ESTATE), encoding="utf-8")
    store = root / "store"
    code, report = ks(store, "ingest", str(estate), "--json")
    assert code == 0, report
    queries = root / "queries.jsonl"
    queries.write_text("".join(json.dumps(q) + "\n" for q in QUERIES), encoding="utf-8")
    qrels = root / "qrels.tsv"
    qrels.write_text("".join(f"{q}\t{uid}\t1\n" for q, uid in QRELS.items()), encoding="utf-8")
    return store, queries, qrels


def compare(files: tuple[Path, Path, Path], *args: str) -> tuple[int, Any]:
    store, queries, qrels = files
    return ks(store, "eval", "--queries", str(queries), "--qrels", str(qrels), *args)


def test_compare_json_holds_each_measure_with_its_paired_interval(
    eval_files: tuple[Path, Path, Path],
) -> None:
    code, result = compare(eval_files, "--compare", "lexical", "adaptive", "--json")
    assert code == 0, result
    assert set(result) == {"queries", "a", "b", "group_by", "measures", "moved", "by_type"}
    assert (result["queries"], result["a"], result["b"]) == (4, "lexical", "adaptive")
    assert set(result["measures"]) == {"ndcg@10", "recall@100", "mrr@10"}
    for row in result["measures"].values():
        assert row["delta"] == pytest.approx(row["b"] - row["a"], abs=2e-4)
        assert row["low"] <= row["delta"] <= row["high"]
    for moved in result["moved"]:
        assert moved["text"] == next(q["text"] for q in QUERIES if q["qid"] == moved["qid"])
        assert moved["delta"] == pytest.approx(moved["b"] - moved["a"], abs=2e-4)
        assert moved["delta"] != 0
    assert [m["qid"] for m in result["moved"]] == ["3"]  # the question lexical ranks second
    deltas = [abs(m["delta"]) for m in result["moved"]]
    assert deltas == sorted(deltas, reverse=True)


def test_the_same_configuration_twice_moves_nothing(eval_files: tuple[Path, Path, Path]) -> None:
    code, result = compare(eval_files, "--compare", "rrf", "rrf:vector=1,lexical=1", "--json")
    assert code == 0, result
    assert result["moved"] == []
    for row in result["measures"].values():
        assert (row["delta"], row["low"], row["high"]) == (0.0, 0.0, 0.0)


def test_queries_that_carry_a_type_are_broken_down_by_it(
    eval_files: tuple[Path, Path, Path],
) -> None:
    code, result = compare(eval_files, "--compare", "vector", "rrf", "--json")
    assert code == 0, result
    assert result["group_by"] == "type"
    assert {g: row["queries"] for g, row in result["by_type"].items()} == {
        "question": 2,
        "term": 2,
    }
    assert set(result["by_type"]["term"]) == {"queries", "ndcg@10", "recall@100", "mrr@10"}


def test_group_by_reads_a_field_from_queries_meta_beside_the_queries(
    eval_files: tuple[Path, Path, Path],
) -> None:
    _, queries, _ = eval_files
    meta = queries.with_name("queries-meta.jsonl")
    meta.write_text(
        "".join(
            json.dumps({"qid": q["qid"], "words": len(q["text"].split())}) + "\n" for q in QUERIES
        ),
        encoding="utf-8",
    )
    try:
        code, result = compare(
            eval_files, "--compare", "vector", "rrf", "--group-by", "words", "--json"
        )
    finally:
        meta.unlink()
    assert code == 0, result
    assert result["group_by"] == "words"
    assert {g: row["queries"] for g, row in result["by_type"].items()} == {"1": 2, "7": 1, "8": 1}


def test_the_readable_output_shows_intervals_types_and_moved_queries(
    eval_files: tuple[Path, Path, Path],
) -> None:
    code, text = compare(eval_files, "--compare", "lexical", "vector")
    assert code == 0, text
    assert "B − A [95% paired bootstrap]" in text and "nDCG@10" in text
    assert "per query type (type)" in text


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--compare", "rrf", "best"), "'best' is not a configuration"),
        (("--compare", "rrf", "adaptive:"), "'adaptive:' is not a configuration"),
        (("--compare", "rrf", "vector:lexical=1"), "is not a configuration"),
        (("--compare", "rrf", "convex:speed=2"), "unknown list 'speed'"),
        (("--compare", "rrf", "convex", "--mode", "rrf"), "not --mode/--weights"),
        (("--group-by", "type"), "--group-by needs --compare"),
        (("--compare", "rrf", "convex", "--group-by", "nothing"), "carries 'nothing'"),
    ],
    ids=str,
)
def test_bad_compare_requests_are_refused_with_a_clear_error(
    eval_files: tuple[Path, Path, Path], args: tuple[str, ...], needle: str
) -> None:
    code, result = compare(eval_files, *args, "--json")
    assert code == 2, result
    assert result["error"]["code"] == "invalid_request"
    assert needle in result["error"]["message"]


def test_a_configuration_is_a_mode_with_weights_or_one_list() -> None:
    convex = parse_config("convex:vector=0.7,lexical=0.3")
    assert convex.fusion is not None
    assert (convex.fusion.weight("vector"), convex.fusion.weight("lexical")) == (0.7, 0.3)
    assert convex.fusion.weight("graph") == 0.05 and convex.expand
    assert not parse_config("rrf:graph=0").expand
    assert parse_config("lexical").single == "lexical"
    with pytest.raises(InvalidRequest):
        parse_config("")
