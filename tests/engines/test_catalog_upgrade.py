"""An embedded catalog of schema 1 or 2 is upgraded on open.

Schema 1 kept bodies inline in ``entities``, schemas 1 and 2 kept vectors inline
in ``chunks``. The old layout is rebuilt from a current store by SQL (the
vectors back in the chunk rows, ``chunk_vectors`` gone; for schema 1 the bodies
back in the entity rows, ``entity_bodies`` gone; ``schema_version`` set), so
every test starts from what an older knowledge-store wrote.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from knowledge_store.engines.embedded import migrate
from knowledge_store.engines.embedded.engine import EmbeddedEngine
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


def _as_schema_2(path: Path) -> None:
    """Rewrite the catalog at ``path`` into the layout of schema 2: vectors in the chunk rows.

    The AUTOINCREMENT high-water mark is kept, as an older store has it.
    """
    conn = sqlite3.connect(path / "catalog.sqlite")
    (seq,) = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'chunks'").fetchone()
    conn.executescript(
        """
        CREATE TABLE chunks_v2 (
            id        INTEGER PRIMARY KEY AUTOINCREMENT,
            entity    INTEGER NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
            ordinal   INTEGER NOT NULL,
            text      TEXT NOT NULL,
            heading   TEXT NOT NULL,
            start     INTEGER NOT NULL,
            "end"     INTEGER NOT NULL,
            embedding BLOB NOT NULL
        );
        INSERT INTO chunks_v2
            SELECT c.id, c.entity, c.ordinal, c.text, c.heading, c.start, c."end", v.embedding
            FROM chunks AS c JOIN chunk_vectors AS v ON v.id = c.id ORDER BY c.id;
        DROP TABLE chunk_vectors;
        DROP TABLE chunks;
        ALTER TABLE chunks_v2 RENAME TO chunks;
        CREATE INDEX chunks_by_entity ON chunks (entity, ordinal);
        UPDATE meta SET value = '2' WHERE key = 'schema_version';
        """
    )
    conn.execute("UPDATE sqlite_sequence SET seq = ? WHERE name = 'chunks'", (seq,))
    conn.commit()
    conn.close()


def _as_schema_1(path: Path) -> None:
    """Rewrite the catalog at ``path`` into the layout of schema 1."""
    _as_schema_2(path)
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
    engine = store.engine
    assert isinstance(engine, EmbeddedEngine)
    with engine.catalog.read() as conn:  # every chunk's id and stored vector
        ids, vectors = engine.catalog.chunk_vectors(conn, engine.catalog.all_chunk_ids(conn))
    return {
        "content": {r["uid"]: store.content(r["uid"]).to_dict() for r in _RECORDS[:4]},
        "lexical": [h.uid for h in store.lexical("vacuum reclaims", k=10).hits],
        "vector": [(h.uid, h.score) for h in store.vector("vacuum reclaims", k=10).hits],
        "graph": [h.uid for h in store.graph(["doc-0"], depth=2).hits],
        "root": store.stats().content_root,
        "vectors": (ids.tolist(), vectors.tobytes()),
    }


def _older_store(tmp_path: Path, schema: int) -> tuple[Path, dict[str, Any]]:
    where = tmp_path / "s"
    with KnowledgeStore.open(where, embedder=HASH) as store:
        store.ingest_records(_RECORDS, acl=["everyone"])
        store.delete(["doc-4"])  # the highest chunk ids (never given again: _RECORDS[:4] stay)
        before = _snapshot(store)
    {1: _as_schema_1, 2: _as_schema_2}[schema](where)
    assert ("body" in _columns(where, "entities")) == (schema == 1)
    assert "embedding" in _columns(where, "chunks") and not _columns(where, "chunk_vectors")
    return where, before


@pytest.fixture(params=[1, 2], ids=["schema-1", "schema-2"])
def old_store(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[Path, dict[str, Any]]:
    return _older_store(tmp_path, request.param)


def _chunk_pages(path: Path) -> int:
    with sqlite3.connect(path / "catalog.sqlite") as conn:
        return int(conn.execute("SELECT count(*) FROM dbstat WHERE name = 'chunks'").fetchone()[0])


def test_an_older_store_opens_with_thin_entity_and_chunk_rows_and_reads_the_same(
    old_store: tuple[Path, dict[str, Any]],
) -> None:
    where, before = old_store
    with sqlite3.connect(where / "catalog.sqlite") as conn:
        (seq,) = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'chunks'").fetchone()
        (top,) = conn.execute("SELECT max(id) FROM chunks").fetchone()
    assert seq > top
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
    assert "embedding" not in _columns(where, "chunks")
    with sqlite3.connect(where / "catalog.sqlite") as conn:
        assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == (
            "4",
        )
        # schema 4: every chunk has a location column, NULL for the chunks of this store
        assert "location" in _columns(where, "chunks")
        assert conn.execute(
            "SELECT count(*) FROM chunks WHERE location IS NOT NULL"
        ).fetchone() == (0,)
        # the deleted entity's body went with it; every other entity has exactly one
        bodies = dict(
            conn.execute(
                "SELECT e.uid, length(b.body) FROM entities AS e"
                " JOIN entity_bodies AS b ON b.entity = e.id"
            ).fetchall()
        )
        assert set(bodies) == {"doc-0", "doc-1", "doc-3"}
        assert conn.execute("SELECT count(*) FROM entity_bodies").fetchone() == (3,)
        # the replaced and deleted chunks' vectors went with them; every chunk has one
        chunks = [c for (c,) in conn.execute("SELECT id FROM chunks ORDER BY id")]
        assert [c for (c,) in conn.execute("SELECT id FROM chunk_vectors ORDER BY id")] == chunks
        (first_new,) = conn.execute(
            "SELECT min(c.id) FROM chunks AS c JOIN entities AS e ON e.id = c.entity"
            " WHERE e.uid = 'doc-1'"
        ).fetchone()
        assert first_new > seq  # the re-ingested entity's chunks: ids above every id given
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        assert not _columns(where, "chunks_inline")


def test_the_upgrade_rebuilds_the_chunks_table_compact(
    old_store: tuple[Path, dict[str, Any]],
) -> None:
    """``ALTER TABLE … DROP COLUMN`` would leave one chunk per page, as with the vector."""
    where, _ = old_store
    inline = _chunk_pages(where)
    KnowledgeStore.open(where, embedder=HASH).close()
    assert _chunk_pages(where) * 2 < inline


def test_a_failed_upgrade_leaves_the_store_as_it_was_and_the_next_open_finishes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    where, before = _older_store(tmp_path, 1)
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


def test_a_failed_vector_split_leaves_the_chunks_as_they_were_and_the_next_open_finishes_it(
    old_store: tuple[Path, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    where, before = old_store
    split = migrate._split_vectors

    def dies_half_way(conn: sqlite3.Connection) -> None:
        conn.execute("ALTER TABLE chunks RENAME TO chunks_inline")
        conn.execute(migrate.CHUNKS_DDL)
        conn.execute(
            'INSERT INTO chunks(id, entity, ordinal, text, heading, start, "end")'
            ' SELECT id, entity, ordinal, text, heading, start, "end" FROM chunks_inline'
        )
        conn.execute(migrate.CHUNK_VECTORS_DDL)
        conn.execute("INSERT INTO chunk_vectors SELECT id, embedding FROM chunks_inline")
        raise sqlite3.OperationalError("disk I/O error")  # as a full disk would

    monkeypatch.setattr(migrate, "_split_vectors", dies_half_way)
    with pytest.raises(StoreError, match="disk I/O error"):
        KnowledgeStore.open(where, embedder=HASH)
    assert "embedding" in _columns(where, "chunks")
    assert not _columns(where, "chunk_vectors") and not _columns(where, "chunks_inline")
    assert "body" not in _columns(where, "entities")  # an earlier step stays done
    monkeypatch.setattr(migrate, "_split_vectors", split)
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
    assert "embedding" not in _columns(where, "chunks") and _columns(where, "chunk_vectors")


def test_an_open_waits_out_an_upgrade_longer_than_the_busy_timeout(
    old_store: tuple[Path, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Schema 3 holds the write lock for 38 s at 1M chunks, past the 30 s busy timeout: a
    second process opening the store then failed ("database is locked"). Here another
    connection holds the lock for 15 busy timeouts of the opener's; the opener waits,
    upgrades and opens."""
    where, expected = old_store
    monkeypatch.setattr(migrate, "UPGRADE_WAIT_S", 30.0)
    holder = sqlite3.connect(
        where / "catalog.sqlite", isolation_level=None, check_same_thread=False
    )
    holder.execute("BEGIN IMMEDIATE")
    opener = sqlite3.connect(where / "catalog.sqlite", isolation_level=None, timeout=0.02)
    release = threading.Timer(0.3, holder.execute, args=("ROLLBACK",))
    release.start()
    try:
        migrate.upgrade(opener)
    finally:
        release.join()
        holder.close()
        opener.close()
    assert "embedding" not in _columns(where, "chunks")
    with KnowledgeStore.open(where, embedder="hash:384") as store:
        assert _snapshot(store) == expected


def test_a_schema_3_store_gets_its_chunks_location_column_in_place(tmp_path: Path) -> None:
    """Schema 4: ``chunks.location`` added by ALTER TABLE (no row rewritten), NULL for the
    chunks already there; the next ingest of a paged body stores its locations."""
    where = tmp_path / "s"
    with KnowledgeStore.open(where, embedder=HASH) as store:
        store.ingest_records(_RECORDS, acl=["everyone"])
        before = _snapshot(store)
    with sqlite3.connect(where / "catalog.sqlite") as conn:
        conn.execute("ALTER TABLE chunks DROP COLUMN location")
        conn.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    assert "location" not in _columns(where, "chunks")
    with KnowledgeStore.open(where, embedder=HASH) as store:
        assert _snapshot(store) == before
        paged = '<!-- ks:location {"page": 1} -->\n\nFirst page.\n\n'
        paged += '<!-- ks:location {"page": 2} -->\n\nSecond page.'
        store.ingest_records([{**_RECORDS[0], "body": paged}], acl=["everyone"])
        chunks = store.content("doc-0").chunks
        assert [c.location and c.location.to_dict() for c in chunks] == [{"page": 1}, {"page": 2}]
    assert "location" in _columns(where, "chunks")
    with sqlite3.connect(where / "catalog.sqlite") as conn:
        assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == (
            "4",
        )
