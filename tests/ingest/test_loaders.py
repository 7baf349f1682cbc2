"""load_paths: JSON Lines, Learn JSON, Markdown and HTML folders → entities and rejections."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from knowledge_store.errors import InvalidRequest, Rejection
from knowledge_store.ingest.loaders import FORMATS, LoadResult, load_paths
from knowledge_store.ingest.loaders.code_samples import sample_title
from knowledge_store.model import LABELS, Edge, Entity

FIXTURES = Path(__file__).parent / "fixtures"
CORPUS = Path(__file__).resolve().parents[3] / "shared" / "eval" / "postgres-docs" / "corpus.jsonl"


def load(*paths: str | Path, format: str | None = None, **options: Any) -> LoadResult:
    return load_paths(
        list(paths),
        format=format,
        source=options.get("source"),
        default_acl=options.get("default_acl"),
    )


def by_uid(result: LoadResult) -> dict[str, Entity]:
    return {record.entity.uid: record.entity for record in result.records}


def edges(entity: Entity, label: str) -> list[str]:
    return [edge.dst for edge in entity.edges if edge.label == label]


def only_rejection(result: LoadResult) -> Rejection:
    assert len(result.rejections) == 1, result.rejections
    return result.rejections[0]


def write_jsonl(path: Path, *lines: object) -> Path:
    path.write_text(
        "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n",
        encoding="utf-8",
    )
    return path


def record(uid: str, **changes: Any) -> dict[str, Any]:
    return {
        "uid": uid,
        "type": "page",
        "title": uid,
        "body": f"About {uid}.",
        "acl": ["everyone"],
    } | changes


# -- the real corpus ---------------------------------------------------------------------------


@pytest.mark.skipif(not CORPUS.is_file(), reason="the shared eval corpus is not beside the repo")
def test_the_eval_corpus_loads_cleanly() -> None:
    result = load(CORPUS)
    assert result.rejections == []
    assert len(result.records) == 4193
    samples = [r.entity for r in result.records if r.entity.type == "codeSample"]
    assert len(samples) == 3026  # canonical records are taken as they are, never re-split
    assert all(r.line is not None for r in result.records)


# -- formats and paths -------------------------------------------------------------------------


def test_an_unknown_format_is_a_request_error_listing_the_formats() -> None:
    with pytest.raises(InvalidRequest) as caught:
        load(FIXTURES / "records.jsonl", format="docbook")
    assert "'docbook'" in caught.value.message
    assert all(name in caught.value.message for name in FORMATS)


def test_a_missing_path_is_a_request_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest) as caught:
        load(tmp_path / "nope.jsonl")
    assert "does not exist" in caught.value.message


def test_a_file_of_unknown_extension_needs_a_format(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "data.dat", record("a"))
    with pytest.raises(InvalidRequest) as caught:
        load(data)
    assert (
        caught.value.details["field"] == "format"
    )  # the CLI says --format, REST never loads files
    assert "format: one of jsonl" in caught.value.message
    assert [r.entity.uid for r in load(data, format="jsonl").records] == ["a"]


def test_a_folder_with_nothing_to_load_is_a_request_error(tmp_path: Path) -> None:
    (tmp_path / "notes.dat").write_text("hello", encoding="utf-8")
    with pytest.raises(InvalidRequest):
        load(tmp_path)


def test_a_bad_acl_default_is_a_request_error() -> None:
    with pytest.raises(InvalidRequest):
        load(FIXTURES / "records.jsonl", default_acl=["admins"])


def test_a_mixed_folder_reads_each_file_by_its_extension(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES, tmp_path / "all")
    uids = by_uid(load(tmp_path / "all", default_acl=["everyone"]))
    assert {"a", "b", "intro", "intro.unit-1", "site_md/index", "site_html/guide/setup"} <= set(
        uids
    )


def test_a_given_format_reads_only_its_files_in_a_folder(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES, tmp_path / "all")
    result = load(tmp_path / "all", format="learn", default_acl=["everyone"])
    assert {r.entity.uid for r in result.records} == {
        "intro",
        "intro.unit-1",
        "intro.unit-1#code-1",
    }


# -- JSON Lines --------------------------------------------------------------------------------


def test_jsonl_records_are_taken_as_they_are() -> None:
    result = load(FIXTURES / "records.jsonl")
    assert result.rejections == []
    assert [(r.line, r.entity.uid) for r in result.records] == [(1, "a"), (3, "b")]
    a = by_uid(result)["a"]
    assert "```sql" in a.body and edges(a, "implementedBy") == []  # not split into samples
    assert by_uid(result)["b"].acl == ()


def test_a_malformed_json_line_is_rejected_with_file_line_and_error(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "in.jsonl", record("a"), '{"uid": "b", "type": ', record("c"))
    result = load(path)
    assert [r.entity.uid for r in result.records] == ["a", "c"]
    found = only_rejection(result)
    assert (found.file, found.line) == (str(path), 2)
    assert "malformed JSON" in found.message and "column" in found.message


def test_a_line_that_is_not_an_object_is_rejected(tmp_path: Path) -> None:
    found = only_rejection(load(write_jsonl(tmp_path / "in.jsonl", record("a"), [1, 2])))
    assert found.line == 2 and "JSON object" in found.message


def test_a_bad_record_names_its_line_uid_and_field(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "in.jsonl", record("a"), record("b", edges=[{"label": "mentions", "to": "a"}])
    )
    found = only_rejection(load(path))
    assert (found.line, found.uid, found.field) == (2, "b", "edges[0].label")
    assert all(label in found.message for label in LABELS)


def test_a_duplicate_uid_is_rejected_naming_the_first(tmp_path: Path) -> None:
    first = write_jsonl(tmp_path / "one.jsonl", record("a"), record("b"))
    second = write_jsonl(tmp_path / "two.jsonl", record("c"), record("a", title="again"))
    result = load(first, second)
    assert [r.entity.uid for r in result.records] == ["a", "b", "c"]
    assert by_uid(result)["a"].title == "a"
    found = only_rejection(result)
    assert (found.file, found.line, found.uid, found.field) == (str(second), 2, "a", "uid")
    assert f"{first}:1" in found.message


def test_a_non_utf8_jsonl_line_is_rejected_with_its_line_and_byte_offset(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    good = json.dumps(record("a")).encode() + b"\n"
    path.write_bytes(good + b'{"uid": "b\xff"}\n')
    found = only_rejection(load(path))
    assert found.line == 2
    assert "UTF-8" in found.message and f"byte offset {len(good) + 10}" in found.message


def test_blank_lines_and_a_byte_order_mark_are_fine(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(
        b"\xef\xbb\xbf"
        + json.dumps(record("a")).encode()
        + b"\n\n  \n"
        + json.dumps(record("b")).encode()
    )
    result = load(path)
    assert result.rejections == [] and [r.line for r in result.records] == [1, 4]


def test_records_without_acl_need_a_default(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "in.jsonl", {k: v for k, v in record("a").items() if k != "acl"})
    found = only_rejection(load(path))
    assert found.field == "acl" and "no acl and no default acl" in found.message
    assert by_uid(load(path, default_acl=["group:staff"]))["a"].acl == ("group:staff",)


def test_source_sets_every_entity_source(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "in.jsonl", record("a", source="wiki"), record("b"))
    assert {e.source for e in by_uid(load(path, source="docs")).values()} == {"docs"}


# -- Learn unit JSON ---------------------------------------------------------------------------


def test_learn_units_map_to_entities() -> None:
    result = load(FIXTURES / "learn" / "units.json", default_acl=["everyone"])
    assert result.rejections == []
    entities = by_uid(result)
    unit = entities["intro.unit-1"]
    assert (unit.type, unit.title, unit.href, unit.source) == (
        "moduleUnit",
        "What is a store?",
        "/modules/intro/unit-1/",
        "learn",
    )
    assert unit.body.startswith("# Stores\n\nA store keeps entities.")
    assert Edge("intro.unit-1", "partOf", "intro", 3) in unit.edges
    assert unit.attributes == {
        "summary": "",
        "products": ["ks"],
        "roles": ["developer"],
        "levels": ["beginner"],
        "subjects": [],
        "headings": ["1. Stores"],
        "durationInMinutes": 7,
        "quiz": None,
    }
    assert unit.acl == ("everyone",)
    assert entities["intro"].acl == ("group:learners",)
    assert [r.line for r in result.records if r.entity.uid == "intro"] == [19]


def test_learn_units_get_code_samples() -> None:
    result = load(FIXTURES / "learn" / "units.json", default_acl=["everyone"])
    entities = by_uid(result)
    derived = {r.entity.uid: r.derived_from for r in result.records if r.derived_from}
    assert derived["intro.unit-1#code-1"] == "intro.unit-1"
    sample = entities["intro.unit-1#code-1"]
    assert sample.type == "codeSample"
    assert sample.title == "What is a store? › Stores (python)"
    assert sample.body == "Create one:\n\n```python\nstore = open_store()\n```"
    assert dict(sample.attributes) == {
        "language": "python",
        "ordinal": 1,
        "heading": "Stores",
        "acl_from": sample.uid.partition("#")[0],  # shares its page's ACL
    }
    assert sample.edges == (Edge(sample.uid, "partOf", "intro.unit-1", 1),)
    assert (sample.source, sample.acl, sample.href) == (
        "learn",
        ("everyone",),
        "/modules/intro/unit-1/",
    )
    assert Edge("intro.unit-1", "implementedBy", sample.uid, 1) in entities["intro.unit-1"].edges
    assert "```python" in entities["intro.unit-1"].body  # the page keeps its code


def test_learn_source_can_be_overridden() -> None:
    result = load(FIXTURES / "learn" / "units.json", source="mslearn", default_acl=["everyone"])
    assert {r.entity.source for r in result.records} == {"mslearn"}


def test_a_learn_file_may_hold_one_unit(tmp_path: Path) -> None:
    path = tmp_path / "unit.json"
    path.write_text(
        json.dumps({"uid": "u", "kind": "unit", "title": "U", "source": "Text.", "acl": []})
    )
    assert [r.entity.uid for r in load(path).records] == ["u"]


def test_a_learn_unit_without_kind_or_source_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "units.json"
    path.write_text(
        json.dumps(
            [
                {"uid": "u1", "title": "U", "source": "x", "acl": []},
                {"uid": "u2", "kind": "unit", "title": "U", "source": "", "acl": []},
            ],
            indent=1,
        )
    )
    result = load(path)
    assert [(r.uid, r.field, r.line) for r in result.rejections] == [
        ("u1", "kind", 2),
        ("u2", "source", 8),
    ]
    assert "Markdown" in result.rejections[1].message


def test_malformed_learn_json_is_rejected_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "units.json"
    path.write_text(
        '[\n  {"uid": "u", "kind": "unit", "title": "U", "source": "x", "acl": []},\n  {"uid": \n]'
    )
    found = only_rejection(load(path))
    assert found.line == 4 and "malformed JSON" in found.message


# -- Markdown folders --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site_md() -> dict[str, Entity]:
    result = load(FIXTURES / "site_md")
    assert result.rejections == []
    return by_uid(result)


def test_markdown_uids_titles_and_types(site_md: dict[str, Entity]) -> None:
    assert set(site_md) == {
        "index",
        "guide/README",
        "guide/install",
        "guide/install#code-1",
        "guide/install#code-2",
        "guide/deep/notes",
    }
    assert site_md["index"].title == "Handbook"  # front matter
    assert site_md["guide/README"].title == "The guide"  # first # heading
    assert site_md["guide/deep/notes"].title == "notes"  # file stem
    assert site_md["index"].type == "page"
    assert site_md["index"].body.startswith("# Welcome")  # front matter is not body


def test_markdown_front_matter_becomes_fields_and_attributes(site_md: dict[str, Entity]) -> None:
    page = site_md["guide/install"]
    assert (page.type, page.title, page.status) == ("howto", "Installing", "published")
    assert page.created_at == "2024-05-01T00:00:00Z"  # from `date`
    assert page.updated_at == "2024-06-02T08:00:00Z"
    assert page.acl == ("group:staff",)
    assert page.attributes == {"level": "beginner", "tags": ["setup", "linux"]}
    assert site_md["guide/README"].acl == ("everyone", "group:staff")


def test_markdown_folders_become_part_of_edges(site_md: dict[str, Entity]) -> None:
    assert edges(site_md["index"], "partOf") == []
    assert edges(site_md["guide/README"], "partOf") == ["index"]  # an index: the enclosing folder's
    assert edges(site_md["guide/install"], "partOf") == ["guide/README"]
    # deep/ has no index: the nearest ancestor's
    assert edges(site_md["guide/deep/notes"], "partOf") == ["guide/README"]


def test_markdown_relative_links_become_xrefs(site_md: dict[str, Entity]) -> None:
    assert edges(site_md["index"], "xref") == ["guide/README", "guide/install"]
    # deduplicated, anchors dropped, external and missing pages ignored
    assert edges(site_md["guide/README"], "xref") == ["index", "guide/install"]
    # no self link
    assert edges(site_md["guide/install"], "xref") == ["guide/deep/notes"]
    assert edges(site_md["guide/deep/notes"], "xref") == ["guide/install"]


def test_markdown_code_blocks_become_samples(site_md: dict[str, Entity]) -> None:
    page = site_md["guide/install"]
    first, second = site_md["guide/install#code-1"], site_md["guide/install#code-2"]
    assert first.title == "Installing › On Linux (bash)"
    assert second.title == "Installing › On macOS"  # no language on the fence
    assert (
        first.body
        == "Run the installer as root:\n\n```bash\nsudo ./install.sh --prefix /opt/tool\n```"
    )
    assert dict(first.attributes) == {
        "language": "bash",
        "ordinal": 1,
        "heading": "On Linux",
        "acl_from": first.uid.partition("#")[0],
    }
    assert second.body == "~~~\nbrew install tool\n~~~"  # a heading before it, no paragraph
    assert dict(second.attributes) == {
        "language": None,
        "ordinal": 2,
        "heading": "On macOS",
        "acl_from": second.uid.partition("#")[0],
    }
    for sample, n in ((first, 1), (second, 2)):
        assert sample.edges == (Edge(sample.uid, "partOf", page.uid, n),)
        assert Edge(page.uid, "implementedBy", sample.uid, n) in page.edges
        assert (sample.acl, sample.status, sample.created_at, sample.updated_at) == (
            page.acl,
            page.status,
            page.created_at,
            page.updated_at,
        )
    assert "```bash" in page.body and "~~~" in page.body


def test_a_markdown_file_with_no_text_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "empty.md").write_text("---\ntitle: Empty\nacl: []\n---\n\n   \n", encoding="utf-8")
    (tmp_path / "full.md").write_text("---\nacl: []\n---\nText.", encoding="utf-8")
    result = load(tmp_path)
    assert [r.entity.uid for r in result.records] == ["full"]
    found = only_rejection(result)
    assert (found.file, found.uid) == (str(tmp_path / "empty.md"), "empty")
    assert "no text" in found.message


def test_a_markdown_file_that_is_not_utf8_is_rejected_with_the_byte_offset(tmp_path: Path) -> None:
    (tmp_path / "latin.md").write_bytes(b"# Caf\xe9\n\nText.\n")
    found = only_rejection(load(tmp_path, default_acl=["everyone"]))
    assert found.file == str(tmp_path / "latin.md")
    assert (
        "not UTF-8" in found.message
        and "byte offset 5" in found.message
        and "0xe9" in found.message
    )


def test_markdown_with_bad_front_matter_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "bad.md").write_text("---\ntitle: [unclosed\n---\nText.\n", encoding="utf-8")
    found = only_rejection(load(tmp_path, default_acl=["everyone"]))
    assert found.field == "front matter" and "YAML" in found.message


def test_a_key_twice_in_front_matter_is_rejected_not_the_last_one_taken(tmp_path: Path) -> None:
    """A second ``acl:`` made a private page public, as a duplicate JSON key did."""
    (tmp_path / "page.md").write_text(
        "---\nacl: [user:owner]\nacl: [everyone]\n---\n# Page\n\nText.\n", encoding="utf-8"
    )
    found = only_rejection(load(tmp_path))
    assert found.field == "front matter" and "'acl' appears twice" in found.message


def test_markdown_without_acl_and_without_default_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "page.md").write_text("# Page\n\nText.\n", encoding="utf-8")
    found = only_rejection(load(tmp_path))
    assert found.field == "acl" and found.uid == "page"
    assert by_uid(load(tmp_path, default_acl=["everyone"]))["page"].acl == ("everyone",)


def test_a_single_markdown_file_takes_its_stem_as_uid(tmp_path: Path) -> None:
    path = tmp_path / "solo.markdown"
    path.write_text("Text.", encoding="utf-8")
    assert [r.entity.uid for r in load(path, default_acl=["everyone"]).records] == ["solo"]


def test_links_inside_code_are_not_xrefs(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("```\n[b](b.md)\n```\n\nText.\n", encoding="utf-8")
    (tmp_path / "b.md").write_text("Text.\n", encoding="utf-8")
    assert edges(by_uid(load(tmp_path, default_acl=["everyone"]))["a"], "xref") == []


# -- HTML folders ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site_html() -> dict[str, Entity]:
    result = load(FIXTURES / "site_html", default_acl=["everyone"])
    assert result.rejections == []
    return by_uid(result)


def test_html_keeps_the_main_content_as_markdown(site_html: dict[str, Entity]) -> None:
    page = site_html["guide/setup"]
    assert (page.title, page.href, page.type) == ("Setup", "guide/setup.html", "page")
    assert page.body.startswith("# Setting up\n\nInstall the package with `pip`:")
    assert "```python\nimport tool\ntool.setup()\n```" in page.body
    assert "## Checking" in page.body
    for chrome in ("cookies", "Home", "Sidebar", "Related", "tracking", "<input"):
        assert chrome not in page.body
    index = site_html["index"]
    assert index.title == "Tool docs"
    assert (
        index.body == "# Tool documentation\n\nRead the [setup page](guide/setup.html#first) first."
    )


def test_html_links_and_folders_become_edges(site_html: dict[str, Entity]) -> None:
    assert edges(site_html["index"], "xref") == ["guide/setup"]
    assert edges(site_html["guide/setup"], "xref") == ["index"]
    assert edges(site_html["guide/setup"], "partOf") == ["index"]


def test_html_code_blocks_become_samples(site_html: dict[str, Entity]) -> None:
    sample = site_html["guide/setup#code-1"]
    assert (
        sample.body
        == "Install the package with `pip`:\n\n```python\nimport tool\ntool.setup()\n```"
    )
    assert dict(sample.attributes) == {
        "language": "python",
        "ordinal": 1,
        "heading": "Setting up",
        "acl_from": "guide/setup",
    }


def test_html_title_falls_back_to_the_first_h1(tmp_path: Path) -> None:
    (tmp_path / "p.html").write_text(
        "<body><h1>Heading one</h1><p>Text.</p></body>", encoding="utf-8"
    )
    assert by_uid(load(tmp_path, default_acl=["everyone"]))["p"].title == "Heading one"


def test_an_html_page_with_no_text_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "chrome.html").write_text(
        "<html><head><title>Only chrome</title></head><body><nav>Menu</nav>"
        "<footer>Footer</footer><script>x = 1</script></body></html>",
        encoding="utf-8",
    )
    found = only_rejection(load(tmp_path, default_acl=["everyone"]))
    assert (found.uid, found.field) == ("chrome", "body")
    assert "no text" in found.message


def test_an_html_file_that_is_not_utf8_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "p.html").write_bytes(b"<p>caf\xe9</p>")
    found = only_rejection(load(tmp_path, default_acl=["everyone"]))
    assert "not UTF-8" in found.message and "byte offset 6" in found.message


def test_html_drops_run_together_navigation_and_link_tooltips(tmp_path: Path) -> None:
    (tmp_path / "p.html").write_text(
        '<html><body><div class="navheader"><a href="q.html">Next</a></div>'
        '<div class="sect1"><h2>Dump</h2><p>Use <a href="q.html" title="The Q tool">q</a>.</p>'
        '</div><div class="navfooter"><a href="index.html">Home</a></div></body></html>',
        encoding="utf-8",
    )
    page = by_uid(load(tmp_path, default_acl=["everyone"]))["p"]
    assert page.body == "## Dump\n\nUse [q](q.html)."


def test_a_code_samples_title_names_its_heading_and_language() -> None:
    """Regression (issue 15): samples were titled "Page › example 1"."""
    assert sample_title("Failover", "Check lag", "sql", 1) == "Failover › Check lag (sql)"
    assert sample_title("Failover", "Check lag", "sql", 2) == "Failover › Check lag (sql, sample 2)"
    assert sample_title("Failover", "Check lag", None, 2) == "Failover › Check lag (sample 2)"
    # under the page's own title (its h1) or no heading at all: the language names it
    assert sample_title("Failover", "Failover", "bash", 1) == "Failover › bash sample"
    assert sample_title("Failover", None, None, 3) == "Failover › code sample 3"


def test_a_folder_name_is_a_source_in_nfc(tmp_path: Path) -> None:
    """macOS writes names decomposed; the default source is a name, so it is composed."""
    folder = tmp_path / "Cafe\u0301 notes"
    folder.mkdir()
    (folder / "page.md").write_text("# Page\n\nText.\n", encoding="utf-8")
    result = load(folder, default_acl=["everyone"])
    assert not result.rejections
    assert result.records[0].entity.source == "Caf\u00e9 notes"
