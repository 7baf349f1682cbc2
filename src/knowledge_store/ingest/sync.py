"""Ingesting under a source name: what a sync holds, the crawl state kept in the store.

:func:`source_sync` turns a load into the :class:`~knowledge_store.engines.sql.sources.SourceSync`
the publish takes (what the batch holds, what is kept as stored); :func:`crawl_options`
loads the state the store keeps for each crawled site's source before a crawl, and
:func:`save_crawl_state` writes what the crawl learned once the publish is done;
:func:`watch_source` re-syncs a folder on every burst of changes.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from knowledge_store.engines.sql.sources import SourceSync
from knowledge_store.engines.sql.writer import CatalogWriter
from knowledge_store.errors import InvalidRequest
from knowledge_store.ingest.crawl_state import MemoryCrawlState, PageState
from knowledge_store.ingest.loaders import EXTENSIONS, LoadResult, check_format, is_url
from knowledge_store.ingest.loaders.web import WebOptions, site_source
from knowledge_store.ingest.watch import WatchSummary, watch
from knowledge_store.model import MAX_UID_LENGTH, IngestReport, name_problem

__all__ = [
    "PAGE_FORMATS",
    "check_sync",
    "crawl_options",
    "folder_uid_prefix",
    "not_reread",
    "save_crawl_state",
    "source_sync",
    "watch_source",
    "web_with_prefix",
]


def check_sync(source: str | None, sync: bool) -> None:
    """A sync names the one source it replaces."""
    if sync and not source:
        raise InvalidRequest(
            "a sync replaces the content of one source: name it (source)", field="source"
        )


def not_reread(loaded: LoadResult) -> set[str]:
    """The uids a crawl found unchanged (``304``: present as stored, not read again)."""
    return set(loaded.unchanged) - {r.entity.uid for r in loaded.records}


def source_sync(
    loaded: LoadResult, source: str, sync: bool, allow_mass: bool, *, uid_prefix: str = ""
) -> SourceSync:
    """The source an ingest names: what it read, and (for a sync) what is present in it —
    the records, what a crawl kept as stored, and records rejected this time (their
    stored version stays). A crawl cut short by its page bound deletes nothing. When it
    read pages from a folder, its row records ``uid_prefix``, the prefix they got."""
    kept = loaded.kept() | {r.uid for r in loaded.rejections if r.uid}
    pages = any(name in PAGE_FORMATS for info in loaded.sources for name in info.loader.split(","))
    return SourceSync(
        name=source,
        loader=",".join(sorted({info.loader for info in loaded.sources if info.loader})),
        locations=tuple(info.location for info in loaded.sources),
        sync=sync,
        present=frozenset(r.entity.uid for r in loaded.records),
        kept=frozenset(kept),
        delete_missing=not any(crawl.truncated for crawl in loaded.crawls),
        allow_mass_delete=allow_mass,
        uid_prefix=uid_prefix if pages else None,
        unchanged_before=len(not_reread(loaded)),
    )


#: The formats whose files a folder's pages are read from (uid: the path, after a prefix).
PAGE_FORMATS = ("markdown", "html")


def folder_uid_prefix(
    writer: CatalogWriter, paths: Sequence[str | Path], source: str | None, given: str | None
) -> str:
    """The prefix of the uids of the pages read from folders (``--uid-prefix``).

    ``given`` wins. Else a source the store knows keeps the prefix its row records, and
    one it knows without a recorded prefix (made before prefixes) keeps its uids as they
    are (``""``); a source new to the store gets ``"SOURCE:"``, so that two sources'
    ``README``/``index`` pages are two entities, not one overwriting the other. A load
    with no source name gets none (its pages' sources are their folders' names, and no
    row would remember the prefix).
    """
    if given is not None:
        problem = name_problem(given, MAX_UID_LENGTH) if given else None
        if problem is not None:
            raise InvalidRequest(f"the uid prefix {given!r} {problem}", field="uid_prefix")
        return given
    if source is None or all(is_url(p) for p in paths):
        return ""
    stored = writer.source_uid_prefix(source)
    return f"{source}:" if stored is None else stored


def web_with_prefix(
    paths: Sequence[str | Path], web: WebOptions | None, uid_prefix: str | None
) -> WebOptions | None:
    """The crawl options with ``uid_prefix`` for the sites' pages, unless ``web`` names one."""
    if not uid_prefix or not any(is_url(p) for p in paths):
        return web
    if web is not None and web.uid_prefix:
        return web
    return dataclasses.replace(web or WebOptions(), uid_prefix=uid_prefix)


def crawl_options(
    writer: CatalogWriter, paths: Sequence[str | Path], source: str | None, web: WebOptions | None
) -> tuple[WebOptions | None, set[str]]:
    """The crawl options, with the state the store keeps for each site's source loaded
    (unless the caller brings its own state); the sources whose state the store keeps."""
    urls = [str(p) for p in paths if isinstance(p, str) and is_url(p)]
    if not urls or (web is not None and web.state is not None):
        return web, set()
    state = MemoryCrawlState()
    names = {source or site_source(url) for url in urls}
    for name in names:
        for url, text in writer.crawl_pages(name).items():
            state.put(name, url, PageState.from_dict(json.loads(text)))
    return dataclasses.replace(web or WebOptions(), state=state), names


def save_crawl_state(writer: CatalogWriter, loaded: LoadResult, kept: set[str]) -> None:
    """Write what each crawl of a source in ``kept`` learned (after the publish)."""
    for crawl in loaded.crawls:
        if crawl.source in kept:
            writer.save_crawl_pages(
                crawl.source,
                {
                    url: None if page is None else json.dumps(page.to_dict())
                    for url, page in crawl.updates.items()
                },
            )


def watch_source(
    paths: Sequence[str | Path],
    sync: Callable[[list[Path]], IngestReport],
    *,
    format: str | None,
    on_sync: Callable[[list[Path], IngestReport], None] | None,
    on_error: Callable[[list[Path], Exception], None] | None,
    quiet_ms: int,
    max_wait_ms: int,
    stop: threading.Event | None,
    force_polling: bool | None,
) -> WatchSummary[IngestReport]:
    """Run ``sync`` now, then after each burst of changes to the files ``format`` reads
    (every loader's extensions without one) under ``paths`` (folders, never sites)."""
    check_format(format)
    if any(isinstance(p, str) and is_url(p) for p in paths):
        raise InvalidRequest("--watch watches folders; a web site can't be watched")
    suffixes = EXTENSIONS.get(format or "", tuple(s for e in EXTENSIONS.values() for s in e))
    return watch(
        paths,
        sync,
        on_sync=on_sync,
        on_error=on_error,
        suffixes=suffixes,
        quiet_ms=quiet_ms,
        max_wait_ms=max_wait_ms,
        initial_sync=True,
        stop=stop,
        force_polling=force_polling,
    )
