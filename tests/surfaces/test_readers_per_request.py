"""One reader per request on every surface (STYLE 13), counted: the Python API, REST, GraphQL,
the MCP tools, the CLI and both pages, on both engines. Each request opens exactly one engine
reader — one snapshot, one identity expansion — however many reads it makes."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from typer.testing import CliRunner

from knowledge_store.model import Identity
from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.auth import Caller
from knowledge_store.surfaces.cli import app as cli
from knowledge_store.surfaces.http import create_app
from knowledge_store.surfaces.tools import call_tool
from tests.surfaces.serve_estate import BOB, TOKENS, build, call


class Counted:
    """Counts the readers an engine opens and the identity expansions they make."""

    def __init__(self) -> None:
        self.readers = 0
        self.expansions = 0


@pytest.fixture
def counted(
    store: KnowledgeStore, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[KnowledgeStore, Counted]]:
    build(store)
    counts = Counted()
    engine_class = type(store.engine)
    opened = engine_class.reader

    @contextmanager
    def reader(self: Any, identity: Identity) -> Iterator[Any]:
        counts.readers += 1
        with opened(self, identity) as r:
            yield r
            counts.expansions += r.explain()["identity_expansions"]

    monkeypatch.setattr(engine_class, "reader", reader)
    yield store, counts


def _once(counts: Counted, request: Callable[[], Any]) -> Any:
    before = counts.readers, counts.expansions
    answer = request()
    assert (counts.readers - before[0], counts.expansions - before[1]) == (1, 1)
    return answer


def test_every_surface_opens_one_reader_per_request(
    counted: tuple[KnowledgeStore, Counted],
) -> None:
    store, counts = counted
    app = create_app(store, tokens=TOKENS)
    bob = Caller(Identity("user:bob"), admin=False)
    location = str(store.engine.path)  # type: ignore[attr-defined]

    _once(counts, lambda: store.search("reindex a bloated index", identity="user:bob"))
    _once(counts, lambda: store.fuzzy("reindexx", identity="user:bob"))
    for route, body in (
        ("/v1/search", {"query": "reindex a bloated index"}),
        ("/v1/fuzzy", {"query": "vacum"}),
        ("/v1/related", {"uid": "unit:analyze"}),
    ):
        got = _once(counts, lambda r=route, b=body: call(app, "POST", r, json=b, headers=BOB))
        assert got.status_code == 200, got.text
    query = '{ search(query: "vacuum") { results { uid ranks { list rank } } } }'
    got = _once(counts, lambda: call(app, "POST", "/graphql", json={"query": query}, headers=BOB))
    assert got.json()["data"]["search"]["results"]
    _once(counts, lambda: call_tool(store, bob, "search", {"query": "vacuum"}))
    _once(counts, lambda: call_tool(store, bob, "get_learning_path", {"uid": "unit:analyze"}))
    # the pages: the search page makes five reads, the entity page three — on one reader
    page = _once(
        counts, lambda: call(app, "GET", "/", params={"q": "reindex a bloated index"}, headers=BOB)
    )
    assert page.status_code == 200 and "Neighbours" in page.text
    entity = _once(counts, lambda: call(app, "GET", "/entity/unit:analyze", headers=BOB))
    assert entity.status_code == 200 and "Learning path" in entity.text
    # the CLI (in this process: the command opens the store again, on the same engine class)
    if store.engine.name == "embedded":
        ran = _once(
            counts,
            lambda: CliRunner().invoke(
                cli, ["--store", location, "search", "vacuum", "--as", "user:bob", "--json"]
            ),
        )
        assert ran.exit_code == 0, ran.output
        assert json.loads(ran.stdout)["results"]
