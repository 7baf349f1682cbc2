"""Nothing validation accepts may fail in a derived index (issue 11, item 1), on every engine.

Records at every documented limit, with the text a derived index is most likely to
choke on — a 1M-character code block of distinct words (a PostgreSQL tsvector holds
1 MiB), a 250k-character heading, one 250k-character token, odd Unicode, the widest
(4-byte) characters in every name — are taken, answered by every primitive, rebuilt
and deleted. Vectors a derived index
cannot take are refused before anything is written.
"""

from __future__ import annotations

import random
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from knowledge_store.engines.base import PreparedEntity
from knowledge_store.engines.sql.publish import EMPTY_ROOT
from knowledge_store.errors import StoreError
from knowledge_store.ingest.pipeline import chunk_entity
from knowledge_store.model import (
    JSON_INT_RANGE,
    MAX_ACL_PRINCIPALS,
    MAX_ATTRIBUTE_DEPTH,
    MAX_BODY_CHARS,
    MAX_CHUNK_CHARS,
    MAX_EDGE_POSITION,
    MAX_EDGES,
    MAX_HREF_BYTES,
    MAX_NAME_CHARS,
    MAX_PRINCIPAL_ID_CHARS,
    MAX_TITLE_CHARS,
    MAX_UID_CHARS,
    Entity,
)
from knowledge_store.store import KnowledgeStore
from tests import postgres_support
from tests.conftest import HASH_SPEC

DIMENSION = 384  # HASH_SPEC's

_rng = random.Random(11)


def _words(chars: int) -> str:
    words: list[str] = []
    size = 0
    while size < chars:
        word = "".join(_rng.choices(string.ascii_lowercase, k=_rng.randint(3, 9)))
        words.append(word)
        size += len(word) + 1
    return " ".join(words)[:chars]


ODD = (
    "مرحبا بالعالم \u202bRTL\u202c e\u0301\u0301\u0301 👩\u200d👩\u200d👧 \ufffe\uffff"
    " \ue000 \U0001d54f \u2028 \u0085 \u00ad kiwi"
)


def _wide(chars: int) -> str:
    """``chars`` characters of four UTF-8 bytes each."""
    return "".join(chr(0x20000 + _rng.randrange(0xA6D0)) for _ in range(chars))


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth - 1):
        value = {"d": value}
    return value


RECORDS: list[dict[str, Any]] = [
    {"uid": "edge:fence", "body": "```\n" + _words(MAX_BODY_CHARS - 10) + "\n```"},
    # past MAX_CHUNK_CHARS is enough for the rest (the suite stays fast)
    {"uid": "edge:heading", "body": "# " + _words(250_000) + "\n\nkiwi under a long heading"},
    {"uid": "edge:token", "body": "k" * 250_000},
    {"uid": "edge:lines", "body": "\n".join(_words(30) for _ in range(8_000))},
    {
        # the widest text at every limit: 4-byte characters (CJK Extension B, NFC-stable)
        "uid": _wide(MAX_UID_CHARS),
        "type": _wide(MAX_NAME_CHARS),
        "source": _wide(MAX_NAME_CHARS),
        "status": "ステータス",
        "title": _wide(MAX_TITLE_CHARS - 10) + " Τίτλος\u200b!",
        "href": "/" + _wide(MAX_HREF_BYTES // 4 - 1) + "abc",
        "body": ODD,
        "created_at": "0001-01-01T00:00:00Z",
        "updated_at": "9999-12-31T23:59:59Z",
        "attributes": {
            "deep": _nested(MAX_ATTRIBUTE_DEPTH - 1),
            "ints": [JSON_INT_RANGE[0], JSON_INT_RANGE[1]],
            "float": 1e308,
            "text": "x" * 60_000,
            _wide(MAX_NAME_CHARS): ODD,
        },
        "edges": [
            {
                "label": "xref",
                "to": _wide(MAX_UID_CHARS - 6) + f"{i:06d}",
                "position": MAX_EDGE_POSITION - i,
            }
            for i in range(MAX_EDGES)
        ],
        "acl": [
            "everyone",
            *(
                f"user:{_wide(MAX_PRINCIPAL_ID_CHARS - 6)}{i:06d}"
                for i in range(MAX_ACL_PRINCIPALS - 1)
            ),
        ],
    },
]


def _full(record: dict[str, Any]) -> dict[str, Any]:
    return {"type": "page", "title": "Edge case", "acl": ["everyone"], **record}


@pytest.fixture
def hash_store(engine_kind: str, tmp_path: Path, pg_database: str) -> Iterator[KnowledgeStore]:
    location: Path | str = tmp_path / "hash"
    if engine_kind == "postgres":
        location = postgres_support.store_url(pg_database)
    with KnowledgeStore.open(location, embedder=HASH_SPEC) as store:
        yield store


def test_the_chunker_bounds_every_chunk() -> None:
    for record in RECORDS:
        entity = Entity(record["uid"], "page", "t", record["body"])
        chunks = chunk_entity(entity)
        assert all(len(c.text) <= MAX_CHUNK_CHARS for c in chunks)
        assert all(len(h) <= MAX_TITLE_CHARS for c in chunks for h in c.heading)
        assert all(c.text == entity.body[c.start : c.end] for c in chunks)


def test_records_at_every_limit_are_taken_and_answered(hash_store: KnowledgeStore) -> None:
    store = hash_store
    report = store.ingest_records([_full(r) for r in RECORDS])
    assert report.added == len(RECORDS) and not report.rejected
    uids = {r["uid"] for r in RECORDS}

    def everything() -> None:
        assert {h.uid for h in store.sql(k=100).hits} == uids
        assert store.aggregate("count").pairs() == [(None, len(uids))]
        assert "edge:heading" in {h.uid for h in store.lexical("kiwi long heading", k=20).hits}
        assert RECORDS[-1]["uid"] in {h.uid for h in store.lexical("kiwi", k=20).hits}
        assert store.vector("kiwi", k=5).hits
        assert store.search(ODD, k=5).results
        assert store.graph([RECORDS[-1]["uid"]], k=5).hits == []  # its targets don't exist
        wide = RECORDS[-1]["acl"][1]
        store.add_member(f"group:{wide[5:]}", wide)  # the widest membership
        assert store.query_graph("MATCH (n) RETURN count(*)").rows == [[len(uids)]]
        content = store.content(RECORDS[-1]["uid"])
        assert content.entity.title == RECORDS[-1]["title"]
        assert content.entity.attributes["ints"] == list(JSON_INT_RANGE)
        stats = store.stats()
        assert stats.entities == len(uids)
        assert stats.extra.get("indexes", {}).get("error") is None

    everything()
    store.rebuild()
    everything()
    store.delete(sorted(uids))
    assert store.stats().entities == 0


def _prepared(vectors: np.ndarray) -> PreparedEntity:
    entity = Entity("v:1", "page", "Vectors", "kiwi", acl=("everyone",))
    return PreparedEntity(entity, chunk_entity(entity), vectors)


@pytest.mark.parametrize(
    ("vectors", "says"),
    [
        (np.full((1, DIMENSION), np.nan, np.float32), "NaN"),
        (np.full((1, DIMENSION), np.inf, np.float32), "NaN or infinite"),
        (np.zeros((1, DIMENSION), np.float32), "all-zero"),
        (np.ones((1, DIMENSION + 1), np.float32), "shape"),
        (np.ones((2, DIMENSION), np.float32), "shape"),
    ],
)
def test_vectors_a_derived_index_cannot_take_are_refused_before_the_commit(
    hash_store: KnowledgeStore, vectors: np.ndarray, says: str
) -> None:
    store = hash_store
    store.ingest_records([_full({"uid": "first", "body": "kiwi"})])  # the store has its model
    root = store.content_root()
    with pytest.raises(StoreError, match=says):
        store.engine.writer.publish([_prepared(vectors)], [], kind="ingest")
    assert store.content_root() == root != EMPTY_ROOT
    assert {h.uid for h in store.lexical("kiwi", k=5).hits} == {"first"}
