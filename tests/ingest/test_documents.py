"""The document loaders (issue 30): each format read from real files into entities, with
locations, structure and edges; what can't be read is skipped with its reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from knowledge_store.ingest.chunking import chunk_markdown
from knowledge_store.ingest.loaders import LoadResult, load_paths
from knowledge_store.ingest.loaders import documents as document_loader
from knowledge_store.model import Entity
from tests.ingest import document_files as files


def load(folder: Path) -> LoadResult:
    return load_paths([folder], format=None, source=None, default_acl=["everyone"])


def entities(result: LoadResult) -> dict[str, Entity]:
    return {r.entity.uid: r.entity for r in result.records}


def skipped(result: LoadResult) -> dict[str, str]:
    return {Path(s.path).name: s.reason for s in result.skipped}


def edges(entity: Entity, label: str) -> set[str]:
    return {e.dst for e in entity.edges if e.label == label}


def test_a_pdf_has_a_location_per_page_and_headings_from_font_sizes(tmp_path: Path) -> None:
    (tmp_path / "manual.pdf").write_bytes(
        files.pdf(
            [
                [
                    ("Operations manual", 24),
                    ("This manual covers the replica and the primary of the cluster.", 11),
                ],
                [
                    ("Failover", 16),
                    ("Promote the replica when the primary is lost, with one command.", 11),
                ],
                [("It goes on: check the replication lag before you promote the replica.", 11)],
            ],
            title="The operations manual",
        )
    )
    found = entities(load(tmp_path))
    manual = found["manual"]
    assert manual.title == "The operations manual" and manual.type == "document"
    assert manual.attributes["pages"] == 3 and manual.href == "manual.pdf"
    chunks = chunk_markdown(manual.body)
    assert [c.location for c in chunks] == [{"page": 1}, {"page": 2}, {"page": 3}]
    assert chunks[1].heading == ("Operations manual", "Failover")
    assert chunks[2].heading == ("Operations manual", "Failover")  # the section goes on


def test_a_pdf_outline_gives_its_headings(tmp_path: Path) -> None:
    (tmp_path / "guide.pdf").write_bytes(
        files.pdf(
            [
                [("Introduction", 11), ("Words about the guide and what it covers in detail.", 11)],
                [("Installing", 11), ("Run the installer and follow what it says on screen.", 11)],
            ],
            outline=[("Introduction", 0), ("Installing", 1)],
        )
    )
    body = entities(load(tmp_path))["guide"].body
    assert "# Introduction" in body and "# Installing" in body


@pytest.mark.parametrize(
    ("name", "data", "says"),
    [
        ("locked.pdf", files.pdf([[("Secret words on a page.", 11)]], encrypted=True), "encrypted"),
        ("scan.pdf", files.scanned_pdf(), "no text layer"),
        ("many.pdf", files.pdf_of_many_pages(5001), "5,001 pages"),
        ("broken.pdf", b"%PDF-1.4\nnot really", "not a PDF"),
        ("broken.docx", b"PK\x03\x04 not a zip", "zip"),
        ("bomb.docx", files.zip_bomb(), "zip bomb"),
        ("empty.csv", b"only,a,header\n", "no rows"),
        ("latin.txt", "caf\xe9".encode("latin-1"), "not UTF-8"),
    ],
)
def test_a_file_that_cant_be_read_is_skipped_with_its_reason_and_the_rest_loads(
    tmp_path: Path, name: str, data: bytes, says: str
) -> None:
    (tmp_path / name).write_bytes(data)
    (tmp_path / "notes.txt").write_text("Notes\n\nThe rest of the folder loads.\n")
    result = load(tmp_path)
    assert says in skipped(result)[name]
    assert set(entities(result)) == {"notes"}


def test_every_file_of_a_folder_is_loaded_or_skipped_with_a_reason(tmp_path: Path) -> None:
    """Issue 30: notes.txt, spec.pdf and real.md gave `added 1` and `"skipped": []`."""
    (tmp_path / "notes.txt").write_text("Meeting notes\n\nPromote the replica on Friday.\n")
    (tmp_path / "spec.pdf").write_bytes(files.pdf([[("The spec says promote the replica.", 11)]]))
    (tmp_path / "real.md").write_text("# Real\n\nSee [the spec](spec.pdf).\n")
    (tmp_path / "logo.png").write_bytes(b"\x89PNG")
    (tmp_path / ".hidden.md").write_text("# hidden\n")
    result = load(tmp_path)
    found = entities(result)
    assert set(found) == {"notes", "spec", "real"}
    assert found["notes"].title == "Meeting notes" and found["notes"].type == "page"
    assert "unsupported type (.png)" in skipped(result)["logo.png"]
    assert edges(found["real"], "xref") == {"spec"}


def test_a_missing_extra_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        document_loader, "_missing", lambda fmt: fmt.needs[0] if fmt.needs else None
    )
    (tmp_path / "spec.pdf").write_bytes(files.pdf([[("Words.", 11)]]))
    (tmp_path / "notes.txt").write_text("Notes\n")
    reason = skipped(load(tmp_path))["spec.pdf"]
    assert "pypdfium2 is not installed" in reason and "knowledge-store[docs]" in reason


def test_a_docx_keeps_its_headings_lists_tables_and_links(tmp_path: Path) -> None:
    (tmp_path / "runbook.docx").write_bytes(files.docx())
    (tmp_path / "records.md").write_text("# Records\n\nThe records.\n")
    found = entities(load(tmp_path))
    runbook = found["runbook"]
    assert runbook.title == "Runbook" and runbook.attributes["author"] == "Ann"
    body = runbook.body
    assert "# Runbook" in body and "## Failover" in body and "### Contacts" in body
    assert "- Check the replication lag\n- Stop the old primary\n  - Fence it at the switch" in body
    assert "| team | pager |" in body and "| SRE | 555-0100 |" in body
    assert "[the records](records.md)" in body
    assert edges(runbook, "xref") == {"records"}


def test_a_pptx_is_a_section_per_slide_with_its_notes(tmp_path: Path) -> None:
    (tmp_path / "review.pptx").write_bytes(files.pptx())
    review = entities(load(tmp_path))["review"]
    assert review.title == "Quarterly review" and review.type == "presentation"
    chunks = chunk_markdown(review.body)
    assert [c.location for c in chunks] == [{"slide": 1}, {"slide": 2}, {"slide": 3}]
    assert [c.heading[-1] for c in chunks] == ["Quarterly review", "Incidents", "Next quarter"]
    assert "### Notes\n\nMention the replica promotion drill." in chunks[1].text
    assert "  - Both in payments" in chunks[1].text
    assert "| role | count |" in chunks[2].text


def test_a_spreadsheet_is_its_rows_with_their_header_by_sheet_and_rows(tmp_path: Path) -> None:
    (tmp_path / "team.xlsx").write_bytes(files.xlsx(rows=120))
    team = entities(load(tmp_path))["team"]
    chunks = [c for c in chunk_markdown(team.body) if c.location]
    assert {c.location["sheet"] for c in chunks if c.location} == {"People", "Costs"}
    first = chunks[0]
    assert first.location == {"sheet": "People", "rows": first.location["rows"]}
    assert first.location["rows"].startswith("2-")
    assert "name: person 1 · team: search · on call: 0" in first.text
    assert any("item: servers · cost: 1200" in c.text for c in chunks)


def test_a_csv_names_its_rows(tmp_path: Path) -> None:
    rows = "name,team\n" + "".join(f"person {i},payments\n" for i in range(1, 200))
    (tmp_path / "people.csv").write_text(rows)
    people = entities(load(tmp_path))["people"]
    chunks = [c for c in chunk_markdown(people.body) if c.location]
    assert chunks[0].location is not None and chunks[0].location["rows"].startswith("2-")
    assert "sheet" not in chunks[0].location
    assert "name: person 1 · team: payments" in chunks[0].text


def test_an_epub_is_the_book_and_a_part_per_chapter(tmp_path: Path) -> None:
    (tmp_path / "replica.epub").write_bytes(files.epub())
    found = entities(load(tmp_path))
    book = found["replica"]
    assert book.title == "The Replica Book" and book.type == "book"
    one, two = found["replica#chapter-1"], found["replica#chapter-2"]
    assert (one.title, two.title) == ("Promoting a replica", "Fencing the old primary")
    assert [(e.label, e.dst, e.position) for e in one.edges if e.label == "partOf"] == [
        ("partOf", "replica", 1)
    ]
    assert edges(two, "xref") == {"replica#chapter-1"}
    assert chunk_markdown(two.body)[0].location == {"chapter": 2}


def test_mail_threads_are_partof_edges_and_subjects_are_titles(tmp_path: Path) -> None:
    first = files.message("Replica lag", "Ann <ann@example.org>", "1@example.org")
    reply = files.message(
        "Re: Replica lag", "Bob <bob@example.org>", "2@example.org", "1@example.org"
    )
    (tmp_path / "archive.mbox").write_text(files.mbox([first, reply]))
    (tmp_path / "later.eml").write_text(
        files.message("Re: Replica lag", "Cy <cy@example.org>", "3@example.org", "2@example.org")
    )
    found = entities(load(tmp_path))
    box, one, two, later = (
        found["archive"],
        found["archive#message-1"],
        found["archive#message-2"],
        found["later"],
    )
    assert box.type == "mailbox" and one.type == "message"
    assert one.title == "Replica lag" and one.attributes["from"] == "Ann <ann@example.org>"
    assert one.created_at is not None and one.created_at.startswith("2024-04-02")
    assert edges(one, "partOf") == {"archive"}
    assert edges(two, "partOf") == {"archive#message-1"}
    assert edges(later, "partOf") == {"archive#message-2"}


def test_a_uid_prefix_names_every_part_and_the_edges_among_them(tmp_path: Path) -> None:
    """A source's uid prefix goes before the parts' uids too (a chapter, a message), and
    their edges follow: a part whose document was renamed under it would be cut off."""
    (tmp_path / "replica.epub").write_bytes(files.epub())
    first = files.message("Replica lag", "Ann <ann@example.org>", "1@example.org")
    reply = files.message(
        "Re: Replica lag", "Bob <bob@example.org>", "2@example.org", "1@example.org"
    )
    (tmp_path / "archive.mbox").write_text(files.mbox([first, reply]))
    result = load_paths(
        [tmp_path], format=None, source="lib", default_acl=["everyone"], uid_prefix="lib:"
    )
    found = entities(result)
    assert set(found) == {
        "lib:replica",
        "lib:replica#chapter-1",
        "lib:replica#chapter-2",
        "lib:archive",
        "lib:archive#message-1",
        "lib:archive#message-2",
    }
    assert edges(found["lib:replica#chapter-1"], "partOf") == {"lib:replica"}
    assert edges(found["lib:replica#chapter-2"], "xref") == {"lib:replica#chapter-1"}
    assert edges(found["lib:archive#message-2"], "partOf") == {"lib:archive#message-1"}
