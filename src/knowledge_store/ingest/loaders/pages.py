"""Folders of pages (Markdown, HTML): uids from paths, ``partOf`` from folders, ``xref`` from links.

A page's parent is the index page (``index.md``, ``_index.md``, ``README.md``,
``index.html`` …) of its folder — for an index page, of the enclosing folder —
the nearest ancestor folder under the root that has one. A relative link to
another loaded page is an ``xref`` edge (anchors dropped, deduplicated, no
self links); links to anything outside the load are ignored. Pages take their
dates from their files when they don't give them (git history, else mtime) and
their folder's name as source when they name none. A page whose uid is its path gets
``Options.uid_prefix`` before it (``--uid-prefix``; a uid its front matter gives is kept
as written), before any edge is resolved: links and parents name the prefixed uids.
"""

from __future__ import annotations

import dataclasses
import os
import re
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import unquote, urlsplit

from knowledge_store.errors import InvalidRecord, Rejection
from knowledge_store.ingest.dates import Dates, folder_dates
from knowledge_store.ingest.loaders.base import LoadedRecord, Options
from knowledge_store.ingest.loaders.code_samples import with_code_samples
from knowledge_store.ingest.records import record_to_entity
from knowledge_store.model import MAX_NAME_CHARS, name_problem

__all__ = [
    "INDEX_NAMES",
    "Page",
    "add_structure_edges",
    "default_uid",
    "folder_source",
    "is_index",
    "page_entities",
    "prefixed_rejection",
    "site_records",
]

#: Index page names, most preferred first (compared case-insensitively).
INDEX_NAMES: tuple[str, ...] = (
    "index.md",
    "index.markdown",
    "index.html",
    "index.htm",
    "_index.md",
    "_index.markdown",
    "readme.md",
    "readme.markdown",
)
_PAGE_SUFFIXES = (".md", ".markdown", ".html", ".htm")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


@dataclass
class Page:
    """One parsed page file before its edges are resolved.

    ``record`` is its canonical record (no ``partOf``/``xref`` from the folder
    yet); ``links`` are the link targets as written in it.
    """

    file: str
    path: Path
    root: Path
    record: dict[str, Any]
    links: list[str] = field(default_factory=list)


def default_uid(path: Path, root: Path) -> str:
    """The path relative to ``root``, without extension, with ``/`` separators."""
    relative = PurePosixPath(path.relative_to(root).as_posix())
    return str(relative.with_suffix("")) if relative.suffix else str(relative)


def is_index(path: Path) -> bool:
    return path.name.lower() in INDEX_NAMES


def _folder_indexes(pages: Iterable[Page]) -> dict[Path, Page]:
    indexes: dict[Path, Page] = {}
    for page in sorted(
        pages, key=lambda p: INDEX_NAMES.index(p.path.name.lower()) if is_index(p.path) else 99
    ):
        if is_index(page.path):
            indexes.setdefault(page.path.parent, page)
    return indexes


def _parent(page: Page, indexes: dict[Path, Page]) -> Page | None:
    folder = page.path.parent.parent if is_index(page.path) else page.path.parent
    while folder == page.root or page.root in folder.parents:
        found = indexes.get(folder)
        if found is not None and found is not page:
            return found
        if folder == page.root:
            break
        folder = folder.parent
    return None


def _link_target(page: Page, href: str, by_path: dict[Path, Page]) -> Page | None:
    if not href or href.startswith(("#", "/")) or _SCHEME.match(href):
        return None
    relative = unquote(urlsplit(href).path)
    if not relative:
        return None
    target = Path(os.path.normpath(page.path.parent / relative))
    candidates = [target]
    if href.endswith("/") or not target.suffix:
        candidates += [target / name for name in INDEX_NAMES]
    if not target.suffix:
        candidates += [target.with_name(target.name + suffix) for suffix in _PAGE_SUFFIXES]
    elif target.suffix.lower() in (".html", ".htm"):
        candidates += [target.with_suffix(suffix) for suffix in (".md", ".markdown")]
    for candidate in candidates:
        found = by_path.get(candidate)
        if found is not None:
            return found
    return None


def _uid_of(page: Page | None) -> str | None:
    uid = page.record.get("uid") if page is not None else None
    return uid if isinstance(uid, str) and uid.strip() else None


def add_structure_edges(record: dict[str, Any], parent: str | None, links: Iterable[str]) -> None:
    """Add ``partOf parent`` (unless the record names a parent) and an ``xref`` to each linked uid.

    Links to the record itself and edges it already gives are left out.
    """
    uid = record.get("uid")
    edges = list(record.get("edges") or [])
    given = {(e.get("label"), e.get("to")) for e in edges if isinstance(e, dict)}
    has_parent = any(label == "partOf" for label, _ in given)
    if parent is not None and not has_parent and parent != uid:
        edges.append({"label": "partOf", "to": parent, "position": None})
    for to in links:
        if to != uid and ("xref", to) not in given:
            given.add(("xref", to))
            edges.append({"label": "xref", "to": to, "position": None})
    if edges:
        record["edges"] = edges


def page_entities(
    record: dict[str, Any], *, file: str, options: Options
) -> Iterator[LoadedRecord | Rejection]:
    """A page record's entity, then its code samples (or the rejections)."""
    try:
        entity = record_to_entity(
            record, file=file, line=None, default_acl=options.default_acl, source=options.source
        )
    except InvalidRecord as exc:
        yield exc.rejection
        return
    entity, samples, rejected = with_code_samples(entity, file=file, line=None)
    yield LoadedRecord(file, None, entity)
    yield from (LoadedRecord(file, None, sample, entity.uid) for sample in samples)
    yield from rejected


def _dates(pages: list[Page]) -> dict[Path, Dates]:
    """Each page's file dates, from one git history per folder (see :mod:`..dates`)."""
    undated: dict[Path, list[Path]] = {}
    for page in pages:
        if page.record.get("created_at") is None or page.record.get("updated_at") is None:
            undated.setdefault(page.root, []).append(page.path)
    dates: dict[Path, Dates] = {}
    for root, files in undated.items():
        dates.update(folder_dates(root, files))
    return dates


def folder_source(root: Path) -> str:
    """A folder's name as a source: in NFC (macOS writes names decomposed), trimmed to a
    name's size; "" when even that is not a name (a control character in a folder name)."""
    name = unicodedata.normalize("NFC", root.name or str(root)).strip()[:MAX_NAME_CHARS].strip()
    return name if name and name_problem(name, MAX_NAME_CHARS) is None else ""


def prefixed_rejection(rejection: Rejection, path: Path, root: Path, prefix: str) -> Rejection:
    """A page's rejection naming the uid the page would have had (``prefix`` before a uid
    taken from its path): what a sync keeps as stored."""
    if not prefix or rejection.uid != default_uid(path, root):
        return rejection
    return dataclasses.replace(rejection, uid=f"{prefix}{rejection.uid}")


def _with_prefix(pages: list[Page], prefix: str) -> list[Page]:
    """``pages`` with ``prefix`` before every uid taken from a path — a page's, and a
    document part's (``book#chapter-2``: its document's path, then ``#``) — and the edges
    among them renamed alike (a part's ``partOf`` its document, a reply's its message)."""
    if not prefix:
        return pages
    renamed: dict[str, str] = {}
    for page in pages:
        uid = page.record.get("uid")
        path_uid = default_uid(page.path, page.root)
        if isinstance(uid, str) and (uid == path_uid or uid.startswith(f"{path_uid}#")):
            renamed[uid] = f"{prefix}{uid}"
    out = []
    for page in pages:
        record = dict(page.record)
        record["uid"] = renamed.get(record.get("uid"), record.get("uid"))  # type: ignore[arg-type]
        if isinstance(record.get("edges"), list):
            record["edges"] = [
                {**edge, "to": renamed.get(edge["to"], edge["to"])}
                if isinstance(edge, dict) and isinstance(edge.get("to"), str)
                else edge
                for edge in record["edges"]
            ]
        out.append(dataclasses.replace(page, record=record))
    return out


def site_records(pages: list[Page], options: Options) -> Iterator[LoadedRecord | Rejection]:
    """Each page (with its folder ``partOf`` and link ``xref`` edges) and its code samples.

    A page without dates of its own takes them from its file (:func:`folder_dates`);
    without a source, the name of the folder it was loaded from.
    """
    pages = _with_prefix(pages, options.uid_prefix)
    by_path = {page.path: page for page in pages}
    indexes = _folder_indexes(pages)
    dates = _dates(pages)
    for page in pages:
        record = dict(page.record)
        if page.path in dates:
            dates[page.path].fill(record)
        if not record.get("source"):
            record["source"] = folder_source(page.root)
        links = (_uid_of(_link_target(page, href, by_path)) for href in page.links)
        add_structure_edges(
            record, _uid_of(_parent(page, indexes)), (to for to in links if to is not None)
        )
        yield from page_entities(record, file=page.file, options=options)
