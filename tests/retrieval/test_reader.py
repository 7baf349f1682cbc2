"""One reader per request: one snapshot, one identity expansion, one content root."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Any

from knowledge_store.store import KnowledgeStore

#: Another process changes what the search would find: it deletes the best page and
#: takes the chapter away from everyone.
ELSEWHERE = textwrap.dedent(
    """
    import sys
    from knowledge_store.store import KnowledgeStore
    with KnowledgeStore.open(sys.argv[1]) as store:
        store.delete(["guide:vacuum"])
        store.revoke("guide:admin", "everyone")
    """
)


def _location(store: KnowledgeStore) -> str:
    return str(getattr(store.engine, "path", ""))


def _shape(answer: Any) -> Any:
    out = answer.to_dict()
    out.pop("explain", None)
    return out


def test_a_publish_between_the_stages_changes_nothing_in_that_answer(
    estate_store: KnowledgeStore,
) -> None:
    text = "vacuum dead tuples server administration"
    before = estate_store.search(text, k=10)
    assert "guide:vacuum" in {r.uid for r in before.results}
    ran: list[str] = []

    def publish_elsewhere(stage: str) -> None:
        ran.append(stage)
        if stage == "vector":  # between the vector and the lexical stage
            subprocess.run(
                [sys.executable, "-c", ELSEWHERE, _location(estate_store)],
                check=True,
                timeout=120,
                env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
            )

    with estate_store.reader() as r:
        during = r.search(text, k=10, after_each=publish_elsewhere)
        again = r.content("guide:vacuum")  # the same snapshot: still there
    assert ran[:2] == ["vector", "lexical"]
    assert _shape(during) == _shape(before)
    assert again.content_root == before.content_root
    after = estate_store.search(text, k=10)
    assert after.content_root != before.content_root
    assert {"guide:vacuum", "guide:admin"}.isdisjoint(r.uid for r in after.results)


def test_explain_shows_one_snapshot_and_one_identity_expansion(
    estate_store: KnowledgeStore,
) -> None:
    answer = estate_store.search("replica lag monitoring", identity="user:sam", explain=True)
    assert answer.explain is not None
    reader = answer.explain["reader"]
    assert reader["identity_expansions"] == 1
    assert reader["snapshot"]["content_root"] == answer.content_root
    statements = reader["statements"]
    expanding = [s for s in statements if "memberships" in s["sql"]]
    assert len(expanding) == 1 and expanding[0]["runs"] == 1
    assert any("acl_set" in s["sql"] for s in statements)  # the real statements, not a sentence


def test_every_list_of_a_reader_shares_its_content_root(estate_store: KnowledgeStore) -> None:
    with estate_store.reader("user:sam") as r:
        roots = {
            r.search("replica").content_root,
            r.lexical("replica").content_root,
            r.sql().content_root,
            r.graph(["ticket:1042"]).content_root,
            r.content("ticket:1042").content_root,
            r.query_graph("MATCH (n {uid: $u}) RETURN n.uid", {"u": "ticket:1042"}).content_root,
        }
    assert roots == {estate_store.content_root()}
