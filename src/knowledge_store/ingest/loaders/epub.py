"""E-books (EPUB 2 and 3): the book, and a part per chapter, read with the standard
library's zipfile and XML parser and the HTML loader (no EPUB library: the common one,
EbookLib, is AGPL).

The reading order is the package's spine; each XHTML document in it is a chapter:
an entity ``{book}#chapter-N``, ``partOf`` the book at position N, titled by the
book's table of contents (else its first heading), its body starting with a location
marker ``{"chapter": N}``. A link from one chapter to another becomes an ``xref``.
The book itself holds its title, creators and the list of chapters. Bounded: at most
:data:`MAX_CHAPTERS` chapters, each file of the container at most
:data:`MAX_CHAPTER_BYTES` (the loader checked the container's declared sizes first).
"""

from __future__ import annotations

import io
import posixpath
import zipfile
from typing import Any
from urllib.parse import unquote, urlsplit
from xml.etree import ElementTree

from knowledge_store.ingest.chunking import location_marker
from knowledge_store.ingest.loaders.parts import Part, Unreadable, paragraphs

__all__ = ["MAX_CHAPTERS", "MAX_CHAPTER_BYTES", "read_epub"]

MAX_CHAPTERS = 2_000
MAX_CHAPTER_BYTES = 16 * 1024**2
_OPF = "{http://www.idpf.org/2007/opf}"
_DC = "{http://purl.org/dc/elements/1.1/}"
_CONTAINER = "{urn:oasis:names:tc:opendocument:xmlns:container}"
_XHTML = "{http://www.w3.org/1999/xhtml}"
_NCX = "{http://www.daisy.org/z3986/2005/ncx/}"
_DOCUMENT_TYPES = ("application/xhtml+xml", "text/html")


def _read(book: zipfile.ZipFile, name: str) -> bytes:
    info = book.getinfo(name)
    if info.file_size > MAX_CHAPTER_BYTES:
        raise ValueError(f"{name} is {info.file_size:,} bytes (the limit is {MAX_CHAPTER_BYTES:,})")
    return book.read(info)


def _xml(book: zipfile.ZipFile, name: str) -> ElementTree.Element:
    return ElementTree.fromstring(_read(book, name))


def _toc_titles(
    book: zipfile.ZipFile, folder: str, manifest: dict[str, tuple[str, str, str]]
) -> dict[str, str]:
    """The table of contents' label of each document (EPUB 3 nav, else EPUB 2 NCX)."""
    titles: dict[str, str] = {}
    for path, kind, properties in manifest.values():
        try:
            if "nav" in properties.split():
                root = _xml(book, path)
                for link in root.iter(f"{_XHTML}a"):
                    target = posixpath.normpath(
                        posixpath.join(
                            posixpath.dirname(path), unquote(urlsplit(link.get("href", "")).path)
                        )
                    )
                    label = " ".join("".join(link.itertext()).split())
                    if label:
                        titles.setdefault(target, label)
            elif kind == "application/x-dtbncx+xml":
                root = _xml(book, path)
                for point in root.iter(f"{_NCX}navPoint"):
                    text = point.find(f"{_NCX}navLabel/{_NCX}text")
                    content = point.find(f"{_NCX}content")
                    if text is not None and content is not None:
                        src = unquote(urlsplit(content.get("src", "")).path)
                        target = posixpath.normpath(posixpath.join(posixpath.dirname(path), src))
                        label = " ".join("".join(text.itertext()).split())
                        if label:
                            titles.setdefault(target, label)
        except (KeyError, ValueError, ElementTree.ParseError):
            continue
    del folder
    return titles


def read_epub(data: bytes, name: str) -> list[Part] | Unreadable:
    """The EPUB ``data``: the book and its chapters, or why it can't be read."""
    from knowledge_store.ingest.loaders.html import parse_html

    try:
        book = zipfile.ZipFile(io.BytesIO(data))
        container = _xml(book, "META-INF/container.xml")
        rootfile = container.find(f"{_CONTAINER}rootfiles/{_CONTAINER}rootfile")
        if rootfile is None or not rootfile.get("full-path"):
            return Unreadable("not an EPUB: its container names no package")
        package_path = rootfile.get("full-path", "")
        package = _xml(book, package_path)
    except (zipfile.BadZipFile, KeyError, ValueError, ElementTree.ParseError) as exc:
        return Unreadable(f"not an EPUB that can be read ({exc})")
    folder = posixpath.dirname(package_path)
    metadata = package.find(f"{_OPF}metadata")

    def meta(tag: str) -> list[str]:
        found = [] if metadata is None else metadata.findall(f"{_DC}{tag}")
        return [
            " ".join("".join(e.itertext()).split()) for e in found if "".join(e.itertext()).strip()
        ]

    manifest = {
        item.get("id", ""): (
            posixpath.normpath(posixpath.join(folder, unquote(item.get("href", "")))),
            item.get("media-type", ""),
            item.get("properties", ""),
        )
        for item in package.iter(f"{_OPF}item")
    }
    spine = [
        manifest[ref.get("idref", "")]
        for ref in package.iter(f"{_OPF}itemref")
        if ref.get("idref", "") in manifest and manifest[ref.get("idref", "")][1] in _DOCUMENT_TYPES
    ]
    if not spine:
        return Unreadable("an EPUB with no chapter to read (its spine is empty)")
    if len(spine) > MAX_CHAPTERS:
        return Unreadable(f"{len(spine):,} chapters; the limit is {MAX_CHAPTERS:,}")
    titles = _toc_titles(book, folder, manifest)
    parts: list[Part] = []
    listed: list[str] = []
    for number, (path, _, _) in enumerate(spine, start=1):
        try:
            page = parse_html(_read(book, path).decode("utf-8-sig", errors="replace"))
        except (KeyError, ValueError) as exc:
            return Unreadable(f"the chapter {path} could not be read ({exc})")
        if page.problem is not None:
            return Unreadable(f"the chapter {path}: {page.problem}")
        if not page.body.strip():
            continue
        chapter = titles.get(path) or page.title or f"Chapter {number}"
        listed.append(f"{len(listed) + 1}. {chapter}")
        links = tuple(
            posixpath.normpath(
                posixpath.join(posixpath.dirname(path), unquote(urlsplit(link).path))
            )
            for link in page.links
            if link and not urlsplit(link).scheme and urlsplit(link).path
        )
        parts.append(
            Part(
                key=f"chapter-{len(listed)}",
                type="chapter",
                title=chapter,
                body=paragraphs([location_marker({"chapter": len(listed)}), page.body]),
                parent="",
                position=len(listed),
                links=links,
                name=path,
            )
        )
    title = next(iter(meta("title")), None)
    creators = meta("creator")
    attributes: dict[str, Any] = {"chapters": len(parts)}
    if creators:
        attributes["author"] = ", ".join(creators)
    if meta("language"):
        attributes["language"] = meta("language")[0]
    head = [f"# {title}" if title else "", f"By {', '.join(creators)}" if creators else ""]
    book_part = Part(
        key=None,
        type="book",
        title=title,
        body=paragraphs([*head, "\n".join(listed)]),
        attributes={**attributes, **({"published": meta("date")[0]} if meta("date") else {})},
    )
    return [book_part, *parts]
