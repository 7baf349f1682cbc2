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

The statements are written once (:func:`statement`) with the dialect's
parameter spelling; :func:`plan_sync` feeds the publish planner
(:func:`~knowledge_store.engines.sql.publish.plan_publish`) the deletions.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from knowledge_store.engines.sql.dialect import SqlDialect
from knowledge_store.errors import MassDeleteRefused
from knowledge_store.model import DELETED_UIDS_SHOWN, LastSync, SourceSummary

if TYPE_CHECKING:
    from knowledge_store.engines.base import Published

__all__ = [
    "CRAWL_PAGES_DDL",
    "DERIVED_MARK",
    "MASS_DELETE_SHARE",
    "SOURCES_DDL",
    "SOURCE_COLUMNS_ADDED",
    "SOURCE_COUNTS",
    "SourceRecord",
    "SourceSync",
    "crawl_page_writes",
    "derived_from",
    "plan_sync",
    "read_crawl_pages",
    "read_sources",
    "read_uid_prefix",
    "record_source",
    "source_columns_missing",
    "source_record",
    "source_views",
    "statement",
    "sync_deletes",
    "write_crawl_pages",
]

#: The largest share of a source a sync deletes without ``allow_mass_delete``.
MASS_DELETE_SHARE = 0.5

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
    deleted      INTEGER NOT NULL,
    uid_prefix   TEXT
)"""

#: Columns of ``sources`` added after the table first shipped: ``(name, SQL type)``. A store
#: made before gets them when it is opened (``source_columns_missing``), NULL in every row.
SOURCE_COLUMNS_ADDED: tuple[tuple[str, str], ...] = (("uid_prefix", "TEXT"),)

#: What a crawl remembers per ``(source, url)`` (``ingest.crawl_state.PageState`` as JSON).
CRAWL_PAGES_DDL = """
CREATE TABLE IF NOT EXISTS crawl_pages (
    source TEXT NOT NULL,
    url    TEXT NOT NULL,
    state  TEXT NOT NULL,
    PRIMARY KEY (source, url)
)"""

_COLUMNS = (
    "name",
    "loader",
    "locations",
    "mode",
    "synced_at",
    "content_root",
    "added",
    "updated",
    "unchanged",
    "deleted",
    "uid_prefix",
)


def statement(name: str, d: SqlDialect) -> str:
    """The statement ``name``, its parameters spelled by the dialect ``d``."""
    p = d.param
    if name == "source_uids":
        return f"SELECT uid FROM entities WHERE source = {p('source')}"
    if name == "write_source":
        # a uid prefix, once recorded, stays unless an ingest names another (NULL: none named)
        updates = ", ".join(
            f"{c} = coalesce(excluded.{c}, sources.{c})"
            if c == "uid_prefix"
            else f"{c} = excluded.{c}"
            for c in _COLUMNS[1:]
        )
        return (
            f"INSERT INTO sources ({', '.join(_COLUMNS)})"
            f" VALUES ({', '.join(p(c) for c in _COLUMNS)})"
            f" ON CONFLICT (name) DO UPDATE SET {updates}"
        )
    if name == "forget_source":
        return f"DELETE FROM sources WHERE name = {p('name')}"
    if name == "source_rows":
        return f"SELECT {', '.join(_COLUMNS)} FROM sources ORDER BY name"
    if name == "source_uid_prefix":
        return f"SELECT uid_prefix FROM sources WHERE name = {p('name')}"
    if name == "source_holds_any":
        return f"SELECT 1 FROM entities WHERE source = {p('name')} LIMIT 1"
    if name == "crawl_pages":
        return f"SELECT url, state FROM crawl_pages WHERE source = {p('source')}"
    if name == "put_crawl_page":
        return (
            "INSERT INTO crawl_pages (source, url, state)"
            f" VALUES ({p('source')}, {p('url')}, {p('state')})"
            " ON CONFLICT (source, url) DO UPDATE SET state = excluded.state"
        )
    if name == "forget_crawl_page":
        return f"DELETE FROM crawl_pages WHERE source = {p('source')} AND url = {p('url')}"
    if name == "forget_crawl_source":
        return f"DELETE FROM crawl_pages WHERE source = {p('source')}"
    raise KeyError(name)


def crawl_page_writes(
    source: str, pages: Iterable[tuple[str, str | None]], d: SqlDialect
) -> list[tuple[str, dict[str, Any]]]:
    """The statements that remember (JSON) or forget (None) each url's crawl state."""
    return [
        (statement("forget_crawl_page", d), {"source": source, "url": url})
        if state is None
        else (statement("put_crawl_page", d), {"source": source, "url": url, "state": state})
        for url, state in pages
    ]


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
    #: Entities present but not published: the batch's unchanged ones and what a crawl
    #: found unchanged (304s), counted before publishing.
    unchanged_before: int = 0
    #: The whole source goes: every entity, its row and its crawl state.
    forget: bool = False
    #: The uid prefix its folder pages got, recorded in its row (None: none recorded now).
    uid_prefix: str | None = None

    @classmethod
    def removal(cls, name: str) -> SourceSync:
        """``ks delete --source NAME``: a sync of nothing, allowed to delete everything."""
        return cls(name, "", (), sync=True, allow_mass_delete=True, forget=True)

    @property
    def mode(self) -> str:
        return "sync" if self.sync else "upsert"

    def statements(self, result: Published, d: SqlDialect) -> list[tuple[str, dict[str, Any]]]:
        """What the catalog writes for this source, in the publish's transaction."""
        if self.forget:
            return [
                (statement("forget_source", d), {"name": self.name}),
                (statement("forget_crawl_source", d), {"source": self.name}),
            ]
        return [(statement("write_source", d), source_record(self, result).params())]


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
    uid_prefix: str | None = None

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
            "uid_prefix": self.uid_prefix,
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
            uid_prefix=None if row[10] is None else str(row[10]),
        )


def source_record(sync: SourceSync, result: Published) -> SourceRecord:
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
        uid_prefix=sync.uid_prefix,
    )


def _summary(name: str, entities: int, chunks: int, last: SourceRecord | None) -> SourceSummary:
    return SourceSummary(
        source=name,
        entities=entities,
        chunks=chunks,
        loader=None if last is None else last.loader,
        locations=[] if last is None else list(last.locations),
        last_sync=None
        if last is None
        else LastSync(
            at=last.synced_at,
            mode=last.mode,
            content_root=last.content_root,
            added=last.added,
            updated=last.updated,
            unchanged=last.unchanged,
            deleted=last.deleted,
        ),
    )


#: ``(source, entities, chunks)`` of every source the entities table holds.
SOURCE_COUNTS = (
    "SELECT e.source, count(*), coalesce(sum(c.n), 0) FROM entities AS e"
    " LEFT JOIN (SELECT entity, count(*) AS n FROM chunks GROUP BY entity) AS c"
    " ON c.entity = e.id GROUP BY e.source"
)


def source_views(
    counts: Iterable[Sequence[Any]], rows: Iterable[Sequence[Any]]
) -> list[SourceSummary]:
    """Every source that holds entities or has a catalog row, by name.

    ``counts``: ``(source, entities, chunks)`` rows (:data:`SOURCE_COUNTS`); ``rows``:
    the ``sources`` table's (``statement("source_rows")``).
    """
    held = {str(name): (int(e), int(c)) for name, e, c in counts}
    records = {record.name: record for record in map(SourceRecord.from_row, rows)}
    return [
        _summary(name, *held.get(name, (0, 0)), records.get(name))
        for name in sorted(set(held) | set(records))
    ]


# -- what an engine runs, in its own connection ---------------------------------------------------
class Executes(Protocol):
    """A DB-API connection that runs one statement with named parameters (both engines')."""

    def execute(self, query: str, params: Any = ..., /) -> Any: ...


def sync_deletes(
    conn: Executes, d: SqlDialect, source: SourceSync | None, deletes: Sequence[str]
) -> list[str]:
    """``deletes`` and, for a sync, the source's stored uids it deletes — read in the
    publish's own write transaction, for the planner (:func:`plan_sync`)."""
    if source is None or not source.sync:
        return list(deletes)
    held = conn.execute(statement("source_uids", d), {"source": source.name}).fetchall()
    return [*deletes, *plan_sync((str(uid) for (uid,) in held), source)]


def record_source(
    conn: Executes, d: SqlDialect, source: SourceSync | None, result: Published
) -> Published:
    """Write the source's row (or forget the source), in the publish's transaction."""
    if source is not None:
        for text, params in source.statements(result, d):
            conn.execute(text, params)
    return result


def read_sources(conn: Executes, d: SqlDialect) -> list[SourceSummary]:
    """Every source (:func:`source_views`), read in one transaction."""
    counts = conn.execute(SOURCE_COUNTS).fetchall()
    rows = conn.execute(statement("source_rows", d)).fetchall()
    return source_views(counts, rows)


def read_uid_prefix(conn: Executes, d: SqlDialect, name: str) -> str | None:
    """The uid prefix source ``name``'s folder pages get: the one its row records; ``""`` for
    a source the catalog knows without one (a row from before prefixes, or entities of that
    source ingested without a row): its uids stay as they are; None for a source the catalog
    does not know (a new one)."""
    row = conn.execute(statement("source_uid_prefix", d), {"name": name}).fetchone()
    if row is not None:
        return "" if row[0] is None else str(row[0])
    held = conn.execute(statement("source_holds_any", d), {"name": name}).fetchone()
    return None if held is None else ""


def source_columns_missing(d: SqlDialect, present: Iterable[str]) -> list[str]:
    """The ``ALTER TABLE`` statements that add the :data:`SOURCE_COLUMNS_ADDED` a ``sources``
    table with the columns ``present`` lacks."""
    have = set(present)
    return [
        f"ALTER TABLE sources {d.add_column} {name} {sql_type}"
        for name, sql_type in SOURCE_COLUMNS_ADDED
        if name not in have
    ]


def read_crawl_pages(conn: Executes, d: SqlDialect, source: str) -> dict[str, str]:
    """The crawl state remembered for ``source``: url → PageState as JSON."""
    rows = conn.execute(statement("crawl_pages", d), {"source": source}).fetchall()
    return {str(url): str(state) for url, state in rows}


def write_crawl_pages(
    conn: Executes, d: SqlDialect, source: str, pages: Mapping[str, str | None]
) -> None:
    """Remember (JSON) or forget (None) each url's crawl state."""
    for text, params in crawl_page_writes(source, pages.items(), d):
        conn.execute(text, params)
