"""The CLI contract (DESIGN §6): commands, flags, JSON shapes, error codes, exit status."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from knowledge_store.errors import InvalidRequest
from knowledge_store.surfaces.cli import app
from tests.conftest import ESTATE, HASH_SPEC

runner = CliRunner()


def ks(store: Path, *args: str) -> tuple[int, Any]:
    result = runner.invoke(app, ["--store", str(store), *args])
    stdout = result.stdout.strip()
    try:
        payload = json.loads(stdout) if stdout else None
    except ValueError:
        payload = stdout
    return result.exit_code, payload


@pytest.fixture(scope="module")
def estate_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("estate") / "estate.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ESTATE), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def cli_store(tmp_path_factory: pytest.TempPathFactory, estate_file: Path) -> Path:
    store = tmp_path_factory.mktemp("cli") / "store"
    code, report = ks(store, "ingest", str(estate_file), "--json")
    assert code == 0, report
    return store


def test_ingest_json_shape_and_idempotence(cli_store: Path, estate_file: Path) -> None:
    code, report = ks(cli_store, "ingest", str(estate_file), "--json")
    assert code == 0
    design = {"content_root", "added", "updated", "unchanged", "deleted", "rejected"}
    # DESIGN §6's keys, + the paths not read and the uids a sync deleted (extensions)
    assert set(report) == design | {"skipped", "deleted_uids"}
    assert report["unchanged"] == len(ESTATE) and report["added"] == 0
    assert report["skipped"] == []


def test_search_json_shape(cli_store: Path) -> None:
    code, answer = ks(cli_store, "search", "vacuum dead tuples", "--json", "--k", "3")
    assert code == 0
    assert set(answer) >= {"content_root", "mode", "results", "vector"}
    assert answer["mode"] == "adaptive"
    assert set(answer["vector"]) == {"strategy", "scanned", "exhaustive"}
    top = answer["results"][0]
    assert set(top) == {
        "uid",
        "title",
        "type",
        "href",
        "score",
        "ranks",
        "superseded_by",
        "evidence",
        "similarity",  # an extension: the best chunk's cosine (issue 15)
    }
    assert answer["words_matched"] is True  # an extension too
    assert set(top["ranks"]) == {"vector", "lexical", "graph", "sql"}
    assert top["uid"] == "guide:vacuum"
    assert set(top["evidence"][0]) == {"chunk_id", "text", "heading", "start", "end"}


@pytest.mark.parametrize("command", ["lexical", "vector"])
def test_primitive_json_shape(cli_store: Path, command: str) -> None:
    code, answer = ks(cli_store, command, "pg_stat_activity", "--json")
    assert code == 0
    hit = answer["hits"][0]
    assert set(hit) == {
        "uid",
        "chunk_id",
        "title",
        "type",
        "score",
        "rank",
        "text",
        "heading",
        "start",
        "end",
    }
    assert ("vector" in answer) == (command == "vector")
    assert "explain" not in answer
    code, explained = ks(cli_store, command, "pg_stat_activity", "--json", "--explain")
    assert "ms" in explained["explain"]


def test_filters_and_identity_flags(cli_store: Path) -> None:
    code, answer = ks(cli_store, "lexical", "ERR-1042", "--json")
    assert code == 0 and answer["hits"] == []
    code, answer = ks(cli_store, "lexical", "ERR-1042", "--as", "group:sre", "--json")
    assert [h["uid"] for h in answer["hits"]] == ["ticket:1042"]
    code, answer = ks(cli_store, "search", "database", "--type", "chapter", "--json")
    assert {r["uid"] for r in answer["results"]} == {"guide:admin"}
    code, err = ks(
        cli_store,
        "search",
        "x",
        "--created-from",
        "2024-05-01",
        "--created-to",
        "2024-01-01",
        "--json",
    )
    assert code == 2 and err["error"]["code"] == "invalid_request"


def test_stats_json_shape(cli_store: Path) -> None:
    code, stats = ks(cli_store, "stats", "--json")
    assert code == 0
    assert set(stats) >= {
        "content_root",
        "entities",
        "chunks",
        "edges",
        "segments",
        "model",
        "dimension",
        "is_empty",
    }
    assert stats["entities"] == len(ESTATE) and stats["is_empty"] is False
    assert stats["edges"] == {"partOf": 2, "xref": 2}
    # the model $KS_EMBEDDER names (the suite's hashing; unset, the default model:
    # tests/ingest/test_embedding.py::test_default_embedder_identity)
    assert stats["model"] == os.environ["KS_EMBEDDER"] == HASH_SPEC
    assert stats["dimension"] == 384


def test_stats_without_json_shows_the_engines_own_keys(cli_store: Path) -> None:
    # the human output left out indexes (how far the derived indexes are, and why not):
    # a lagging index was visible only with --json
    shown = runner.invoke(app, ["--store", str(cli_store), "stats"]).stdout
    lines = {line.split()[0]: line.split(None, 1)[1] for line in shown.splitlines()}
    assert lines["engine"] == "embedded" and lines["path"] == str(cli_store)
    assert lines["indexes"].startswith("publish=") and "error=None" in lines["indexes"]
    assert lines["entities"] == "5"


def test_errors_have_one_shape_and_exit_codes(cli_store: Path, tmp_path: Path) -> None:
    code, err = ks(cli_store, "ingest", "README.md", "--format", "docbook", "--json")
    assert code == 2 and err["error"]["code"] == "invalid_request"
    assert "jsonl" in err["error"]["message"]
    unknown = tmp_path / "records.dat"
    unknown.write_text("{}")
    code, err = ks(cli_store, "ingest", str(unknown), "--json")
    assert code == 2 and "name its --format: one of jsonl" in err["error"]["message"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"uid": "x", "type": "page", "title": "X", "body": "b", "acl": []}\n{not json\n'
    )
    code, err = ks(cli_store, "ingest", str(bad), "--json")
    assert code == 2 and err["error"]["code"] == "invalid_record"
    assert "bad.jsonl:2" in err["error"]["message"]
    code, err = ks(cli_store, "delete", "no-such-uid", "--json")
    assert code == 2 and err["error"]["code"] == "not_found"
    code, err = ks(cli_store, "search", "x", "--mode", "median", "--json")
    assert code == 2 and err["error"]["code"] == "invalid_request"
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    for command in (["stats"], ["ingest", str(tmp_path / "bad.jsonl")]):  # a read, a write
        code, err = ks(not_a_dir, *command, "--json")
        assert code == 2 and err["error"]["code"] == "invalid_request"  # the --store given
        assert "is a file, not a directory" in err["error"]["message"]


def test_a_rejected_batch_lists_every_bad_record_without_json(tmp_path: Path) -> None:
    # the sentence names the first bad record and counts the others; each one gets its line
    # (it said "and 2 more bad records" and named neither: only --json listed them)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"uid": "a", "type": "page", "title": "A", "body": "b", "acl": ["everyone"]}\n'
        "{not json\n"
        '{"uid": "c", "type": "page", "title": "C", "body": "b", "acl": ["everyone"], "x": 1}\n'
        '{"uid": "d", "type": "page", "title": "D", "body": "b"}\n',
        encoding="utf-8",
    )
    result = runner.invoke(app, ["--store", str(tmp_path / "s"), "ingest", str(bad)])
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.startswith("rejected ")]
    assert [line.split(":")[1].split()[0] for line in lines] == ["2", "3", "4"]
    assert "field 'x'" in lines[1] and "field 'acl'" in lines[2]
    assert "and 2 more bad records" in result.stderr
    bad.write_text("{not json\n", encoding="utf-8")  # one: the sentence alone names it
    result = runner.invoke(app, ["--store", str(tmp_path / "s"), "ingest", str(bad)])
    assert result.exit_code == 2 and "bad.jsonl:1: malformed JSON" in result.stderr
    assert "rejected " not in result.stderr


@pytest.mark.parametrize(
    ("option", "says"),
    [
        (["--max-pages", "0"], "--max-pages must be at least 1"),
        (["--max-depth", "-1"], "--max-depth must not be negative"),
        (["--delay", "-1"], "--delay must be a finite number of seconds ≥ 0, not -1.0"),
        (["--delay", "nan"], "--delay must be a finite number of seconds ≥ 0, not nan"),
    ],
)
def test_a_bad_crawl_bound_is_an_input_error(
    tmp_path: Path, estate_file: Path, option: list[str], says: str
) -> None:
    # these were Python tracebacks with exit status 1 (and a NaN delay was taken)
    code, err = ks(tmp_path / "s", "ingest", str(estate_file), *option, "--json")
    assert code == 2 and err["error"] == {
        "code": "invalid_request",
        "message": says,
        "details": {"field": option[0]},
    }
    assert not (tmp_path / "s").exists()


def test_aggregate_names_the_bucket_of_entities_without_the_field(tmp_path: Path) -> None:
    # the key "" (no status) showed as a blank cell, next to "(null)" for a missing date
    records = tmp_path / "r.jsonl"
    rows = [
        {"uid": "a", "type": "page", "title": "A", "body": "x", "status": "open"},
        {"uid": "b", "type": "page", "title": "B", "body": "y"},
    ]
    records.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    store = tmp_path / "s"
    assert ks(store, "ingest", str(records), "--acl", "everyone", "--json")[0] == 0
    code, answer = ks(store, "aggregate", "count", "--by", "status", "--json")
    assert code == 0 and {r["key"]: r["value"] for r in answer["rows"]} == {"": 1, "open": 1}
    shown = runner.invoke(app, ["--store", str(store), "aggregate", "count", "--by", "status"])
    cells = [line.split() for line in shown.stdout.splitlines()[1:3]]
    assert sorted(cells) == [["(none)", "1"], ["open", "1"]]


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ('{"group": "group:b"}', "(it has no 'member')"),
        ('[{"group": "group:b", "member": "user:x"}]', "(it is not a JSON object: [{"),
        ("group:b user:x", "(not JSON: Expecting value at column 1)"),
    ],
)
def test_principals_load_says_what_is_wrong_with_a_line(
    tmp_path: Path, line: str, why: str
) -> None:
    # each said only 'expected {"group": "group:<id>", "member": "user:<id>"}'
    memberships = tmp_path / "m.jsonl"
    memberships.write_text('{"group": "group:a", "member": "user:y"}\n' + line + "\n")
    code, err = ks(tmp_path / "s", "principals", "load", str(memberships), "--json")
    assert code == 2 and err["error"]["details"] == {"file": str(memberships), "line": 2}
    assert err["error"]["message"].startswith(
        f'{memberships}:2: expected {{"group": "group:<id>", "member": "user:<id>"}} {why}'
    )


def test_acl_and_principals_commands(tmp_path: Path, estate_file: Path) -> None:
    store = tmp_path / "s"
    assert ks(store, "ingest", str(estate_file), "--json")[0] == 0
    members = tmp_path / "members.jsonl"
    members.write_text(
        '{"group": "group:sre", "member": "group:oncall"}\n'
        '{"group": "group:oncall", "member": "user:olga"}\n'
    )
    code, loaded = ks(store, "principals", "load", str(members), "--json")
    assert code == 0 and loaded == {"groups": 2, "memberships": 2}
    code, shown = ks(store, "principals", "show", "user:olga", "--json")
    assert shown["direct_groups"] == ["group:oncall"] and shown["inherited_groups"] == ["group:sre"]
    code, explained = ks(store, "acl", "explain", "user:olga", "ticket:1042", "--json")
    assert explained["allowed"] and explained["chain"] == ["user:olga", "group:oncall", "group:sre"]
    code, _ = ks(store, "principals", "remove-member", "group:oncall", "user:olga", "--json")
    assert code == 0
    code, explained = ks(store, "acl", "explain", "user:olga", "ticket:1042", "--json")
    assert not explained["allowed"]
    code, granted = ks(store, "acl", "grant", "ticket:1042", "user:olga", "--json")
    assert code == 0 and "user:olga" in granted["acl"]
    code, answer = ks(store, "lexical", "ERR-1042", "--as", "user:olga", "--json")
    assert [h["uid"] for h in answer["hits"]] == ["ticket:1042"]
    code, err = ks(store, "principals", "add-member", "group:sre", "group:oncall", "--json")
    assert code == 0  # already a member: idempotent
    code, err = ks(store, "principals", "add-member", "group:oncall", "group:sre", "--json")
    assert code == 2 and "cycle" in err["error"]["message"]


def test_a_path_with_a_nul_is_an_input_error(cli_store: Path, tmp_path: Path) -> None:
    # "ValueError: embedded null byte" came out as store_error (exit 1); a path from the
    # Python API or a test runner can hold one, though a shell can't pass it
    code, err = ks(cli_store, "principals", "load", "a\x00b", "--json")
    assert code == 2 and err["error"]["code"] == "invalid_request"
    assert err["error"]["message"].startswith("cannot read a\x00b: ")
    from knowledge_store.retrieval.evaluation import read_queries

    with pytest.raises(InvalidRequest, match="cannot read"):
        read_queries(str(tmp_path / "a\x00b"))


@pytest.mark.parametrize("missing", ["queries", "qrels"])
def test_eval_of_a_file_that_is_not_there_is_an_input_error(
    cli_store: Path, tmp_path: Path, missing: str
) -> None:
    # it was store_error (exit 1): "FileNotFoundError: [Errno 2] …"
    files = {"queries": tmp_path / "q.jsonl", "qrels": tmp_path / "qrels.tsv"}
    files["queries"].write_text('{"qid": "1", "text": "autovacuum"}\n')
    files["qrels"].write_text("1\tpage:1\t1\n")
    files[missing] = tmp_path / "nosuch"
    args = ["--queries", str(files["queries"]), "--qrels", str(files["qrels"])]
    code, err = ks(cli_store, "eval", *args, "--json")
    assert code == 2 and err["error"]["code"] == "invalid_request"
    assert err["error"]["message"].startswith(f"cannot read {tmp_path / 'nosuch'}: ")
    assert err["error"]["details"] == {"file": str(tmp_path / "nosuch")}


def test_eval_reports_three_lists(cli_store: Path, tmp_path: Path) -> None:
    queries = tmp_path / "q.jsonl"
    queries.write_text(
        '{"qid": "1", "text": "autovacuum"}\n{"qid": "2", "text": "pg_stat_activity"}\n'
    )
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\n1\tguide:vacuum\t1\n2\tguide:monitoring\t1\n")
    code, result = ks(cli_store, "eval", "--queries", str(queries), "--qrels", str(qrels), "--json")
    assert code == 0, result
    assert result["queries"] == 2
    for name in ("lexical", "vector", "fused"):
        assert set(result[name]) == {"ndcg@10", "recall@100", "mrr@10"}
        assert result[name]["recall@100"] == 1.0


def test_the_installed_entry_point_runs(cli_store: Path) -> None:
    exe = shutil.which("ks") or str(Path(os.sys.executable).parent / "ks")  # type: ignore[attr-defined]
    proc = subprocess.run(
        [exe, "--store", str(cli_store), "stats", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["entities"] == len(ESTATE)
    help_text = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60).stdout
    for command in (
        "ingest",
        "delete",
        "search",
        "lexical",
        "vector",
        "stats",
        "rebuild",
        "eval",
        "acl",
        "principals",
    ):
        assert command in help_text


def test_the_cli_reads_ks_as_and_ks_store_and_the_library_reads_neither(
    cli_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KS_AS", "group:sre")
    monkeypatch.setenv("KS_STORE", str(cli_store))
    result = runner.invoke(app, ["lexical", "ERR-1042", "--json"])  # no --store, no --as
    assert [h["uid"] for h in json.loads(result.stdout)["hits"]] == ["ticket:1042"]
    from knowledge_store.store import KnowledgeStore

    with KnowledgeStore.open(cli_store) as store:  # the library's default is everyone
        assert store.lexical("ERR-1042").hits == []


@pytest.mark.parametrize("command", [["search", "x"], ["sql"], ["graph", "ticket:1042"]])
def test_a_bad_identity_is_an_input_error_naming_where_it_came_from(
    cli_store: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    # it was a traceback and exit status 1: the identity was read outside the error handling
    code, err = ks(cli_store, *command, "--as", "nobody", "--json")
    assert code == 2 and err["error"]["code"] == "invalid_request"
    assert err["error"]["message"].startswith("--as: invalid principal 'nobody'")
    assert err["error"]["details"]["field"] == "--as"
    monkeypatch.setenv("KS_AS", "user:")
    code, err = ks(cli_store, *command, "--json")
    assert code == 2 and err["error"]["message"].startswith("$KS_AS: invalid principal 'user:'")


@pytest.mark.parametrize("acl_default", [False, True])
def test_schema_record_prints_the_record_json_schema(tmp_path: Path, acl_default: bool) -> None:
    from knowledge_store.ingest.record_schema import record_json_schema

    args = ["schema", "record", *(["--acl-default"] if acl_default else [])]
    code, printed = ks(tmp_path / "never-created", *args)
    assert code == 0
    assert printed == record_json_schema(acl_default=acl_default)
    assert not (tmp_path / "never-created").exists()  # no store is needed or made


def test_zero_results_that_should_say_why_are_errors(cli_store: Path) -> None:
    for args in (["lexical", ""], ["lexical", "  "], ["vector", ""], ["search", ""]):
        code, err = ks(cli_store, *args, "--json")
        assert code == 2 and err["error"]["code"] == "invalid_request", args
        assert err["error"]["details"]["field"] == "TEXT"  # the query, as the CLI spells it
        # a sentence, not a respelled field name in one ("a non-empty text or a TEXT vector")
        assert "TEXT" not in err["error"]["message"], err
    code, err = ks(cli_store, "graph", "nosuchuid", "--json")
    assert code == 2 and err["error"]["code"] == "not_found"
    assert err["error"]["message"] == "no entity with uid 'nosuchuid'"


def test_a_search_says_how_many_results_and_when_there_are_none(cli_store: Path) -> None:
    # an empty answer printed only the vector line and the content root
    shown = runner.invoke(app, ["--store", str(cli_store), "search", "vacuum", "--k", "2"])
    assert shown.exit_code == 0 and shown.stdout.rstrip().endswith("· 2 results")
    shown = runner.invoke(
        app, ["--store", str(cli_store), "search", "vacuum", "--status", "nosuchstatus"]
    )
    assert shown.exit_code == 0
    assert "Nothing you can read matches. Try other words or fewer filters." in shown.stdout
    assert shown.stdout.rstrip().endswith("· 0 results")


def test_a_mistyped_type_gets_a_note_not_an_error(cli_store: Path) -> None:
    result = runner.invoke(app, ["--store", str(cli_store), "sql", "--type", "pgae"])
    assert result.exit_code == 0
    assert "note no entity you can read has type 'pgae'; did you mean page?" in result.stderr
    code, answer = ks(cli_store, "lexical", "vacuum", "--type", "pgae", "--json")
    assert code == 0 and answer["hits"] == []
    assert answer["warnings"][0].startswith("no entity you can read has type 'pgae'")


def test_serve_on_a_taken_port_says_so_and_how_to_pick_another(cli_store: Path) -> None:
    import socket
    import sys

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [
                *(sys.executable, "-m", "knowledge_store.surfaces.cli", "--store", str(cli_store)),
                *("serve", "--port", str(port), "--anonymous"),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "COLUMNS": "300"},
        )
    assert done.returncode == 2  # docs/cli.md: the caller's input (invalid_request)
    assert done.stderr.strip() == (
        f"error (invalid_request): port {port} on 127.0.0.1 is already in use (another ks"
        f" serve, or another program); pick another with --port, e.g. `ks serve --port"
        f" {port + 1}` (with make: `make run PORT={port + 1}`)"
    )
    assert "serving on" not in done.stdout and "Traceback" not in done.stderr


def test_a_file_named_in_invalid_utf8_keeps_every_output_utf8(tmp_path: Path) -> None:
    """The byte shows as ``\\xff`` — in --json, on the terminal, in each place alike."""
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "good.md").write_text("# Good\n\nhello\n", encoding="utf-8")
    (folder / "bad\udcffname.md").write_text("# Bad\n\nhello\n", encoding="utf-8")  # b"bad\xff…"
    args = ["--store", str(tmp_path / "s"), "ingest", str(folder), "--acl", "everyone"]
    answered = runner.invoke(app, [*args, "--skip-invalid", "--json"])
    report = json.loads(answered.stdout_bytes.decode("utf-8"))  # strict: valid UTF-8
    assert report["added"] == 1
    (rejected,) = report["rejected"]
    assert rejected["file"] == str(folder) + "/bad\\xffname.md"
    assert rejected["uid"] == "bad\\xffname"
    refused = runner.invoke(app, args)
    assert refused.exit_code == 2
    shown = refused.stderr_bytes.decode("utf-8")
    assert "bad\\xffname.md" in " ".join(shown.split()).replace(" ", "")
