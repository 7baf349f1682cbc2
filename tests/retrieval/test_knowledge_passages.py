"""``search_knowledge`` never gives one passage twice (issue 25 item 15), on both engines.

A code sample's text is also its page's: both rank for a query about the code, and
the MCP tool gave the same passage as [1] and [2] — two slots of an agent's context for
one text. A passage the same as, inside or around a better-ranked one is folded into it
(listed in its source's ``folded``, named in the context block); a result left with no
passage of its own gets no number.
"""

from __future__ import annotations

from pathlib import Path

from knowledge_store.model import Identity
from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.auth import Caller
from knowledge_store.surfaces.tools import call_tool

PAGE = """# Replica promotion

## Promote

Promote the standby replica with pg_ctl:

```bash
pg_ctl promote -D /var/lib/postgresql/data
```

## Afterwards

Rebuild the old primary as a new standby once the promotion is done.
"""


def _words(text: str) -> str:
    return " ".join(text.split())


def _store(store: KnowledgeStore, tmp_path: Path) -> KnowledgeStore:
    folder = tmp_path / "runbooks"
    folder.mkdir()
    (folder / "promote.md").write_text(PAGE, encoding="utf-8")
    report = store.ingest([folder], format="markdown", acl=["everyone"])
    assert report.added == 2  # the page and its code sample
    return store


def test_a_sample_and_its_page_never_fill_two_slots(store: KnowledgeStore, tmp_path: Path) -> None:
    answer = _store(store, tmp_path).search_knowledge("pg_ctl promote the standby replica", k=5)
    ranked = [r.uid for r in store.search("pg_ctl promote the standby replica", k=5).results]
    assert {"promote", "promote#code-1"} <= set(ranked)  # both rank: the case to fold
    passages = [_words(p.text) for r in answer.results for p in r.passages]
    for i, one in enumerate(passages):
        for other in passages[i + 1 :]:
            assert one not in other and other not in one, (one, other)
    assert answer.context.count("pg_ctl promote -D") == 1
    folded = [(r.uid, f) for r in answer.results for f in r.folded]
    assert len(folded) == 1
    holder, fold = folded[0]
    assert {holder, fold.uid} == {"promote", "promote#code-1"}
    assert ranked.index(holder) < ranked.index(fold.uid)  # the better-ranked one is kept
    assert f"(the same passage: {fold.uid})" in answer.context
    assert [r.n for r in answer.results] == list(range(1, len(answer.results) + 1))


def test_the_mcp_tool_gives_each_passage_once(store: KnowledgeStore, tmp_path: Path) -> None:
    _store(store, tmp_path)
    out = call_tool(
        store,
        Caller(Identity("everyone")),
        "search_knowledge",
        {"query": "pg_ctl promote the standby replica", "k": 5},
    )
    texts = [_words(p["text"]) for r in out["results"] for p in r["passages"]]
    assert sum("pg_ctl promote -D" in t for t in texts) == 1
    assert out["context"].count("pg_ctl promote -D") == 1
