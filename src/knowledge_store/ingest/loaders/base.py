"""What every loader returns, and the small helpers they share."""

from __future__ import annotations

from dataclasses import dataclass, field

from knowledge_store.errors import Rejection
from knowledge_store.ingest.loaders.files import Skipped
from knowledge_store.model import Entity

__all__ = ["LoadResult", "LoadedRecord", "Options", "decode_utf8"]


@dataclass(frozen=True)
class LoadedRecord:
    """One valid entity and where it came from (``line`` is None for whole-file records)."""

    file: str
    line: int | None
    entity: Entity


@dataclass
class LoadResult:
    """The records of one load, in reading order, every record rejected, every path skipped."""

    records: list[LoadedRecord] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)


@dataclass(frozen=True)
class Options:
    """The caller's ``--source`` and ``--acl`` default, handed to every loader."""

    source: str | None
    default_acl: tuple[str, ...] | None


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
