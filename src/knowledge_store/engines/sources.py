"""Sources: what a sync deletes, what the catalog remembers per source — shared by both engines.

A *source* is the value of the entities' ``source`` field. An ingest with a
source name (``--source``) writes a :class:`SourceRecord` row in the catalog,
in the publish's own transaction: the loader, the paths or URLs, when, the
content root and what the publish did. A *sync* (``--sync``) treats its batch
as the whole current content of the source: :func:`plan_sync` picks, inside
the write transaction, the stored entities of the source that the batch does
not hold, and the publish deletes them — one content root for the whole
change. A sync that would delete more than :data:`MASS_DELETE_SHARE` of the
source is refused (:class:`~knowledge_store.errors.MassDeleteRefused`) unless
the caller allows it.

The statements are written once with ``:name`` parameters; :func:`statement`
gives each engine its own spelling.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from knowledge_store.errors import MassDeleteRefused

if TYPE_CHECKING:
    from knowledge_store.engines.base import PublishResult

__all__ = [
    "CRAWL_PAGES_DDL",
    "DELETED_UIDS_SHOWN",
    "DERIVED_MARK",
    "MASS_DELETE_SHARE",
    "SOURCES_DDL",
    "SourceRecord",
    "SourceSync",
    "SourceView",
    "derived_from",
    "plan_sync",
    "source_record",
    "source_views",
    "statement",
]

#: The largest share of a source a sync deletes without ``allow_mass_delete``.
MASS_DELETE_SHARE = 0.5
#: How many deleted uids an answer lists (the count is always exact).
DELETED_UIDS_SHOWN = 100

Style = Literal["sqlite", "postgres"]

#: The per-source row (one per source name), the same columns on both engines.
SOURCES_DDL = """
CREATE TABLE IF NOT EXISTS sources (
    name         TEXT PRIMARY KEY,
    loader       TEXT NOT NULL,
    locations    TEXT NOT NULL,
    mode         TEXT NOT NULL,
    synced_at    TEXT NOT NULL,
    content_root TEXT NOT NULL,
    added        INTEGER NOT NULL,
    updated      INTEGER NOT NULL,
    unchanged    INTEGER NOT NULL,
    deleted      INTEGER NOT NULL
)"""

#: What a crawl remembers per ``(source, url)`` (``ingest.crawl_state.PageState`` as JSON).
CRAWL_PAGES_DDL = """
CREATE TABLE IF NOT EXISTS crawl_pages (
    source TEXT NOT NULL,
    url    TEXT NOT NULL,
    state  TEXT NOT NULL,
    PRIMARY KEY (source, url)
)"""

_STATEMENTS = {
    "source_uids": "SELECT uid FROM entities WHERE source = :source",
    "write_source": (
        "INSERT INTO sources (name, loader, locations, mode, synced_at, content_root, added,"
        " updated, unchanged, deleted) VALUES (:name, :loader, :locations, :mode, :synced_at,"
        " :content_root, :added, :updated, :unchanged, :deleted)"
        " ON CONFLICT (name) DO UPDATE SET loader = excluded.loader,"
        " locations = excluded.locations, mode = excluded.mode, synced_at = excluded.synced_at,"
        " content_root = excluded.content_root, added = excluded.added,"
        " updated = excluded.updated, unchanged = excluded.unchanged, deleted = excluded.deleted"
    ),
    "forget_source": "DELETE FROM sources WHERE name = :name",
    "source_rows": (
        "SELECT name, loader, locations, mode, synced_at, content_root, added, updated,"
        " unchanged, deleted FROM sources ORDER BY name"
    ),
    "crawl_pages": "SELECT url, state FROM crawl_pages WHERE source = :source",
    "put_crawl_page": (
        "INSERT INTO crawl_pages (source, url, state) VALUES (:source, :url, :state)"
        " ON CONFLICT (source, url) DO UPDATE SET state = excluded.state"
    ),
    "forget_crawl_page": "DELETE FROM crawl_pages WHERE source = :source AND url = :url",
    "forget_crawl_source": "DELETE FROM crawl_pages WHERE source = :source",
}

_PARAM = re.compile(r":([a-z_]+)")


def statement(name: str, style: Style) -> str:
    """The statement ``name`` with named parameters in the engine's spelling."""
    text = _STATEMENTS[name]
    return text if style == "sqlite" else _PARAM.sub(r"%(\1)s", text)


#: What a loader puts between a page's uid and its code sample's number (``loaders.code_samples``).
DERIVED_MARK = "#code-"


def derived_from(uid: str) -> str | None:
    """The uid of the page a code sample was derived from (by its uid), else None."""
    parent, mark, number = uid.rpartition(DERIVED_MARK)
    return parent if mark and number.isdigit() else None


@dataclass(frozen=True)
class SourceSync:
    """An ingest under a source name; with ``sync``, the batch is the whole source.

    ``present``: the uids of the batch. ``kept``: uids the source still holds
    but this load did not re-read — what a crawl found unchanged or could not
    read this time, records rejected in this load: their stored versions stay,
    with what was derived from them. With ``delete_missing`` False (a crawl cut
    short by its page bound) nothing is deleted: what was not reached is not gone.
    """

    name: str
    loader: str
    locations: tuple[str, ...]
    sync: bool = False
    present: frozenset[str] = frozenset()
    kept: frozenset[str] = frozenset()
    delete_missing: bool = True
    allow_mass_delete: bool = False
    max_share: float = MASS_DELETE_SHARE
    #: Entities of the batch the pipeline found unchanged before publishing (not sent).
    unchanged_before: int = 0
    #: The whole source goes: every entity, its row and its crawl state.
    forget: bool = False

    @classmethod
    def removal(cls, name: str) -> SourceSync:
        """``ks delete --source NAME``: a sync of nothing, allowed to delete everything."""
        return cls(name, "", (), sync=True, allow_mass_delete=True, forget=True)

    @property
    def mode(self) -> str:
        return "sync" if self.sync else "upsert"

    def statements(self, result: PublishResult, style: Style) -> list[tuple[str, dict[str, Any]]]:
        """What the catalog writes for this source, in the publish's transaction."""
        if self.forget:
            return [
                (statement("forget_source", style), {"name": self.name}),
                (statement("forget_crawl_source", style), {"source": self.name}),
            ]
        return [(statement("write_source", style), source_record(self, result).params())]


def plan_sync(stored: Iterable[str], sync: SourceSync) -> list[str]:
    """The stored uids of the source that a sync deletes (sorted); refuses a mass delete.

    A stored entity stays when the batch holds it, when it is kept, or when it was
    derived from a kept one (a page kept as stored keeps its code samples; a page
    read again brings its own, and a sample it no longer has goes).
    """
    stored = sorted(set(stored))
    if not sync.sync or not sync.delete_missing:
        return []
    doomed = [
        uid
        for uid in stored
        if uid not in sync.present and uid not in sync.kept and derived_from(uid) not in sync.kept
    ]
    if doomed and not sync.allow_mass_delete and len(doomed) > sync.max_share * len(stored):
        raise MassDeleteRefused(
            f"this sync of source {sync.name!r} would delete {len(doomed)} of its"
            f" {len(stored)} entities ({len(doomed) / len(stored):.0%}), more than the"
            f" {sync.max_share:.0%} a sync may delete; nothing was published. Check the path"
            " (a wrong or empty folder looks like a mass deletion), or allow it"
            " (--allow-mass-delete)",
            source=sync.name,
            stored=len(stored),
            deleting=len(doomed),
            share=round(len(doomed) / len(stored), 4),
            limit=sync.max_share,
            uids=doomed[:DELETED_UIDS_SHOWN],
        )
    return doomed


@dataclass(frozen=True)
class SourceRecord:
    """The catalog row of a source: its last ingest under that name."""

    name: str
    loader: str
    locations: tuple[str, ...]
    mode: str
    synced_at: str
    content_root: str
    added: int
    updated: int
    unchanged: int
    deleted: int

    def params(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "loader": self.loader,
            "locations": json.dumps(list(self.locations), ensure_ascii=False),
            "mode": self.mode,
            "synced_at": self.synced_at,
            "content_root": self.content_root,
            "added": self.added,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "deleted": self.deleted,
        }

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> SourceRecord:
        return cls(
            name=str(row[0]),
            loader=str(row[1]),
            locations=tuple(json.loads(row[2])),
            mode=str(row[3]),
            synced_at=str(row[4]),
            content_root=str(row[5]),
            added=int(row[6]),
            updated=int(row[7]),
            unchanged=int(row[8]),
            deleted=int(row[9]),
        )


def source_record(sync: SourceSync, result: PublishResult) -> SourceRecord:
    """The row an ingest under ``sync.name`` leaves, from what its publish did."""
    return SourceRecord(
        name=sync.name,
        loader=sync.loader,
        locations=sync.locations,
        mode=sync.mode,
        synced_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        content_root=result.root,
        added=result.added,
        updated=result.updated,
        unchanged=result.unchanged + sync.unchanged_before,
        deleted=result.deleted,
    )


@dataclass(frozen=True)
class SourceView:
    """One source as ``ks sources`` lists it: what it holds now, and its last ingest."""

    name: str
    entities: int
    chunks: int
    last: SourceRecord | None = None

    def to_dict(self) -> dict[str, Any]:
        last = self.last
        return {
            "source": self.name,
            "entities": self.entities,
            "chunks": self.chunks,
            "loader": None if last is None else last.loader,
            "locations": [] if last is None else list(last.locations),
            "last_sync": None
            if last is None
            else {
                "at": last.synced_at,
                "mode": last.mode,
                "content_root": last.content_root,
                "added": last.added,
                "updated": last.updated,
                "unchanged": last.unchanged,
                "deleted": last.deleted,
            },
        }


def source_views(
    counts: Iterable[tuple[str, int, int]], records: Iterable[SourceRecord]
) -> list[SourceView]:
    """Every source that holds entities or has a catalog row, by name.

    ``counts``: ``(source, entities, chunks)`` rows from the entities table.
    """
    held = {str(name): (int(e), int(c)) for name, e, c in counts}
    rows = {record.name: record for record in records}
    return [
        SourceView(name, *held.get(name, (0, 0)), rows.get(name))
        for name in sorted(set(held) | set(rows))
    ]
