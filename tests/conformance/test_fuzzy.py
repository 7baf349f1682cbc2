"""The ``fuzzy`` list on every engine: a misspelt word is searched as the nearest word the
chunks the caller may read hold; the ACL holds inside it, corrections included."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from knowledge_store.engines.spelling import correct, corrected, misspelt_candidates, variants
from knowledge_store.errors import InvalidRequest
from knowledge_store.store import KnowledgeStore

REPLICATION = {
    "uid": "guide:replication",
    "type": "page",
    "title": "Streaming Replication",
    "body": "# Streaming Replication\n\nStreaming replication keeps a standby current with"
    " its primary: the replication slot retains WAL until every standby has it.",
    "source": "docs",
    "status": "published",
    "created_at": "2024-04-01",
    "updated_at": "2024-04-02",
    "acl": ["everyone"],
}


@pytest.fixture
def docs(estate_store: KnowledgeStore) -> KnowledgeStore:
    estate_store.ingest_records([REPLICATION])
    return estate_store


def test_lexical_finds_nothing_for_a_typo_and_fuzzy_finds_the_word(
    docs: KnowledgeStore,
) -> None:
    lexical = docs.lexical("replicaton", identity="user:sam")
    assert lexical.hits == [] and lexical.warnings == ()  # a miss says nothing
    fuzzy = docs.fuzzy("replicaton", identity="user:sam")
    assert [h.uid for h in fuzzy.hits] == ["guide:replication"]
    assert fuzzy.hits[0].score > 0
    assert fuzzy.warnings == (
        "searched 'replicaton' as 'replication', the nearest word the chunks you can read hold",
    )
    assert fuzzy.to_dict().keys() == lexical.to_dict().keys() - {"warnings"} | {"warnings"}
    # spelt right, fuzzy is lexical
    right = docs.fuzzy("standby replica", identity="user:sam")
    assert [(h.chunk_id, h.score) for h in right.hits] == [
        (h.chunk_id, h.score) for h in docs.lexical("standby replica", identity="user:sam").hits
    ]
    assert right.warnings == ()


def test_a_correction_never_names_a_word_only_unreadable_chunks_hold(
    estate_store: KnowledgeStore,
) -> None:
    # 'payroll' is only in ticket:2001 (group:finance): sam can't read it, so 'payrol'
    # is not corrected for sam — exactly as for a word no chunk holds at all
    assert estate_store.fuzzy("payrol", identity="user:sam").hits == []
    assert estate_store.fuzzy("payrol", identity="user:sam").warnings == (
        estate_store.fuzzy("zqxjkv", identity="user:sam").warnings
    )
    estate_store.add_member("group:finance", "user:fin")
    found = estate_store.fuzzy("payrol", identity="user:fin")
    assert [h.uid for h in found.hits] == ["ticket:2001"]


def test_fuzzy_applies_filters_and_fuses_when_weighted(estate_store: KnowledgeStore) -> None:
    only_pages = estate_store.fuzzy("vacumm", identity="user:sam", filters={"type": ["page"]})
    assert only_pages.hits and {h.uid for h in only_pages.hits} <= {
        "guide:vacuum",
        "guide:monitoring",
    }
    default = estate_store.search("vacumm dead tupels", identity="user:sam")
    assert "fuzzy" not in default.results[0].ranks  # off in fusion by default
    weighted = estate_store.search(
        "vacumm dead tupels", identity="user:sam", weights={"fuzzy": 1.0}
    )
    ranked = {r.uid: r.ranks["fuzzy"] for r in weighted.results}
    assert ranked["guide:vacuum"] == 1
    assert list(weighted.results[0].ranks) == ["vector", "lexical", "graph", "sql", "fuzzy"]


def test_fuzzy_needs_words(store: KnowledgeStore) -> None:
    with pytest.raises(InvalidRequest, match="fuzzy needs a non-empty text"):
        store.fuzzy("   ")


# -- the pure part ------------------------------------------------------------------------------
def _distance(a: str, b: str) -> int:
    """Optimal string alignment distance (the reference)."""
    d = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a) + 1):
        d[i][0] = i
    for j in range(len(b) + 1):
        d[0][j] = j
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[len(a)][len(b)]


@given(st.text(alphabet="abcdefgz", min_size=1, max_size=7), st.text(alphabet="abz", max_size=8))
def test_variants_are_exactly_the_words_one_edit_away(word: str, other: str) -> None:
    made = set(variants(word))
    assert word not in made
    assert all(_distance(word, v) == 1 for v in made)
    if other != word and _distance(word, other) == 1:
        assert other in made


def test_corrections_pick_the_most_held_variant_and_keep_known_and_stop_words() -> None:
    held = {"replication": 5, "replicator": 2, "the": None, "lag": 3}
    fixes = correct(
        ["replicaton", "lagg", "with"],
        lambda words: {w: held.get(w, 0) for w in words} | {"with": None},
    )
    assert [(f.word, f.to, f.chunks) for f in fixes] == [
        ("replicaton", "replication", 5),
        ("lagg", "lag", 3),
    ]
    assert corrected("Replicaton LAGG, again", fixes) == "replication lag, again"
    assert misspelt_candidates("a pg_hba Lag lag 1042 replicaton") == ["replicaton"]
