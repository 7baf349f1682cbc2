"""Loaders: paths and URLs → validated entities and rejections (DESIGN §1, §7).

``load_paths`` reads every path with one of :data:`FORMATS` — given, or told
by each file's extension; an ``http(s)://`` URL is a web site (``web``) — and
returns the good records and the rejected ones, and what it found present
but did not read (see :class:`LoadResult`). Within one load a uid may appear
once; a second occurrence is rejected naming the first. Only regular files
inside the folder given are read; links out of it, FIFOs, devices and sockets
are skipped and reported (:mod:`.files`), and so is a file larger than its
format's :data:`MAX_FILE_BYTES` — told before anything of it is read.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from knowledge_store.errors import InvalidRequest, Rejection
from knowledge_store.ingest.loaders.base import (
    FetchFailure,
    LoadedRecord,
    LoadResult,
    Options,
    SourceInfo,
)
from knowledge_store.ingest.loaders.documents import (
    DOCUMENT_FORMATS,
    read_documents,
    thread_messages,
)
from knowledge_store.ingest.loaders.files import (
    Skipped,
    open_regular,
    read_at_most,
    too_large,
    walk_folder,
)
from knowledge_store.ingest.loaders.jsonl import read_jsonl
from knowledge_store.ingest.loaders.learn import read_learn
from knowledge_store.ingest.loaders.markdown import read_markdown_page
from knowledge_store.ingest.loaders.pages import Page, prefixed_rejection, site_records
from knowledge_store.model import check_principal

if TYPE_CHECKING:
    from knowledge_store.ingest.loaders.web import WebOptions

__all__ = [
    "EXTENSIONS",
    "FORMATS",
    "MAX_FILE_BYTES",
    "FetchFailure",
    "LoadResult",
    "LoadedRecord",
    "Skipped",
    "SourceInfo",
    "check_format",
    "is_url",
    "load_paths",
]

FORMATS: tuple[str, ...] = ("jsonl", "learn", "markdown", "html", "web", *DOCUMENT_FORMATS)
#: The file extensions each file format reads when it walks a folder (and auto-detection uses).
EXTENSIONS: dict[str, tuple[str, ...]] = {
    "jsonl": (".jsonl",),
    "learn": (".json",),
    "markdown": (".md", ".markdown"),
    "html": (".html", ".htm"),
    **{name: fmt.extensions for name, fmt in DOCUMENT_FORMATS.items()},
}
_FORMAT_OF = {suffix: name for name, suffixes in EXTENSIONS.items() for suffix in suffixes}
#: The largest file each format reads whole, in bytes; a larger one is skipped unread
#: (JSON Lines files are read a line at a time, each line bounded). A Markdown body
#: holds at most MAX_BODY_CHARS characters, 4 MB in UTF-8; HTML carries markup.
MAX_FILE_BYTES: dict[str, int] = {
    "learn": 64 * 1024**2,
    "markdown": 8 * 1024**2,
    "html": 32 * 1024**2,
}
#: How each format names its files in a reason.
_FILES_OF = {"learn": "a Learn unit file", "markdown": "a Markdown file", "html": "an HTML file"}

PageReader = Callable[[bytes, Path, Path, str], Page | Rejection]


def _read_html_page(data: bytes, path: Path, root: Path, file: str) -> Page | Rejection:
    # Imported on first use: BeautifulSoup and markdownify take ~0.1 s to import, which
    # every `ks` command would pay otherwise (most never read HTML).
    from knowledge_store.ingest.loaders.html import read_html_page

    return read_html_page(data, path, root, file)


_PAGE_READERS: dict[str, PageReader] = {"markdown": read_markdown_page, "html": _read_html_page}


def is_url(path: str | Path) -> bool:
    """A string naming a web site to crawl (``http://`` or ``https://``)."""
    return isinstance(path, str) and path[:8].lower().startswith(("http://", "https://"))


def check_format(format: str | None) -> None:
    """Raise ``InvalidRequest`` naming the formats unless ``format`` is one (or None)."""
    if format is not None and format not in FORMATS:
        raise InvalidRequest(
            f"unknown format {format!r}; use one of: {', '.join(FORMATS)}",
            format=format,
            allowed=list(FORMATS),
        )


def _plan(path: Path, format: str | None) -> list[tuple[str, Path, Path] | Skipped]:
    """``(format, file, folder)`` for each file to read under ``path``, and what was skipped.

    A file named on its own is read within the folder it sits in.
    """
    if format == "web":
        raise InvalidRequest(
            f"the format 'web' reads web sites: give an http:// or https:// URL, not {str(path)!r}",
            path=str(path),
        )
    if not os.path.lexists(path):
        raise InvalidRequest(f"{str(path)!r} does not exist", path=str(path))
    if not path.is_dir():
        name = format or _FORMAT_OF.get(path.suffix.lower())
        if name is None:
            raise InvalidRequest(
                f"can't tell what kind of records {str(path)!r} holds from its extension;"
                f" name its format: one of {', '.join(FORMATS)}",
                field="format",
                path=str(path),
            )
        return [(name, path, path.parent)]
    wanted = EXTENSIONS[format] if format else tuple(_FORMAT_OF)
    plan: list[tuple[str, Path, Path] | Skipped] = [
        found
        if isinstance(found, Skipped)
        else (format or _FORMAT_OF[found.suffix.lower()], found, path)
        if found.suffix.lower() in wanted
        else Skipped(str(found), _unsupported(found, format))
        for found in walk_folder(path)
    ]
    if not any(isinstance(step, tuple) for step in plan):
        raise InvalidRequest(
            f"the folder {str(path)!r} holds no {' / '.join(wanted)} file to load", path=str(path)
        )
    return plan


def _unsupported(found: Path, format: str | None) -> str:
    """Why a file of a folder is not read: not of the format asked for, or of none."""
    kind = found.suffix.lower() or "no extension"
    if format is not None:
        return f"not {format} ({kind}): this load reads {format} files only"
    return f"unsupported type ({kind}); the types read are {', '.join(sorted(_FORMAT_OF))}"


def _read(
    plan: Iterable[tuple[str, Path, Path] | Skipped], options: Options
) -> Iterator[LoadedRecord | Rejection | Skipped]:
    pages: list[Page] = []
    documents: list[tuple[str, Path, Path]] = []
    for step in plan:
        if isinstance(step, Skipped):
            yield step
            continue
        name, file, folder = step
        if name in DOCUMENT_FORMATS:
            documents.append(step)
            continue
        shown = str(file)
        try:
            opened = open_regular(file, folder)
        except OSError as exc:
            yield Rejection(shown, None, None, None, f"cannot read the file: {exc.strerror}")
            continue
        if isinstance(opened, Skipped):
            yield opened
            continue
        if name == "jsonl":
            yield from read_jsonl(opened, shown, options)
            continue
        with opened:
            data = read_at_most(opened, MAX_FILE_BYTES[name])
        if data is None:
            size = os.stat(file).st_size
            yield Skipped(shown, too_large(size, MAX_FILE_BYTES[name], _FILES_OF[name]))
            continue
        if name == "learn":
            yield from read_learn(data, shown, options)
        else:
            absolute = Path(os.path.abspath(file))
            root = Path(os.path.abspath(folder))
            page = _PAGE_READERS[name](data, absolute, root, shown)
            if isinstance(page, Rejection):
                yield prefixed_rejection(page, absolute, root, options.uid_prefix)
            else:
                pages.append(page)
    for outcome in read_documents(documents):
        if isinstance(outcome, Skipped | Rejection):
            yield outcome
        else:
            pages.extend(outcome)
    thread_messages(pages)
    # Pages last: their links and folders are resolved against every page of the load.
    yield from site_records(pages, options)


def _source_info(
    path: Path, steps: list[tuple[str, Path, Path] | Skipped], source: str | None
) -> SourceInfo:
    read = [step for step in steps if isinstance(step, tuple)]
    formats = sorted({name for name, _, _ in read})
    pages = [
        folder for name, _, folder in read if name in _PAGE_READERS or name in DOCUMENT_FORMATS
    ]
    name = source or (Path(os.path.abspath(pages[0])).name if pages else None)
    return SourceInfo(name, ",".join(formats), os.path.abspath(path))


def _read_sites(
    urls: Sequence[str], options: Options, web: WebOptions | None, result: LoadResult
) -> Iterator[LoadedRecord | Rejection | Skipped]:
    # Imported here: the crawler imports the HTML loader, which imports this package.
    from knowledge_store.ingest.loaders.web import WebOptions, load_site, site_source

    web = web or WebOptions()
    for url in urls:
        site = load_site(url, options, web)
        if site.report is not None:
            result.crawls.append(site.report)
            result.failed.extend(site.report.failed)
            yield from (Skipped(skipped, reason) for skipped, reason in site.report.skipped)
        result.unchanged.extend(site.unchanged)
        result.sources.append(SourceInfo(options.source or site_source(url), "web", url))
        yield from site.records
        yield from site.rejections


def load_paths(
    paths: Sequence[str | Path],
    *,
    format: str | None,
    source: str | None,
    default_acl: Sequence[str] | None,
    web: WebOptions | None = None,
    uid_prefix: str = "",
) -> LoadResult:
    """Read ``paths`` (files, folders or web site URLs) into validated entities and rejections.

    ``format`` is one of :data:`FORMATS`, or None to tell each file by its
    extension (a string starting ``http://``/``https://`` is a site to crawl).
    ``source`` (``--source``) sets every entity's source; ``default_acl``
    (``--acl``) is the ACL of records that have none — with no default such
    records are rejected. ``uid_prefix`` goes before the uid of every page of a
    folder (Markdown, HTML) whose uid is its path. ``web`` bounds the crawl of sites
    and gives their uid prefix and crawl state. A path that is not a regular file inside the folder
    given is skipped, not read (``result.skipped``; so are URLs a crawl leaves
    out). Raises :class:`InvalidRequest` for an unknown format, a missing path,
    a bad ``--acl`` principal, or a site that can't be crawled at all.
    """
    check_format(format)
    if default_acl is not None:
        default_acl = tuple(check_principal(principal) for principal in default_acl)
    if not paths:
        raise InvalidRequest("no path to load; give at least one file, folder or URL")
    urls = [str(path) for path in paths if is_url(path)]
    if urls and format not in (None, "web"):
        raise InvalidRequest(
            f"{urls[0]!r} is a web site; read it with the format 'web', not {format}",
            path=urls[0],
        )
    plans = [(Path(path), _plan(Path(path), format)) for path in paths if not is_url(path)]
    plan = [step for _, steps in plans for step in steps]
    options = Options(
        source=source,
        default_acl=None if default_acl is None else tuple(default_acl),
        uid_prefix=uid_prefix,
    )
    result = LoadResult(sources=[_source_info(path, steps, source) for path, steps in plans])
    first_seen: dict[str, str] = {}
    items = itertools.chain(_read(plan, options), _read_sites(urls, options, web, result))
    for item in items:
        if isinstance(item, Skipped):
            result.skipped.append(item)
            continue
        if isinstance(item, Rejection):
            result.rejections.append(item)
            continue
        uid = item.entity.uid
        where = item.file + (f":{item.line}" if item.line is not None else "")
        if uid in first_seen:
            result.rejections.append(
                Rejection(
                    item.file,
                    item.line,
                    uid,
                    "uid",
                    f"uid {uid!r} was already loaded from {first_seen[uid]};"
                    " a uid may appear once in a load",
                )
            )
            continue
        first_seen[uid] = where
        result.records.append(item)
    return result
