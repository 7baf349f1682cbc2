"""What only the PostgreSQL engine has, against a real PostgreSQL + pgvector (pgserver):
migrations, the SQL BM25 against a reference, its statistics under change, the
ts_rank_cd ranker, the vector fallback on pgvector 0.6, query_graph's time bound,
the fan-out cap, and ``pg:DIR``'s server lifecycle."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest

from knowledge_store.engines.base import PreparedEntity
from knowledge_store.engines.postgres import vector as vector_sql
from knowledge_store.engines.postgres.engine import PostgresEngine
from knowledge_store.engines.postgres.schema import FIELD_HEADING, MIGRATIONS, Migration
from knowledge_store.errors import InvalidRequest, QueryTimeout, StoreError
from knowledge_store.graphquery.check import checked_query
from knowledge_store.model import (
    FANOUT_CAP,
    AggregateSpec,
    Edge,
    Entity,
    Filters,
    GraphQuery,
    Identity,
    Order,
    relevance,
)
from knowledge_store.store import KnowledgeStore
from tests import postgres_support
from tests.conftest import ESTATE, HASH_SPEC

FIXTURES = Path(__file__).parent / "fixtures"
DOCS = [json.loads(line) for line in (FIXTURES / "pg-docs-sample.jsonl").open(encoding="utf-8")]


@pytest.fixture(scope="module")
def database() -> str:
    return postgres_support.fresh_database("postgres_engine")


@pytest.fixture(scope="module")
def docs(database: str) -> Any:
    store = KnowledgeStore.open(postgres_support.store_url(database), embedder=HASH_SPEC)
    store.ingest_records(DOCS[:30])
    store.ingest_records(ESTATE)
    store.add_member("group:sre", "user:sam")
    yield store
    store.close()


def _engine(store: KnowledgeStore) -> PostgresEngine:
    assert isinstance(store.engine, PostgresEngine)
    return store.engine


# -- schema and migrations -------------------------------------------------------------------------


def test_a_store_of_a_newer_version_is_refused_with_what_to_do(database: str) -> None:
    url = postgres_support.store_url(database, "newer")
    PostgresEngine.open(url).close()
    engine = PostgresEngine.open(url)
    with engine.db.write() as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    engine.close()
    with pytest.raises(StoreError, match=r"newer knowledge-store \(schema version 99.*upgrade"):
        PostgresEngine.open(url)


def _as_version_1(url: str) -> PostgresEngine:
    """A store at schema version 1 that this build's publish can write to: it writes the
    facet columns (version 4) and the heading field (version 5), so the old schema gets
    those, nothing else."""
    engine = PostgresEngine.open(url, migrations=MIGRATIONS[:1])
    with engine.db.write() as conn:
        for statement in (*MIGRATIONS[3].statements, *MIGRATIONS[4].statements):
            conn.execute(statement)
    return engine


def test_an_older_store_is_migrated_on_open_and_says_when_a_rebuild_is_due(database: str) -> None:
    url = postgres_support.store_url(database, "older")
    with KnowledgeStore(_as_version_1(url)) as old:
        old.engine.writer.publish(
            [
                PreparedEntity(
                    Entity("a", "page", "Alpha", "alpha", acl=("everyone",)),
                    (),
                    np.zeros((0, 1), np.float32),
                )
            ],
            [],
            kind="ingest",
        )
    later = Migration(
        MIGRATIONS[-1].version + 1,
        "a test migration that changes text analysis",
        ("ALTER TABLE entities ADD COLUMN IF NOT EXISTS note text",),
        needs_rebuild=True,
    )
    engine = PostgresEngine.open(url, migrations=(*MIGRATIONS, later))
    try:
        assert engine.stats().to_dict()["needs_rebuild"] is True
        with pytest.raises(StoreError, match="rebuild"):
            KnowledgeStore(engine).sql()
        engine.rebuild()
        assert [h.uid for h in KnowledgeStore(engine).sql().hits] == ["a"]
    finally:
        engine.close()
    with pytest.raises(StoreError, match="newer"):
        PostgresEngine.open(url)  # this build knows one version less


def test_version_5_fills_the_heading_field_of_a_version_4_store_in_place(database: str) -> None:
    url = postgres_support.store_url(database, "heading")
    with KnowledgeStore.open(url, embedder=HASH_SPEC) as store:
        store.ingest_records(DOCS)
        engine = _engine(store)
        built = _statistics(engine)
        assert any(field == FIELD_HEADING for field, _, _ in built[0])
        before = [h.to_dict() for h in store.lexical("vacuum table index", k=20).hits]
        with engine.db.write() as conn:  # the store as version 4 left it
            for statement in (
                f"DELETE FROM lexical_postings WHERE field = {FIELD_HEADING}",
                f"DELETE FROM lexical_terms WHERE field = {FIELD_HEADING}",
                f"DELETE FROM lexical_fields WHERE field = {FIELD_HEADING}",
                "ALTER TABLE chunks DROP COLUMN len_heading",
                "DROP FUNCTION ks_last_heading(text, jsonb)",
                "UPDATE meta SET value = '4' WHERE key = 'schema_version'",
            ):
                conn.execute(statement)
    with KnowledgeStore.open(url, embedder=HASH_SPEC) as store:
        engine = _engine(store)
        assert engine.stats().to_dict()["needs_rebuild"] is False
        assert _statistics(engine) == built
        assert [h.to_dict() for h in store.lexical("vacuum table index", k=20).hits] == before


def test_version_7_gives_a_version_6_store_its_chunk_locations(database: str) -> None:
    url = postgres_support.store_url(database, "location")
    with KnowledgeStore.open(url, embedder=HASH_SPEC) as store:
        store.ingest_records(DOCS)
        before = [h.to_dict() for h in store.lexical("vacuum table index", k=20).hits]
        with _engine(store).db.write() as conn:  # the store as version 6 left it
            conn.execute("ALTER TABLE chunks DROP COLUMN location")
            conn.execute("UPDATE meta SET value = '6' WHERE key = 'schema_version'")
    with KnowledgeStore.open(url, embedder=HASH_SPEC) as store:
        assert _engine(store).stats().to_dict()["needs_rebuild"] is False
        assert [h.to_dict() for h in store.lexical("vacuum table index", k=20).hits] == before
        paged = '<!-- ks:location {"page": 1} -->\n\nFirst page.\n\n'
        paged += '<!-- ks:location {"page": 2} -->\n\nSecond page.'
        store.ingest_records([{**DOCS[0], "body": paged}])
        assert [
            c.location and c.location.to_dict() for c in store.content(DOCS[0]["uid"]).chunks
        ] == [
            {"page": 1},
            {"page": 2},
        ]


def test_version_2_pads_old_dates_and_hashes_old_acl_keys(database: str) -> None:
    """Version 1 wrote year 1 as ``1-01-01T…`` (sorts wrong) and ACL-set keys as the
    principals' text (a long ACL overflowed its b-tree entry)."""
    from knowledge_store.engines.sql.dialect import POSTGRES

    url = postgres_support.store_url(database, "version1")
    acl = ("everyone", "user:x")

    def prepared(uid: str) -> PreparedEntity:
        entity = Entity(uid, "page", uid, "alpha", created_at="2024-01-01T00:00:00Z", acl=acl)
        return PreparedEntity(entity, (), np.zeros((0, 1), np.float32))

    old = _as_version_1(url)
    old.writer.publish([prepared("a")], [], kind="ingest")
    with old.db.write() as conn:  # what version 1 wrote
        conn.execute("UPDATE entities SET created_at = '1-01-01T00:00:00Z'")
        conn.execute("UPDATE acl_sets SET key = %s", ("\n".join(acl),))
    old.close()
    engine = PostgresEngine.open(url)
    try:
        assert [h.created_at for h in KnowledgeStore(engine).sql().hits] == ["0001-01-01T00:00:00Z"]
        engine.writer.publish([prepared("b")], [], kind="ingest")  # the same ACL: the same set
        keys = [r[0] for r in engine.db.conn().execute("SELECT key FROM acl_sets")]
        assert keys == [POSTGRES.acl_set_key(acl)]
    finally:
        engine.close()


def test_a_fresh_schema_opens_concurrently_once(database: str) -> None:
    import threading

    url = postgres_support.store_url(database, "racing")
    errors: list[BaseException] = []

    def open_close() -> None:
        try:
            PostgresEngine.open(url).close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_close) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors


def test_stats_report_the_engine_and_its_features(docs: KnowledgeStore) -> None:
    stats = docs.stats().to_dict()
    assert stats["engine"] == "postgres" and stats["lexical_ranker"] == "bm25"
    assert stats["pgvector"].startswith("0.") and stats["iterative_scan"] is False
    assert stats["bm25_extension"] is None  # pgserver ships none
    assert stats["dimension"] == 384 and stats["chunks"] > 30 and not stats["is_empty"]
    assert "***" in stats["url"] or "@" not in stats["url"].split("//", 1)[1].split("/")[0]


# -- lexical -------------------------------------------------------------------------------------------


def _reference_bm25(engine: PostgresEngine, text: str) -> dict[int, float]:
    """BM25 in plain Python over every chunk, from the same analysis (the SQL functions)."""
    conn = engine.db.conn()
    docs = conn.execute(
        "SELECT c.id, e.title, ks_context(e.title, c.heading, c.text) FROM chunks AS c"
        " JOIN entities AS e ON e.id = c.entity"
    ).fetchall()

    def bag(function: str, value: str) -> Counter[str]:
        return Counter(
            {str(t): int(n) for t, n in conn.execute(f"SELECT * FROM {function}(%s)", (value,))}
        )

    def ident_length(value: str) -> int:
        row = conn.execute("SELECT ks_ident_length(%s)", (value,)).fetchone()
        assert row is not None
        return int(row[0])

    fields: list[tuple[float, dict[int, Counter[str]], dict[int, int], set[str]]] = []
    body = {int(i): bag("ks_words", ctx) for i, _, ctx in docs}
    title = {int(i): bag("ks_words", t) for i, t, _ in docs}
    ident = {int(i): bag("ks_idents", ctx) for i, _, ctx in docs}
    q_words = set(bag("ks_words", text))
    q_idents = set(bag("ks_idents", text))
    fields.append((1.0, body, {i: sum(b.values()) for i, b in body.items()}, q_words))
    fields.append(
        (relevance.TITLE_BOOST, title, {i: sum(b.values()) for i, b in title.items()}, q_words)
    )
    heading = {
        int(i): bag("ks_words", str(h))
        for i, h in conn.execute(
            "SELECT c.id, ks_last_heading(e.title, c.heading) FROM chunks AS c"
            " JOIN entities AS e ON e.id = c.entity"
        )
    }
    fields.append(
        (
            relevance.HEADING_BOOST,
            heading,
            {i: sum(b.values()) for i, b in heading.items()},
            q_words,
        )
    )
    fields.append(
        (
            relevance.IDENTIFIER_BOOST,
            ident,
            {int(i): ident_length(ctx) for i, _, ctx in docs},
            q_idents,
        )
    )
    k1, b = relevance.BM25_K1, relevance.BM25_B
    scores: dict[int, float] = {}
    n = len(docs)
    for boost, bags, lengths, terms in fields:
        avgdl = sum(lengths.values()) / n
        for term in terms:
            df = sum(1 for bag_ in bags.values() if term in bag_)
            if df == 0:
                continue
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            for chunk, bag_ in bags.items():
                tf = bag_.get(term, 0)
                if tf:
                    norm = tf + k1 * (1 - b + b * lengths[chunk] / avgdl)
                    scores[chunk] = scores.get(chunk, 0.0) + boost * idf * tf * (k1 + 1) / norm
    return scores


@pytest.mark.parametrize(
    "text", ["pg_stat_activity", "ALTER OPERATOR CLASS", "vacuum dead tuples", "ERR-1042 replica"]
)
def test_sql_bm25_equals_a_reference_implementation(docs: KnowledgeStore, text: str) -> None:
    engine = _engine(docs)
    reference = _reference_bm25(engine, text)
    hits = docs.lexical(text, identity="user:sam", k=20).hits
    assert hits, text
    expected = sorted(reference.items(), key=lambda kv: (-kv[1], kv[0]))[: len(hits)]
    public = {  # answers name a chunk by its public id (engines.shared.ChunkIds)
        int(row_id): engine.chunk_ids(str(uid), int(ordinal))
        for row_id, uid, ordinal in engine.db.conn().execute(
            "SELECT c.id, e.uid, c.ordinal FROM chunks AS c JOIN entities AS e ON e.id = c.entity"
        )
    }
    assert [h.chunk_id for h in hits] == [public[c] for c, _ in expected]
    for hit, (_, score) in zip(hits, expected, strict=True):
        assert hit.score == pytest.approx(score, rel=1e-9)


def test_identifiers_stay_matchable(docs: KnowledgeStore) -> None:
    for ranker in ("bm25", "ts_rank_cd"):
        engine = PostgresEngine.open(_engine(docs).path, lexical_ranker=ranker)
        try:
            store = KnowledgeStore(engine)
            hits = store.lexical("pg_stat_activity", k=3).hits
            assert hits and hits[0].uid == "guide:monitoring", ranker
            literal = store.lexical("'; DROP TABLE chunks; --", k=3).hits
            assert all("drop" in h.text.lower() or "table" in h.text.lower() for h in literal)
            assert engine.stats().chunks > 0  # the words were searched for, nothing ran
        finally:
            engine.close()
    with pytest.raises(InvalidRequest, match="ts_rank_cd"):
        PostgresEngine.open(_engine(docs).path, lexical_ranker="tfidf")


def _statistics(engine: PostgresEngine) -> tuple[Any, ...]:
    conn = engine.db.conn()
    return (
        conn.execute("SELECT field, term, df FROM lexical_terms ORDER BY 1, 2").fetchall(),
        conn.execute("SELECT * FROM lexical_fields ORDER BY 1").fetchall(),
        conn.execute(
            "SELECT field, term, chunk, tf, dl FROM lexical_postings ORDER BY 1, 2, 3"
        ).fetchall(),
    )


def test_bm25_statistics_stay_exact_through_updates_deletes_and_a_rebuild(database: str) -> None:
    store = KnowledgeStore.open(postgres_support.store_url(database), embedder=HASH_SPEC)
    try:
        store.ingest_records(DOCS[:6])
        changed = [dict(DOCS[1], body=DOCS[1]["body"] + "\n\nA new paragraph about VACUUM.")]
        store.ingest_records(changed)
        store.delete([DOCS[2]["uid"]])
        store.grant(DOCS[3]["uid"], "group:x")
        engine = _engine(store)
        kept = _statistics(engine)
        before = [h.to_dict() for h in store.lexical("vacuum table index", k=20).hits]
        engine.rebuild()
        assert _statistics(engine) == kept
        assert [h.to_dict() for h in store.lexical("vacuum table index", k=20).hits] == before
        store.delete([d["uid"] for d in DOCS[:6] if d["uid"] != DOCS[2]["uid"]])
        assert _statistics(engine) == ([], [(0, 0, 0), (1, 0, 0), (2, 0, 0), (3, 0, 0)], [])
        assert store.is_empty
    finally:
        store.close()


# -- vector --------------------------------------------------------------------------------------------


def test_filtered_vectors_fall_back_to_post_filtered_hnsw_on_pgvector_0_6(
    docs: KnowledgeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = _engine(docs)
    assert not engine.features.iterative_scan
    query = docs.embedder.embed_query("how do I see which queries are running")
    store = KnowledgeStore(engine)
    everyone = store.vector(query, k=10)
    assert everyone.vector is not None and everyone.vector.strategy == "exact"  # a small store
    # pretend the store is big: the planner now post-filters HNSW candidates
    monkeypatch.setattr(vector_sql, "EXACT_FLOOR", 0)
    monkeypatch.setattr(vector_sql, "EXACT_SHARE", 0.0)
    filtered = store.vector(query, k=10, filters={"type": ["section"]}, explain=True)
    info = filtered.vector
    assert info is not None and info.strategy == "hnsw-filtered" and not info.exhaustive
    assert info.scanned == filtered.explain["plan"]["ef_search"]  # type: ignore[index]
    assert all(h.type == "section" for h in filtered.hits) and filtered.hits
    monkeypatch.undo()
    exact = store.vector(query, k=10, filters={"type": ["section"]})
    assert exact.vector is not None and exact.vector.exhaustive
    got = {h.chunk_id for h in filtered.hits}
    assert len(got & {h.chunk_id for h in exact.hits}) >= 0.8 * len(exact.hits)


def test_a_vector_of_another_dimension_is_refused(docs: KnowledgeStore) -> None:
    from knowledge_store.errors import ModelMismatch

    with pytest.raises(ModelMismatch):
        docs.vector(np.ones(12, np.float32), k=5)


# -- graph -----------------------------------------------------------------------------------------------


def _chunkless(entity: Entity) -> PreparedEntity:
    return PreparedEntity(entity, (), np.zeros((0, 384), np.float32))


def test_query_graph_is_cancelled_at_its_bound(database: str) -> None:
    import random

    rng = random.Random(3)
    engine = PostgresEngine.open(postgres_support.store_url(database))
    try:
        nodes = 1500
        engine.writer.publish(
            [
                _chunkless(
                    Entity(
                        f"n:{i}",
                        "page",
                        f"node {i}",
                        "",
                        acl=("everyone",),
                        edges=tuple(
                            Edge(f"n:{i}", "xref", f"n:{t}")
                            for t in rng.sample(range(nodes), 25)
                            if t != i
                        ),
                    )
                )
                for i in range(nodes)
            ],
            [],
            kind="ingest",
        )
        engine.db.conn().execute("ANALYZE")
        started = time.perf_counter()
        store = KnowledgeStore(engine)
        with pytest.raises(QueryTimeout, match="250 ms"):
            store.query_graph("MATCH (a)-[*1..4]-(b) RETURN a.uid, b.uid")
        assert time.perf_counter() - started < 2.0
        answer = store.query_graph("MATCH (a {uid: $u}) RETURN a.uid", {"u": "n:1"})
        assert answer.rows == [["n:1"]]
        # the primitive's fan-out cap: a hub with more than FANOUT_CAP neighbours
        leaves = FANOUT_CAP + 5
        engine.writer.publish(
            [
                _chunkless(
                    Entity(
                        "hub",
                        "page",
                        "hub",
                        "",
                        acl=("everyone",),
                        edges=tuple(Edge("hub", "xref", f"leaf:{i}") for i in range(leaves)),
                    )
                )
            ]
            + [
                _chunkless(Entity(f"leaf:{i}", "page", f"leaf {i}", "", acl=("everyone",)))
                for i in range(leaves)
            ],
            [],
            kind="ingest",
        )
        hub = store.graph(["hub"], k=1000)
        assert hub.capped is True and len(hub.hits) == 1000
        assert store.graph(["leaf:1"]).capped is False
    finally:
        engine.close()


# -- pg:DIR --------------------------------------------------------------------------------------------


def _postgres_processes(pgdata: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if proc.info.get("name") == "postgres" and any(str(pgdata) in part for part in cmdline):
            found.append(proc)
    return found


def test_pg_dir_starts_a_local_server_and_stops_it_at_exit(tmp_path: Path) -> None:
    location = f"pg:{tmp_path / 'local'}"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("KS_PG_KEEP_RUNNING", None)
    ks = [sys.executable, "-m", "knowledge_store.surfaces.cli", "--store", location]
    added = subprocess.run(
        [*ks, "principals", "add-member", "group:sre", "user:sam", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert added.returncode == 0, added.stderr
    assert not _postgres_processes(tmp_path / "local" / "pgdata"), "the server was left running"
    # the data stays: the next opener (here, in-process) starts the server again
    try:
        with KnowledgeStore.open(location) as store:
            assert store.principal_show("user:sam").direct_groups == ("group:sre",)
            assert store.stats().to_dict()["engine"] == "postgres"
    finally:  # this process is its last user: stop it now, not at interpreter exit
        from pgserver.postgres_server import get_server

        get_server(tmp_path / "local" / "pgdata").cleanup()
    assert not _postgres_processes(tmp_path / "local" / "pgdata")


# -- values are bound, never spliced ---------------------------------------------------------------


class _Recorder:
    """Stands in for a connection: records each statement's text, then runs it."""

    def __init__(self, conn: Any, seen: list[str]) -> None:
        self._conn = conn
        self._seen = seen

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        self._seen.append(query if isinstance(query, str) else repr(query))
        return self._conn.execute(query, params, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def test_no_input_value_reaches_the_sql_text(
    docs: KnowledgeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = _engine(docs)
    seen: list[str] = []
    real, borrow, give = engine.db.conn, engine.db.borrow, engine.db.give
    monkeypatch.setattr(engine.db, "conn", lambda: _Recorder(real(), seen))
    monkeypatch.setattr(engine.db, "borrow", lambda: _Recorder(borrow(), seen))
    monkeypatch.setattr(engine.db, "give", lambda conn: give(conn._conn))
    mark = "zqx9"
    who = Identity(f"user:{mark}'--")
    filters = Filters.build(type=[f"{mark}'"], source=[mark], uid=[f"{mark};"])
    with engine.reader(who) as r:
        r.lexical(f"{mark} ' OR 1=1 pg_stat_{mark}", 5, filters)
        r.vector(docs.embedder.embed_query("anything"), 5, filters)
        r.sql(filters, Order.parse("title"), 5)
        r.aggregate(AggregateSpec.of("count", "created_at:week"), filters)
        r.successors([mark], filters)
        r.graph(GraphQuery(starts=(f"{mark}'",), depth=3, labels=("xref",), direction="both"))
        text = "MATCH (a {uid: $u})-[:xref*1..2]-(b) RETURN b.uid"
        r.query_graph(checked_query(text, {"u": mark}), {"u": mark})
        r.content(mark)
    engine.admin.acl_explain(who.principal, "guide:monitoring")
    assert len(seen) > 10
    for statement in seen:
        assert mark not in statement, statement
