"""Issue 15 (a new user's first hour), on both engines and through the CLI.

Only writing commands create a store: a read on a path that holds none is
``not_found`` and leaves nothing behind (item 2). Zero results say why: blank
text is an error, a graph start nobody can read is ``not_found``, a type no
readable entity has gets a note naming the types (item 3). Code samples share
their page's ACL (item 1); titles sort without regard to case (item 11); a
search answer says how strong each match is (item 14).
"""

from __future__ import annotations

from tests.conformance.conftest import OpenStore

# -- sorting by title ignores case, ties by uid (issue 15, item 11) ------------------------------


def test_ordering_by_title_ignores_case_and_ties_go_by_uid(open_store: OpenStore) -> None:
    store = open_store("titles")
    titles = {"u1": "banana", "u2": "Apple", "u3": "cherry", "u4": "apple", "u5": "Banana"}
    store.ingest_records(
        [
            {"uid": uid, "type": "page", "title": t, "body": t, "acl": ["everyone"]}
            for uid, t in titles.items()
        ]
    )
    up = [h.uid for h in store.sql(order="title", k=10).hits]
    assert up == ["u2", "u4", "u1", "u5", "u3"]  # Apple, apple, banana, Banana, cherry
    down = [h.uid for h in store.sql(order="title:desc", k=10).hits]
    assert down == ["u3", "u1", "u5", "u2", "u4"]  # equal titles keep the uid order
