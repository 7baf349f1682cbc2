"""A deliberately expensive query (dense graph, depth 4, no LIMIT) is cut at the time bound."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from knowledge_store.engines.base import PreparedEntity
from knowledge_store.engines.embedded.engine import EmbeddedEngine
from knowledge_store.errors import QueryTimeout
from knowledge_store.graphquery import parse
from knowledge_store.graphquery.check import checked_query
from knowledge_store.model import QUERY_GRAPH_TIME_LIMIT_S as TIME_LIMIT_S
from knowledge_store.model import Edge, Entity, Identity

NODES = 1500
DEGREE = 25


@pytest.fixture(scope="module")
def dense(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedEngine]:
    rng = random.Random(3)
    engine = EmbeddedEngine(Path(tmp_path_factory.mktemp("dense")) / "store")
    entities = []
    for i in range(NODES):
        targets = rng.sample(range(NODES), DEGREE)
        edges = tuple(Edge(f"n:{i}", "xref", f"n:{t}") for t in targets if t != i)
        entities.append(
            PreparedEntity(
                Entity(f"n:{i}", "page", f"node {i}", "", edges=edges, acl=("everyone",)),
                (),
                np.zeros((0, 384), np.float32),
            )
        )
    engine.catalog.apply_publish(entities, [], kind="ingest")
    yield engine
    engine.close()


def _run(
    engine: EmbeddedEngine, text: str, params: dict[str, Any], time_limit_s: float | None = None
) -> Any:
    with engine.reader(Identity()) as r:
        return r.query_graph(checked_query(text, params), params, time_limit_s=time_limit_s)


#: For the queries that must finish: the bound is wall-clock time, and a loaded machine can
#: pause a few-millisecond statement past 250 ms.
AMPLE_S = 30.0


def test_an_expensive_query_is_cancelled_at_the_bound(dense: EmbeddedEngine) -> None:
    parse("MATCH (a) RETURN a")  # the grammar is built once per process: not part of the query
    started, cpu_started = time.perf_counter(), time.thread_time()
    with pytest.raises(QueryTimeout) as caught:
        _run(dense, "MATCH (a)-[*1..4]-(b) RETURN a.uid, b.uid", {})
    elapsed = time.perf_counter() - started
    # cancelled at the bound: not before it (wall clock), and no work past it (this thread's
    # CPU time, where SQLite runs: a busy machine's pre-emption does not count)
    assert elapsed >= TIME_LIMIT_S
    assert time.thread_time() - cpu_started < TIME_LIMIT_S + 0.5
    error = caught.value
    assert error.code == "timeout" and error.exit_status == 2
    assert "ran past the 250 ms bound and was cancelled" in error.message
    assert error.details["limit_ms"] == 250


def test_the_store_answers_normally_after_a_timeout(dense: EmbeddedEngine) -> None:
    with pytest.raises(QueryTimeout):
        _run(dense, "MATCH (a)-[:xref*1..4]->(b) RETURN count(*)", {})
    assert not dense.catalog._conn().in_transaction
    text = "MATCH (a {uid: $uid})-[:xref]->(b) RETURN count(b)"
    answer = _run(dense, text, {"uid": "n:1"}, AMPLE_S)
    assert 0 < answer.rows[0][0] <= DEGREE


def test_an_anchored_deep_query_on_the_dense_graph_finishes(dense: EmbeddedEngine) -> None:
    text = "MATCH (a {uid: $uid})-[:xref*1..2]->(b) RETURN count(b) AS n"
    answer = _run(dense, text, {"uid": "n:7"}, AMPLE_S)
    assert answer.rows[0][0] > DEGREE
