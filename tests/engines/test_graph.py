"""The graph primitive: ranking, paths, direction, labels, bounds, ACL, dangling edges, fan-out cap.

Also: the primitive and query_graph's variable-length patterns are one traversal
(the same entities at the same hop distance, for every start, direction, depth).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from knowledge_store.engines.base import PreparedEntity
from knowledge_store.engines.embedded.engine import EmbeddedEngine
from knowledge_store.engines.sql.dialect import SQLITE
from knowledge_store.engines.sql.traversal import traverse
from knowledge_store.errors import BoundExceeded, InvalidRequest, NotFound, UnknownLabel
from knowledge_store.ingest.embedding import Embedder
from knowledge_store.model import FANOUT_CAP, LABELS, Edge, Entity, GraphQuery, Identity
from knowledge_store.store import KnowledgeStore
from tests import graph_estate


@pytest.fixture(scope="module")
def estate(engine: Any, embedder: Embedder) -> Iterator[KnowledgeStore]:
    """The graph estate, once per engine."""
    store = graph_estate.build(engine.location("graph"), embedder)
    yield store
    store.close()


def _path(hit: object) -> list[tuple[str, str | None]]:
    return [(s.uid, s.label) for s in hit.path]  # type: ignore[attr-defined]


def test_ranked_by_hops_then_paths_then_recency_with_one_path_each(estate: KnowledgeStore) -> None:
    answer = estate.graph(["page:start"], depth=2, labels=["xref"], direction="out")
    assert [(h.uid, h.hops, h.paths) for h in answer.hits] == [
        ("page:m3", 1, 1),  # hop 1: all one path; newest first (2024-03, -02, -01)
        ("page:m2", 1, 1),
        ("page:m1", 1, 1),
        ("page:target", 2, 2),  # two shortest paths (via m1 and m2) beat a newer page
        ("page:other", 2, 1),
    ]
    assert [h.rank for h in answer.hits] == [1, 2, 3, 4, 5]
    target = answer.hits[3]
    # one path, through the best-ranked parent
    assert _path(target) == [("page:start", None), ("page:m2", "xref"), ("page:target", "xref")]
    assert answer.capped is False
    assert answer.content_root == estate.content_root()


def test_the_json_shape(estate: KnowledgeStore) -> None:
    shape = estate.graph(["page:start"]).to_dict()
    assert set(shape) == {"content_root", "hits", "capped"}
    assert set(shape["hits"][0]) == {"uid", "title", "type", "rank", "hops", "paths", "path"}
    assert set(shape["hits"][0]["path"][0]) == {"uid", "label", "direction"}
    assert shape["hits"][0]["path"][0]["direction"] is None  # the start: no edge reached it


def test_each_path_step_says_which_way_its_edge_points(estate: KnowledgeStore) -> None:
    """``direction``: ``out`` when the previous entity is the edge's source, ``in`` when it is
    its target — a walk in both directions tells a dependency from a dependent (issue 25)."""
    into = estate.graph(["page:target"], depth=2, direction="both", labels=["xref"])
    steps = {h.uid: [(s.uid, s.label, s.direction) for s in h.path] for h in into.hits}
    # page:m2 -xref-> page:target: walked from the target, the edge points back
    assert steps["page:m2"] == [("page:target", None, None), ("page:m2", "xref", "in")]
    out = estate.graph(["page:start"], depth=1, direction="both", labels=["xref"])
    assert {s.direction for h in out.hits for s in h.path[1:]} == {"out"}
    for hit in estate.graph(["page:m1"], depth=2, direction="both").hits:
        for before, step in zip(hit.path, hit.path[1:], strict=False):
            src, dst = (before.uid, step.uid) if step.direction == "out" else (step.uid, before.uid)
            labels = {e.label for e in estate.content(src).edges.out if e.uid == dst}
            assert step.label in labels, (hit.uid, before.uid, step)


def test_direction(estate: KnowledgeStore) -> None:
    into = estate.graph(["page:target"], depth=2, direction="in")
    assert [(h.uid, h.hops, h.paths) for h in into.hits] == [
        ("page:m2", 1, 1),
        ("page:m1", 1, 1),
        ("page:start", 2, 2),
    ]
    assert estate.graph(["page:target"], depth=2, direction="out").hits == []
    both = {h.uid for h in estate.graph(["page:m1"], depth=1, direction="both").hits}
    assert both == {"page:start", "page:target"}


def test_labels(estate: KnowledgeStore) -> None:
    samples = estate.graph(["page:blob"], labels=["implementedBy"], direction="out")
    assert [h.uid for h in samples.hits] == ["sample:upload"]
    assert _path(samples.hits[0]) == [("page:blob", None), ("sample:upload", "implementedBy")]
    two = estate.graph(["page:blob"], labels=["appliesTo", "derivedFrom"])
    assert {h.uid for h in two.hits} == {"product:storage", "page:derived"}
    every = estate.graph(["page:blob"], labels=[])
    assert {h.uid for h in every.hits} == {
        "sample:upload",
        "product:storage",
        "page:derived",
        "page:accounts",
    }


@pytest.mark.parametrize(
    ("depth", "words"),
    [
        (0, "below the minimum of 1"),
        (4, "exceeds the maximum of 3"),
        (9, "exceeds the maximum of 3"),
    ],
)
def test_depth_outside_1_to_3_says_the_bound(
    estate: KnowledgeStore, depth: int, words: str
) -> None:
    with pytest.raises(BoundExceeded) as caught:
        estate.graph(["page:start"], depth=depth)
    assert words in caught.value.message
    assert caught.value.details["maximum"] == 3


def test_unknown_label_lists_the_nine(estate: KnowledgeStore) -> None:
    with pytest.raises(UnknownLabel) as caught:
        estate.graph(["page:start"], labels=["xref", "mentions"])
    assert caught.value.details["allowed"] == list(LABELS)


def test_bad_requests(estate: KnowledgeStore) -> None:
    with pytest.raises(InvalidRequest, match="at least one start uid"):
        estate.graph([])
    with pytest.raises(InvalidRequest, match="use one of: out, in, both"):
        estate.graph(["page:start"], direction="sideways")
    with pytest.raises(InvalidRequest, match="k must be between 1 and 1000"):
        estate.graph(["page:start"], k=0)


def test_dangling_edges_are_ignored(estate: KnowledgeStore) -> None:
    uids = {h.uid for h in estate.graph(["page:start"], depth=3).hits}
    assert "page:ghost" not in uids


def test_nothing_is_reached_through_an_unreadable_entity(estate: KnowledgeStore) -> None:
    everyone = {h.uid for h in estate.graph(["page:start"], depth=3).hits}
    assert "page:private" not in everyone and "page:beyond" not in everyone
    alice = estate.graph(["page:start"], depth=3, identity="user:alice")
    beyond = next(h for h in alice.hits if h.uid == "page:beyond")
    assert beyond.hops == 2
    assert _path(beyond) == [
        ("page:start", None),
        ("page:private", "xref"),
        ("page:beyond", "xref"),
    ]
    # the module only alice reads hides its unit from everyone else
    units = {h.uid for h in estate.graph(["lp:azure"], depth=3, labels=["partOf"]).hits}
    assert "unit:secret-1" not in units and "mod:secret" not in units
    bob = {h.uid for h in estate.graph(["lp:azure"], depth=3, identity="user:bob").hits}
    assert "unit:storage-3" in bob and "unit:secret-1" not in bob


def test_unreadable_or_missing_starts_contribute_nothing(estate: KnowledgeStore) -> None:
    # none readable: not_found, alike for a hidden start and a missing one (as content)
    with pytest.raises(NotFound, match="no entity with uid 'page:private'"):
        estate.graph(["page:private"], depth=2)
    with pytest.raises(NotFound, match="no entity with uid 'page:nobody', 'page:ghost'"):
        estate.graph(["page:nobody", "page:ghost"], depth=2)
    mixed = estate.graph(["page:private", "page:m3"], depth=1, direction="out")
    assert [h.uid for h in mixed.hits] == ["page:other"]


def test_several_starts_add_their_paths(estate: KnowledgeStore) -> None:
    answer = estate.graph(["page:m1", "page:m2", "page:m3"], depth=1, direction="out")
    assert [(h.uid, h.paths) for h in answer.hits] == [("page:target", 2), ("page:other", 1)]
    starts = {"page:m1", "page:m2"}
    assert not starts & {h.uid for h in estate.graph(sorted(starts), depth=2).hits}


def test_k_cuts_the_ranking(estate: KnowledgeStore) -> None:
    full = estate.graph(["lp:azure"], depth=3, k=1000)
    top = estate.graph(["lp:azure"], depth=3, k=3)
    assert [h.uid for h in top.hits] == [h.uid for h in full.hits[:3]]


@pytest.mark.embedded_only(reason="walks the embedded catalog's connection with the SQLite dialect")
def test_fan_out_cap_is_reported(estate: KnowledgeStore) -> None:
    catalog = estate.engine.catalog  # type: ignore[attr-defined]
    with catalog.read() as conn:
        walk = GraphQuery(starts=("page:start",), depth=2, fanout=2)
        small = traverse(conn, SQLITE, ["everyone"], walk)
    assert small.capped is True
    assert [r.uid for r in small.reached if r.hops == 1] == ["page:m3", "page:m2"]


def test_fan_out_cap_default_on_a_hub(tmp_path: Path) -> None:
    engine = EmbeddedEngine(tmp_path / "hub")
    try:
        leaves = FANOUT_CAP + 5
        hub = Entity(
            "hub",
            "page",
            "hub",
            "",
            edges=tuple(Edge("hub", "xref", f"leaf:{i}") for i in range(leaves)),
            acl=("everyone",),
        )
        rows = [hub] + [
            Entity(f"leaf:{i}", "page", f"leaf {i}", "", acl=("everyone",)) for i in range(leaves)
        ]
        engine.catalog.apply_publish(
            [PreparedEntity(e, (), np.zeros((0, 384), np.float32)) for e in rows], [], kind="ingest"
        )
        with engine.reader(Identity()) as r:
            answer = r.graph(GraphQuery(starts=("hub",), k=1000))
            leaf = r.graph(GraphQuery(starts=("leaf:1",)))
        assert answer.capped is True and len(answer.hits) == 1000
        assert leaf.capped is False
    finally:
        engine.close()


# -- one traversal ----------------------------------------------------------------------------------

_ARROWS = {"out": ("-", "->"), "in": ("<-", "-"), "both": ("-", "-")}


@pytest.mark.parametrize("direction", ["out", "in", "both"])
@pytest.mark.parametrize("labels", [(), ("partOf",), ("xref", "dependsOn", "implementedBy")])
def test_the_primitive_and_query_graph_walk_the_same_graph(
    estate: KnowledgeStore, direction: str, labels: tuple[str, ...]
) -> None:
    left, right = _ARROWS[direction]
    types = (":" + "|".join(labels)) if labels else ""
    for who in ("everyone", "user:alice"):
        for record in graph_estate.RECORDS:
            uid = record["uid"]
            with estate.reader(who) as r:  # the engine's walk: a hidden start reaches nothing
                hits = r.engine.graph(
                    GraphQuery(starts=(uid,), depth=3, labels=labels, direction=direction, k=1000)
                ).hits
            for hops in (1, 2, 3):
                text = (
                    f"MATCH (a {{uid: $uid}}){left}[{types}*{hops}..{hops}]{right}(b)"
                    " RETURN b.uid ORDER BY b.uid LIMIT 1000"
                )
                rows = estate.query_graph(text, {"uid": uid}, identity=who).rows
                assert [r[0] for r in rows] == sorted(h.uid for h in hits if h.hops == hops), (
                    who,
                    uid,
                    hops,
                )


@pytest.mark.parametrize("direction", ["out", "in", "both"])
def test_a_hop_sorted_in_python_is_the_ordered_statement(
    estate: KnowledgeStore, direction: str
) -> None:
    """A hop that is not capped is sorted in Python: the same rows in the same order as the
    ordered statement (frontier position, recency newest first and none last, uid,
    orientation, label), from every start and from all starts at once."""
    from knowledge_store.engines.sql.dialect import POSTGRES
    from knowledge_store.engines.sql.traversal import _in_edge_order, statements

    uids = [str(record["uid"]) for record in graph_estate.RECORDS]
    with estate.reader("everyone") as r:
        conn = r.engine._conn  # type: ignore[attr-defined]
        d = POSTGRES if type(r.engine).__name__.startswith("Postgres") else SQLITE
        _, unordered, ordered = statements(d, GraphQuery(starts=("x",), direction=direction))
        for frontier in [[uid] for uid in uids] + [uids, uids[::-1]]:
            params = {
                **d.held_params(r.engine.held),
                "frontier": d.bind_array(frontier),
                "seen": d.bind_array(frontier[:1]),
                "cap": FANOUT_CAP + 1,
            }
            expected = [tuple(row) for row in conn.execute(ordered, params).fetchall()]
            got = _in_edge_order([tuple(row) for row in conn.execute(unordered, params).fetchall()])
            assert got == expected, frontier


@pytest.mark.embedded_only(reason="SQLite's plan")
def test_a_hop_reads_entities_from_the_covering_index_only(estate: KnowledgeStore) -> None:
    """Each step looks its targets up by uid in ``entities_card`` and never reads the entity
    row (SQLite's planner would take the unique uid index and read the row)."""
    from knowledge_store.engines.sql.traversal import statements

    engine = estate.engine
    assert isinstance(engine, EmbeddedEngine)
    query = GraphQuery(starts=("page:start",), depth=1, k=10)
    with engine.reader(Identity("everyone")) as r, engine.catalog.read() as conn:
        params = {
            **SQLITE.held_params(r.held),
            "starts": SQLITE.bind_array(["page:start"]),
            "frontier": SQLITE.bind_array(["page:start"]),
            "seen": SQLITE.bind_array(["page:start"]),
            "cap": 11,
        }
        for sql in statements(SQLITE, query):
            steps = [str(row[3]) for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]
            lookups = [s for s in steps if s.startswith(("SEARCH e ", "SEARCH t "))]
            assert lookups, steps
            assert all("USING COVERING INDEX entities_card" in s for s in lookups), steps


@pytest.mark.parametrize(
    "given",
    [
        {"type": ["unit"]},
        {"not_type": ["unit", "page"]},
        {"updated_from": "2024-02-01"},
        {"type": ["page"], "updated_to": "2024-01-31"},
        {"source": ["nowhere"]},
    ],
)
def test_the_walk_says_which_entities_pass_the_filters(
    estate: KnowledgeStore, given: dict[str, Any]
) -> None:
    """``passes`` (read in the hop's statement, as fused search's graph stage uses it) is
    what the FILTERS statement of ``entities`` says, for every start and identity; the walk
    itself is the same with or without FILTERS (it goes through entities that fail them)."""
    from knowledge_store.model import Filters

    filters = Filters.build(**given)
    starts = tuple(str(record["uid"]) for record in graph_estate.RECORDS)
    for who in ("everyone", "user:alice"):
        with estate.reader(who) as r:
            for uid in starts:
                query = GraphQuery(starts=(uid,), depth=2, direction="both", k=1000)
                plain = r.engine.walk(query)
                walk = r.engine.walk(query, filters)
                assert [x[:-1] for x in walk.reached] == [x[:-1] for x in plain.reached]
                assert all(x.passes for x in plain.reached)
                reached = [x.uid for x in walk.reached]
                passing = set(r.engine.entities(reached, filters))
                assert {x.uid for x in walk.reached if x.passes} == passing, (who, uid)
