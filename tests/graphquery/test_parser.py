"""The parser builds a typed AST with positions; the compiler writes through a dialect."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pytest

from knowledge_store.engines.sql.dialect import SQLITE, SqliteDialect
from knowledge_store.errors import InvalidRequest
from knowledge_store.graphquery import compile_query, parse, parse_lenient
from knowledge_store.graphquery import nodes as n
from knowledge_store.graphquery.parser import MAX_QUERY_CHARS
from knowledge_store.graphquery.steps import step_joins


def test_the_ast() -> None:
    query = parse(
        "MATCH (a:page {uid: $uid})<-[r:partOf|:xref]-(b)\n"
        "OPTIONAL MATCH (b)-[*2..3]-(c)\n"
        "WHERE NOT (c.title STARTS WITH $p OR c.href IS NULL)\n"
        "RETURN DISTINCT b.title AS t, count(DISTINCT c), type(r) ORDER BY t DESC SKIP $s LIMIT 5"
    )
    first, second = query.clauses
    assert not first.optional and second.optional
    a, _b = first.patterns[0].nodes
    assert (a.var, a.labels, a.props[0][0]) == ("a", ("page",), "uid")
    assert isinstance(a.props[0][1], n.Param) and a.props[0][1].name == "uid"
    rel = first.patterns[0].rels[0]
    assert (rel.var, rel.labels, rel.direction, rel.length) == ("r", ("partOf", "xref"), "in", None)
    var = second.patterns[0].rels[0]
    assert var.direction == "both" and var.length is not None
    assert (var.length.lo, var.length.hi, var.length.exact) == (2, 3, False)
    assert var.length.pos == n.Pos(2, 21)
    assert isinstance(second.where, n.Not) and isinstance(second.where.expr, n.Or)
    assert [i.column for i in query.items] == ["t", "count(DISTINCT c)", "type(r)"]
    assert query.distinct and query.order[0].descending
    assert isinstance(query.skip, n.Param) and query.limit == 5


@pytest.mark.parametrize(
    ("arrow", "direction"), [("-->", "out"), ("<--", "in"), ("--", "both"), ("<-->", "both")]
)
def test_arrows(arrow: str, direction: str) -> None:
    assert (
        parse(f"MATCH (a){arrow}(b) RETURN a").clauses[0].patterns[0].rels[0].direction == direction
    )


def test_errors_carry_line_and_column() -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse("MATCH (a)\n  RETURN a.uid,\n    b")
    assert (caught.value.details["line"], caught.value.details["column"]) == (3, 5)
    assert caught.value.message.startswith("line 3, column 5: unknown variable `b`")


def test_limits_of_the_text() -> None:
    with pytest.raises(Exception, match="maximum is"):
        parse("MATCH (a) RETURN a " + " " * MAX_QUERY_CHARS)
    assert parse_lenient("")[1][0].message.startswith("the query is empty")
    assert (
        parse_lenient("MATCH (a) RETURN a\x00")[1][0].message
        == "the query contains a NUL character"
    )


@dataclass(frozen=True)
class _Pyformat(SqliteDialect):
    """What a PostgreSQL dialect changes: placeholders and one recursive SELECT."""

    name: str = "pyformat"
    multiple_recursive_selects: bool = False

    def param(self, name: str) -> str:
        return f"%({name})s"


def test_a_dialect_changes_placeholders_and_quirks_not_the_compiler() -> None:
    query = parse("MATCH (a {uid: $uid})-[:xref*1..2]-(b) WHERE b.type IN $types RETURN b.uid")
    params: dict[str, Any] = {"uid": "x", "types": ["page"]}
    sqlite = compile_query(query, params, ["everyone"], dialect=SQLITE)
    other = compile_query(query, params, ["everyone"], dialect=_Pyformat())
    assert re.findall(r"%\((\w+)\)s", other.sql)
    assert not re.findall(r"(?<![:\w]):(?!principal)[a-z]\w*", other.sql)
    assert sqlite.params == other.params
    # both directions: two recursive SELECTs in SQLite, one over a union of edges otherwise
    assert len(re.findall(r"FROM reach\d+_walk AS w", sqlite.sql)) == 2
    assert len(re.findall(r"FROM reach\d+_walk AS w", other.sql)) == 1
    assert len(step_joins("both", ["xref"], source="x", dialect=SQLITE)) == 2
    assert len(step_joins("both", ["xref"], source="x", dialect=_Pyformat())) == 1
