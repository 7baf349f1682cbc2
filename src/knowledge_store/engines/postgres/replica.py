"""A replica of a PostgreSQL store: a fresh store in a schema of its own in the same
database (``ks_replica_<hex>``), naming chunks with the source's key and recording its
model (see ``engines.base.Replica``); discarded with ``DROP SCHEMA … CASCADE``."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING

from psycopg import sql

from knowledge_store.engines.postgres.db import translate
from knowledge_store.engines.sql.history import follow_source, replace_memberships

if TYPE_CHECKING:
    from knowledge_store.engines.postgres.engine import PostgresEngine

__all__ = ["PostgresReplica"]


class PostgresReplica:
    def __init__(self, source: PostgresEngine) -> None:
        from knowledge_store.engines.postgres.engine import PostgresEngine

        self._schema = f"ks_replica_{secrets.token_hex(6)}"
        engine = PostgresEngine(
            source.url, schema=self._schema, lexical_ranker=source.lexical_ranker
        )
        follow_source(engine, source)
        self._engine = engine

    @property
    def engine(self) -> PostgresEngine:
        return self._engine

    def set_memberships(self, pairs: Sequence[tuple[str, str]]) -> None:
        with self._engine.writing() as conn:
            replace_memberships(conn, self._engine.dialect, pairs)

    def discard(self) -> None:
        url = self._engine.url
        db = self._engine.db
        self._engine.close()
        conn = db.connect(register=False)
        try:
            with translate("removing a replica"):
                conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(self._schema))
                )
        finally:
            conn.close()
        del url
