"""What every loader returns, and the small helpers they share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from knowledge_store.errors import Rejection
from knowledge_store.ingest.loaders.files import Skipped
from knowledge_store.model import Entity

if TYPE_CHECKING:
    from knowledge_store.ingest.loaders.web import CrawlReport

__all__ = ["FetchFailure", "LoadResult", "LoadedRecord", "Options", "SourceInfo", "decode_utf8"]


@dataclass(frozen=True)
class LoadedRecord:
    """One valid entity and where it came from (``line`` is None for whole-file records).

    ``derived_from`` is the uid of the record a loader split it off (a page's
    code sample): it lives and goes with that record.
    """

    file: str
    line: int | None
    entity: Entity
    derived_from: str | None = None


@dataclass(frozen=True)
class FetchFailure:
    """A page that could not be read this time (a server error, a timeout): not gone.

    ``uids`` are what it produced when last read (or the uid it would have):
    a sync must keep them.
    """

    url: str
    uids: tuple[str, ...]
    status: int | None
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "uids": list(self.uids),
            "status": self.status,
            "message": self.message,
        }


@dataclass(frozen=True)
class SourceInfo:
    """Where a load read from: the source name it gave (None: the records name their own),
    the loader (a format) and the path or URL."""

    name: str | None
    loader: str
    location: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "loader": self.loader, "location": self.location}


@dataclass
class LoadResult:
    """The records of one load, in reading order, every record rejected, every path skipped,
    and what is present in the sources but was not read.

    ``skipped``: paths (and URLs) not read on purpose, with the reason.
    ``unchanged``: uids whose pages answered ``304 Not Modified`` (with the
    entities derived from them): present, as stored. ``failed``: pages that could
    not be read this time; their ``uids`` are present too. A sync deletes
    neither — :meth:`kept` is the set it must keep besides ``records``.
    ``crawls``: one report per crawled site (figures, state updates to save
    after the publish). ``sources``: what each path or URL was read as.
    """

    records: list[LoadedRecord] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    failed: list[FetchFailure] = field(default_factory=list)
    crawls: list[CrawlReport] = field(default_factory=list)
    sources: list[SourceInfo] = field(default_factory=list)

    def kept(self) -> set[str]:
        """Uids present in the sources that this load did not re-read."""
        return set(self.unchanged) | {uid for failure in self.failed for uid in failure.uids}

    @property
    def complete(self) -> bool:
        """False when a crawl failed somewhere or stopped at its page bound."""
        return all(report.complete for report in self.crawls)


@dataclass(frozen=True)
class Options:
    """The caller's ``--source`` and ``--acl`` default, handed to every loader (``source``
    replaces every record's own), and ``--uid-prefix``: put before the uid of every page of a
    folder that takes its uid from its path."""

    source: str | None
    default_acl: tuple[str, ...] | None
    uid_prefix: str = ""


def decode_utf8(
    data: bytes, *, file: str, line: int | None = None, offset: int = 0
) -> str | Rejection:
    """``data`` as text (a UTF-8 byte order mark dropped), or a rejection naming the bad byte.

    ``offset`` is where ``data`` starts in its file, so that the byte offset reported is the file's.
    """
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        bad = data[exc.start : exc.start + 1].hex()
        return Rejection(
            file,
            line,
            None,
            None,
            f"not UTF-8: byte 0x{bad} at byte offset {offset + exc.start} ({exc.reason});"
            " save the file as UTF-8",
        )
