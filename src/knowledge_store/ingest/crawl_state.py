"""What a crawl remembers per URL between runs, so that a re-crawl fetches almost nothing.

For each ``(source, url)`` a :class:`PageState` keeps the validators the site
sent (``ETag``, ``Last-Modified``: sent back as ``If-None-Match`` /
``If-Modified-Since``), the uids the page produced (the page and the entities
derived from it, such as its code samples) and the links it holds. On a
``304 Not Modified`` the crawler reports those uids as present-but-unchanged and
follows those links without the page's body.

:class:`CrawlState` is the small protocol a crawl reads and a caller writes;
:class:`MemoryCrawlState` and :class:`JsonFileCrawlState` implement it. A store
can implement it in its own tables, written in the publish's transaction.
Validators must be saved only once the batch they belong to is published: a
page remembered but never stored would come back ``304`` and never be read.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, Self

from knowledge_store.errors import InvalidRequest

__all__ = ["CrawlState", "JsonFileCrawlState", "MemoryCrawlState", "PageState"]

_FORMAT = 1


@dataclass(frozen=True)
class PageState:
    """What one URL gave the last time it was read."""

    etag: str | None = None
    last_modified: str | None = None
    uids: tuple[str, ...] = ()
    links: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "etag": self.etag,
            "last_modified": self.last_modified,
            "uids": list(self.uids),
            "links": list(self.links),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PageState:
        return cls(
            etag=data.get("etag"),
            last_modified=data.get("last_modified"),
            uids=tuple(data.get("uids") or ()),
            links=tuple(data.get("links") or ()),
        )

    @property
    def conditional(self) -> bool:
        """True when a conditional request can be made from it."""
        return self.etag is not None or self.last_modified is not None


class CrawlState(Protocol):
    """Per ``(source, url)`` state: read by a crawl, written after its batch is published.

    A crawl calls ``get`` from its worker threads: an implementation must allow that.
    """

    def get(self, source: str, url: str) -> PageState | None: ...

    def put(self, source: str, url: str, state: PageState) -> None: ...

    def forget(self, source: str, url: str) -> None: ...


class MemoryCrawlState:
    """A :class:`CrawlState` in a dict (tests, one process's repeated crawls)."""

    def __init__(self) -> None:
        self._pages: dict[str, dict[str, PageState]] = {}

    def get(self, source: str, url: str) -> PageState | None:
        return self._pages.get(source, {}).get(url)

    def put(self, source: str, url: str, state: PageState) -> None:
        self._pages.setdefault(source, {})[url] = state

    def forget(self, source: str, url: str) -> None:
        self._pages.get(source, {}).pop(url, None)

    def urls(self, source: str) -> list[str]:
        """The URLs remembered for ``source``, sorted."""
        return sorted(self._pages.get(source, {}))

    def items(self) -> Iterator[tuple[str, str, PageState]]:
        for source, pages in sorted(self._pages.items()):
            for url, state in sorted(pages.items()):
                yield source, url, state


class JsonFileCrawlState(MemoryCrawlState):
    """A :class:`CrawlState` kept in one JSON file; written (atomically) by :meth:`flush`.

    Use it as a context manager: the file is written on a clean exit.
    """

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = Path(path)
        if self.path.exists():
            self._read()

    def _read(self) -> None:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if data.get("format") != _FORMAT:
                raise ValueError(f"format {data.get('format')!r}, expected {_FORMAT}")
            for source, pages in data["sources"].items():
                for url, state in pages.items():
                    self.put(source, url, PageState.from_dict(state))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InvalidRequest(
                f"the crawl state file {str(self.path)!r} can't be read ({exc});"
                " delete it to crawl everything again",
                path=str(self.path),
            ) from exc

    def flush(self) -> None:
        sources: dict[str, dict[str, Any]] = {}
        for source, url, state in self.items():
            sources.setdefault(source, {})[url] = state.to_dict()
        text = json.dumps({"format": _FORMAT, "sources": sources}, ensure_ascii=False, indent=1)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(text)
            os.replace(temporary, self.path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: object, *rest: object) -> None:
        if kind is None:
            self.flush()
