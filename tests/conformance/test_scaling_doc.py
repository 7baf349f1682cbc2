"""docs/scaling.md's Citus DDL fits the real schema: every statement but Citus's own
functions runs on a PostgreSQL store with data in it."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from knowledge_store.engines.base import PreparedEntity
from knowledge_store.engines.postgres.engine import PostgresEngine
from knowledge_store.model import Chunk, Edge, Entity
from tests import postgres_support

DOC = Path(__file__).resolve().parents[2] / "docs" / "scaling.md"


def _statements() -> list[str]:
    block = re.search(r"```sql\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert block is not None
    text = re.sub(r"--[^\n]*", "", block.group(1))
    return [s.strip() for s in text.split(";") if s.strip()]


def test_the_citus_ddl_applies_to_the_schema() -> None:
    statements = _statements()
    assert any("create_distributed_table('chunks'" in s for s in statements)
    engine = PostgresEngine.open(postgres_support.store_url(postgres_support.fresh_database("doc")))
    try:
        engine.writer.set_model("m", 4, "test")
        chunk = Chunk(0, "some text", (), 0, 9)
        vector = np.ones((1, 4), np.float32) / 2
        entity = Entity(
            "a", "page", "A", "some text", acl=("everyone",), edges=(Edge("a", "xref", "b"),)
        )
        engine.writer.publish([PreparedEntity(entity, (chunk,), vector)], [], kind="ingest")
        conn = engine.db.conn()
        for statement in statements:
            if "citus" in statement or "create_distributed_table" in statement:
                continue  # Citus's own; everything else must fit our tables
            if "create_reference_table" in statement or statement.startswith("SET search_path"):
                continue  # (the doc names the default schema; this store has its own)
            conn.execute(statement)
        row = conn.execute("SELECT uid FROM chunks").fetchone()
        assert row == ("a",)
    finally:
        engine.close()
