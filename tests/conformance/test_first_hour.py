"""Issue 15 (a new user's first hour), on both engines and through the CLI.

Only writing commands create a store: a read on a path that holds none is
``not_found`` and leaves nothing behind (item 2). Zero results say why: blank
text is an error, a graph start nobody can read is ``not_found``, a type no
readable entity has gets a note naming the types (item 3). Code samples share
their page's ACL (item 1); titles sort without regard to case (item 11); a
search answer says how strong each match is (item 14).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from typer.testing import CliRunner

from knowledge_store.errors import InvalidRequest, NotFound
from knowledge_store.model import Filters
from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.cli import app
from tests import postgres_support
from tests.conformance.conftest import OpenStore

# -- only writing commands create a store (issue 15, item 2) --------------------------------------

READS = [
    ["lexical", "dead rows"],
    ["vector", "dead rows"],
    ["search", "dead rows"],
    ["sql"],
    ["aggregate", "count"],
    ["graph", "page:1"],
    ["query", "MATCH (a) RETURN a.uid"],
    ["stats"],
    ["rebuild"],
    ["delete", "page:1"],
    ["acl", "show", "page:1"],
    ["acl", "grant", "page:1", "user:a"],
    ["acl", "explain", "user:a", "page:1"],
    ["principals", "show", "user:a"],
    ["principals", "remove-member", "group:a", "user:a"],
]


@pytest.mark.parametrize("command", READS, ids=lambda c: " ".join(c[:2]))
def test_a_read_on_a_missing_store_is_not_found_and_creates_nothing(
    tmp_path: Path, command: list[str]
) -> None:
    where = tmp_path / "nonexistent"
    result = CliRunner().invoke(app, ["--store", str(where), *command, "--json"])
    assert result.exit_code == 2, result.stdout
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "not_found"
    assert error["message"] == f"no store at {where}; create one with `ks ingest`"
    assert not where.exists()


def test_an_empty_folder_is_no_store_either(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["--store", str(tmp_path), "stats"])
    assert result.exit_code == 2
    assert "no store at" in result.stderr and "ks ingest" in result.stderr
    assert list(tmp_path.iterdir()) == []  # no catalog.sqlite, lexical/ or write.lock


def test_writing_commands_create_the_store(tmp_path: Path) -> None:
    where = tmp_path / "new"
    result = CliRunner().invoke(
        app, ["--store", str(where), "principals", "add-member", "group:a", "user:a"]
    )
    assert result.exit_code == 0, result.output
    assert (where / "catalog.sqlite").is_file()
    shown = CliRunner().invoke(app, ["--store", str(where), "principals", "show", "user:a"])
    assert shown.exit_code == 0 and "group:a" in shown.stdout


# -- serving a path that holds no store (issue 25, item 12) ---------------------------------------
SERVE = {
    "stdio": ["--mcp-stdio"],
    "http": ["--anonymous", "--port", "0"],
    "workers": ["--anonymous", "--port", "0", "--workers", "2"],
}


@pytest.mark.parametrize("how", SERVE.values(), ids=SERVE.keys())
def test_serving_a_path_that_holds_no_store_is_not_found_and_creates_nothing(
    tmp_path: Path, how: list[str]
) -> None:
    """`ks --store ~/notes-typo serve --mcp-stdio` made an empty store and listed 0 tools."""
    where = tmp_path / "notes-typo"
    result = CliRunner().invoke(app, ["--store", str(where), "serve", *how], input="")
    assert result.exit_code == 2, result.output
    said = " ".join(result.stderr.split())
    assert f"(not_found): no store at {where}" in said
    assert f"ks --store {where} ingest" in said and "serve --create" in said
    assert not where.exists()


def test_serve_create_serves_an_empty_store(tmp_path: Path) -> None:
    where = tmp_path / "fresh"
    ks = str(Path(sys.executable).with_name("ks"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(  # the client closes stdin at once: the session ends
        [ks, "--store", str(where), "serve", "--mcp-stdio", "--create"],
        input="",
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    with KnowledgeStore.open(where, create=False) as store:
        assert store.is_empty


@pytest.mark.parametrize("pg_dir", [False, True], ids=["postgresql-url", "pg-dir"])
def test_postgres_serving_a_missing_store_is_not_found_and_creates_nothing(
    tmp_path: Path, pg_dir: bool
) -> None:
    from knowledge_store.surfaces.serve import serve

    database = postgres_support.fresh_database("serve_missing")
    location = (
        f"pg:{tmp_path / 'pg-nope'}"
        if pg_dir
        else postgres_support.store_url(database, "nosuchstore")
    )
    with pytest.raises(NotFound, match="serve --create"):
        serve(location, mcp_stdio=True)
    assert not (tmp_path / "pg-nope").exists()
    with psycopg.connect(database) as conn:
        made = conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = 'nosuchstore'"
        ).fetchone()
    assert made == (0,)


def test_postgres_a_read_on_a_missing_schema_is_not_found_and_creates_nothing() -> None:
    database = postgres_support.fresh_database("missing_store")
    location = postgres_support.store_url(database, "nosuchstore")
    with pytest.raises(NotFound) as info:
        KnowledgeStore.open(location, create=False)
    assert info.value.message.startswith("no store at postgresql://")
    assert "schema=nosuchstore" in info.value.message
    with psycopg.connect(database) as conn:
        made = conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = 'nosuchstore'"
        ).fetchone()
    assert made == (0,)
    KnowledgeStore.open(location).close()  # a writer makes it …
    KnowledgeStore.open(location, create=False).close()  # … and then a read opens it


def test_postgres_pg_dir_that_holds_no_server_starts_none(tmp_path: Path) -> None:
    where = tmp_path / "pg-nope"
    with pytest.raises(NotFound, match=f"no store at pg:{where}; create one with `ks ingest`"):
        KnowledgeStore.open(f"pg:{where}", create=False)
    assert not where.exists()


@pytest.mark.parametrize("prefix", ["", "pg:"], ids=["embedded", "pg-dir"])
@pytest.mark.parametrize("create", [False, True], ids=["read", "write"])
@pytest.mark.parametrize("under", [False, True], ids=["the-file", "under-it"])
def test_a_store_path_that_is_a_file_says_so(
    tmp_path: Path, prefix: str, create: bool, under: bool
) -> None:
    # a mistyped --store naming a file: a read said "no store … create one with `ks ingest`",
    # which then failed with store_error (exit 1) and the OS's "[Errno 17] File exists"
    file = tmp_path / "notes.txt"
    file.write_text("mine")
    where = file / "store" if under else file
    with pytest.raises(InvalidRequest) as info:
        KnowledgeStore.open(f"{prefix}{where}", create=create)
    what = f"{file}" if under else "it"
    assert info.value.message == (
        f"{prefix}{where} is not a store: {what} is a file, not a directory;"
        " a store needs a directory of its own"
    )
    assert info.value.exit_status == 2
    assert file.read_text() == "mine"  # nothing written


@pytest.mark.parametrize("prefix", ["", "pg:"], ids=["embedded", "pg-dir"])
def test_a_new_store_is_not_written_among_other_files(tmp_path: Path, prefix: str) -> None:
    # a mistyped --store naming a project folder got a catalog, a lexical index and a dense
    # index written among the folder's own files
    folder = tmp_path / "project"
    (folder / "src").mkdir(parents=True)
    for name in ("README.md", "notes.txt", "setup.py"):
        (folder / name).write_text("mine")
    before = sorted(p.name for p in folder.iterdir())
    with pytest.raises(InvalidRequest) as info:
        KnowledgeStore.open(f"{prefix}{folder}")
    assert info.value.message == (
        f"{prefix}{folder} is not a store, and it is not empty (it holds 'README.md',"
        " 'notes.txt', 'setup.py' and 1 more): a new store needs a directory of its own;"
        " name a new or empty directory, or an existing store"
    )
    assert info.value.exit_status == 2
    assert sorted(p.name for p in folder.iterdir()) == before  # nothing written
    # an empty directory, and a store's own directory, open as before
    (tmp_path / "empty").mkdir()
    KnowledgeStore.open(f"{prefix}{tmp_path / 'empty'}").close()
    KnowledgeStore.open(f"{prefix}{tmp_path / 'empty'}", create=False).close()


def test_a_first_open_that_was_killed_is_opened_again(tmp_path: Path) -> None:
    # what a store creates before its catalog (a start killed early) is the store's own
    where = tmp_path / "s"
    (where / "lexical").mkdir(parents=True)
    (where / "write.lock").touch()
    (where / "dense.hnsw.tmp4242").touch()
    KnowledgeStore.open(where).close()
    assert (where / "catalog.sqlite").is_file()
    KnowledgeStore.open(where, create=False).close()


def test_a_store_path_under_the_home_directory_is_expanded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # KS_STORE='~/kb' (or --store=~/kb, which a shell leaves alone) made a directory named
    # "~" in the working directory; pg:~/DIR was expanded
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    KnowledgeStore.open("~/kb").close()
    assert (tmp_path / "home" / "kb" / "catalog.sqlite").is_file()
    assert not (tmp_path / "~").exists()


# -- zero results that say why (issue 15, item 3) -------------------------------------------------


@pytest.fixture
def tiny(open_store: OpenStore) -> KnowledgeStore:
    store = open_store("tiny")
    store.ingest_records(
        [
            {"uid": "a", "type": "page", "title": "A", "body": "dead rows", "acl": ["everyone"]},
            {"uid": "h", "type": "page", "title": "H", "body": "hidden", "acl": ["user:x"]},
        ]
    )
    return store


@pytest.mark.parametrize("text", ["", "   ", "\n\t"])
def test_blank_text_is_an_invalid_request(tiny: KnowledgeStore, text: str) -> None:
    for primitive in (tiny.lexical, tiny.vector, tiny.search, tiny.search_knowledge):
        with pytest.raises(InvalidRequest, match=r"needs a non-empty text|needs a text") as info:
            primitive(text)
        assert info.value.details["field"] == "query"
    assert [r.uid for r in tiny.search(text, filters={"type": ["page"]}).results] == ["a"]


def test_graph_from_a_start_nobody_can_read_is_not_found(tiny: KnowledgeStore) -> None:
    for starts in (["nosuchuid"], ["h"], ["nosuchuid", "h"]):
        with pytest.raises(NotFound, match=r"no entity with uid ('nosuchuid'|'h')"):
            tiny.graph(starts)
    assert tiny.graph(["h"], identity="user:x").hits == []
    assert tiny.graph(["a", "nosuchuid"]).hits == []  # a readable start: answered


def test_a_type_nobody_can_read_gets_a_note_naming_the_types(tiny: KnowledgeStore) -> None:
    pgae = Filters.build(type=["pgae"])
    expected = ("no entity you can read has type 'pgae'; did you mean page? the types are: page",)
    assert tiny.lexical("dead rows", filters=pgae).warnings == expected
    assert tiny.vector("dead rows", filters=pgae).warnings == expected
    assert tiny.search("dead rows", filters=pgae).warnings == expected
    assert tiny.search("dead rows", filters={"type": ["pgae"]}).warnings == expected
    assert tiny.sql(pgae).warnings == expected
    assert tiny.aggregate("count", filters=pgae).warnings == expected
    assert tiny.sql(Filters.build(not_type=["PAGE"])).to_dict()["warnings"] == [
        "no entity you can read has type 'PAGE'; did you mean page? the types are: page"
    ]
    answer = tiny.lexical("dead rows", filters=Filters.build(type=["page"]))
    assert answer.warnings == () and "warnings" not in answer.to_dict()  # DESIGN's shape
    tiny.ingest_records(
        [{"uid": "t", "type": "ticket", "title": "T", "body": "x", "acl": ["user:x"]}]
    )
    hidden = tiny.sql(Filters.build(type=["ticket"])).warnings  # a type only others can read
    assert hidden == ("no entity you can read has type 'ticket'; the types are: page",)
    assert tiny.sql(Filters.build(type=["ticket"]), identity="user:x").warnings == ()
    # the types a caller can read are kept per snapshot: a publish is seen at once
    assert tiny.sql(Filters.build(type=["faq"])).warnings != ()
    tiny.ingest_records(
        [{"uid": "f", "type": "faq", "title": "F", "body": "y", "acl": ["everyone"]}]
    )
    assert tiny.sql(Filters.build(type=["faq"])).warnings == ()
    tiny.delete(["f"])
    assert tiny.sql(Filters.build(type=["faq"])).warnings != ()


# -- derived entities share their parent's ACL (issue 15, item 1) -------------------------------

PAGE = """# Architecture

The Tantivy watermark records how far the lexical index has caught up.

```python
watermark = catalog.latest_publish()
```
"""


#: A code sample written as a record, linked to the page: its ACL is its own.
OWN_SAMPLE = {
    "uid": "own-sample",
    "type": "codeSample",
    "title": "Watermark",
    "body": "Tantivy watermark, read by hand",
    "edges": [{"label": "partOf", "to": "architecture"}],
    "acl": ["everyone"],
}


def test_code_samples_follow_their_page_through_grant_and_revoke(
    open_store: OpenStore, tmp_path: Path
) -> None:
    store = open_store("derived")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "architecture.md").write_text(PAGE, encoding="utf-8")
    store.ingest([tmp_path / "docs"], format="markdown", acl=["everyone"])
    store.ingest_records([OWN_SAMPLE])  # a code sample written as a record: its ACL is its own
    sample = "architecture#code-1"

    def bob_reads() -> set[str]:
        return {h.uid for h in store.lexical("Tantivy watermark", identity="user:bob").hits}

    assert bob_reads() == {"architecture", sample, "own-sample"}
    assert store.acl_inherited_from(sample) == "architecture"
    assert store.acl_inherited_from("architecture") is None
    assert store.acl_inherited_from("own-sample") is None

    root = store.content_root()
    store.revoke("architecture", "everyone")
    assert store.content_root() != root
    assert bob_reads() == {"own-sample"}  # the page's text is gone with the page
    assert store.acl_show(sample) == store.acl_show("architecture") == ()
    assert store.acl_show("own-sample") == ("everyone",)

    store.grant("architecture", "user:bob")  # one publish changes both
    assert store.acl_show(sample) == ("user:bob",)
    assert bob_reads() == {"architecture", sample, "own-sample"}
    assert {h.uid for h in store.vector("watermark", identity="user:bob", k=10).hits} >= {sample}
    assert store.acl_explain("user:bob", sample).allowed

    with pytest.raises(InvalidRequest, match="shares the ACL of 'architecture'"):
        store.grant(sample, "user:eve")
    assert store.acl_show(sample) == ("user:bob",)

    store.ingest([tmp_path / "docs"], format="markdown", acl=["everyone"])  # the file's ACL again
    assert store.acl_show(sample) == store.acl_show("architecture") == ("everyone",)


def test_deleting_a_page_deletes_the_code_samples_split_off_it(
    open_store: OpenStore, tmp_path: Path
) -> None:
    """A sample left behind would keep the page's ACL, which nobody could change any more
    (a grant on it goes to the page, which is gone): ``delete PAGE`` takes it along, says
    so, and leaves alone a record that only links to the page."""
    store = open_store("delete-derived")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "architecture.md").write_text(PAGE, encoding="utf-8")
    (tmp_path / "docs" / "other.md").write_text(PAGE.replace("Architecture", "Other"), "utf-8")
    store.ingest([tmp_path / "docs"], format="markdown", acl=["everyone"])
    store.ingest_records([OWN_SAMPLE])  # a record of its own linking to the page: not derived
    with pytest.raises(NotFound):  # one missing uid: nothing is deleted
        store.delete(["architecture", "nowhere"])
    assert store.content("architecture#code-1").entity.uid == "architecture#code-1"

    report = store.delete(["architecture"])
    assert report.deleted == 2
    assert report.deleted_uids == ["architecture", "architecture#code-1"]
    for gone in ("architecture", "architecture#code-1"):
        with pytest.raises(NotFound):
            store.content(gone)
    found = {h.uid for h in store.lexical("catalog latest_publish watermark", k=20).hits}
    assert found == {"other", "other#code-1", "own-sample"}
    assert store.acl_show("own-sample") == ("everyone",)

    # deleting a sample alone deletes just it; a delete by uid names nothing more
    report = store.delete(["other#code-1"])
    assert (report.deleted, report.deleted_uids) == (1, None)
    assert store.content("other").entity.uid == "other"


def test_acl_show_says_where_the_acl_comes_from(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "architecture.md").write_text(PAGE, encoding="utf-8")
    where = tmp_path / "s"
    runner = CliRunner()
    ingest = ["--store", str(where), "ingest", str(tmp_path / "docs"), "--acl", "everyone"]
    assert runner.invoke(app, ingest).exit_code == 0
    shown = runner.invoke(app, ["--store", str(where), "acl", "show", "architecture#code-1"])
    assert shown.stdout.strip() == "architecture#code-1: everyone  (inherited from architecture)"
    shown = runner.invoke(app, ["--store", str(where), "acl", "show", "architecture", "--json"])
    assert json.loads(shown.stdout) == {
        "uid": "architecture",
        "acl": ["everyone"],
        "inherited_from": None,
    }
    revoke = ["--store", str(where), "acl", "revoke", "architecture", "everyone"]
    assert runner.invoke(app, revoke).exit_code == 0
    lexical = ["--store", str(where), "lexical", "Tantivy watermark", "--as", "user:bob", "--json"]
    assert json.loads(runner.invoke(app, lexical).stdout)["hits"] == []


# -- sorting by title ignores case, ties by uid (issue 15, item 11) ------------------------------


def test_ordering_by_title_ignores_case_and_ties_go_by_uid(open_store: OpenStore) -> None:
    store = open_store("titles")
    titles = {"u1": "banana", "u2": "Apple", "u3": "cherry", "u4": "apple", "u5": "Banana"}
    store.ingest_records(
        [
            {"uid": uid, "type": "page", "title": t, "body": t, "acl": ["everyone"]}
            for uid, t in titles.items()
        ]
    )
    up = [h.uid for h in store.sql(order="title", k=10).hits]
    assert up == ["u2", "u4", "u1", "u5", "u3"]  # Apple, apple, banana, Banana, cherry
    down = [h.uid for h in store.sql(order="title:desc", k=10).hits]
    assert down == ["u3", "u1", "u5", "u2", "u4"]  # equal titles keep the uid order


# -- a search answer says how strong each match is (issue 15, item 14) ---------------------------


def test_search_answer_carries_similarity_and_whether_words_matched(tiny: KnowledgeStore) -> None:
    unrelated = tiny.search("kubernetes helm chart")
    assert unrelated.words_matched is False and unrelated.to_dict()["words_matched"] is False
    assert [r.uid for r in unrelated.results] == ["a"]
    (result,) = unrelated.results
    vector = tiny.vector("kubernetes helm chart").hits[0]
    assert result.similarity == round(vector.score, 4)  # the cosine of its best chunk
    assert result.to_dict()["similarity"] == result.similarity

    matched = tiny.search("dead rows")
    assert matched.words_matched is True
    assert matched.results[0].similarity is not None
    assert tiny.search("", filters={"type": ["page"]}).words_matched is None  # no text
    sql_only = tiny.search("", filters={"type": ["page"]}).results[0]
    assert sql_only.similarity is None
