"""Folders of pages (Markdown, HTML): uids from paths, ``partOf`` from folders, ``xref`` from links.

A page's parent is the index page (``index.md``, ``_index.md``, ``README.md``,
``index.html`` …) of its folder — for an index page, of the enclosing folder —
the nearest ancestor folder under the root that has one. A relative link to
another loaded page is an ``xref`` edge (anchors dropped, deduplicated, no
self links); links to anything outside the load are ignored.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import unquote, urlsplit

from knowledge_store.errors import InvalidRecord, Rejection
from knowledge_store.ingest.loaders.base import LoadedRecord, Options
from knowledge_store.ingest.loaders.code_samples import with_code_samples
from knowledge_store.ingest.records import record_to_entity

__all__ = ["INDEX_NAMES", "Page", "default_uid", "is_index", "site_records"]

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


def site_records(pages: list[Page], options: Options) -> Iterator[LoadedRecord | Rejection]:
    """Each page (with its folder ``partOf`` and link ``xref`` edges) and its code samples."""
    by_path = {page.path: page for page in pages}
    indexes = _folder_indexes(pages)
    for page in pages:
        record = dict(page.record)
        uid = record.get("uid")
        edges = list(record.get("edges") or [])
        given = {(e.get("label"), e.get("to")) for e in edges if isinstance(e, dict)}
        has_parent = any(label == "partOf" for label, _ in given)
        parent = _parent(page, indexes)
        up = _uid_of(parent)
        if up is not None and not has_parent and up != uid:
            edges.append({"label": "partOf", "to": up, "position": None})
        for href in page.links:
            to = _uid_of(_link_target(page, href, by_path))
            if to is not None and to != uid and ("xref", to) not in given:
                given.add(("xref", to))
                edges.append({"label": "xref", "to": to, "position": None})
        if edges:
            record["edges"] = edges
        try:
            entity = record_to_entity(
                record,
                file=page.file,
                line=None,
                default_acl=options.default_acl,
                source=options.source,
            )
        except InvalidRecord as exc:
            yield exc.rejection
            continue
        entity, samples, rejected = with_code_samples(entity, file=page.file, line=None)
        yield LoadedRecord(page.file, None, entity)
        yield from (LoadedRecord(page.file, None, sample) for sample in samples)
        yield from rejected
