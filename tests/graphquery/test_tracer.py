"""No input value ever appears in the SQL text: parameters, node types, uids, rejected literals.

``sqlite3``'s trace callback shows each statement *expanded* with its bound
values, so the check is two-sided: every statement our code hands to SQLite
(recorded on the way in) holds none of the marked inputs, and what SQLite ran
(the trace) is exactly that text with the bound parameters filled in — the
values reached the statement as parameters and nothing else.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest

from knowledge_store import store as docs_tools
from knowledge_store.errors import KnowledgeStoreError
from knowledge_store.model import LABELS
from knowledge_store.store import KnowledgeStore

pytestmark = pytest.mark.embedded_only(
    reason="traces the statements on the embedded catalog's SQLite connection"
)

MARK = "zqx9"  # in every input value and user-chosen name below


class _Recorder:
    """Stands in for the catalog's connection: records each statement, then runs it."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self.statements: list[tuple[str, Any]] = []

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        self.statements.append((sql, params))
        return self._conn.execute(sql, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


@pytest.fixture
def traced(
    estate: KnowledgeStore, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[_Recorder, list[str]]]:
    catalog = estate.engine.catalog  # type: ignore[attr-defined]
    real: sqlite3.Connection = catalog.borrow()  # the connection every reader gets below
    give = catalog.give
    recorder = _Recorder(real)
    monkeypatch.setattr(catalog, "borrow", lambda: recorder)
    monkeypatch.setattr(catalog, "give", lambda conn: real.in_transaction and real.commit())
    trace: list[str] = []
    real.set_trace_callback(trace.append)
    try:
        yield recorder, trace
    finally:
        real.set_trace_callback(None)
        if real.in_transaction:
            real.execute("COMMIT")
        give(real)


def _literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool | int):
        return str(int(value))
    assert isinstance(value, str), value
    return "'" + value.replace("'", "''") + "'"


def _expand(sql: str, params: Any) -> str:
    if isinstance(params, dict):
        return re.sub(r":([A-Za-z_][A-Za-z0-9_]*)", lambda m: _literal(params[m.group(1)]), sql)
    values = iter(params)
    return re.sub(r"\?", lambda _: _literal(next(values)), sql)


def _check(recorder: _Recorder, trace: list[str], *, expect_graph_sql: bool = True) -> None:
    ours = [(sql, p) for sql, p in recorder.statements if sql.startswith("WITH RECURSIVE")]
    if expect_graph_sql:
        assert ours, "no graph statement ran"
    for sql, params in recorder.statements:
        assert MARK not in sql.lower(), sql
        assert _expand(sql, params) in trace
    for sql, _ in ours:
        # only the closed vocabularies appear as quoted text: labels, and 'everyone'
        quoted = set(re.findall(r"'([^']*)'", sql))
        assert quoted <= {*LABELS, "everyone"}, quoted


QUERIES: list[tuple[str, dict[str, Any]]] = [
    ("MATCH (n {uid: $zqx9uid}) RETURN n", {"zqx9uid": "page:zqx9"}),
    (
        "MATCH (zqx9a:zqx9type)-[zqx9r:xref|partOf]->(b) WHERE b.title STARTS WITH $zqx9p"
        " AND b.uid IN $zqx9list AND NOT b.status = $s RETURN zqx9a.uid AS zqx9col, type(zqx9r)",
        {"zqx9p": "zqx9'; DROP TABLE entities; --", "zqx9list": ["a", "zqx9", "it's"], "s": "zqx9"},
    ),
    (
        "MATCH (a {uid: $u})-[:xref*1..3]->(b:zqx9) OPTIONAL MATCH (b)<-[r:partOf]-(c)"
        " WHERE c.href ENDS WITH $h OR c.title CONTAINS $c RETURN b, count(c) AS n ORDER BY n DESC"
        " SKIP $skip LIMIT $limit",
        {"u": "page:start", "h": "#zqx9", "c": "zqx9%_", "skip": 1, "limit": 7},
    ),
    ("MATCH (a)-[r {position: $p}]-(b) RETURN r", {"p": "zqx9"}),
]


@pytest.mark.parametrize(("text", "params"), QUERIES)
def test_query_values_are_bound_parameters(
    estate: KnowledgeStore, traced: tuple[_Recorder, list[str]], text: str, params: dict[str, Any]
) -> None:
    recorder, trace = traced
    estate.query_graph(text, params, identity="user:zqx9")
    _check(recorder, trace)
    graph = [s for s, _ in recorder.statements if s.startswith("WITH RECURSIVE")]
    expansions = [s for s in graph if "memberships" in s]
    assert len(expansions) == 1  # the reader expands the identity once, in its own statement
    assert len(graph) == 2  # and the query is one statement


@pytest.mark.parametrize(
    "text",
    [
        "MATCH (n {uid: 'zqx9'}) RETURN n",
        'MATCH (n) WHERE n.title = "zqx9" RETURN n',
        "MATCH (n) WHERE n.uid IN ['zqx9'] RETURN n",
        "CREATE (n {uid: $zqx9}) RETURN n",
    ],
)
def test_rejected_literals_never_reach_sql(
    estate: KnowledgeStore, traced: tuple[_Recorder, list[str]], text: str
) -> None:
    recorder, trace = traced
    with pytest.raises(KnowledgeStoreError):
        estate.query_graph(text, {})
    assert not [s for s, _ in recorder.statements if s.startswith("WITH RECURSIVE")]
    assert not any(MARK in t for t in trace)


def test_graph_primitive_binds_its_uids(
    estate: KnowledgeStore, traced: tuple[_Recorder, list[str]]
) -> None:
    recorder, trace = traced
    estate.graph(
        ["page:start", "zqx9'); --", "page:zqx9"], depth=3, labels=["xref"], identity="user:zqx9"
    )
    _check(recorder, trace)


def test_docs_tools_bind_their_inputs(
    estate: KnowledgeStore, traced: tuple[_Recorder, list[str]]
) -> None:
    recorder, trace = traced
    with pytest.raises(KnowledgeStoreError):
        docs_tools.resolve_xref(estate, "/docs/zqx9#zqx9", identity="user:zqx9")
    docs_tools.graph_facets(estate, ["page:blob", "zqx9"], identity="user:zqx9")
    with pytest.raises(KnowledgeStoreError):
        docs_tools.get_related(estate, "zqx9", identity="user:zqx9")
    _check(recorder, trace)
