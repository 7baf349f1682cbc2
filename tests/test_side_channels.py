"""What hidden entities may and may not change in a reader's answers (docs/security.md).

Two stores hold the same visible entities; one also holds entities the reader
can't see. Asked the same questions as the reader, they must agree on every
result set, length and count, on the dense scores and order, and on sql and
aggregates. Only the lexical BM25 *scores* (and so the lexical order and what
fusion makes of it) may differ: corpus-wide statistics, the documented side
channel.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from knowledge_store.ingest.embedding import Embedder
from knowledge_store.store import KnowledgeStore

READER = "user:reader"
WORDS = ["vacuum", "index", "replica", "checkpoint", "merger", "salary", "table", "lock"]
QUERIES = ["vacuum index", "merger salary", "replica checkpoint lock", "table"]
KINDS = ["page", "ticket"]

bodies = st.lists(st.sampled_from(WORDS), min_size=1, max_size=4, unique=True).map(" ".join)
entities = st.lists(st.tuples(bodies, st.sampled_from(KINDS)), min_size=1, max_size=5)


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="ks-side-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _records(prefix: str, acl: str, items: list[tuple[str, str]]) -> list[dict[str, object]]:
    return [
        {"uid": f"{prefix}{i}", "type": kind, "title": f"{prefix}{i}", "body": body, "acl": [acl]}
        for i, (body, kind) in enumerate(items)
    ]


def _answers(store: KnowledgeStore) -> dict[str, object]:
    out: dict[str, object] = {}
    for q in QUERIES:
        lexical = store.lexical(q, identity=READER, k=50)
        out[f"lexical {q}: uids"] = sorted(h.uid for h in lexical.hits)
        vector = store.vector(q, identity=READER, k=50)
        # scores fix the order; equal scores may tie in either order
        out[f"vector {q}"] = sorted((-round(h.score, 5), h.uid) for h in vector.hits)
        fused = store.search(q, identity=READER, k=50)
        out[f"search {q}: uids"] = sorted(r.uid for r in fused.results)
    out["sql"] = [h.uid for h in store.sql(identity=READER, k=100, order="title:asc").hits]
    out["aggregate"] = store.aggregate("count", "type", identity=READER).pairs()
    out["count"] = store.aggregate("count", identity=READER).pairs()
    return out


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(visible=entities, hidden=entities)
def test_hidden_entities_change_nothing_but_lexical_scores(
    embedder: Embedder,
    workdir: Path,
    visible: list[tuple[str, str]],
    hidden: list[tuple[str, str]],
) -> None:
    shown = _records("v", "everyone", visible)
    with_hidden = KnowledgeStore.open(workdir / "with", embedder=embedder)
    without = KnowledgeStore.open(workdir / "without", embedder=embedder)
    try:
        with_hidden.ingest_records(shown + _records("h", "group:secret", hidden))
        without.ingest_records(shown)
        assert _answers(with_hidden) == _answers(without)
    finally:
        with_hidden.close()
        without.close()
        shutil.rmtree(workdir / "with", ignore_errors=True)
        shutil.rmtree(workdir / "without", ignore_errors=True)


def test_lexical_scores_are_the_documented_side_channel(embedder: Embedder, workdir: Path) -> None:
    """The one thing that may differ does, as docs/security.md says: BM25 is corpus-wide."""
    shown = _records("v", "everyone", [("vacuum index", "page"), ("vacuum table", "page")])
    hidden = _records("h", "group:secret", [("index index index", "page")] * 3)
    scores = []
    for name, records in (("a", shown + hidden), ("b", shown)):
        with KnowledgeStore.open(workdir / name, embedder=embedder) as store:
            store.ingest_records(records)
            hits = store.lexical("vacuum index", identity=READER, k=10).hits
            assert {h.uid for h in hits} == {"v0", "v1"}
            scores.append({h.uid: h.score for h in hits})
    assert scores[0]["v0"] != pytest.approx(scores[1]["v0"])


def test_chunk_ids_count_no_hidden_chunk(embedder: Embedder, workdir: Path) -> None:
    """``chunk_id`` was the catalog's global row id: the gap between two visible ids counted
    the chunks hidden between them. Now it is a keyed hash of the chunk's own uid and
    ordinal: with the same key, a store with hidden entities between two visible ones
    gives the reader the very ids of a store without them."""
    key_name = "chunk_id_key"  # engines.shared.CHUNK_KEY_META

    first = _records("v", "everyone", [("vacuum index", "page")])
    hidden = _records("h", "group:secret", [("vacuum table lock", "page")] * 4)
    last = _records("w", "everyone", [("vacuum checkpoint", "page")])
    with KnowledgeStore.open(workdir / "ids-a", embedder=embedder) as a:
        key = a.engine.catalog.get_meta(key_name)  # type: ignore[attr-defined]
    if key is not None:
        with KnowledgeStore.open(workdir / "ids-b", embedder=embedder) as b:
            b.engine.catalog.set_meta(key_name, key)  # type: ignore[attr-defined]

    def ids(store: KnowledgeStore) -> dict[str, object]:
        lexical = store.lexical("vacuum", identity=READER, k=50).hits
        vector = store.vector("vacuum", identity=READER, k=50).hits
        search = store.search("vacuum", identity=READER, k=50).results
        return {
            "lexical": sorted((h.uid, h.chunk_id) for h in lexical),
            "vector": sorted((h.uid, h.chunk_id) for h in vector),
            "evidence": sorted((r.uid, e.chunk_id) for r in search for e in r.evidence),
            "content": sorted(
                (uid, c.chunk_id)
                for uid in ("v0", "w0")
                for c in store.content(uid, identity=READER).chunks
            ),
        }

    answers = []
    for name, batches in (("ids-a", (first, hidden, last)), ("ids-b", (first, last))):
        with KnowledgeStore.open(workdir / name, embedder=embedder) as store:
            for batch in batches:
                store.ingest_records(batch)
            answers.append(ids(store))
    assert answers[0] == answers[1]
    assert answers[0]["lexical"] and all(
        0 <= chunk_id < 2**53
        for _, chunk_id in answers[0]["lexical"]  # type: ignore[attr-defined]
    )
