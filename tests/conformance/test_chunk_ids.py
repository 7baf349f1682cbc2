"""Public chunk ids (docs/security.md): one per chunk, the same in every answer, on every engine.

A chunk is named by a keyed hash of its entity's uid and its ordinal under the store's
secret — 53 bits, so JSON clients read it exactly — never by the engines' global row
id, whose gaps counted the chunks hidden from the reader.
"""

from __future__ import annotations

from knowledge_store.engines.shared import CHUNK_KEY_META, ChunkIds
from knowledge_store.store import KnowledgeStore


def _key(store: KnowledgeStore) -> str:
    engine = store.engine
    if engine.name == "embedded":
        key = engine.catalog.get_meta(CHUNK_KEY_META)  # type: ignore[attr-defined]
    else:
        with engine.db.read() as conn:  # type: ignore[attr-defined]
            key = engine._meta(conn, CHUNK_KEY_META)  # type: ignore[attr-defined]
    assert key is not None
    return str(key)


def test_a_chunk_id_is_the_keyed_hash_of_its_uid_and_ordinal_everywhere(
    store: KnowledgeStore,
) -> None:
    body = "# Vacuum\n\nkiwi vacuum reclaims space.\n\n## Autovacuum\n\nkiwi the daemon runs it."
    store.ingest_records(
        [{"uid": "v:1", "type": "page", "title": "V", "body": body, "acl": ["everyone"]}]
    )
    store.ingest_records(
        [
            {"uid": f"h:{i}", "type": "page", "title": "H", "body": "kiwi hidden", "acl": []}
            for i in range(5)
        ]
    )
    store.ingest_records(
        [{"uid": "v:2", "type": "page", "title": "W", "body": "kiwi vacuum", "acl": ["everyone"]}]
    )
    chunk_ids = ChunkIds(_key(store))
    content = {uid: store.content(uid).chunks for uid in ("v:1", "v:2")}
    expected = {(uid, chunk_ids(uid, c.ordinal)) for uid, chunks in content.items() for c in chunks}
    assert {(uid, c.chunk_id) for uid, chunks in content.items() for c in chunks} == expected
    lexical = {(h.uid, h.chunk_id) for h in store.lexical("kiwi vacuum", k=50).hits}
    vector = {(h.uid, h.chunk_id) for h in store.vector("kiwi vacuum", k=50).hits}
    evidence = {
        (r.uid, e.chunk_id) for r in store.search("kiwi vacuum", k=50).results for e in r.evidence
    }
    assert lexical == vector == expected
    assert evidence <= expected and evidence
    assert all(0 <= chunk_id < 2**53 for _, chunk_id in expected)
    assert len({chunk_id for _, chunk_id in expected}) == len(expected)


def test_the_meta_key_is_the_one_the_side_channel_test_names() -> None:
    assert CHUNK_KEY_META == "chunk_id_key"


def test_a_remembered_id_is_the_computed_one() -> None:
    """Public ids are remembered (a bounded memo): the same id the keyed hash gives, after
    the memo filled and started over too."""
    key = ChunkIds.new_key()
    fresh = ChunkIds(key)
    remembering = ChunkIds(key)
    remembering.MEMO = 50  # type: ignore[misc]
    pairs = [(f"page:{i % 70}", i % 3) for i in range(400)]
    assert [remembering(uid, o) for uid, o in pairs] == [ChunkIds(key)(uid, o) for uid, o in pairs]
    assert [remembering(uid, o) for uid, o in pairs] == [fresh(uid, o) for uid, o in pairs]
    assert ChunkIds(ChunkIds.new_key())("page:1", 0) != fresh("page:1", 0)
