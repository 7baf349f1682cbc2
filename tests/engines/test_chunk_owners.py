"""The in-memory map of chunk owners names the same entity the catalog does, in every snapshot.

The map is read once, then caught up by id range; a chunk it lacks (deleted before
it was read, still in an older reader's snapshot) is looked up in the catalog.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from knowledge_store.engines.embedded.engine import EmbeddedEngine
from knowledge_store.engines.sql import statements
from knowledge_store.engines.sql.dialect import SQLITE
from knowledge_store.model import Filters, Identity
from knowledge_store.store import KnowledgeStore

pytestmark = pytest.mark.embedded_only(reason="the chunk-owner map is the embedded reader's own")

HASH = "hash:384"
EVERYONE = Identity("everyone")


def _page(uid: str, words: str = "alpha beta", chunks: int = 2) -> dict[str, object]:
    body = "\n\n".join(
        f"## Part {i}\n\n{words} {uid} {i}. " + "filler text " * 80 for i in range(chunks)
    )
    return {"uid": uid, "type": "page", "title": uid, "body": body}


def _engine(store: KnowledgeStore) -> EmbeddedEngine:
    engine = store.engine
    assert isinstance(engine, EmbeddedEngine)
    return engine


def _catalog_owners(engine: EmbeddedEngine) -> dict[int, str]:
    with engine.catalog.read() as conn:
        return {int(c): str(u) for c, u in conn.execute(*statements.chunk_owners(SQLITE))}


def _map_owners(engine: EmbeddedEngine, ids: list[int]) -> dict[int, str]:
    with engine.reader(EVERYONE) as r:
        return engine.owners.owners(ids, r._conn, r.publish)  # type: ignore[attr-defined]


def _vector(engine: EmbeddedEngine, k: int = 50) -> tuple[list[str], dict[str, object]]:
    with engine.reader(EVERYONE) as r:
        assert engine.dense is not None
        got = r.vector(np.ones(engine.dense.dimension, np.float32), k, Filters())
        return got.uids, dict(got.details)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[KnowledgeStore]:
    with KnowledgeStore.open(tmp_path / "s", embedder=HASH) as s:
        s.ingest_records([_page(f"p{i}") for i in range(6)], acl=["everyone"])
        yield s


def test_the_map_is_read_after_the_second_ask_and_answers_as_the_catalog(
    store: KnowledgeStore,
) -> None:
    engine = _engine(store)
    by_catalog, details = _vector(engine)
    assert details["owners"] == "catalog" and not engine.owners.loaded
    _vector(engine)  # the second ask starts the background read
    engine.owners.wait()
    assert engine.owners.loaded
    by_map, details = _vector(engine)
    assert details["owners"] == "memory" and by_map == by_catalog


def test_publishes_after_the_read_are_caught_up_and_deleted_chunks_fall_back(
    store: KnowledgeStore,
) -> None:
    engine = _engine(store)
    engine.owners.load()
    store.ingest_records([_page("new", chunks=3)], acl=["everyone"])
    store.ingest_records([_page("p1", words="gamma delta", chunks=4)], acl=["everyone"])
    store.delete(["p2"])
    truth = _catalog_owners(engine)
    assert _map_owners(engine, sorted(truth)) == truth
    assert set(_vector(engine, 200)[0]) == set(truth.values())

    # a reader on the snapshot before a delete, with a map read after it
    with engine.reader(EVERYONE) as old:
        before = _catalog_owners(engine)
        store.delete(["p3"])
        engine.owners.close()
        engine.owners.__init__(engine.catalog)  # type: ignore[misc]
        engine.owners.load()
        assert engine.dense is not None
        got = old.vector(np.ones(engine.dense.dimension, np.float32), 200, Filters())
        assert "p3" in got.uids
        assert {c: u for c, u in zip(got.ids, got.uids, strict=True)} == {
            c: before[c] for c in got.ids
        }


_OPS = st.lists(
    st.tuples(
        st.sampled_from(["upsert", "delete"]),
        st.sampled_from([f"e{i}" for i in range(5)]),
        st.integers(1, 4),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_OPS, read_after=st.integers(0, 8))
def test_the_map_always_names_the_catalogs_owner(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, str, int]], read_after: int
) -> None:
    where = tmp_path_factory.mktemp("owners") / "s"
    with KnowledgeStore.open(where, embedder=HASH) as s:
        engine = _engine(s)
        present: set[str] = set()
        for i, (op, uid, chunks) in enumerate(ops):
            if i == read_after:
                engine.owners.load()
            if op == "upsert":
                s.ingest_records([_page(uid, chunks=chunks)], acl=["everyone"])
                present.add(uid)
            elif uid in present:
                s.delete([uid])
                present.discard(uid)
        truth = _catalog_owners(engine)
        mapped = _map_owners(engine, sorted(truth))
        assert {c: mapped[c] for c in mapped} == {c: truth[c] for c in mapped}
        if engine.owners.loaded:
            assert mapped == truth
