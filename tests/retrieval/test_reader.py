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


def _hydrations(explained: dict[str, Any]) -> int:
    """How many times the reader ran the chunk hydration statement."""
    from knowledge_store.engines.sql import statements
    from knowledge_store.engines.sql.dialect import POSTGRES, SQLITE

    dialect = POSTGRES if explained["engine"] == "postgres" else SQLITE
    hydrate = statements.chunk_cards(dialect, [1])[0]
    return sum(s["runs"] for s in explained["statements"] if s["sql"] == hydrate)


def test_a_fused_search_hydrates_once_after_fusion(estate_store: KnowledgeStore) -> None:
    with estate_store.reader() as r:
        answer = r.search("vacuum dead tuples", k=3)
        assert _hydrations(r.explain()) == 1  # the returned results' evidence, not each list
    assert answer.results and all(len(res.evidence) <= 3 for res in answer.results)
    assert any(res.evidence for res in answer.results)


def test_code_sample_search_hydrates_no_evidence(estate_store: KnowledgeStore) -> None:
    with estate_store.reader() as r:
        plain = r.search("vacuum dead tuples", k=3, evidence=0)
        assert _hydrations(r.explain()) == 0
    assert plain.results and not any(res.evidence for res in plain.results)
    estate_store.ingest_records(
        [
            {
                "uid": "sample:vacuum",
                "type": "codeSample",
                "title": "VACUUM a table",
                "body": "```sql\nVACUUM (VERBOSE, ANALYZE) orders;\n```\n",
                "acl": ["everyone"],
                "edges": [{"label": "partOf", "to": "guide:vacuum"}],
            }
        ]
    )
    with estate_store.reader() as r:
        samples = r.code_sample_search("vacuum orders")
        assert _hydrations(r.explain()) == 0  # the code comes from the entity itself
    assert [s.uid for s in samples.results] == ["sample:vacuum"]
    assert samples.results[0].code == "VACUUM (VERBOSE, ANALYZE) orders;"
