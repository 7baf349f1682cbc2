"""The Tantivy lexical index: identifiers, filters inside the query, ACL sets,
injection-proof queries, deletes, commits, watermark and reload — on a real index."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from knowledge_store.engines.embedded import analysis
from knowledge_store.engines.embedded.lexical import SIDECAR, LexicalDoc, LexicalIndex
from knowledge_store.errors import StoreError
from knowledge_store.model import Filters, compose_context, last_heading, relevance
from knowledge_store.model.queries import FUNCTION_WORDS, STOP_WORDS

TYPES = ("section", "chapter", "codeSample", "ticket")
SOURCES = ("docs", "jira", "wiki")
PRINCIPALS = ("everyone", "group:a", "group:b", "user:u")
#: ACLs of the corpus: one principal, two, none (default deny), or a principal no caller holds.
ACLS = (
    ("group:a",),
    ("group:b", "user:u"),
    (),
    ("group:a", "group:b"),
    ("group:x",),
    ("everyone",),
)
STATUSES = ("published", "draft")
DATES = [f"2024-0{m}-1{d}T12:00:00Z" for m in range(1, 7) for d in range(3)]
IDENTIFIER_TEXTS = {
    "pg_stat_activity": "The pg_stat_activity view shows one row per server process.",
    "ERR-1042": "The client reports ERR-1042 when the handshake times out.",
    "pg_hba.conf": "Client authentication is controlled by pg_hba.conf entries.",
    "$libdir": "The library path may start with $libdir for the package directory.",
    "_PG_init": "A loadable module may define _PG_init to run at load time.",
    "max_wal_size": "Raise max_wal_size to space checkpoints further apart.",
}


def make_doc(chunk_id: int, **fields: object) -> LexicalDoc:
    values: dict[str, object] = {
        "chunk_id": chunk_id,
        "uid": f"e{chunk_id}",
        "acl": ("everyone",),
        "type": "section",
        "source": "docs",
        "status": "published",
        "created_at": None,
        "updated_at": None,
        "title": f"Title {chunk_id}",
        "heading": (),
        "text": "common words",
    }
    values.update(fields)
    return LexicalDoc(**values)  # type: ignore[arg-type]


def corpus() -> list[LexicalDoc]:
    rng = random.Random(7)
    docs = []
    for i in range(1, 301):
        docs.append(
            make_doc(
                i,
                uid=f"e{(i + 1) // 2}",  # two chunks per entity
                acl=rng.choice(ACLS),
                type=rng.choice(TYPES),
                source=rng.choice(SOURCES),
                status=rng.choice(STATUSES),
                created_at=rng.choice([None, *DATES]),
                updated_at=rng.choice([None, *DATES]),
                title=f"Page {i}",
                heading=("Part", f"Section {i % 7}"),
                text=f"common shared text number {i} about tables and indexes",
            )
        )
    extra = [
        ("pg_stat_activity", "Statistics are gathered about stat activity of the server."),
        *IDENTIFIER_TEXTS.items(),
        ("field:foo", "A literal field:foo appears here with OR and stars *."),
        ("decoy", "Some pg hba conf notes and the err of 1042 and max wal size."),
    ]
    for n, (name, text) in enumerate(extra, start=1000):
        docs.append(make_doc(n, uid=f"id:{name}:{n}", text=text, title="Identifiers"))
    return docs


DOCS = corpus()
BY_CHUNK = {d.chunk_id: d for d in DOCS}


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> LexicalIndex:
    ix = LexicalIndex(tmp_path_factory.mktemp("lexical") / "lex")
    ix.add(DOCS)
    ix.commit(1)
    return ix


def chunks(hits: list[tuple[int, str, float]]) -> set[int]:
    return {c for c, _, _ in hits}


def expected(held: set[str] | None, f: Filters) -> set[int]:
    """The Python reference for which "common" docs a filter keeps."""
    out = set()
    for d in DOCS:
        if "common" not in d.text:
            continue
        if held is not None and not held & set(d.acl):
            continue
        if f.values("type") and d.type not in f.values("type"):
            continue
        if d.type in f.excluded("type"):
            continue
        if f.values("source") and d.source not in f.values("source"):
            continue
        if f.values("status") and d.status not in f.values("status"):
            continue
        if f.values("uid") and d.uid not in f.values("uid"):
            continue
        ok = True
        for value, lo, hi in (
            (d.created_at, *f.range("created_at")),
            (d.updated_at, *f.range("updated_at")),
        ):
            if lo is None and hi is None:
                continue
            if value is None or (lo is not None and value < lo) or (hi is not None and value > hi):
                ok = False
        if ok:
            out.add(d.chunk_id)
    return out


# -- identifiers --------------------------------------------------------------


@pytest.mark.parametrize("identifier", sorted(IDENTIFIER_TEXTS))
def test_identifier_found_first_as_written(index: LexicalIndex, identifier: str) -> None:
    hits = index.search(identifier, 5, principals=None, filters=Filters())
    assert hits, identifier
    assert BY_CHUNK[hits[0][0]].text == IDENTIFIER_TEXTS[identifier]


def test_identifier_does_not_match_its_words_apart(index: LexicalIndex) -> None:
    hits = index.search("pg_stat_activity", 50, principals=None, filters=Filters())
    texts = [BY_CHUNK[c].text for c, _, _ in hits]
    assert texts == [IDENTIFIER_TEXTS["pg_stat_activity"]]


def test_words_are_stemmed(index: LexicalIndex) -> None:
    hits = index.search("indexing a table", 1000, principals=None, filters=Filters())
    assert chunks(hits) == expected(None, Filters())  # "indexes", "tables" match


def test_hits_are_best_first_with_uid_and_limited_to_k(index: LexicalIndex) -> None:
    hits = index.search("common number 42 tables", 10, principals=None, filters=Filters())
    assert len(hits) == 10
    scores = [s for _, _, s in hits]
    assert scores == sorted(scores, reverse=True)
    assert hits[0][0] == 42
    assert all(uid == BY_CHUNK[c].uid for c, uid, _ in hits)


@pytest.mark.parametrize("text", ["", "   ", "the and of", "*", "--", "\x00", "!!! ???"])
def test_empty_or_stopword_query_returns_nothing(index: LexicalIndex, text: str) -> None:
    assert index.search(text, 10, principals=None, filters=Filters()) == []


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("How do I create an AUTOINCREMENT field?", ("creat", "autoincr", "field")),
        ("What should I put in user.name?", ("put", "user", "name")),
        (
            "Can multiple applications access a single database?",
            ("multipl", "applic", "access", "singl", "databas"),
        ),
    ],
)
def test_a_questions_function_words_are_no_query_terms(text: str, words: tuple[str, ...]) -> None:
    """A natural-language query is searched without Snowball's English stop words (as
    PostgreSQL's ``english`` configuration drops them): with Tantivy's list alone, how/do/i/
    what/should/can of every question scored on thousands of chunks."""
    assert analysis.Analyzers().query_terms(text).words == words


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("BETWEEN", ("between",)),
        ("UNION ALL", ("union", "all")),
        ("OVER clause", ("over", "claus")),
    ],
)
def test_a_keyword_querys_words_stay_terms(text: str, words: tuple[str, ...]) -> None:
    """An index term is searched by every word the index keeps: SQL's BETWEEN, ALL and OVER
    are function words of a question, and the very thing a keyword query looks for."""
    assert analysis.Analyzers().query_terms(text).words == words


def test_the_index_drops_exactly_the_declared_stop_words() -> None:
    """Tantivy's built-in ``english`` stop filter is ``model.queries.STOP_WORDS`` word for word
    (PostgreSQL's analysis cuts the declared list): over both stop lists and every word of
    the sample pages, the index's word analyzer drops a word exactly when it is declared."""
    sample = Path(__file__).parents[1] / "conformance" / "fixtures" / "pg-docs-sample.jsonl"
    words = {
        w.lower()
        for line in sample.open(encoding="utf-8")
        for w in re.findall(r"[A-Za-z]+", json.loads(line)["body"])
    }
    words |= {*STOP_WORDS, *FUNCTION_WORDS}
    analyzers = analysis.Analyzers()
    assert len(words) > 2000
    assert {w for w in words if not analyzers.words.analyze(w)} == set(STOP_WORDS)
    assert set(STOP_WORDS) < set(FUNCTION_WORDS) and len(set(STOP_WORDS)) == 33


def test_a_keyword_query_finds_a_word_a_question_would_drop(tmp_path: Path) -> None:
    ix = LexicalIndex(tmp_path / "lex")
    ix.add(
        [
            make_doc(1, title="Comparison operators", text="a BETWEEN x AND y tests a range"),
            make_doc(2, title="Pattern matching", text="LIKE compares strings with a pattern"),
        ]
    )
    ix.commit(1)
    assert [c for c, _, _ in ix.search("BETWEEN", 10, principals=None, filters=Filters())] == [1]
    # the same word in a question is a function word: nothing else of it is in the index
    assert ix.search("where is it between?", 10, principals=None, filters=Filters()) == []
    ix.close()


def test_k_zero_returns_nothing_and_a_huge_k_is_fine(index: LexicalIndex) -> None:
    assert index.search("common", 0, principals=None, filters=Filters()) == []
    assert len(index.search("common", 10**12, principals=None, filters=Filters())) == 300


# -- filters and ACL sets inside the query ------------------------------------


@pytest.mark.parametrize(
    "filters",
    [
        Filters.build(type=("chapter",)),
        Filters.build(type=("chapter", "ticket")),
        Filters.build(not_type=("codeSample",)),
        Filters.build(not_type=("codeSample", "section")),
        Filters.build(source=("jira",)),
        Filters.build(status=("draft",)),
        Filters.build(uid=("e3", "e10", "e77")),
        Filters.build(created_from=DATES[3], created_to=DATES[7]),  # inclusive on both ends
        Filters.build(created_from=DATES[5]),
        Filters.build(updated_to=DATES[2]),
        Filters.build(updated_from=DATES[4], updated_to=DATES[4]),
        Filters.build(type=("section",), source=("docs",), status=("published",)),
    ],
    ids=repr,
)
def test_filters_restrict_inside_the_query(index: LexicalIndex, filters: Filters) -> None:
    hits = index.search("common", 1000, principals=None, filters=filters)
    assert chunks(hits) == expected(None, filters)
    assert hits  # every case keeps something


def test_range_bounds_are_inclusive(index: LexicalIndex) -> None:
    day = DATES[4]
    hits = index.search(
        "common", 1000, principals=None, filters=Filters.build(created_from=day, created_to=day)
    )
    assert hits and all(BY_CHUNK[c].created_at == day for c, _, _ in hits)


def test_acl_is_a_term_set_of_held_principals(index: LexicalIndex) -> None:
    for held in ({"group:a"}, {"group:b", "user:u"}, set(PRINCIPALS), {"group:nobody"}):
        hits = index.search("common", 1000, principals=held, filters=Filters())
        assert chunks(hits) == expected(held, Filters())
    # an empty ACL is default deny: even a caller holding every principal misses it
    denied = {d.chunk_id for d in DOCS if not d.acl and "common" in d.text}
    assert denied
    everything = index.search("common", 1000, principals=PRINCIPALS, filters=Filters())
    assert not denied & chunks(everything)


def test_no_principals_see_nothing(index: LexicalIndex) -> None:
    assert index.search("common", 1000, principals=set(), filters=Filters()) == []
    assert index.search("pg_stat_activity", 10, principals=[], filters=Filters()) == []


def _ordered(low: str | None, high: str | None) -> tuple[str | None, str | None]:
    return (low, high) if low is None or high is None or low <= high else (high, low)


@st.composite
def filter_values(draw: st.DrawFn) -> Filters:
    created = _ordered(
        draw(st.none() | st.sampled_from(DATES)), draw(st.none() | st.sampled_from(DATES))
    )
    updated = _ordered(
        draw(st.none() | st.sampled_from(DATES)), draw(st.none() | st.sampled_from(DATES))
    )
    return Filters.build(
        type=draw(st.lists(st.sampled_from(TYPES), max_size=2)),
        not_type=draw(st.lists(st.sampled_from(TYPES), max_size=2)),
        source=draw(st.lists(st.sampled_from(SOURCES), max_size=2)),
        status=draw(st.lists(st.sampled_from(STATUSES), max_size=1)),
        uid=draw(st.lists(st.sampled_from([f"e{i}" for i in range(1, 160)]), max_size=40)),
        created_from=created[0],
        created_to=created[1],
        updated_from=updated[0],
        updated_to=updated[1],
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    filters=filter_values(),
    held=st.none() | st.sets(st.sampled_from([*PRINCIPALS, "group:other"]), max_size=4),
)
def test_filters_and_acl_match_the_reference(
    index: LexicalIndex, filters: Filters, held: set[str] | None
) -> None:
    hits = index.search("common", 1000, principals=held, filters=filters)
    assert chunks(hits) == expected(held, filters)


# -- injection ----------------------------------------------------------------

INJECTIONS = [
    "field:foo",
    "uid:e1 OR acl:everyone",
    "acl:[a TO z]",
    "* OR *",
    "common OR -common",
    '"common words" AND NOT x',
    "common --",
    "common\x00type:ticket",
    "title:Page^1000",
    "/.*/",
    "common " * 2500,
    "x" * 10_000,
    "é" * 5000 + " common",
]


@pytest.mark.parametrize("text", INJECTIONS, ids=lambda t: repr(t[:30]))
def test_injection_strings_never_widen(index: LexicalIndex, text: str) -> None:
    f = Filters.build(type=("chapter",))
    hits = index.search(text, 1000, principals={"group:b"}, filters=f)
    assert chunks(hits) <= expected({"group:b"}, f)


def test_query_syntax_is_matched_literally(index: LexicalIndex) -> None:
    hits = index.search("field:foo", 3, principals=None, filters=Filters())
    assert "field:foo" in BY_CHUNK[hits[0][0]].text


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=st.text(max_size=300)
    | st.lists(st.sampled_from([*INJECTIONS[:10], "common", "AND", "(", ")", "\\", "'", ":"])).map(
        " ".join
    )
)
def test_arbitrary_text_never_crashes_or_widens(index: LexicalIndex, text: str) -> None:
    f = Filters.build(not_type=("section",), status=("draft",))
    hits = index.search(text, 50, principals={"user:u"}, filters=f)
    assert len(hits) <= 50
    allowed = {d.chunk_id for d in DOCS if "user:u" in d.acl and d.type != "section"}
    allowed &= {d.chunk_id for d in DOCS if d.status == "draft"}
    assert chunks(hits) <= allowed


# -- writes, commits, watermark, reload ---------------------------------------


def test_new_index_is_empty_with_watermark_zero(tmp_path: Path) -> None:
    ix = LexicalIndex(tmp_path / "lex")
    assert ix.watermark == 0 and ix.num_docs() == 0
    assert ix.search("anything", 10, principals=None, filters=Filters()) == []
    ix.close()


def test_changes_are_invisible_until_commit(tmp_path: Path) -> None:
    ix = LexicalIndex(tmp_path / "lex")
    ix.add([make_doc(1, text="alpha")])
    assert ix.search("alpha", 10, principals=None, filters=Filters()) == []
    ix.commit(1)
    assert chunks(ix.search("alpha", 10, principals=None, filters=Filters())) == {1}
    ix.add([make_doc(2, text="alpha")])
    ix.rollback()
    ix.commit(2)
    assert ix.num_docs() == 1 and ix.watermark == 2
    ix.close()


def test_delete_entities_and_chunks(tmp_path: Path) -> None:
    ix = LexicalIndex(tmp_path / "lex")
    ix.add([make_doc(i, uid=f"u{i % 3}", text="alpha beta") for i in range(1, 10)])
    ix.commit(1)
    ix.delete_entities(["u1", "missing"])
    ix.delete_chunks([3, 6, 12345])
    ix.commit(2)
    left = chunks(ix.search("alpha", 100, principals=None, filters=Filters()))
    assert left == {2, 5, 8, 9}  # u1 gone; chunks 3 and 6 of u0 gone, 9 kept
    assert ix.num_docs() == 4
    ix.close()


def test_re_adding_a_chunk_replaces_it_and_replaying_is_idempotent(tmp_path: Path) -> None:
    ix = LexicalIndex(tmp_path / "lex")
    ix.add([make_doc(1, text="old words")])
    ix.commit(1)
    batch = [make_doc(1, text="new words"), make_doc(2, text="new words")]
    for watermark in (2, 2):  # the catalog re-applies a publish after a crash
        ix.add(batch)
        ix.delete_chunks([7])
        ix.commit(watermark)
    assert ix.num_docs() == 2
    assert ix.search("old", 10, principals=None, filters=Filters()) == []
    assert chunks(ix.search("new", 10, principals=None, filters=Filters())) == {1, 2}
    ix.close()


def test_commit_and_watermark_survive_reopen(tmp_path: Path) -> None:
    path = tmp_path / "lex"
    ix = LexicalIndex(path)
    ix.add([make_doc(1, text="durable")])
    ix.commit(41)
    ix.close()
    again = LexicalIndex(path)
    assert again.watermark == 41
    assert chunks(again.search("durable", 10, principals=None, filters=Filters())) == {1}
    assert again.num_segments() >= 1
    sidecar = json.loads((path / SIDECAR).read_text())
    assert sidecar["watermark"] == 41
    again.close()


def test_commit_without_changes_records_the_watermark(tmp_path: Path) -> None:
    ix = LexicalIndex(tmp_path / "lex")
    ix.commit(9)
    assert ix.watermark == 9 and LexicalIndex(tmp_path / "lex").watermark == 9


def test_reload_sees_another_instances_commit(tmp_path: Path) -> None:
    path = tmp_path / "lex"
    writer, reader = LexicalIndex(path), LexicalIndex(path)
    writer.add([make_doc(1, text="fresh")])
    # A reader searches while another instance holds the writer.
    assert reader.search("fresh", 10, principals=None, filters=Filters()) == []
    writer.commit(3)
    reader.reload()
    assert reader.watermark == 3
    assert chunks(reader.search("fresh", 10, principals=None, filters=Filters())) == {1}
    writer.close()
    reader.close()


def test_second_writer_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "lex"
    first, second = LexicalIndex(path), LexicalIndex(path)
    first.add([make_doc(1)])
    with pytest.raises(StoreError, match="another process"):
        second.add([make_doc(2)])
    first.commit(1)
    second.add([make_doc(2)])  # the writer was released by the commit
    second.commit(2)
    first.reload()
    assert first.num_docs() == 2
    first.close()
    second.close()


def test_clear_drops_everything(tmp_path: Path) -> None:
    ix = LexicalIndex(tmp_path / "lex")
    ix.add([make_doc(i) for i in range(1, 20)])
    ix.commit(5)
    ix.clear()
    assert ix.num_docs() == 0 and ix.watermark == 0
    ix.add([make_doc(1, text="rebuilt")])
    ix.commit(6)
    assert chunks(ix.search("rebuilt", 10, principals=None, filters=Filters())) == {1}
    ix.close()


def test_index_of_another_schema_version_starts_empty(tmp_path: Path) -> None:
    path = tmp_path / "lex"
    ix = LexicalIndex(path)
    ix.add([make_doc(1)])
    ix.commit(8)
    ix.close()
    (path / SIDECAR).write_text(json.dumps({"watermark": 8, "schema": -1}))
    files = {f.name: f.read_bytes() for f in path.iterdir() if not f.name.endswith(".lock")}
    again = LexicalIndex(path)
    assert again.watermark == 0 and again.num_docs() == 0
    assert "has another schema" in (again.stale or "")
    # Opening and reading touch nothing: the files are replaced by the first write, which
    # only the holder of the store's write lock makes.
    assert again.search("common", 10, principals=None, filters=Filters()) == []
    assert {f.name: f.read_bytes() for f in path.iterdir() if f.name in files} == files
    again.add([make_doc(2, text="replaced")])
    again.commit(9)
    assert again.stale is None and chunks(
        again.search("replaced", 10, principals=None, filters=Filters())
    ) == {2}
    assert json.loads((path / SIDECAR).read_text())["schema"] != -1
    again.close()


def test_reload_opens_an_index_another_instance_replaced(tmp_path: Path) -> None:
    """Another process recreated the files (a new generation): reloading opens them afresh."""
    path = tmp_path / "lex"
    writer = LexicalIndex(path)
    writer.add([make_doc(1, text="before")])
    writer.commit(3)
    reader = LexicalIndex(path)
    assert chunks(reader.search("before", 10, principals=None, filters=Filters())) == {1}
    writer.recreate()
    writer.add([make_doc(2, text="after")])
    writer.commit(3)
    reader.reload()
    assert reader.search("before", 10, principals=None, filters=Filters()) == []
    assert chunks(reader.search("after", 10, principals=None, filters=Filters())) == {2}
    writer.close()
    reader.close()


# -- the heading field -------------------------------------------------------------------


def _heading_pair(tmp_path: Path) -> LexicalIndex:
    """Chunk 1 sits under the heading "Vacuum"; chunk 2 has the word in its text. Both
    bodies (title + heading path + text) hold the same words, so only the heading field
    tells them apart."""
    ix = LexicalIndex(tmp_path / "lex")
    ix.add(
        [
            make_doc(1, title="Maintenance", heading=("Maintenance", "Vacuum"), text="reclaim"),
            make_doc(2, title="Maintenance", heading=("Maintenance",), text="vacuum reclaim"),
        ]
    )
    ix.commit(1)
    return ix


def test_a_query_word_in_the_chunks_last_heading_ranks_it_first(tmp_path: Path) -> None:
    ix = _heading_pair(tmp_path)
    hits = ix.search("vacuum", 10, principals=None, filters=Filters())
    assert [chunk_id for chunk_id, _, _ in hits] == [1, 2]
    assert hits[0][2] > hits[1][2]
    ix.close()


def test_without_the_heading_boost_the_two_chunks_tie(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(relevance, "HEADING_BOOST", 0.0)
    ix = _heading_pair(tmp_path)
    (_, _, first), (_, _, second) = ix.search("vacuum", 10, principals=None, filters=Filters())
    assert first == pytest.approx(second)
    ix.close()


def test_only_the_innermost_heading_below_the_title_is_in_the_heading_field(
    tmp_path: Path,
) -> None:
    ix = LexicalIndex(tmp_path / "lex")
    ix.add(
        [
            make_doc(1, title="Guide", heading=("Guide", "Outer", "Inner"), text="x"),
            make_doc(2, title="Guide", heading=("Guide",), text="outer inner x"),
        ]
    )
    ix.commit(1)
    outer = ix.search("outer", 10, principals=None, filters=Filters())
    inner = ix.search("inner", 10, principals=None, filters=Filters())
    assert outer[0][2] == pytest.approx(outer[1][2])  # in both bodies only
    assert [c for c, _, _ in inner] == [1, 2] and inner[0][2] > inner[1][2]
    ix.close()


@given(
    st.text(max_size=8),
    st.lists(st.text(max_size=8), max_size=4),
)
def test_last_heading_is_the_last_piece_of_the_context_path(title: str, heading: list[str]) -> None:
    last = last_heading(title, heading)
    below = [h for h in heading if h and h != title]
    assert last == (below[-1] if below else "")
    assert last != title or last == ""
    if last:
        assert f"\n{' > '.join(below)}\n" in compose_context(title, heading, "text")
