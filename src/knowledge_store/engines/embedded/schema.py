"""The SQLite catalog schema of the embedded engine (the source of truth).

Every table is ``CREATE … IF NOT EXISTS``, run on each open: a table added by a
later version (``sources``, ``crawl_pages``) appears in an existing store then;
a facet column declared later is added before (``Catalog``, :mod:`..sql.facets`).
"""

from __future__ import annotations

from knowledge_store.engines.embedded.migrate import (
    CHUNK_VECTORS_DDL,
    CHUNKS_BY_ENTITY_DDL,
    CHUNKS_DDL,
    ENTITY_BODIES_DDL,
    LOCATION_SCHEMA,
)
from knowledge_store.engines.sql.declared import declared_ddl
from knowledge_store.engines.sql.dialect import ENTITY_CARD_COLUMNS, ENTITY_CARD_INDEX, SQLITE
from knowledge_store.engines.sql.facets import facet_column, facet_index
from knowledge_store.engines.sql.history import history_ddl
from knowledge_store.engines.sql.sources import CRAWL_PAGES_DDL, SOURCES_DDL
from knowledge_store.model import FACET_NAMES

# 2: body and attributes in entity_bodies; 3: chunk vectors in chunk_vectors; 4: chunk
# locations (migrate.py)
SCHEMA_VERSION = LOCATION_SCHEMA

_FACET_COLUMNS = "".join(f"\n    {facet_column(SQLITE, name)}," for name in FACET_NAMES)
_FACET_INDEXES = "".join(f"\n{facet_index(name)};" for name in FACET_NAMES)

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;

-- A deduplicated set of principals; many entities share one.
CREATE TABLE IF NOT EXISTS acl_sets (
    id  INTEGER PRIMARY KEY,
    key TEXT NOT NULL UNIQUE            -- the sorted principals, one per line
);
CREATE TABLE IF NOT EXISTS acl_set_principals (
    acl_set   INTEGER NOT NULL REFERENCES acl_sets(id),
    principal TEXT NOT NULL,
    PRIMARY KEY (acl_set, principal)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS acl_set_principals_by_principal
    ON acl_set_principals (principal, acl_set);

CREATE TABLE IF NOT EXISTS entities (
    id           INTEGER PRIMARY KEY,
    uid          TEXT NOT NULL UNIQUE,
    type         TEXT NOT NULL,
    title        TEXT NOT NULL,
    source       TEXT NOT NULL,
    status       TEXT NOT NULL,{facet_columns}
    created_at   TEXT,
    updated_at   TEXT,
    href         TEXT,
    acl_set      INTEGER NOT NULL REFERENCES acl_sets(id),
    content_hash TEXT NOT NULL,
    publish      INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS entities_by_type       ON entities (type);
CREATE INDEX IF NOT EXISTS entities_by_source     ON entities (source);
CREATE INDEX IF NOT EXISTS entities_by_status     ON entities (status);{facet_indexes}
CREATE INDEX IF NOT EXISTS entities_by_created_at ON entities (created_at);
CREATE INDEX IF NOT EXISTS entities_by_updated_at ON entities (updated_at);
CREATE INDEX IF NOT EXISTS entities_by_acl_set    ON entities (acl_set);
CREATE INDEX IF NOT EXISTS entities_by_href       ON entities (href);
CREATE INDEX IF NOT EXISTS entities_by_title      ON entities (title);
CREATE INDEX IF NOT EXISTS {card_index} ON entities ({card_columns});
-- An entity's body and attributes, out of its row: the row stays a few hundred bytes
-- (what visibility checks, cards and the graph walk read), the body reaches 100 KB.
{entity_bodies};

{chunks};
{chunks_by_entity};
-- A chunk's vector, out of its row: 1,536 bytes, more than its text; inline, a page
-- held one or two chunks for what hydrating hits reads. Deleted with its chunk (the
-- catalog's connections all turn foreign keys on).
{chunk_vectors};

-- Edges name uids, not rows: an edge to a uid not yet ingested is kept and
-- resolves when the target arrives; a dangling edge is invisible to readers.
CREATE TABLE IF NOT EXISTS edges (
    src      TEXT NOT NULL,
    label    TEXT NOT NULL,
    dst      TEXT NOT NULL,
    position INTEGER,
    PRIMARY KEY (src, label, dst)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS edges_by_dst ON edges (dst, label, src);

CREATE TABLE IF NOT EXISTS memberships (
    grp    TEXT NOT NULL,
    member TEXT NOT NULL,
    PRIMARY KEY (grp, member)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS memberships_by_member ON memberships (member, grp);

CREATE TABLE IF NOT EXISTS publishes (
    id       INTEGER PRIMARY KEY,
    root     TEXT NOT NULL,
    parent   TEXT NOT NULL,
    kind     TEXT NOT NULL,
    at       TEXT NOT NULL,
    added    INTEGER NOT NULL,
    updated  INTEGER NOT NULL,
    deleted  INTEGER NOT NULL
);

-- What each publish did to chunks, for the derived indexes to catch up:
-- 'add' a chunk, 'del' a chunk, 'acl' a chunk whose entity changed ACL set.
CREATE TABLE IF NOT EXISTS publish_ops (
    publish INTEGER NOT NULL,
    chunk   INTEGER NOT NULL,
    op      TEXT NOT NULL CHECK (op IN ('add', 'del', 'acl')),
    PRIMARY KEY (publish, chunk, op)
) WITHOUT ROWID;

-- Embeddings by content hash of (model, embedded text): re-ingest embeds nothing.
CREATE TABLE IF NOT EXISTS embedding_cache (
    key    TEXT PRIMARY KEY,
    vector BLOB NOT NULL
) WITHOUT ROWID;
"""
SCHEMA = SCHEMA.format(
    facet_columns=_FACET_COLUMNS,
    facet_indexes=_FACET_INDEXES,
    entity_bodies=ENTITY_BODIES_DDL,
    chunks=CHUNKS_DDL,
    chunks_by_entity=CHUNKS_BY_ENTITY_DDL,
    chunk_vectors=CHUNK_VECTORS_DDL,
    card_index=ENTITY_CARD_INDEX,
    card_columns=", ".join(ENTITY_CARD_COLUMNS),
)
_HISTORY = ";\n".join(history_ddl(SQLITE))
_DECLARED = ";\n".join(declared_ddl(SQLITE))
SCHEMA += f"""
-- One row per source name: its last ingest (engines/sql/sources.py).
{SOURCES_DDL};
-- A crawl's validators per (source, url), saved after the publish commits.
{CRAWL_PAGES_DDL};
-- What each publish ended, and each membership's interval (engines/sql/history.py).
{_HISTORY};
-- The facets an operator declared, and their values (engines/sql/declared.py).
{_DECLARED};
"""
