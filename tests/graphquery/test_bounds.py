"""Every bound of DESIGN §5 / issue 5, one test (or more) each."""

from __future__ import annotations

import pytest

from knowledge_store.engines.base import EngineSettings
from knowledge_store.errors import (
    BoundExceeded,
    InvalidRequest,
    KnowledgeStoreError,
    QueryTimeout,
    UnknownField,
    UnknownLabel,
)
from knowledge_store.graphquery import parse, parse_lenient
from knowledge_store.graphquery.validator import NODE_PROPERTIES
from knowledge_store.model import LABELS
from knowledge_store.store import KnowledgeStore
from tests import graph_estate

# -- read-only ------------------------------------------------------------------------------------

WRITES = [
    ("CREATE (n:page) RETURN n", "CREATE"),
    ("MATCH (n) MERGE (m {uid: $u}) RETURN m", "MERGE"),
    ("MATCH (n) SET n.title = $t RETURN n", "SET"),
    ("MATCH (n) DELETE n", "DELETE"),
    ("MATCH (n) DETACH DELETE n", "DETACH DELETE"),
    ("MATCH (n) REMOVE n.status RETURN n", "REMOVE"),
    ("INSERT INTO edges VALUES ($a, $b, $c, NULL)", "INSERT"),
    ("CALL apoc.periodic.iterate($a, $b, {})", "CALL"),
    ("LOAD CSV FROM $url AS line RETURN line", "LOAD CSV"),
    ("MATCH (n) FOREACH (x IN $xs | CREATE (m))", "FOREACH"),
    ("UNWIND $xs AS x RETURN x", "UNWIND"),
    ("DROP CONSTRAINT uid_unique", "DROP"),
    ("CREATE CONSTRAINT FOR (n:page) REQUIRE n.uid IS UNIQUE", "CREATE"),
    ("ALTER TABLE entities ADD COLUMN x", "ALTER"),
    ("match (n) delete n", "DELETE"),  # any case
    ("MATCH (n)\nRETURN n\n/* c */ SET n.x = $v", "SET"),  # anywhere
]


@pytest.mark.parametrize(("text", "keyword"), WRITES)
def test_write_and_schema_keywords_are_refused_as_read_only(text: str, keyword: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse(text)
    assert f"read-only: `{keyword}`" in caught.value.message
    assert caught.value.details["line"] >= 1 and caught.value.details["column"] >= 1


def test_keywords_inside_strings_comments_names_are_not_clauses(estate: KnowledgeStore) -> None:
    # a type named like a keyword, a parameter named like one, a keyword in a comment
    answer = estate.query_graph(
        "MATCH (n:Create {uid: $delete}) // SET nothing\nRETURN n.uid", {"delete": "page:m1"}
    )
    assert answer.rows == []
    # a literal that mentions CREATE is refused as a literal, not as a write
    with pytest.raises(InvalidRequest, match="literal value"):
        parse("MATCH (n) WHERE n.title = 'CREATE (m)' RETURN n")


# -- labels -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("label", LABELS)
def test_each_of_the_nine_labels_is_accepted(estate: KnowledgeStore, label: str) -> None:
    answer = estate.query_graph(f"MATCH (a)-[r:{label}]->(b) RETURN count(r) AS n", {})
    assert answer.columns == ["n"]


def test_an_unknown_label_is_refused_listing_the_nine() -> None:
    with pytest.raises(UnknownLabel) as caught:
        parse("MATCH (a)-[:xref|mentions*1..2]->(b) RETURN b")
    assert caught.value.details["allowed"] == list(LABELS)
    assert ", ".join(LABELS) in caught.value.message


# -- depth ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("pattern", ["*", "*1..", "*2..", ":xref*"])
def test_unbounded_variable_length_is_refused(pattern: str) -> None:
    with pytest.raises(BoundExceeded, match=r"write `\*1\.\.d`"):
        parse(f"MATCH (a)-[{pattern}]->(b) RETURN b")


def test_depth_over_four_is_refused_with_the_bound() -> None:
    with pytest.raises(BoundExceeded) as caught:
        parse("MATCH (a)-[*1..6]->(b) RETURN b")
    assert caught.value.message.endswith("`depth` 6 exceeds the maximum of 4; write `*1..4`")
    assert caught.value.details["maximum"] == 4


@pytest.mark.parametrize("pattern", ["*1..4", "*4", "*..4", "*2..4", "*1", "*1..1"])
def test_depth_up_to_four_is_accepted(estate: KnowledgeStore, pattern: str) -> None:
    answer = estate.query_graph(
        f"MATCH (a {{uid: $uid}})-[:partOf{pattern}]->(b) RETURN b.uid ORDER BY b.uid",
        {"uid": "unit:intro-1"},
    )
    reachable = {"mod:intro": 1, "lp:azure": 2}
    lo, _, hi = pattern.lstrip("*").partition("..")
    low = int(lo or 1)
    high = int(hi or lo) if ".." in pattern else int(lo)
    assert [r[0] for r in answer.rows] == sorted(
        u for u, d in reachable.items() if low <= d <= high
    )


# -- rows ---------------------------------------------------------------------------------------------------


def test_limit_defaults_to_100_and_says_truncated(estate: KnowledgeStore) -> None:
    answer = estate.query_graph("MATCH (a:page), (b:page) RETURN a.uid, b.uid", {})
    assert len(answer.rows) == 100  # 14 × 14 pages match
    assert answer.truncated is True


def test_limit_1000_is_the_maximum(estate: KnowledgeStore) -> None:
    answer = estate.query_graph("MATCH (a), (b) RETURN a.uid, b.uid LIMIT 1000", {})
    assert len(answer.rows) == 27 * 27 and answer.truncated is False
    assert answer.warnings == ()
    assert "warnings" not in answer.to_dict()  # DESIGN's shape when nothing was capped


def test_a_limit_above_1000_is_capped_with_a_warning(estate: KnowledgeStore) -> None:
    # DESIGN §5: "LIMIT defaults to 100, capped at 1000" — capped, not refused.
    many = estate.query_graph("MATCH (a), (b), (c) RETURN a.uid, b.uid, c.uid LIMIT 5000", {})
    assert len(many.rows) == 1000 and many.truncated is True  # 27³ rows matched
    note = "LIMIT 5000 was capped at 1000: at most 1000 rows; page with SKIP"
    assert many.warnings == (note,) and many.to_dict()["warnings"] == [note]
    few = estate.query_graph("MATCH (a) RETURN a.uid LIMIT $n", {"n": 10_000})
    assert len(few.rows) == 27 and few.truncated is False  # nothing more matched
    assert few.warnings == ("LIMIT 10000 was capped at 1000: at most 1000 rows; page with SKIP",)
    paged = estate.query_graph(
        "MATCH (a), (b), (c) RETURN a.uid, b.uid, c.uid ORDER BY a.uid, b.uid, c.uid"
        " SKIP 1000 LIMIT 1001",
        {},
    )
    assert len(paged.rows) == 1000 and paged.truncated is True


def test_truncated_only_when_more_rows_matched(estate: KnowledgeStore) -> None:
    exact = estate.query_graph("MATCH (n:module) RETURN n.uid LIMIT 2", {})
    assert len(exact.rows) == 2 and exact.truncated is False
    fewer = estate.query_graph("MATCH (n:unit) RETURN n.uid LIMIT 5", {})
    assert len(fewer.rows) == 5 and fewer.truncated is True
    nothing = estate.query_graph("MATCH (n:unit) RETURN n.uid LIMIT 0", {})
    assert nothing.rows == [] and nothing.truncated is True


def test_skip_pages_through_the_rows(estate: KnowledgeStore) -> None:
    text = "MATCH (n) RETURN n.uid ORDER BY n.uid SKIP $skip LIMIT 10"
    pages = [estate.query_graph(text, {"skip": s}) for s in (0, 10, 20)]
    seen = [r[0] for p in pages for r in p.rows]
    assert len(seen) == len(set(seen)) == 27
    assert [p.truncated for p in pages] == [True, True, False]


# -- parameters and literals ------------------------------------------------------------------------------


def test_parameters_are_bound_by_name(estate: KnowledgeStore) -> None:
    with pytest.raises(InvalidRequest, match=r"parameter \$uid is not bound"):
        estate.query_graph("MATCH (n {uid: $uid}) RETURN n", {})
    with pytest.raises(InvalidRequest, match="'extra' is not used"):
        estate.query_graph("MATCH (n {uid: $uid}) RETURN n", {"uid": "a", "extra": 1})
    answer = estate.query_graph(
        "MATCH (n) WHERE n.uid = $uid OR n.title = $uid RETURN n.uid", {"uid": "page:m1"}
    )
    assert answer.rows == [["page:m1"]]


@pytest.mark.parametrize(
    "text",
    [
        "MATCH (n {uid: 'page:m1'}) RETURN n",
        'MATCH (n) WHERE n.title = "x" RETURN n',
        "MATCH (n) WHERE n.updated_at > 2024 RETURN n",
        "MATCH (n) WHERE n.updated_at > 20.5 RETURN n",
        "MATCH (n) WHERE n.status IN ['a'] RETURN n",
        "MATCH (n) WHERE n.status = null RETURN n",
        "MATCH (n) WHERE n.status <> false RETURN n",
        "MATCH (n) RETURN n, 'x' AS y",
        "MATCH (n) RETURN n ORDER BY 1",
    ],
)
def test_literal_values_are_refused_with_a_parameter_hint(text: str) -> None:
    with pytest.raises(InvalidRequest, match=r"values enter only as parameters: write \$"):
        parse(text)


def test_parameter_values_of_the_wrong_kind_are_refused(estate: KnowledgeStore) -> None:
    bad = [
        ("MATCH (n {uid: $u}) RETURN n", {"u": {"a": 1}}),
        ("MATCH (n) WHERE n.uid IN $u RETURN n", {"u": [["nested"]]}),
        ("MATCH (n) WHERE n.title STARTS WITH $u RETURN n", {"u": 3}),
        ("MATCH (n) RETURN n SKIP $s", {"s": -1}),
        ("MATCH (n) RETURN n LIMIT $s", {"s": True}),
        ("MATCH (n {uid: $u}) RETURN n", {"u": 2**70}),
        ("MATCH (n {uid: $u}) RETURN n", {"u": "a\x00b"}),
        ("MATCH (n {uid: $u}) RETURN n", {"u": float("nan")}),
    ]
    for text, params in bad:
        with pytest.raises(InvalidRequest):
            estate.query_graph(text, params)


@pytest.mark.parametrize(
    ("text", "value", "says"),
    [
        ("MATCH (n {uid: $u}) RETURN n", "a\x00b", "NUL"),
        ("MATCH (n {uid: $u}) RETURN n", "\ud800", "surrogate"),
        ("MATCH (n) WHERE n.title STARTS WITH $u RETURN n", "a\x00", "NUL"),
        ("MATCH (n) WHERE n.uid IN $u RETURN n", ["ok", "a\x00"], "NUL"),
        ("MATCH (n {uid: $u}) RETURN n", float("inf"), "finite"),
    ],
)
def test_a_parameter_value_that_is_not_storable_text_says_why(
    estate: KnowledgeStore, text: str, value: object, says: str
) -> None:
    """A string with NUL was refused as "must be a string …, not str"."""
    with pytest.raises(InvalidRequest) as caught:
        estate.query_graph(text, {"u": value})
    assert says in caught.value.message
    assert "not str" not in caught.value.message


# -- properties and variables ------------------------------------------------------------------------------


@pytest.mark.parametrize("prop", NODE_PROPERTIES)
def test_each_node_property_can_be_read(estate: KnowledgeStore, prop: str) -> None:
    answer = estate.query_graph(f"MATCH (n {{uid: $uid}}) RETURN n.{prop}", {"uid": "lp:azure"})
    assert len(answer.rows) == 1


@pytest.mark.parametrize("prop", ["body", "attributes", "acl", "acl_set", "id", "content_hash"])
def test_other_node_properties_are_unknown_fields(prop: str) -> None:
    with pytest.raises(UnknownField) as caught:
        parse(f"MATCH (n) RETURN n.{prop}")
    assert caught.value.details["allowed"] == list(NODE_PROPERTIES)


# -- permissions -------------------------------------------------------------------------------------------


def test_a_path_through_an_unreadable_entity_does_not_match(estate: KnowledgeStore) -> None:
    fixed = "MATCH (a {uid: $uid})-[:xref]->(p)-[:xref]->(b) RETURN p.uid, b.uid ORDER BY p.uid"
    assert ["page:private", "page:beyond"] not in estate.query_graph(
        fixed, {"uid": "page:start"}
    ).rows
    assert ["page:private", "page:beyond"] in estate.query_graph(
        fixed, {"uid": "page:start"}, identity="user:alice"
    ).rows
    anonymous = "MATCH (a {uid: $uid})-[:xref*1..4]-(b) RETURN b.uid"
    rows = {r[0] for r in estate.query_graph(anonymous, {"uid": "page:start"}).rows}
    assert "page:beyond" not in rows and "page:private" not in rows


def test_count_covers_only_what_the_identity_reads(estate: KnowledgeStore) -> None:
    count = "MATCH (n) RETURN count(n) AS n"
    assert estate.query_graph(count, {}).rows == [[27]]
    assert estate.query_graph(count, {}, identity="user:alice").rows == [[31]]
    assert estate.query_graph(count, {}, identity="user:bob").rows == [[28]]
    assert estate.query_graph(count, {}, identity="user:nobody").rows == [[27]]


def test_dangling_edges_are_invisible(estate: KnowledgeStore) -> None:
    answer = estate.query_graph(
        "MATCH (a {uid: $uid})-[r]->(b) RETURN count(r) AS n", {"uid": "page:start"}
    )
    assert answer.rows == [[3]]  # m1, m2, m3; not private (unreadable) nor ghost (missing)


# -- all problems at once ---------------------------------------------------------------------------------------


def test_lenient_mode_reports_every_problem_with_its_place(estate: KnowledgeStore) -> None:
    text = (
        "MATCH (n:page {uid: 'x'})-[:knows*1..9]->(m)\n"
        "WHERE m.body = $b\n"
        "RETURN m.foo, q LIMIT 5000"
    )
    query, errors = parse_lenient(text)
    assert query is not None
    where = [(e.code, e.line, e.column) for e in errors]
    assert where == [
        ("invalid_request", 1, 21),
        ("unknown_label", 1, 26),
        ("bound_exceeded", 1, 34),
        ("unknown_field", 2, 7),
        ("unknown_field", 3, 8),
        ("invalid_request", 3, 15),
    ]  # LIMIT 5000 is no problem: it is capped at 1000 (DESIGN §5)
    with pytest.raises(KnowledgeStoreError) as caught:
        estate.query_graph(text, {"zzz": 1}, lenient=True)
    listed = caught.value.details["errors"]
    assert len(listed) == 8  # the six above, $b not bound, zzz not used
    assert caught.value.code == "invalid_request"
    assert "and 7 more problems" in caught.value.message


def test_lenient_mode_lists_syntax_errors() -> None:
    query, errors = parse_lenient("MATCH (n RETURN n\nMATCH (m:x {a: $p) RETURN m")
    assert query is None
    assert [(e.line, e.column) for e in errors][:2] == [(1, 10), (2, 18)]


def test_strict_mode_raises_the_first_problem_only(estate: KnowledgeStore) -> None:
    with pytest.raises(KnowledgeStoreError) as caught:
        estate.query_graph("MATCH (a)-[:knows*1..9]->(b) RETURN b.foo", {})
    assert caught.value.code == "unknown_label"
    assert "errors" not in caught.value.details


# -- time: the bound is the engine's setting; guards removed after the query -------------------------------------


def test_the_time_bound_is_a_setting_of_the_engine(estate: KnowledgeStore) -> None:
    # EngineSettings.graph_time_limit_s (``KS_GRAPH_TIME_LIMIT_MS`` for ks and the servers)
    assert estate.engine.graph_time_limit_s == graph_estate.TIME_LIMIT_S  # type: ignore[attr-defined]
    heavy = "MATCH (a), (b), (c), (d) RETURN count(*)"  # 27⁴ rows to count
    assert estate.query_graph(heavy, {}).rows == [[27**4]]
    tight = KnowledgeStore.open(
        estate.engine.path,  # type: ignore[attr-defined]
        create=False,
        engine_settings=EngineSettings(graph_time_limit_s=0.001),
    )
    try:
        with pytest.raises(QueryTimeout) as caught:
            tight.query_graph(heavy, {})
        assert "ran past the 1 ms bound and was cancelled" in caught.value.message
        assert caught.value.details["limit_ms"] == 1
    finally:
        tight.close()
    with pytest.raises(InvalidRequest, match="positive number of seconds"):
        EngineSettings(graph_time_limit_s=0)


@pytest.mark.embedded_only(reason="the guard is SQLite's progress handler and authorizer")
def test_the_time_guard_is_removed_after_each_query(estate: KnowledgeStore) -> None:
    estate.query_graph("MATCH (n) RETURN count(*)", {})
    catalog = estate.engine.catalog  # type: ignore[attr-defined]
    rows = catalog.execute(
        "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 3000000)"
        " SELECT count(*) FROM c"
    )
    assert rows[0][0] == 3_000_000  # ran to the end, not cancelled
    # and on a connection of the reader pool, where query_graph ran: no progress handler
    # left (SQLite would call it and cancel), no authorizer left (it would deny the write)
    conn = catalog.borrow()
    try:
        conn.execute("CREATE TEMP TABLE guard_gone(i)")  # an authorizer left would deny it
        (n,) = conn.execute(
            "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 3000000)"
            " SELECT count(*) FROM c"
        ).fetchone()
        assert n == 3_000_000
        conn.execute("DROP TABLE guard_gone")
    finally:
        catalog.give(conn)
    with catalog.write() as conn:  # and the authorizer is gone: the writer can write
        conn.execute("INSERT INTO meta(key, value) VALUES ('graph-test', 'x')")
        conn.execute("DELETE FROM meta WHERE key = 'graph-test'")


# -- size -------------------------------------------------------------------------------------------------------


def test_size_bounds() -> None:
    deep = "MATCH (n) WHERE " + "(" * 200 + "n.uid = $p" + ")" * 200 + " RETURN n"
    with pytest.raises(BoundExceeded, match="nests more than 32 levels"):
        parse(deep)
    with pytest.raises(BoundExceeded, match="nests more than 32 levels"):
        parse("MATCH (n) WHERE " + "NOT " * 100 + "n.uid = $p RETURN n")
    long_path = "MATCH " + "-->".join(["()"] * 40) + " RETURN count(*)"
    with pytest.raises(BoundExceeded, match="the maximum is 32"):
        parse(long_path)
    with pytest.raises(BoundExceeded, match="the maximum is 10000"):
        parse("MATCH (n) RETURN n //" + "x" * 10_000)
