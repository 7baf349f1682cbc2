"""The PostgreSQL engine's point-in-time reader: one ``REPEATABLE READ`` transaction.

A reader owns a connection for its lifetime and reads everything in one
``REPEATABLE READ READ ONLY`` transaction — one snapshot for every statement,
so every list of an answer comes from one publish. The identity is expanded
once (one statement) and the principals it holds are bound into every later
statement; the ACL CTEs and the visibility condition come only from the
dialect (:mod:`knowledge_store.engines.sql.dialect`). Statement-local
settings (the vector plan's ``hnsw.*``, query_graph's ``statement_timeout``)
live in a savepoint, so neither a setting nor a cancelled statement outlives
its one read.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import errors as pg_errors

from knowledge_store.engines.base import RankedChunks, Vector
from knowledge_store.engines.postgres import lexical as lexical_sql
from knowledge_store.engines.postgres import vector as vector_sql
from knowledge_store.engines.postgres.db import Connection, translate
from knowledge_store.engines.postgres.graph import prepare_query_graph, statement_timeout_ms
from knowledge_store.engines.sql.dialect import POSTGRES
from knowledge_store.engines.sql.reader import SqlReader, ms
from knowledge_store.errors import ModelMismatch, QueryTimeout, StoreError
from knowledge_store.graphquery.nodes import Query
from knowledge_store.model import (
    Filters,
    Identity,
    QueryAnswer,
    VectorInfo,
)

if TYPE_CHECKING:
    from knowledge_store.engines.postgres.engine import PostgresEngine

__all__ = ["PostgresReader"]


class PostgresReader(SqlReader):
    """See the module docstring. Made by :meth:`PostgresEngine.reader`, never directly."""

    dialect = POSTGRES
    engine_name = "postgres"
    json_as_text = False

    def __init__(
        self, engine: PostgresEngine, conn: Connection, identity: Identity, publish: int, root: str
    ) -> None:
        super().__init__(engine, conn, identity, publish, root)
        self._engine: PostgresEngine = engine
        self._conn: Connection = conn

    def _snapshot(self) -> dict[str, Any]:
        return {"isolation": "repeatable read"}

    def _failing(self, action: str) -> AbstractContextManager[None]:
        return translate(action)

    def _run(self, sql: str, params: Mapping[str, Any]) -> list[Any]:
        self._counted(sql)
        with self._failing("reading"):
            return self._conn.execute(sql, params).fetchall()

    @contextmanager
    def _local(self, action: str) -> Iterator[None]:
        """A savepoint around statement-local settings, rolled back after the read."""
        with translate(action):
            self._conn.execute("SAVEPOINT ks_local")
        try:
            yield
        finally:
            with translate(action):
                self._conn.execute("ROLLBACK TO SAVEPOINT ks_local")
                self._conn.execute("RELEASE SAVEPOINT ks_local")

    # -- ranking ids -----------------------------------------------------------------------
    def lexical(
        self, text: str, k: int, filters: Filters, *, hydrate: bool = False
    ) -> RankedChunks:
        # One statement ranks and checks: ``hydrate`` has nothing to share; chunks() hydrates.
        started = time.perf_counter()
        ranker = self._engine.lexical_ranker
        statement = lexical_sql.lexical_statement(ranker, self.held, text, k, filters)
        rows = self._run(statement.sql, statement.params)
        return RankedChunks(
            [int(r[0]) for r in rows],
            [str(r[1]) for r in rows],
            [float(r[2]) for r in rows],
            None,
            {"ranker": ranker, "ms": {"statement": ms(time.perf_counter() - started)}},
        )

    def vector(
        self, vector: Vector, k: int, filters: Filters, *, hydrate: bool = False
    ) -> RankedChunks:
        expected = self._engine.writer.model()
        if expected is None:
            empty = VectorInfo(strategy="exact", scanned=0, exhaustive=True)
            return RankedChunks([], [], [], empty, {"ms": {}})
        if vector.shape[-1] != expected[1]:
            raise ModelMismatch(
                f"the query vector has {vector.shape[-1]} dimensions; this store's model"
                f" {expected[0]} has {expected[1]}",
            )
        started = time.perf_counter()
        key = (self._publish, self.held, filters)
        counts = self._engine.visible_counts(key)
        if counts is None:
            sql, params = vector_sql.vector_count_statement(self.held, filters)
            row = self._run(sql, params)[0]
            counts = (int(row[0] or 0), int(row[1] or 0))
            self._engine.remember_counts(key, counts)
        plan = vector_sql.plan_vector(counts[0], counts[1], k, self._engine.features)
        t_plan = time.perf_counter()
        rows: list[Any] = []
        if plan.visible:
            sql, params = vector_sql.vector_statement(plan, self.held, vector, k, filters)
            with self._local("vector search"):
                for setting in vector_sql.settings(plan):
                    self._conn.execute(setting)
                rows = self._run(sql, params)
        scanned = plan.visible if plan.strategy == "exact" else int(rows[0][3]) if rows else plan.ef
        info = VectorInfo(strategy=plan.strategy, scanned=scanned, exhaustive=plan.exhaustive)
        details = {
            "plan": plan.to_dict(),
            "ms": {"plan": ms(t_plan - started), "statement": ms(time.perf_counter() - t_plan)},
        }
        return RankedChunks(
            [int(r[0]) for r in rows],
            [str(r[1]) for r in rows],
            [float(r[2]) for r in rows],
            info,
            details,
        )

    def query_graph(
        self,
        query: Query,
        params: Mapping[str, Any],
        *,
        time_limit_s: float | None = None,
    ) -> QueryAnswer:
        """One compiled statement under ``statement_timeout`` (in a savepoint), read-only
        (``time_limit_s``, else the engine's bound)."""
        compiled = prepare_query_graph(query, params, self.held)
        limit_ms = statement_timeout_ms(
            self._engine.graph_time_limit_s if time_limit_s is None else time_limit_s
        )
        self._counted(compiled.sql)
        started = time.perf_counter()
        conn = self._conn
        with translate("query_graph"):
            conn.execute("SAVEPOINT ks_query")
        try:
            conn.execute(f"SET LOCAL statement_timeout = {int(limit_ms)}")
            raw = conn.execute(compiled.sql, compiled.params).fetchmany(compiled.limit + 1)
        except pg_errors.QueryCanceled as exc:
            self._restore("ks_query")
            raise QueryTimeout(
                f"the query ran past the {limit_ms} ms bound and was cancelled; anchor a node"
                " with a parameter (e.g. (a {uid: $uid})), lower the depth of *1..d, name fewer"
                " labels, or add WHERE conditions",
                limit_ms=limit_ms,
                elapsed_ms=round((time.perf_counter() - started) * 1000),
            ) from exc
        except psycopg.Error as exc:
            self._restore("ks_query")
            with translate("query_graph"):
                raise exc
        self._restore("ks_query")
        truncated = len(raw) > compiled.limit
        return QueryAnswer(
            content_root=self._root,
            columns=[c.name for c in compiled.columns],
            rows=[compiled.shape(tuple(r)) for r in raw[: compiled.limit]],
            truncated=truncated,
            warnings=compiled.warnings,
        )

    def _restore(self, savepoint: str) -> None:
        """Back to ``savepoint`` (its settings undone, a failed statement forgotten)."""
        try:
            self._conn.execute(f"ROLLBACK TO SAVEPOINT {savepoint}")
            self._conn.execute(f"RELEASE SAVEPOINT {savepoint}")
        except psycopg.Error as exc:
            raise StoreError(f"the reader's snapshot could not be restored: {exc}") from exc
