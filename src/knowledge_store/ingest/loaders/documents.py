"""Documents: PDF, Word, PowerPoint, spreadsheets, CSV, e-books, e-mail and plain text.

Each format (:data:`DOCUMENT_FORMATS`) names its extensions, its reader and the
modules the reader needs. A file is read in the loader's process only as far as
checking it: its size before a byte is read (:attr:`DocumentFormat.max_bytes`), then,
for the zip-based formats (DOCX, PPTX, XLSX, EPUB), what its parts declare they
expand to (:data:`MAX_UNZIPPED_BYTES`, :data:`MAX_ZIP_ENTRIES`). The reader runs in
a bounded worker (:mod:`.bounded`, :data:`DOCUMENT_LIMITS`): a file that loops, inflates
or crashes its parser is refused within the bound, the rest of the load goes on.

A file that is not loaded is :class:`~.files.Skipped` with its reason — too large, a
zip bomb, encrypted, no text layer, unreadable, or its extra not installed (``pip install
'knowledge-store[docs]'``) — never dropped without a word. A file read becomes
:class:`~.pages.Page`\\ s: the document (uid: its path without extension, like a page),
and its parts (``{uid}#chapter-3``, ``{uid}#message-2``) ``partOf`` it; links in it to
other loaded files become ``xref`` edges, e-mail replies ``partOf`` what they answer.
"""

from __future__ import annotations

import importlib
import importlib.util
import io
import os
import zipfile
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from knowledge_store.errors import Rejection
from knowledge_store.ingest.dates import file_dates
from knowledge_store.ingest.loaders.bounded import Limits, Refused, Runner, shared_runner
from knowledge_store.ingest.loaders.files import Skipped, open_regular, read_at_most, too_large
from knowledge_store.ingest.loaders.pages import Page, default_uid
from knowledge_store.ingest.loaders.parts import Part, Unreadable

__all__ = [
    "DOCS_EXTRA",
    "DOCUMENT_FORMATS",
    "DOCUMENT_LIMITS",
    "MAX_UNZIPPED_BYTES",
    "MAX_ZIP_ENTRIES",
    "DocumentFormat",
    "format_of_type",
    "part_records",
    "read_document",
    "read_documents",
    "thread_messages",
]

DOCS_EXTRA = "pip install 'knowledge-store[docs]'"
#: The bounds of one document's read in the worker.
DOCUMENT_LIMITS = Limits(seconds=120.0, cpu_seconds=120, memory_bytes=2 * 1024**3)
#: A zip-based file (DOCX, PPTX, XLSX, EPUB) whose parts declare more than this, in all, is
#: refused unread (a zip bomb: 1 MB that inflates to gigabytes).
MAX_UNZIPPED_BYTES = 512 * 1024**2
MAX_ZIP_ENTRIES = 20_000
_MiB = 1024**2


@dataclass(frozen=True)
class DocumentFormat:
    """A document format: its extensions, its reader (``module:function``, run in the
    worker), the modules that reader needs (from the ``docs`` extra, or none), the
    largest file it reads, and whether the file is a zip container."""

    name: str
    extensions: tuple[str, ...]
    reader: str
    needs: tuple[str, ...]
    max_bytes: int
    zipped: bool = False
    what: str = "a file"


_LOADERS = "knowledge_store.ingest.loaders"
DOCUMENT_FORMATS: dict[str, DocumentFormat] = {
    f.name: f
    for f in (
        DocumentFormat(
            "pdf",
            (".pdf",),
            f"{_LOADERS}.pdf:read_pdf",
            ("pypdfium2",),
            256 * _MiB,
            what="a PDF file",
        ),
        DocumentFormat(
            "docx",
            (".docx",),
            f"{_LOADERS}.office:read_docx",
            ("docx",),
            256 * _MiB,
            zipped=True,
            what="a Word file",
        ),
        DocumentFormat(
            "pptx",
            (".pptx",),
            f"{_LOADERS}.office:read_pptx",
            ("pptx",),
            256 * _MiB,
            zipped=True,
            what="a PowerPoint file",
        ),
        DocumentFormat(
            "xlsx",
            (".xlsx", ".xlsm"),
            f"{_LOADERS}.sheets:read_xlsx",
            ("python_calamine",),
            256 * _MiB,
            zipped=True,
            what="a spreadsheet",
        ),
        DocumentFormat(
            "csv",
            (".csv", ".tsv"),
            f"{_LOADERS}.sheets:read_csv",
            (),
            64 * _MiB,
            what="a CSV file",
        ),
        DocumentFormat(
            "epub",
            (".epub",),
            f"{_LOADERS}.epub:read_epub",
            (),
            256 * _MiB,
            zipped=True,
            what="an e-book",
        ),
        DocumentFormat(
            "email",
            (".eml",),
            f"{_LOADERS}.mail:read_eml",
            (),
            64 * _MiB,
            what="an e-mail message",
        ),
        DocumentFormat(
            "mbox",
            (".mbox",),
            f"{_LOADERS}.mail:read_mbox",
            (),
            256 * _MiB,
            what="a mailbox",
        ),
        DocumentFormat(
            "text",
            (".txt", ".text"),
            f"{_LOADERS}.documents:read_text",
            (),
            8 * _MiB,
            what="a text file",
        ),
    )
}


#: The content types a web server sends for each format (a crawl reads them as documents).
_CONTENT_TYPES = {
    "application/pdf": "pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": "pptx",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
    "text/csv": "csv",
    "text/tab-separated-values": "csv",
    "application/epub+zip": "epub",
    "message/rfc822": "email",
    "application/mbox": "mbox",
    "text/plain": "text",
}


def format_of_type(content_type: str, url_path: str) -> str | None:
    """The document format of a fetched body: by its content type, else (for a generic
    ``application/octet-stream``) by its extension."""
    found = _CONTENT_TYPES.get(content_type)
    if found is None and content_type in ("application/octet-stream", ""):
        suffix = os.path.splitext(url_path)[1].lower()
        found = next((f.name for f in DOCUMENT_FORMATS.values() if suffix in f.extensions), None)
    return found


def read_text(data: bytes, name: str) -> list[Part] | Unreadable:
    """A plain text file as one part: its text as it is; its first line the title."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return Unreadable(f"not UTF-8 text (byte {exc.start:,}); save it as UTF-8")
    if not text.strip():
        return Unreadable("it holds no text")
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    title = first.lstrip("#").strip() if len(first) <= 200 else None
    return [Part(key=None, type="page", title=title or None, body=text)]


def read_document(format: str, data: bytes, name: str) -> list[Part] | Unreadable:
    """Read ``data`` (the file ``name``) as ``format``: what the worker runs."""
    module, _, function = DOCUMENT_FORMATS[format].reader.partition(":")
    reader: Callable[[bytes, str], list[Part] | Unreadable] = getattr(
        importlib.import_module(module), function
    )
    return reader(data, name)


def _missing(fmt: DocumentFormat) -> str | None:
    for module in fmt.needs:
        if importlib.util.find_spec(module) is None:
            return module
    return None


def _zip_problem(data: bytes) -> str | None:
    """Why a zip container is refused unread (a bomb, not a zip), or None."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as container:
            entries = container.infolist()
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        return f"not a readable zip container ({exc}); the file may be damaged"
    if len(entries) > MAX_ZIP_ENTRIES:
        return f"{len(entries):,} parts in its zip container; the limit is {MAX_ZIP_ENTRIES:,}"
    inflated = sum(entry.file_size for entry in entries)
    if inflated > MAX_UNZIPPED_BYTES:
        return (
            f"a zip bomb: its {len(data):,} bytes declare {inflated:,} bytes unpacked;"
            f" the limit is {MAX_UNZIPPED_BYTES:,}"
        )
    return None


Step = tuple[str, Path, Path]
Outcome = list[Page] | Skipped | Rejection


def _prepare(step: Step, file: str) -> tuple[bytes, str] | Skipped | Rejection:
    """The file's bytes, checked before any parser sees them (or why it is not read)."""
    name, path, folder = step
    fmt = DOCUMENT_FORMATS[name]
    module = _missing(fmt)
    if module is not None:
        return Skipped(
            file, f"{fmt.what} needs the docs extra ({module} is not installed): {DOCS_EXTRA}"
        )
    try:
        opened = open_regular(path, folder)
    except OSError as exc:
        return Skipped(file, f"unreadable: {exc.strerror}")
    if isinstance(opened, Skipped):
        return opened
    with opened:
        data = read_at_most(opened, fmt.max_bytes)
    if data is None:
        return Skipped(file, too_large(os.stat(path).st_size, fmt.max_bytes, fmt.what))
    if fmt.zipped:
        problem = _zip_problem(data)
        if problem is not None:
            return Skipped(file, problem)
    return data, path.name


def part_records(
    parts: list[Part], *, uid: str, href: str, file_type: str, fallback_title: str
) -> list[tuple[dict[str, Any], list[str]]]:
    """Each part's canonical record and the links it holds to other files: the document
    (``uid``, ``href``; titled ``fallback_title`` when it names no title), then its parts
    (``uid#key``), with their edges among them."""
    by_name = {p.name: f"{uid}#{p.key}" for p in parts if p.name and p.key}
    out: list[tuple[dict[str, Any], list[str]]] = []
    for part in parts:
        record: dict[str, Any] = {
            "uid": uid if part.key is None else f"{uid}#{part.key}",
            "type": part.type,
            "title": part.title or (fallback_title if part.key is None else part.key),
            "body": part.body,
            "href": href if part.key is None else f"{href}#{part.key}",
            "attributes": {**part.attributes, "file_type": file_type},
        }
        for field, value in (("created_at", part.created_at), ("updated_at", part.updated_at)):
            if value is not None:
                record[field] = value
        edges = []
        if part.parent is not None:
            to = uid if part.parent == "" else f"{uid}#{part.parent}"
            edges.append({"label": "partOf", "to": to, "position": part.position})
        links = list(part.links)
        if part.name:  # links inside the file: to the other parts
            edges += [
                {"label": "xref", "to": by_name[link], "position": None}
                for link in dict.fromkeys(links)
                if link in by_name and by_name[link] != record["uid"]
            ]
            links = []
        if edges:
            record["edges"] = edges
        if part.message_id:
            record["attributes"]["message_id"] = part.message_id
        out.append((record, links))
    return out


def _pages(step: Step, file: str, parts: list[Part]) -> list[Page]:
    """The document's pages (:func:`part_records`); its parts dated by the file."""
    name, path, folder = step
    absolute = Path(os.path.abspath(path))
    root = Path(os.path.abspath(folder))
    uid = default_uid(absolute, root)
    href = absolute.relative_to(root).as_posix()
    dated = file_dates(absolute)
    pages: list[Page] = []
    records = part_records(parts, uid=uid, href=href, file_type=name, fallback_title=absolute.stem)
    for record, links in records:
        part = record["uid"] != uid
        if part:  # parts have no file of their own to date them by
            dated.fill(record)
        where = Path(f"{absolute}#{record['uid'].partition('#')[2]}") if part else absolute
        pages.append(Page(file, where, root, record, links))
    return pages


def _read_one(step: Step, runner: Runner) -> Outcome:
    name, path, _ = step
    file = str(path)
    prepared = _prepare(step, file)
    if isinstance(prepared, Skipped | Rejection):
        return prepared
    data, filename = prepared
    answer = runner.call(read_document, name, data, filename, limits=DOCUMENT_LIMITS)
    if isinstance(answer, Refused):
        return Skipped(file, answer.reason)
    if isinstance(answer, Unreadable):
        return Skipped(file, answer.reason)
    return _pages(step, file, answer)


def read_documents(steps: Iterable[Step], runner: Runner | None = None) -> Iterator[Outcome]:
    """Each step's pages (or why it was not read), in order; read on the runner's workers."""
    steps = list(steps)
    if not steps:
        return
    runner = runner or shared_runner()
    with ThreadPoolExecutor(runner.size) as pool:
        yield from pool.map(lambda step: _read_one(step, runner), steps)


def thread_messages(pages: list[Page]) -> None:
    """A reply ``partOf`` the message it answers, when that message is in ``pages``."""
    by_id = {
        p.record["attributes"]["message_id"]: p.record["uid"]
        for p in pages
        if isinstance(p.record.get("attributes"), dict) and p.record["attributes"].get("message_id")
    }
    for page in pages:
        attributes = page.record.get("attributes")
        answered = attributes.get("in_reply_to") if isinstance(attributes, dict) else None
        parent = by_id.get(answered) if answered else None
        if parent is None or parent == page.record["uid"]:
            continue
        edges = [e for e in page.record.get("edges") or [] if e.get("label") != "partOf"]
        edges.append({"label": "partOf", "to": parent, "position": None})
        page.record["edges"] = edges
