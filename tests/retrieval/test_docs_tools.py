"""Docs tools on the one traversal: get_related, get_learning_path, resolve_xref, graph_facets."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from knowledge_store.errors import BoundExceeded, InvalidRequest, NotFound
from knowledge_store.ingest.embedding import Embedder
from knowledge_store.model import Identity
from knowledge_store.store import (
    KnowledgeStore,
    get_learning_path,
    get_related,
    graph_facets,
    resolve_xref,
)
from tests import graph_estate


@pytest.fixture(scope="module")
def estate(engine: Any, embedder: Embedder) -> Iterator[KnowledgeStore]:
    """The graph estate, once per engine."""
    store = graph_estate.build(engine.location("graph"), embedder)
    yield store
    store.close()


# -- get_related ---------------------------------------------------------------------------------------


def test_get_related_is_the_graph_primitive_from_one_uid(estate: KnowledgeStore) -> None:
    related = get_related(estate, "page:start", depth=2, labels=["xref"])
    primitive = estate.graph(["page:start"], depth=2, labels=["xref"])
    assert [h.model_dump() for h in related.related] == [
        {**h.model_dump(), "href": h.href} for h in primitive.hits
    ]
    shape = related.to_dict()
    assert shape["uid"] == "page:start" and shape["title"] == "Start here"
    assert shape["related"][0] | {"href": None} == primitive.hits[0].to_dict() | {"href": None}
    assert shape["related"][0]["href"] == "/docs/page/m3"


def test_get_related_takes_an_engine_too(estate: KnowledgeStore) -> None:
    on_engine = get_related(estate.engine, "page:m1", identity=Identity("everyone"))
    assert {h.uid for h in on_engine.related} == {"page:start", "page:target"}


def test_get_related_bounds_and_acl(estate: KnowledgeStore) -> None:
    with pytest.raises(BoundExceeded):
        get_related(estate, "page:start", depth=4)
    with pytest.raises(NotFound, match="no entity with uid 'page:private'"):
        get_related(estate, "page:private")
    with pytest.raises(NotFound):
        get_related(estate, "page:ghost")
    assert {h.uid for h in get_related(estate, "page:private", identity="user:alice").related} == {
        "page:start",
        "page:beyond",
    }


# -- get_learning_path ----------------------------------------------------------------------------------


def _units(path: object) -> list[tuple[str, int, int | None]]:
    return [(u.uid, u.depth, u.position) for u in path.units]  # type: ignore[attr-defined]


def test_learning_path_of_a_unit_is_its_whole_path_in_order(estate: KnowledgeStore) -> None:
    path = get_learning_path(estate, "unit:storage-1")
    assert path.root == "lp:azure"
    assert path.ancestors == ("lp:azure", "mod:storage")
    assert _units(path) == [
        ("lp:azure", 0, None),
        ("mod:intro", 1, 1),
        ("unit:intro-1", 2, 1),
        ("unit:intro-2", 2, 2),
        ("unit:intro-3", 2, 3),
        ("mod:storage", 1, 2),
        ("unit:storage-2", 2, 1),  # by position, not by uid
        ("unit:storage-1", 2, 2),
    ]
    assert path.index == 7 and path.units[path.index].uid == "unit:storage-1"
    shape = path.to_dict()
    assert shape["count"] == 8 and shape["units"][6]["parent"] == "mod:storage"


def test_learning_path_of_the_root_is_its_tree(estate: KnowledgeStore) -> None:
    path = get_learning_path(estate, "lp:azure")
    assert path.index == 0 and path.ancestors == ()
    assert _units(path) == _units(get_learning_path(estate, "unit:intro-2"))


def test_learning_path_honours_the_acl(estate: KnowledgeStore) -> None:
    alice = _units(get_learning_path(estate, "unit:intro-1", identity="user:alice"))
    assert ("unit:storage-3", 2, 3) in alice
    assert alice[-2:] == [("mod:secret", 1, 3), ("unit:secret-1", 2, 1)]
    # for everyone the secret module is not there, so its unit stands alone
    alone = get_learning_path(estate, "unit:secret-1")
    assert alone.root == "unit:secret-1" and _units(alone) == [("unit:secret-1", 0, None)]
    with pytest.raises(NotFound):
        get_learning_path(estate, "mod:secret")


def test_learning_path_of_a_code_sample_is_its_page(estate: KnowledgeStore) -> None:
    path = get_learning_path(estate, "sample:upload")
    assert path.root == "page:blob" and path.index == 1


# -- resolve_xref -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ref", "uid", "how", "anchor"),
    [
        ("page:m1", "page:m1", "uid", None),
        ("/docs/storage/blobs", "page:blob", "href", None),
        ("/docs/storage/blobs#upload", "page:blob", "href", "upload"),
        ("/docs/storage/blobs/", "page:blob", "href", None),
        ("https://learn.example.com/docs/storage/blobs", "page:blob", "href", None),
        ("/docs/storage/accounts", "page:accounts", "href", None),  # stored with #create
        ("/docs/storage/accounts#create", "page:accounts", "href", "create"),
        ("Azure Fundamentals", "lp:azure", "title", None),
    ],
)
def test_resolve_xref(
    estate: KnowledgeStore, ref: str, uid: str, how: str, anchor: str | None
) -> None:
    found = resolve_xref(estate, ref)
    assert found.entity is not None and found.entity.uid == uid
    assert (found.matched_by, found.anchor, found.candidates) == (how, anchor, [])


def test_resolve_xref_ambiguous_gives_candidates_it_may_read(estate: KnowledgeStore) -> None:
    everyone = resolve_xref(estate, "Overview")
    assert everyone.entity is None
    assert [c.uid for c in everyone.candidates] == ["page:ov1", "page:ov2"]
    alice = resolve_xref(estate, "Overview", identity="user:alice")
    assert [c.uid for c in alice.candidates] == ["page:ov-secret", "page:ov1", "page:ov2"]
    assert set(everyone.to_dict()) == {"ref", "matched_by", "entity", "candidates", "anchor"}


def test_resolve_xref_hides_what_it_may_not_read(estate: KnowledgeStore) -> None:
    for ref in ("page:private", "Private notes", "/docs/page/private", "/docs/c/overview"):
        with pytest.raises(NotFound):
            resolve_xref(estate, ref)
    assert resolve_xref(estate, "Private notes", identity="user:alice").entity is not None
    with pytest.raises(InvalidRequest):
        resolve_xref(estate, "  ")


# -- graph_facets -------------------------------------------------------------------------------------------


def test_graph_facets_count_visible_neighbours(estate: KnowledgeStore) -> None:
    facets = graph_facets(estate, ["page:blob", "page:start"])
    assert facets.neighbours == 7
    assert facets.by_label == {
        "xref": 3,
        "appliesTo": 1,
        "dependsOn": 1,
        "derivedFrom": 1,
        "implementedBy": 1,
        "partOf": 1,
    }
    assert facets.by_type == {"page": 5, "codeSample": 1, "product": 1}
    alice = graph_facets(estate, ["page:blob", "page:start"], identity="user:alice")
    assert alice.neighbours == 8 and alice.by_label["xref"] == 4  # page:private; never page:nobody
    assert set(facets.to_dict()) == {"uids", "neighbours", "by_label", "by_type", "content_root"}


def test_graph_facets_exclude_the_set_and_ignore_unreadable_members(estate: KnowledgeStore) -> None:
    facets = graph_facets(estate, ["page:m1", "page:target", "page:private"])
    assert facets.by_type == {"page": 2}  # start and m2; m1 and target are in the set
    with pytest.raises(InvalidRequest):
        graph_facets(estate, [])
