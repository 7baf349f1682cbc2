"""The PostgreSQL engine's pure parts: feature detection, the vector planner, locations,
the statements' shapes. (Behaviour against a real server: tests/conformance.)"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from knowledge_store.engines.postgres import lexical, vector
from knowledge_store.engines.postgres.engine import split_location
from knowledge_store.engines.postgres.graph import POSTGRES, prepare_query_graph
from knowledge_store.engines.postgres.schema import (
    MIGRATIONS,
    SCHEMA_VERSION,
    Features,
    detect_features,
    parse_version,
    vector_ddl,
)
from knowledge_store.errors import InvalidRequest
from knowledge_store.graphquery.check import checked_query
from knowledge_store.model import Filters


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.6.2", (0, 6, 2)),
        ("0.8.0", (0, 8, 0)),
        ("0.8", (0, 8, 0)),
        ("1", (1, 0, 0)),
        (" 0.10.1-dev", (0, 10, 1)),
        ("", None),
        (None, None),
        ("dev", None),
    ],
)
def test_versions_parse(text: str | None, expected: tuple[int, int, int] | None) -> None:
    assert parse_version(text) == expected


def test_pgvector_0_6_has_no_iterative_scans_and_0_8_has() -> None:
    old = detect_features([("plpgsql", "1.0"), ("vector", "0.6.2")])
    assert old.pgvector == (0, 6, 2) and not old.iterative_scan
    assert old.bm25_extension is None
    assert detect_features([("vector", "0.7.4")]).iterative_scan is False
    assert detect_features([("vector", "0.8.0")]).iterative_scan is True
    assert detect_features([("vector", "1.2.0")]).iterative_scan is True
    assert detect_features([]).pgvector is None
    assert detect_features([]).to_dict()["pgvector"] is None


def test_a_bm25_extension_is_detected_and_pg_search_wins() -> None:
    found = detect_features([("vector", "0.8.0"), ("pg_textsearch", "0.1.0")])
    assert found.bm25_extension == "pg_textsearch"
    assert found.bm25_extension_version == "0.1.0"
    both = detect_features([("pg_textsearch", "0.1.0"), ("pg_search", "0.15.2"), ("vector", "0.7")])
    assert both.bm25_extension == "pg_search" and both.to_dict()["bm25_extension"] == "pg_search"
    assert set(found.to_dict()) == {
        "pgvector",
        "iterative_scan",
        "bm25_extension",
        "bm25_extension_version",
    }


V06 = Features(pgvector=(0, 6, 2), bm25_extension=None)
V08 = Features(pgvector=(0, 8, 0), bm25_extension=None)


def test_the_vector_planner() -> None:
    plan = vector.plan_vector
    assert plan(0, 0, 10, V06).strategy == "exact"  # an empty store
    assert plan(0, 100_000, 10, V06).strategy == "exact"  # nothing visible
    everything = plan(100_000, 100_000, 10, V06)
    assert everything.strategy == "hnsw" and everything.ef == vector.EF_SEARCH
    assert not everything.exhaustive
    # a small share, or few rows: exact over the visible rows, exhaustive
    for visible in (1_000, vector.EXACT_FLOOR, int(100_000 * vector.EXACT_SHARE) - 1):
        p = plan(visible, 100_000, 10, V06)
        assert p.strategy == "exact" and p.exhaustive, visible
    # pgvector 0.6: post-filtered HNSW, more candidates as the share falls, capped
    half = plan(50_000, 100_000, 10, V06)
    tenth = plan(10_000, 100_000, 10, V06)
    assert half.strategy == tenth.strategy == "hnsw-filtered" and not half.iterative
    assert half.ef == 80 and tenth.ef == 400 and not tenth.exhaustive
    assert plan(6_000, 100_000, 50, V06).ef == vector.EF_MAX
    assert plan(50_000, 100_000, 500, V06).ef == vector.EF_MAX
    # pgvector ≥ 0.8: an iterative index scan keeps walking until enough rows pass
    iterative = plan(10_000, 100_000, 10, V08)
    assert iterative.strategy == "hnsw-filtered" and iterative.iterative
    assert iterative.ef == vector.EF_SEARCH


def test_the_vector_plan_shows_a_rough_share_and_never_the_hidden_count() -> None:
    """docs/security.md: vector diagnostics reveal roughly how much is hidden (issue 25: the
    explain said 0.428571 of 7 chunks)."""
    plan = vector.plan_vector(3, 7, 10, V06).to_dict()
    assert plan["share"] == 0.4 and plan["visible"] == 3 and "total" not in plan
    assert vector.rough_share(0, 0) == 0.0 and vector.rough_share(7, 7) == 1.0
    assert vector.rough_share(4_999, 100_000) == 0.0 and vector.rough_share(5_000, 100_000) == 0.05


@given(st.integers(5_001, 60_000), st.integers(1, 19))
def test_totals_with_the_same_rough_share_give_the_same_plan(visible: int, step: int) -> None:
    """Whatever hides behind one rough share, the plan — strategy, ef, what explain shows — is
    the same: only the caller's own visible count tells callers apart."""
    steps = round(1 / vector.SHARE_STEP)
    fewest = visible * steps // (step + 1) + 1  # the totals whose rough share is step / steps
    most = visible * steps // step
    if fewest > most or most <= visible:
        return
    fewest = max(fewest, visible + 1)
    assert vector.rough_share(visible, fewest) == vector.rough_share(visible, most) == step / steps
    plans = {repr(vector.plan_vector(visible, t, 10, V06).to_dict()) for t in (fewest, most)}
    assert len(plans) == 1


def test_vector_settings_and_statements() -> None:
    q = np.ones(4, np.float32)
    exact = vector.plan_vector(100, 100_000, 10, V06)
    assert vector.settings(exact) == []
    held = ["everyone", "user:a"]
    sql, params = vector.vector_statement(exact, held, q, 10, Filters.build(type=["page"]))
    assert "+ 0" in sql and "held" in sql and "e.type = ANY(%(f0)s::text[])" in sql
    assert params["f0"] == ["page"]  # a FILTERS list is one bound array, whatever its length
    assert params["held"] == held and "user:a" not in sql
    filtered = vector.plan_vector(50_000, 100_000, 10, V06)
    assert vector.settings(filtered) == ["SET LOCAL hnsw.ef_search = 80"]
    sql, params = vector.vector_statement(filtered, held, q, 10, Filters())
    assert "nearest AS MATERIALIZED" in sql and params["ef"] == 80
    iterative = vector.plan_vector(50_000, 100_000, 10, V08)
    assert vector.settings(iterative) == [
        f"SET LOCAL hnsw.ef_search = {vector.EF_SEARCH}",
        "SET LOCAL hnsw.iterative_scan = strict_order",
    ]
    sql, _ = vector.vector_statement(iterative, held, q, 10, Filters())
    assert "nearest" not in sql and "ORDER BY c.embedding <=> %(q)s" in sql


def test_every_lexical_ranker_is_one_statement_with_the_acl_inside() -> None:
    marked = "zqx9 ' OR 1=1 --"
    for name in lexical.LEXICAL_RANKERS:
        held = ["everyone", "group:zqx9"]
        st = lexical.lexical_statement(name, held, marked, 10, Filters.build(uid=[marked]))
        assert st.sql.startswith("WITH RECURSIVE held(p)"), name
        assert "vis" in st.sql and "zqx9" not in st.sql, name
        assert st.params["text"] == marked and st.params["held"] == held
    with pytest.raises(InvalidRequest, match="bm25, ts_rank_cd, pg_search, pg_textsearch"):
        lexical.lexical_statement("okapi", ["everyone"], "x", 10, Filters())
    assert set(lexical.EXTENSION_INDEX) == {"pg_search", "pg_textsearch"}


def test_query_graph_compiles_to_postgresql_with_values_bound() -> None:
    params = {"u": "zqx9", "p": "zqx9'", "l": ["zqx9", 3], "k": 5}
    text = (
        "MATCH (a:page {uid: $u})-[:xref*1..3]->(b) WHERE b.title STARTS WITH $p"
        " AND b.uid IN $l RETURN b.uid, count(*) AS n ORDER BY n DESC LIMIT $k"
    )
    held = ["everyone", "user:zqx9"]
    compiled = prepare_query_graph(checked_query(text, params), params, held)
    assert "zqx9" not in compiled.sql
    assert "%(held)s" in compiled.sql and ":held" not in compiled.sql
    assert "CROSS JOIN" in compiled.sql and "jsonb_array_elements_text" in compiled.sql
    assert "starts_with(" in compiled.sql and "json_each" not in compiled.sql
    assert compiled.params["held"] == held
    assert POSTGRES.multiple_recursive_selects is False


def test_locations_and_schema_versions() -> None:
    assert split_location("postgresql://u@h/db") == ("postgresql://u@h/db", None)
    url, schema = split_location("postgresql://postgres:@/postgres?host=/tmp/x&schema=s7")
    assert schema == "s7" and url == "postgresql://postgres:@/postgres?host=/tmp/x"
    assert [m.version for m in MIGRATIONS] == list(range(1, SCHEMA_VERSION + 1))
    assert vector_ddl(384)[0].endswith("vector(384)")
    for bad in (0, -1, 20_000, True):
        with pytest.raises(ValueError):
            vector_ddl(bad)
