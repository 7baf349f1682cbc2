"""Paging with a cursor (issue 31 item 3), on both engines: every ranked read — search,
lexical, fuzzy, vector, sql, graph — pages through one ranking, made at the first page's
content root, to the bound of 1,000 results.

Pages never repeat or skip a result while a writer publishes between them (new matches,
updates to results already shown and to results still to come); a result the caller may
no longer read is left out and said so; a cursor is bound to its identity and request, and
one that was not handed out is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from knowledge_store.errors import InvalidRequest
from knowledge_store.retrieval.paging import cursor_offset
from knowledge_store.store import KnowledgeStore
from tests.conftest import EngineUnderTest

WORDS = ("replication", "failover", "vacuum", "checkpoint", "index")


def _records(start: int, count: int, extra: str = "") -> list[dict[str, Any]]:
    return [
        {
            "uid": f"doc:{i:04d}",
            "type": "page" if i % 3 else "ticket",
            "title": f"Document {i}",
            "body": f"# Document {i}\n\n{WORDS[i % 5]} replication lag note {i} {extra}\n\n"
            f"## More\n\nsecond part {WORDS[(i + 1) % 5]} replication {i}",
            "updated_at": f"2024-01-{i % 28 + 1:02d}",
            "edges": [{"label": "partOf", "to": "doc:hub"}],
            "acl": ["everyone"] if i % 4 else ["group:ops"],
        }
        for i in range(start, start + count)
    ] + (
        [
            {
                "uid": "doc:hub",
                "type": "chapter",
                "title": "Hub",
                "body": "the hub",
                "acl": ["everyone"],
            }
        ]
        if start == 0
        else []
    )


@pytest.fixture
def paged(engine: EngineUnderTest, embedder: Any) -> Iterator[KnowledgeStore]:
    with engine.open(embedder) as store:
        store.ingest_records(_records(0, 70))
        store.add_member("group:ops", "user:ops")
        yield store


def _items(answer: Any) -> list[Any]:
    if hasattr(answer, "results"):
        return [r.uid for r in answer.results]
    first = answer.hits[0] if answer.hits else None
    if first is not None and hasattr(first, "text"):  # chunk hits: a chunk by entity + text
        return [(h.uid, h.start) for h in answer.hits]
    return [h.uid for h in answer.hits]


READS: dict[str, Callable[..., Any]] = {
    "search": lambda s, **kw: s.search("replication lag", **kw),
    "lexical": lambda s, **kw: s.lexical("replication", **kw),
    "fuzzy": lambda s, **kw: s.fuzzy("replicaton", **kw),
    "vector": lambda s, **kw: s.vector("replication lag note", **kw),
    "sql": lambda s, **kw: s.sql({"type": ["page", "ticket"]}, **kw),
    "graph": lambda s, **kw: s.graph(["doc:hub"], **kw),
}


def _all_pages(
    store: KnowledgeStore,
    name: str,
    k: int,
    between: Callable[[int], None] | None = None,
    **kw: Any,
) -> tuple[list[Any], list[Any]]:
    """Every page of ``name``'s cursor: the items in order, and the answers."""
    read = READS[name]
    answer = read(store, k=k, cursor="*", **kw)
    answers, items = [answer], _items(answer)
    while answer.next is not None:
        if between is not None:
            between(len(answers))
        answer = read(store, k=k, cursor=answer.next, **kw)
        answers.append(answer)
        items += _items(answer)
    return items, answers


@pytest.mark.parametrize("name", list(READS))
def test_every_ranked_read_pages_through_one_ranking(paged: KnowledgeStore, name: str) -> None:
    items, answers = _all_pages(paged, name, 7, identity="user:ops")
    assert len(items) == len(set(items)) and len(answers) > 2
    assert answers[-1].next is None
    once, _ = _all_pages(paged, name, 100, identity="user:ops")
    assert items == once  # the same ranking, whatever the page size
    if name != "search":  # a primitive's pages are its ranking read whole (search: k ≤ 100)
        whole = READS[name](paged, k=1000, identity="user:ops")
        assert items == _items(whole)
        ranks = [h.rank for a in answers for h in a.hits]
        assert ranks == list(range(1, len(ranks) + 1))
    roots = {a.content_root for a in answers}
    assert roots == {paged.content_root()}


@pytest.mark.parametrize("name", list(READS))
def test_pages_never_repeat_or_skip_while_a_writer_publishes(
    paged: KnowledgeStore, name: str
) -> None:
    """Between pages the store gains new matching entities and updates entities that were
    shown and that are still to come; the pages are still the first page's ranking."""
    expected, _ = _all_pages(paged, name, 1000 if name != "search" else 100)
    root = paged.content_root()
    published = []

    def publish(page: int) -> None:
        fresh = _records(200 + 10 * page, 5, extra="replication replication")
        edited = [{**r, "title": f"{r['title']} (edited {page})"} for r in _records(page * 9, 2)]
        published.append(paged.ingest_records(fresh + edited).content_root)

    items, answers = _all_pages(paged, name, 5, between=publish)
    assert published and root not in published
    assert items == expected  # no repeat, no gap, nothing new: the ranking of the first page
    assert all(a.content_root == root for a in answers)
    later = [a for a in answers[1:] if a.warnings]
    assert later and all("was read at" in w for a in later for w in a.warnings[:1])


def test_a_result_no_longer_readable_is_left_out_and_said(paged: KnowledgeStore) -> None:
    first = paged.sql({"type": ["page", "ticket"]}, identity="user:ops", k=5, cursor="*")
    ranked, _ = _all_pages(paged, "sql", 1000, identity="user:ops")
    private = [uid for uid in ranked[5:] if int(uid.split(":")[1]) % 4 == 0]
    assert private
    paged.remove_member("group:ops", "user:ops")
    rest, answers = [], []
    answer = first
    while answer.next is not None:
        answer = paged.sql(
            {"type": ["page", "ticket"]}, identity="user:ops", k=5, cursor=answer.next
        )
        answers.append(answer)
        rest += _items(answer)
    assert not set(private) & set(rest)
    assert rest == [uid for uid in ranked[5:] if uid not in private]
    assert any("no longer readable" in w for a in answers for w in a.warnings)


def test_a_cursor_is_bound_to_its_identity_request_and_offset(paged: KnowledgeStore) -> None:
    first = paged.lexical("replication", k=5, cursor="*", identity="user:ops")
    token = first.next
    assert token is not None and cursor_offset(token) == 5
    # the next page, with another page size: allowed
    assert len(paged.lexical("replication", k=9, cursor=token, identity="user:ops").hits) == 9
    refused = [
        dict(identity="user:other"),  # another identity
        dict(identity="user:ops", filters={"type": ["page"]}),  # another request
    ]
    for change in refused:
        with pytest.raises(InvalidRequest, match="not one this store handed out"):
            paged.lexical("replication", k=5, cursor=token, **change)
    with pytest.raises(InvalidRequest, match="not one this store handed out"):
        paged.lexical("other words", k=5, cursor=token, identity="user:ops")
    version, cursor, _, mac = token.split(".")
    for forged in (f"{version}.{cursor}.500.{mac}", f"{version}.{cursor}.5.{mac[:-2]}AA", "c1.x"):
        with pytest.raises(InvalidRequest, match="not one this store handed out"):
            paged.lexical("replication", k=5, cursor=forged, identity="user:ops")
    with pytest.raises(InvalidRequest, match="cursor"):
        paged.search("replication", cursor="")  # an empty cursor is no cursor


@pytest.mark.embedded_only(reason="the bound is the paging module's, the same on every engine")
def test_a_cursor_never_reaches_past_the_first_thousand_results(
    engine: EngineUnderTest, embedder: Any
) -> None:
    with engine.open(embedder) as store:
        many = [
            {
                "uid": f"n:{i}",
                "type": "page",
                "title": f"Note {i}",
                "body": f"common replication word {i}",
                "acl": ["everyone"],
            }
            for i in range(1100)
        ]
        store.ingest_records(many)
        items, answers = _all_pages(store, "sql", 100)
        assert len(items) == 1000 == len(set(items)) and answers[-1].next is None
        items, _ = _all_pages(store, "lexical", 250)
        assert len(items) == 1000
