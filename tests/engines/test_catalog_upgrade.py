"""An embedded catalog of schema 1 (bodies inline in ``entities``) is upgraded on open.

The old layout is rebuilt from a current store by SQL (the columns back in the
entity rows, ``entity_bodies`` gone, ``schema_version`` 1), so every test starts
from what an older knowledge-store wrote.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from knowledge_store.engines.embedded import migrate
from knowledge_store.errors import StoreError
from knowledge_store.store import KnowledgeStore

HASH = "hash:384"

_RECORDS = [
    {
        "uid": f"doc-{i}",
        "type": "page",
        "title": f"Page {i}",
        "body": f"Vacuum reclaims storage, page {i}. " + "Long text. " * (40 * i),
        "attributes": {"team": f"t{i}", "n": i},
        "edges": [{"label": "xref", "to": f"doc-{i + 1}"}] if i < 4 else [],
    }
    for i in range(5)
]


def _columns(path: Path, table: str) -> list[str]:
    with sqlite3.connect(path / "catalog.sqlite") as conn:
        return [str(r[1]) for r in conn.execute(f"PRAGMA table_info({table})")]


def _as_schema_1(path: Path) -> None:
    """Rewrite the catalog at ``path`` into the layout of schema 1."""
    conn = sqlite3.connect(path / "catalog.sqlite")
    conn.executescript(
        """
        ALTER TABLE entities ADD COLUMN body TEXT NOT NULL DEFAULT '';
        ALTER TABLE entities ADD COLUMN attributes TEXT NOT NULL DEFAULT '{}';
        UPDATE entities SET
            body = (SELECT body FROM entity_bodies WHERE entity = entities.id),
            attributes = (SELECT attributes FROM entity_bodies WHERE entity = entities.id);
        DROP TABLE entity_bodies;
        UPDATE meta SET value = '1' WHERE key = 'schema_version';
        """
    )
    conn.commit()
    conn.close()


def _snapshot(store: KnowledgeStore) -> dict[str, Any]:
    return {
        "content": {r["uid"]: store.content(r["uid"]).to_dict() for r in _RECORDS},
        "lexical": [h.uid for h in store.lexical("vacuum reclaims", k=10).hits],
        "graph": [h.uid for h in store.graph(["doc-0"], depth=2).hits],
        "root": store.stats().content_root,
    }


@pytest.fixture
def old_store(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    where = tmp_path / "s"
    with KnowledgeStore.open(where, embedder=HASH) as store:
        store.ingest_records(_RECORDS, acl=["everyone"])
        before = _snapshot(store)
    _as_schema_1(where)
    assert "body" in _columns(where, "entities")
    return where, before


def test_an_older_store_opens_with_thin_entity_rows_and_reads_the_same(
    old_store: tuple[Path, dict[str, Any]],
) -> None:
    where, before = old_store
    with KnowledgeStore.open(where, embedder=HASH) as store:
        assert _snapshot(store) == before
        store.ingest_records(
            [{**_RECORDS[1], "body": "Rewritten: analyze statistics."}], acl=["everyone"]
        )
        assert (
            store.content("doc-1").to_dict()["entity"]["body"] == "Rewritten: analyze statistics."
        )
        store.delete(["doc-2"])
    columns = _columns(where, "entities")
    assert "body" not in columns and "attributes" not in columns
    with sqlite3.connect(where / "catalog.sqlite") as conn:
        assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == (
            "2",
        )
        # the deleted entity's body went with it; every other entity has exactly one
        bodies = dict(
            conn.execute(
                "SELECT e.uid, length(b.body) FROM entities AS e"
                " JOIN entity_bodies AS b ON b.entity = e.id"
            ).fetchall()
        )
        assert set(bodies) == {"doc-0", "doc-1", "doc-3", "doc-4"}
        assert conn.execute("SELECT count(*) FROM entity_bodies").fetchone() == (4,)


def test_a_failed_upgrade_leaves_the_store_as_it_was_and_the_next_open_finishes_it(
    old_store: tuple[Path, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    where, before = old_store
    thin = migrate._thin_rows

    def dies_half_way(conn: sqlite3.Connection) -> None:
        conn.execute(migrate.ENTITY_BODIES_DDL)
        conn.execute("INSERT INTO entity_bodies SELECT id, body, attributes FROM entities")
        conn.execute("ALTER TABLE entities DROP COLUMN body")
        raise sqlite3.OperationalError("disk I/O error")  # as a full disk would

    monkeypatch.setattr(migrate, "_thin_rows", dies_half_way)
    with pytest.raises(StoreError, match="disk I/O error"):
        KnowledgeStore.open(where, embedder=HASH)
    assert "body" in _columns(where, "entities") and not _columns(where, "entity_bodies")
    monkeypatch.setattr(migrate, "_thin_rows", thin)
    with KnowledgeStore.open(where, embedder=HASH) as store:
        assert _snapshot(store) == before


_OPEN = textwrap.dedent(
    """
    import sys
    from knowledge_store.store import KnowledgeStore
    with KnowledgeStore.open(sys.argv[1], embedder="hash:384") as store:
        print(store.content("doc-3").to_dict()["entity"]["body"][:20])
    """
)


def test_processes_opening_an_older_store_at_once_all_succeed(
    old_store: tuple[Path, dict[str, Any]],
) -> None:
    """As the workers of ``ks serve --workers N`` open a store at once: one upgrades it, the
    others wait for its write lock, see it done and open."""
    where, _ = old_store
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _OPEN, str(where)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        assert out.strip() == "Vacuum reclaims stor"
    assert "body" not in _columns(where, "entities")
