"""The bad-input corpus: every kind of record the store must refuse, and how it must say so.

Each case is one JSON Lines line as raw bytes (so that duplicate keys, 5,000-digit
integers, lone-surrogate escapes and invalid UTF-8 stay exactly as a file holds
them), the field its rejection must name and words its message must contain.
tests/conformance/test_bad_input.py runs every case through the CLI and the Python
API on both engines; bench/bad_input.py prints the figures (tried / rejected
safely / misbehaved).

:data:`FILE_CASES` are files a folder may hold (a page nesting 200,000 deep, a 2 GB
sparse Markdown file …), each beside a good page: the good page publishes with
``--skip-invalid``, and the bad file is rejected, skipped or loaded (bounded) as the
case says — never a crash, a hang or the whole batch lost.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from knowledge_store.errors import InvalidRecord, KnowledgeStoreError
from knowledge_store.model import (
    MAX_ACL_PRINCIPALS,
    MAX_ATTRIBUTES_BYTES,
    MAX_BODY_CHARS,
    MAX_EDGE_POSITION,
    MAX_EDGES,
    MAX_HREF_BYTES,
    MAX_NAME_CHARS,
    MAX_TITLE_CHARS,
    MAX_UID_CHARS,
    printable,
)
from tests.ingest import document_files as files

#: The good record on line 1 of every case file (the bad one is line 2).
GOOD: dict[str, Any] = {
    "uid": "good:1",
    "type": "page",
    "title": "A good record",
    "body": "# A good record\n\nIt is taken; the bad one beside it is not.",
    "acl": ["everyone"],
}


@dataclass(frozen=True)
class BadCase:
    name: str
    line: bytes  # one JSON Lines line, as a file holds it
    field: str | None  # the field the rejection names (None: the whole line)
    says: str  # words the message must contain
    #: Only JSON text can say it (duplicate keys): as a Python dict it is another record.
    text_only: bool = False
    #: The case file's name (default: from ``name``); may hold a byte that is not UTF-8
    #: (``\udcff``, as Python reads such a name).
    file: str | None = None

    def parsed(self) -> Any:
        """The record as Python's plain ``json.loads`` reads it, or None when it can't
        (then only the file paths can carry it: the Python API takes dicts)."""
        try:
            return json.loads(self.line.decode("utf-8"))
        except (ValueError, RecursionError):
            return None


def _record(**changes: Any) -> dict[str, Any]:
    record = {"uid": "bad:1", "type": "page", "title": "Bad", "body": "text", "acl": ["everyone"]}
    record.update(changes)
    return record


def _line(**changes: Any) -> bytes:
    return json.dumps(_record(**changes)).encode()


def _raw(text: str) -> bytes:
    """A record written by hand: the JSON text exactly as given."""
    return text.encode("utf-8")


_BASE = '"uid":"bad:1","type":"page","title":"Bad","body":"text"'

CASES: tuple[BadCase, ...] = (
    # -- duplicate keys, at every depth: the last would silently win ------------------------
    BadCase(
        "duplicate acl",
        _raw("{" + _BASE + ',"acl":["user:owner"],"acl":["everyone"]}'),
        "acl",
        "appears twice",
        text_only=True,
    ),
    BadCase(
        "duplicate uid key",
        _raw('{"uid":"bad:1","type":"page","title":"Bad","body":"text","uid":"bad:2","acl":[]}'),
        "uid",
        "appears twice",
        text_only=True,
    ),
    BadCase(
        "duplicate attribute key",
        _raw("{" + _BASE + ',"acl":[],"attributes":{"tier":"secret","tier":"public"}}'),
        "tier",
        "appears twice",
        text_only=True,
    ),
    BadCase(
        "duplicate key in an edge",
        _raw("{" + _BASE + ',"acl":[],"edges":[{"label":"xref","to":"a","to":"b"}]}'),
        "to",
        "appears twice",
        text_only=True,
    ),
    BadCase(
        "duplicate key deep in attributes",
        _raw("{" + _BASE + ',"acl":[],"attributes":{"a":[{"b":{"c":1,"c":2}}]}}'),
        "c",
        "appears twice",
        text_only=True,
    ),
    # -- sizes: every string field has a documented limit ----------------------------------------
    BadCase("title over the limit", _line(title="T" * (MAX_TITLE_CHARS + 1)), "title", "limit"),
    BadCase("a 5 MB title", _line(title="T" * 5_000_000), "title", "limit"),
    BadCase("uid over the limit", _line(uid="u" * (MAX_UID_CHARS + 1)), "uid", "limit"),
    BadCase("type over the limit", _line(type="t" * (MAX_NAME_CHARS + 1)), "type", "limit"),
    BadCase("source over the limit", _line(source="s" * (MAX_NAME_CHARS + 1)), "source", "limit"),
    BadCase("status over the limit", _line(status="s" * (MAX_NAME_CHARS + 1)), "status", "limit"),
    BadCase("href over the limit", _line(href="h" * (MAX_HREF_BYTES + 1)), "href", "limit"),
    BadCase(
        "href over the limit in bytes", _line(href="é" * (MAX_HREF_BYTES // 2 + 1)), "href", "bytes"
    ),
    BadCase("body over the limit", _line(body="b" * (MAX_BODY_CHARS + 1)), "body", "limit"),
    BadCase(
        "attributes over the limit",
        _line(attributes={"blob": "x" * MAX_ATTRIBUTES_BYTES}),
        "attributes",
        "limit",
    ),
    BadCase(
        "5 MB of attributes",
        _line(attributes={f"k{i}": "v" * 50 for i in range(100_000)}),
        "attributes",
        "bytes",
    ),
    BadCase(
        "edge target over the limit",
        _line(edges=[{"label": "xref", "to": "t" * (MAX_UID_CHARS + 1)}]),
        "edges[0].to",
        "limit",
    ),
    BadCase(
        "too many edges",
        _line(edges=[{"label": "xref", "to": f"t:{i}"} for i in range(MAX_EDGES + 1)]),
        "edges",
        "limit",
    ),
    BadCase(
        "too many principals",
        _line(acl=[f"user:u{i}" for i in range(MAX_ACL_PRINCIPALS + 1)]),
        "acl",
        "limit",
    ),
    BadCase(
        "attribute key over the limit", _line(attributes={"k" * 300: 1}), "attributes", "limit"
    ),
    # -- NUL and control characters -------------------------------------------------------------
    BadCase("NUL in uid", _line(uid="bad\x001"), "uid", "NUL"),
    BadCase("NUL in type", _line(type="pa\x00ge"), "type", "NUL"),
    BadCase("NUL in title", _line(title="Ba\x00d"), "title", "NUL"),
    BadCase("NUL in body", _line(body="te\x00xt"), "body", "NUL"),
    BadCase("NUL in source", _line(source="do\x00cs"), "source", "NUL"),
    BadCase("NUL in status", _line(status="o\x00pen"), "status", "NUL"),
    BadCase("NUL in href", _line(href="/a\x00b"), "href", "NUL"),
    BadCase("NUL in an attribute key", _line(attributes={"k\x00": 1}), "attributes", "NUL"),
    BadCase("NUL in an attribute value", _line(attributes={"k": "v\x00"}), "attributes", "NUL"),
    BadCase(
        "NUL in an edge target",
        _line(edges=[{"label": "xref", "to": "a\x00"}]),
        "edges[0].to",
        "NUL",
    ),
    BadCase("bell in uid", _line(uid="bad\x071"), "uid", "control"),
    BadCase("newline in uid", _line(uid="bad\n1"), "uid", "control"),
    BadCase("C1 control in uid", _line(uid="bad\x851"), "uid", "control"),
    BadCase("zero-width space in uid", _line(uid="bad\u200b1"), "uid", "invisible"),
    BadCase("bidi override in type", _line(type="page\u202e"), "type", "invisible"),
    BadCase("escape sequence in title", _line(title="Bad\x1b[2J"), "title", "control"),
    BadCase("escape in type", _line(type="pa\x1bge"), "type", "control"),
    BadCase("tab in an attribute key", _line(attributes={"a\tb": 1}), "attributes", "control"),
    BadCase("newline in href", _line(href="/a\nb"), "href", "control"),
    # -- look-alikes ------------------------------------------------------------------------
    BadCase("uid with a trailing space", _line(uid="ok:1 "), "uid", "whitespace"),
    BadCase("uid with a leading space", _line(uid=" ok:1"), "uid", "whitespace"),
    BadCase("type with a trailing space", _line(type="page "), "type", "whitespace"),
    BadCase("uid not in NFC", _line(uid="cafe\u0301"), "uid", "NFC"),
    BadCase(
        "edge target not in NFC",
        _line(edges=[{"label": "xref", "to": "cafe\u0301"}]),
        "edges[0].to",
        "NFC",
    ),
    BadCase(
        "principal with a trailing space", _line(acl=["user:sam "]), "acl", "invalid principal"
    ),
    BadCase(
        "principal with a zero-width space",
        _line(acl=["user:s\u200bam"]),
        "acl",
        "invalid principal",
    ),
    BadCase("empty principal id", _line(acl=["group:"]), "acl", "invalid principal"),
    # -- nesting and numbers ------------------------------------------------------------------
    BadCase(
        "nesting 5,000 deep",
        _raw("{" + _BASE + ',"acl":[],"attributes":{"a":' + "[" * 5000 + "]" * 5000 + "}}"),
        None,
        "deeper than",
    ),
    BadCase(
        "nesting 40 deep",
        _raw("{" + _BASE + ',"acl":[],"attributes":{"a":' + "[" * 40 + "]" * 40 + "}}"),
        None,
        "deeper than",
    ),
    BadCase(
        "attributes 20 deep",
        _line(attributes={"a": [[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]}),
        "attributes",
        "deeper than",
    ),
    BadCase(
        "5,000-digit integer",
        _raw("{" + _BASE + ',"acl":[],"attributes":{"n":' + "9" * 5000 + "}}"),
        None,
        "64 bits",
    ),
    BadCase(
        "integer over 64 bits",
        _raw("{" + _BASE + ',"acl":[],"attributes":{"n":' + str(2**64) + "}}"),
        None,
        "64 bits",
    ),
    BadCase(
        "5,000-digit position",
        _raw(
            "{"
            + _BASE
            + ',"acl":[],"edges":[{"label":"xref","to":"a","position":'
            + "9" * 5000
            + "}]}"
        ),
        None,
        "64 bits",
    ),
    BadCase(
        "position 1e23",
        _raw("{" + _BASE + ',"acl":[],"edges":[{"label":"xref","to":"a","position":1e23}]}'),
        "edges[0].position",
        "whole number",
    ),
    BadCase(
        "position 2^31",
        _line(edges=[{"label": "xref", "to": "a", "position": MAX_EDGE_POSITION + 1}]),
        "edges[0].position",
        "whole number",
    ),
    BadCase(
        "position -1",
        _line(edges=[{"label": "xref", "to": "a", "position": -1}]),
        "edges[0].position",
        "whole number",
    ),
    BadCase("NaN", _raw("{" + _BASE + ',"acl":[],"attributes":{"x":NaN}}'), None, "NaN"),
    BadCase(
        "Infinity", _raw("{" + _BASE + ',"acl":[],"attributes":{"x":-Infinity}}'), None, "Infinity"
    ),
    BadCase("1e400", _raw("{" + _BASE + ',"acl":[],"attributes":{"x":1e400}}'), None, "infinity"),
    # -- lone surrogates (valid JSON escapes, not Unicode text) ------------------------------------
    BadCase(
        "lone surrogate in uid",
        _raw('{"uid":"\\ud800","type":"page","title":"t","body":"b","acl":[]}'),
        "uid",
        "surrogate",
    ),
    BadCase(
        "lone surrogate in title",
        _raw('{"uid":"bad:1","type":"page","title":"\\udfff","body":"b","acl":[]}'),
        "title",
        "surrogate",
    ),
    BadCase(
        "lone surrogate in body",
        _raw('{"uid":"bad:1","type":"page","title":"t","body":"a\\ud800b","acl":[]}'),
        "body",
        "surrogate",
    ),
    BadCase(
        "lone surrogate in an attribute",
        _raw("{" + _BASE + ',"acl":[],"attributes":{"k":"\\udc00"}}'),
        "attributes",
        "surrogate",
    ),
    BadCase(
        "lone surrogate as a key",
        _raw("{" + _BASE + ',"acl":[],"\\ud800":1}'),
        "\\ud800",
        "unknown key",
    ),
    BadCase(
        "lone surrogate in a principal",
        _raw("{" + _BASE + ',"acl":["user:\\ud800"]}'),
        "acl",
        "invalid principal",
    ),
    # -- dates: 0001–9999 round-trip (tests/test_dates.py); everything else is refused -------------
    BadCase("year 0", _line(created_at="0000-01-01"), "created_at", "0001–9999"),
    BadCase("year 10000", _line(created_at="10000-01-01"), "created_at", "ISO 8601"),
    BadCase(
        "offset before year 1",
        _line(created_at="0001-01-01T00:00:00+01:00"),
        "created_at",
        "0001–9999",
    ),
    BadCase(
        "offset after year 9999",
        _line(updated_at="9999-12-31T23:00:00-05:00"),
        "updated_at",
        "0001–9999",
    ),
    BadCase("month 13", _line(created_at="2024-13-01"), "created_at", "ISO 8601"),
    BadCase("full-width digits", _line(created_at="２０２４-01-01"), "created_at", "ISO 8601"),
    BadCase(
        "a long date", _line(created_at="2024-01-01" + " " * 100 + "x"), "created_at", "ISO 8601"
    ),
    BadCase("a date that is a number", _line(created_at=20240101), "created_at", "ISO 8601"),
    # -- derived records (issue 25): one sharing another's ACL says so with a partOf edge ----------
    BadCase(
        "acl_from without its partOf edge",
        _line(attributes={"acl_from": "page:x"}),
        "attributes.acl_from",
        "partOf",
    ),
    BadCase(
        "acl_from that is not a uid",
        _line(attributes={"acl_from": ["page:x"]}),
        "attributes.acl_from",
        "names a uid",
    ),
    # -- shapes --------------------------------------------------------------------------------
    BadCase("not an object", _raw("[1, 2, 3]"), None, "JSON object"),
    BadCase("malformed JSON", _raw('{"uid": "bad:1",'), None, "malformed JSON"),
    BadCase("not UTF-8", b'{"uid": "bad:1", "title": "\xff\xfe"}', None, "not UTF-8"),
    # -- the file itself ---------------------------------------------------------------------
    BadCase(  # named in the rejection, and --json stays valid UTF-8 (issue 25, item 11)
        "a file named in invalid UTF-8",
        _line(title="T" * (MAX_TITLE_CHARS + 1)),
        "title",
        "limit",
        file="named-\udcff\udcfe-badly.jsonl",
    ),
)


# -- running the corpus ----------------------------------------------------------------------


@dataclass
class Tally:
    """tried / rejected safely / misbehaved, per path."""

    tried: int = 0
    safe: int = 0
    misbehaved: list[str] = field(default_factory=list)

    def record(self, what: str, problem: str | None) -> None:
        self.tried += 1
        if problem is None:
            self.safe += 1
        else:
            self.misbehaved.append(f"{what}: {problem}")

    def line(self, label: str) -> str:
        return f"{label}: {self.tried} tried / {self.safe} rejected safely / {len(self.misbehaved)} misbehaved"


def write_case(case: BadCase, folder: Path) -> Path:
    """The case as a file: the good record on line 1, the bad one on line 2."""
    name = case.file or case.name.replace(" ", "_").replace(",", "").replace("^", "") + ".jsonl"
    path = folder / name
    path.write_bytes(json.dumps(GOOD).encode() + b"\n" + case.line + b"\n")
    return path


def rejection_problem(
    case: BadCase, rejection: dict[str, Any], *, check_field: bool = True
) -> str | None:
    """What is wrong with how ``case`` was rejected (None: as it must be)."""
    if rejection.get("line") != 2:
        return f"line {rejection.get('line')!r}, not 2"
    if check_field and rejection.get("field") != case.field:
        return f"field {rejection.get('field')!r}, not {case.field!r}"
    if case.says.lower() not in str(rejection.get("message", "")).lower():
        return f"message {str(rejection.get('message'))[:200]!r} does not say {case.says!r}"
    return None


def cli_answer(exit_code: int, stdout: bytes) -> tuple[int, Any]:
    """A ``--json`` command's exit status and answer; its output must be valid UTF-8 JSON (else
    the answer is what is wrong with it, as text)."""
    try:
        out = stdout.decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        return exit_code, f"the output is not UTF-8 ({exc})"
    try:
        return exit_code, json.loads(out) if out else None
    except ValueError:
        return exit_code, out


def cli_problem(case: BadCase, run: Callable[..., tuple[int, Any]], path: Path) -> str | None:
    """``ks ingest FILE --json`` must exit 2 with invalid_record naming line 2, the field and
    the file (as :func:`~knowledge_store.model.printable` shows a name that is not UTF-8)."""
    code, answer = run("ingest", str(path), "--json")
    if code != 2 or not isinstance(answer, dict) or "error" not in answer:
        return f"exit {code}, answered {str(answer)[:200]!r}"
    error = answer["error"]
    if error.get("code") != "invalid_record":
        return f"code {error.get('code')!r}: {str(error.get('message'))[:200]!r}"
    rejected = error.get("details", {}).get("rejected") or [{}]
    if rejected[0].get("file") != printable(str(path)):
        return f"file {rejected[0].get('file')!r}, not {printable(str(path))!r}"
    return rejection_problem(case, rejected[0])


def api_file_problem(case: BadCase, ingest: Callable[[Path], Any], path: Path) -> str | None:
    """``store.ingest([FILE])`` must raise InvalidRecord naming line 2 and the field."""
    try:
        ingest(path)
    except InvalidRecord as exc:
        rejected = exc.details.get("rejected") or [exc.rejection.to_dict()]
        return rejection_problem(case, rejected[0])
    except KnowledgeStoreError as exc:
        return f"{exc.code}: {exc.message[:200]}"
    except Exception as exc:  # the misbehaviour this corpus is for
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    return "accepted"


def api_records_problem(case: BadCase, ingest_records: Callable[[list[Any]], Any]) -> str | None:
    """``store.ingest_records([good, bad])`` must raise InvalidRecord naming record 2."""
    try:
        ingest_records([GOOD, case.parsed()])
    except InvalidRecord as exc:
        rejected = exc.details.get("rejected") or [exc.rejection.to_dict()]
        # Python's json read some cases differently (NaN as a float, 2**64 as an int):
        # the field may be the record's own rather than the line's.
        return rejection_problem(case, rejected[0], check_field=case.field is not None)
    except KnowledgeStoreError as exc:
        return f"{exc.code}: {exc.message[:200]}"
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    return "accepted"


# -- files a folder may hold ----------------------------------------------------------------------

#: The good page beside every file case.
GOOD_PAGE = "# A good page\n\nIt is loaded whatever the file beside it holds.\n"


@dataclass(frozen=True)
class FileCase:
    """A file beside a good page: how a folder ingest must treat it.

    ``outcome``: ``rejected`` (one ``invalid_record`` naming the file; with
    ``--skip-invalid`` the rest publishes), ``skipped`` (not read, in ``skipped`` with
    its reason; the rest publishes) or ``loaded`` (read within bounds). ``says``: words
    the reason must hold, or the loaded page's body.
    """

    name: str
    suffix: str
    write: Callable[[Path], None]
    outcome: Literal["rejected", "skipped", "loaded"]
    says: str

    @property
    def slug(self) -> str:
        return "".join(c if c.isalnum() else "-" for c in self.name.lower()).strip("-")

    @property
    def file(self) -> str:
        """Its name in the folder (each case's own: uids never meet across cases)."""
        return self.slug + self.suffix


def _text(text: str) -> Callable[[Path], None]:
    return lambda path: path.write_text(text, encoding="utf-8")


def _sparse(size: int) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        with path.open("wb") as out:
            out.truncate(size)

    return write


def _bytes(make: Callable[[], bytes]) -> Callable[[Path], None]:
    made = functools.cache(make)  # once per run: both engines write the same file
    return lambda path: path.write_bytes(made())


def _deep_mime(levels: int) -> str:
    parts = "".join(
        f"--b{i}\nContent-Type: multipart/mixed; boundary=b{i + 1}\n\n" for i in range(levels)
    )
    return f"From: a@example.org\nSubject: deep\nContent-Type: multipart/mixed; boundary=b0\n\n{parts}x\n"


def _nested_html(levels: int, opening: str = "<div>", closing: str = "</div>") -> str:
    return (
        "<html><head><title>Deep</title></head><body><main><h1>Deep</h1>"
        + opening * levels
        + "the deepest words"
        + closing * levels
        + "</main></body></html>"
    )


FILE_CASES: tuple[FileCase, ...] = (
    FileCase(
        "HTML nested 200,000 deep",
        ".html",
        _text(_nested_html(200_000)),
        "rejected",
        "nest more than",
    ),
    FileCase(
        "HTML nested 3,000 deep",
        ".html",
        _text(_nested_html(3000)),
        "loaded",
        "the deepest words",
    ),
    FileCase(
        "HTML lists nested 1,000 deep",
        ".html",
        _text(_nested_html(1000, "<ul><li>", "</li></ul>")),
        "loaded",
        "the deepest words",
    ),
    FileCase(
        "HTML quotes nested 1,200 deep",
        ".html",
        _text(_nested_html(1200, "<blockquote><p>quoted</p>", "</blockquote>")),
        "loaded",
        "the deepest words",
    ),
    FileCase(
        "HTML with 25,000 tags",
        ".html",
        _text("<main><h1>Wide</h1>" + "<p><span>the deepest words</span></p>" * 12_500 + "</main>"),
        "loaded",
        "the deepest words",
    ),
    FileCase(
        "Markdown quote nested 100,000 deep",
        ".md",
        _text("# Deep\n\n" + ">" * 100_000 + " the deepest words\n"),
        "loaded",
        "the deepest words",
    ),
    FileCase(
        "Markdown lists nested 500 deep",
        ".md",
        _text("# Deep\n\n" + "".join("  " * i + "- the deepest words\n" for i in range(500))),
        "loaded",
        "the deepest words",
    ),
    FileCase(
        "Markdown quotes and lists nested 600 deep",
        ".md",
        _text("# Deep\n\n" + "".join("> " * i + "- the deepest words\n" for i in range(600))),
        "loaded",
        "the deepest words",
    ),
    FileCase("a 2 GB sparse Markdown file", ".md", _sparse(2 * 1024**3), "skipped", "too large"),
    FileCase("a 2 GB sparse HTML file", ".html", _sparse(2 * 1024**3), "skipped", "too large"),
    FileCase(
        "a 2 GB sparse Learn unit file", ".json", _sparse(2 * 1024**3), "skipped", "too large"
    ),
    # -- documents (issue 30): hostile files are refused within bounds, the rest publishes --------
    FileCase(
        "a DOCX zip bomb (600 MB unpacked)",
        ".docx",
        _bytes(lambda: files.zip_bomb(".docx")),
        "skipped",
        "zip bomb",
    ),
    FileCase(
        "an XLSX zip bomb", ".xlsx", _bytes(lambda: files.zip_bomb(".xlsx")), "skipped", "zip bomb"
    ),
    FileCase(
        "a PDF of 100,000 pages",
        ".pdf",
        _bytes(lambda: files.pdf_of_many_pages(100_000)),
        "skipped",
        "100,000 pages",
    ),
    FileCase(
        "a PDF whose page tree loops",
        ".pdf",
        _bytes(files.pdf_with_a_looping_page_tree),
        "skipped",
        "pages",
    ),
    FileCase(
        "an encrypted PDF",
        ".pdf",
        _bytes(lambda: files.pdf([[("Secret words.", 11)]], encrypted=True)),
        "skipped",
        "encrypted",
    ),
    FileCase(
        "a scanned PDF (no text layer)",
        ".pdf",
        _bytes(files.scanned_pdf),
        "skipped",
        "no text layer",
    ),
    FileCase(
        "a PDF that is not one",
        ".pdf",
        _bytes(lambda: b"%PDF-1.7\n" + bytes(4096)),
        "skipped",
        "not a PDF",
    ),
    FileCase(
        "a DOCX that is not a zip",
        ".docx",
        _bytes(lambda: b"PK\x03\x04" + bytes(100)),
        "skipped",
        "zip",
    ),
    FileCase("a 1 GB sparse CSV", ".csv", _sparse(1024**3), "skipped", "too large"),
    FileCase(
        "a CSV with a 1 MB field",
        ".csv",
        _text("a,b\n" + "x" * 1_000_000 + ",y\n"),
        "skipped",
        "field",
    ),
    FileCase(
        "a CSV past the body limit",
        ".csv",
        _text("name,value\n" + "someone,12345678\n" * 60_000),
        "skipped",
        "too large",
    ),
    FileCase(
        "an e-mail of MIME parts nested 60 deep", ".eml", _text(_deep_mime(60)), "skipped", "nest"
    ),
    FileCase(
        "a PDF",
        ".pdf",
        _bytes(lambda: files.pdf([[("the deepest words on page one", 11)]])),
        "loaded",
        "the deepest words",
    ),
)


def write_file_case(case: FileCase, folder: Path) -> Path:
    """A folder of its own holding the good page and the case's file; the folder."""
    home = folder / case.slug
    home.mkdir(parents=True)
    (home / f"good-{case.slug}.md").write_text(GOOD_PAGE, encoding="utf-8")
    case.write(home / case.file)
    return home


def file_report_problem(case: FileCase, report: dict[str, Any], home: Path) -> str | None:
    """What is wrong with an ``--skip-invalid`` ingest report of the case's folder."""
    path = str(home / case.file)
    present = sum(report.get(count, 0) for count in ("added", "updated", "unchanged"))
    rejected = [r for r in report.get("rejected", []) if r.get("file") == path]
    skipped = [s for s in report.get("skipped", []) if s.get("path") == path]
    if case.outcome == "rejected":
        found = rejected[0]["message"] if rejected else None
    elif case.outcome == "skipped":
        found = skipped[0]["reason"] if skipped else None
    else:
        found = case.says if not rejected and not skipped and present == 2 else None
    if present < 1:
        return f"the good page was not published: {str(report)[:300]}"
    if found is None:
        return f"not {case.outcome}: {str(report)[:300]}"
    if case.says.lower() not in found.lower():
        return f"{found[:200]!r} does not say {case.says!r}"
    return None


def file_case_problem(
    case: FileCase, run: Callable[..., tuple[int, Any]], folder: Path
) -> str | None:
    """``ks ingest FOLDER --skip-invalid --json`` as the case says; without
    ``--skip-invalid``, a rejected file refuses the batch (exit 2, ``invalid_record``
    naming it) and anything else publishes."""
    home = write_file_case(case, folder)
    code, answer = run("ingest", str(home), "--acl", "everyone", "--json")
    if case.outcome == "rejected":
        error = answer.get("error", {}) if isinstance(answer, dict) else {}
        named = str(home / case.file) in json.dumps(error.get("details", {}))
        if code != 2 or error.get("code") != "invalid_record" or not named:
            return f"without --skip-invalid: exit {code}, answered {str(answer)[:300]}"
    elif code != 0 or not isinstance(answer, dict):
        return f"without --skip-invalid: exit {code}, answered {str(answer)[:300]}"
    code, answer = run("ingest", str(home), "--acl", "everyone", "--skip-invalid", "--json")
    if code != 0 or not isinstance(answer, dict):
        return f"exit {code}, answered {str(answer)[:300]}"
    return file_report_problem(case, answer, home)


def sparse_files_cost_nothing(folder: Path) -> bool:
    """Whether this file system keeps sparse files sparse (else the 2 GB cases take 2 GB)."""
    probe = folder / ".sparse-probe"
    _sparse(64 * 1024**2)(probe)
    try:
        return os.stat(probe).st_blocks * 512 < 1024**2
    finally:
        probe.unlink()
