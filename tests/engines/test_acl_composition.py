"""The ACL condition has one producer per dialect: engines/sql/dialect.py.

Every read statement of both engines — the sql primitive, aggregates,
successors, content, chunk probes, the graph walk, query_graph, the lexical
and vector statements of PostgreSQL — takes its ACL CTEs and its visibility
condition from the dialect; nothing else spells them.
"""

from __future__ import annotations

import re
from pathlib import Path

import knowledge_store
from knowledge_store.engines.sql import statements
from knowledge_store.engines.sql.dialect import POSTGRES, SQLITE
from knowledge_store.model import DEFAULT_ORDER, Filters

SRC = Path(knowledge_store.__file__).parent
DIALECT = SRC / "engines" / "sql" / "dialect.py"
#: How the condition is spelled: the expansion over memberships, the held principals'
#: ACL sets, the by-key probe.
SPELLINGS = (
    r"FROM\s+memberships\s+AS\s+m\s+JOIN\s+held",
    r"acl_set\s+IN\s+\(SELECT\s+acl_set\s+FROM\s+vis\)",
    r"principal\s+IN\s+\(SELECT\s+p\s+FROM\s+held\)",
)


def test_only_the_dialect_spells_the_acl_condition() -> None:
    dialect = DIALECT.read_text(encoding="utf-8")
    for spelling in SPELLINGS:
        assert re.search(spelling, dialect), spelling  # the test is not vacuous
    offenders = {
        path.relative_to(SRC).as_posix(): [s for s in SPELLINGS if re.search(s, text)]
        for path in SRC.rglob("*.py")
        if path != DIALECT and (text := path.read_text(encoding="utf-8"))
    }
    assert {path: found for path, found in offenders.items() if found} == {}


def test_every_statement_carries_the_dialects_condition() -> None:
    held = ["everyone", "user:a"]
    for d in (SQLITE, POSTGRES):
        built = [
            statements.sql_hits(d, held, Filters(), DEFAULT_ORDER, 10),
            statements.successors(d, held, ["a"], Filters()),
            statements.content_entity(d, held, "a"),
            statements.entity_cards(d, held, ["a"]),
            statements.probe_chunks(d, held, [1, 2], Filters()),
        ]
        for sql, params in built:
            assert d.acl_ctes()[0] in sql and params["held"] == d.bind_array(held)
            assert d.visible("e") in sql or d.visible("e", "probe") in sql
