"""The ACL condition has one producer per dialect: engines/sql/dialect.py.

Every read statement of both engines — the sql primitive, aggregates,
successors, content, chunk probes, the graph walk, query_graph, the lexical
and vector statements of PostgreSQL — takes its ACL CTEs and its visibility
condition from the dialect; nothing else spells them.
"""

from __future__ import annotations

import ast
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


# -- the same rule, by meaning: a variant spelling is caught too ------------------------------------
#: What makes a SQL text a visibility condition, whatever its spelling: it filters ACL-set
#: principals by principal (``principal IN …``, ``principal = ANY(…)``, ``principal = …``), or
#: walks memberships recursively. Listing an ACL set's principals by its id (``acl show``,
#: hydration of ACLs) and writing them are not conditions.
_PRINCIPAL_TEST = re.compile(r"\bprincipal\s*(?:IN\b|=)", re.IGNORECASE)
_RECURSIVE = re.compile(r"WITH\s+RECURSIVE", re.IGNORECASE)


def _spells_visibility(sql: str) -> bool:
    if re.match(r"\s*(INSERT|DELETE|UPDATE|CREATE|ALTER)\b", sql, re.IGNORECASE):
        return False
    reads_principals = "acl_set_principals" in sql and bool(_PRINCIPAL_TEST.search(sql))
    walks_memberships = "memberships" in sql and bool(_RECURSIVE.search(sql))
    return reads_principals or walks_memberships or bool(re.search(r"\bFROM\s+vis\b", sql))


def _literals(tree: ast.AST) -> list[str]:
    """Every string literal of a module, f-strings with ``?`` for what they interpolate."""
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            out.append(
                "".join(
                    v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "?"
                    for v in node.values
                )
            )
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append(node.value)
    return out


def test_no_module_but_the_dialect_writes_a_visibility_condition_in_any_spelling() -> None:
    assert any(_spells_visibility(s) for s in _literals(ast.parse(DIALECT.read_text())))
    offenders = {
        path.relative_to(SRC).as_posix(): found
        for path in SRC.rglob("*.py")
        if path != DIALECT
        and (found := [s for s in _literals(ast.parse(path.read_text())) if _spells_visibility(s)])
    }
    assert offenders == {}


def test_the_rule_by_meaning_catches_variant_spellings() -> None:
    variants = [
        "SELECT e.uid FROM entities e WHERE e.acl_set IN (SELECT acl_set FROM acl_set_principals"
        " WHERE principal = ANY(%(held)s))",
        "SELECT 1 FROM acl_set_principals AS x WHERE x.acl_set = e.acl_set AND x.principal IN (?)",
        "WITH RECURSIVE g(p) AS (SELECT ? UNION SELECT grp FROM memberships JOIN g ON member = p)",
        "SELECT uid FROM entities WHERE acl_set IN (SELECT acl_set FROM vis)",
    ]
    assert all(_spells_visibility(v) for v in variants)
    allowed = [
        "SELECT principal FROM acl_set_principals WHERE acl_set = ? ORDER BY principal",
        "INSERT INTO acl_set_principals (acl_set, principal) SELECT %s, p FROM unnest(%s)",
        "SELECT member, grp FROM memberships WHERE member = ANY(%s::text[])",
    ]
    assert not any(_spells_visibility(a) for a in allowed)
