"""Where the evidence is (issue 30, item 2): a chunk of a paged document carries its location
— in lexical and vector hits, in search evidence, in the content API — on every engine; a chunk
never spans two places; a chunk of any other document has no location key at all."""

from __future__ import annotations

from typing import Any

from knowledge_store.ingest.chunking import location_marker
from knowledge_store.store import KnowledgeStore


def _paged(pages: list[str]) -> str:
    return "\n\n".join(
        f"{location_marker({'page': n})}\n\n{text}" for n, text in enumerate(pages, start=1)
    )


MANUAL: dict[str, Any] = {
    "uid": "manual",
    "type": "document",
    "title": "Operations manual",
    "body": _paged(
        [
            "# Operations manual\n\nThis manual covers the replica and the primary.",
            "## Failover\n\nPromote the replica when the primary is lost; the failover"
            " takes one command.",
            "It continues here: check the replication lag before you promote the replica.",
        ]
    ),
    "acl": ["everyone"],
}
SHEET: dict[str, Any] = {
    "uid": "budget",
    "type": "spreadsheet",
    "title": "Budget",
    "body": location_marker({"sheet": "2024", "rows": "2-3"})
    + "\n\nitem: servers · cost: 1200\n\nitem: licences · cost: 300",
    "acl": ["everyone"],
}
PLAIN: dict[str, Any] = {
    "uid": "plain",
    "type": "page",
    "title": "Plain page",
    "body": "# Plain page\n\nNothing paged about the replica here.",
    "acl": ["everyone"],
}


def _place(chunk: Any) -> dict[str, Any] | None:
    return None if chunk.location is None else chunk.location.to_dict()


def test_every_chunk_of_a_paged_document_says_where_it_is(store: KnowledgeStore) -> None:
    store.ingest_records([MANUAL, SHEET, PLAIN])
    chunks = store.content("manual").chunks
    assert [_place(c) for c in chunks] == [{"page": 1}, {"page": 2}, {"page": 3}]
    assert [c.heading for c in chunks][1:] == [
        ("Operations manual", "Failover"),
        ("Operations manual", "Failover"),  # the heading path goes on across the page
    ]
    assert all("ks:location" not in c.text for c in chunks)
    (row,) = store.content("budget").chunks
    assert _place(row) == {"sheet": "2024", "rows": "2-3"}
    assert store.content("plain").chunks[0].location is None


def test_hits_and_evidence_carry_the_location_and_leave_it_out_elsewhere(
    store: KnowledgeStore,
) -> None:
    store.ingest_records([MANUAL, SHEET, PLAIN])
    lexical = store.lexical("replication lag", k=5).to_dict()
    first = lexical["hits"][0]
    assert first["uid"] == "manual" and first["location"] == {"page": 3}
    vector = store.vector("promote the replica failover", k=10).to_dict()
    assert all(("location" in h) == (h["uid"] != "plain") for h in vector["hits"]), (
        "a plain page's chunk has no location key"
    )
    answer = store.search("check the replication lag", k=5).to_dict()
    manual = next(r for r in answer["results"] if r["uid"] == "manual")
    assert manual["evidence"][0]["location"] == {"page": 3}
    plain = store.search("nothing paged here", k=5).to_dict()["results"]
    assert all("location" not in e for r in plain if r["uid"] == "plain" for e in r["evidence"])
    content = store.content("budget").to_dict()
    assert content["chunks"][0]["location"] == {"sheet": "2024", "rows": "2-3"}
    assert "location" not in store.content("plain").to_dict()["chunks"][0]
