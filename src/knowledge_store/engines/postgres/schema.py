"""The PostgreSQL schema: versioned migrations, the text functions, feature detection.

A store lives in one schema (``ks`` by default) of one database. Opening it
applies, in order and in one transaction (all or none), every migration newer
than the version recorded in ``meta`` — under an advisory lock, so two
processes opening a new store at once don't race (``migrate.open_schema``). A
store written by a *newer* knowledge-store is refused with a sentence saying to
upgrade; a migration that can't convert data in place records that a
``rebuild`` is due, and every read says so until it has run.

Text columns that are compared or ordered use ``COLLATE "C"`` (byte order =
code point order for UTF-8): the same order as SQLite and Python, so both
engines sort titles and uids identically whatever the database's locale.

The ``vector(d)`` column gets its dimension, and its HNSW index, when the
store learns its model (:func:`vector_ddl`): before that ``embedding`` is an
undimensioned ``vector`` in an empty table.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from knowledge_store.engines.sql.dialect import POSTGRES
from knowledge_store.engines.sql.facets import add_facet
from knowledge_store.engines.sql.sources import CRAWL_PAGES_DDL, SOURCES_DDL
from knowledge_store.model import FACET_NAMES
from knowledge_store.model.queries import FUNCTION_WORDS, STOP_WORDS

__all__ = [
    "ADVISORY_LOCK_MIGRATE",
    "ADVISORY_LOCK_WRITE",
    "BM25_EXTENSIONS",
    "FIELD_BODY",
    "FIELD_HEADING",
    "FIELD_IDENT",
    "FIELD_TITLE",
    "HEADING_POSTINGS",
    "IDENT_POSTINGS",
    "MIGRATIONS",
    "REDERIVE_LEXICAL",
    "SCHEMA_VERSION",
    "WORD_POSTINGS",
    "Features",
    "Migration",
    "detect_features",
    "parse_version",
    "vector_ddl",
]

#: Advisory lock keys (``pg_advisory_xact_lock``): the single writer, and migrations.
ADVISORY_LOCK_WRITE = 0x4B53_5752  # "KSWR"
ADVISORY_LOCK_MIGRATE = 0x4B53_4D47  # "KSMG"

#: The fields of the SQL BM25 (``lexical_postings.field``); see ``lexical``.
FIELD_BODY = 0
FIELD_TITLE = 1
FIELD_IDENT = 2
FIELD_HEADING = 3  # schema version 5

#: BM25 extensions the engine uses when one is installed (detected on open).
BM25_EXTENSIONS: tuple[str, ...] = ("pg_search", "pg_textsearch")


@dataclass(frozen=True)
class Migration:
    """One schema version: DDL applied in one transaction, and whether data must be rebuilt."""

    version: int
    summary: str
    statements: tuple[str, ...]
    #: True when existing rows can't be converted in place: ``ks rebuild`` must run.
    needs_rebuild: bool = False


# -- text functions -----------------------------------------------------------------------------
#
# The lexical analysis runs in the database, at publish and at query time alike,
# so a document and a query are always cut the same way — and the same way as the
# embedded engine's Tantivy analyzers (engines/embedded/analysis.py), whose behaviour
# is the reference:
#   body  — ks_tsv: English words (identifiers' _-joined parts kept as one word),
#           every word but Lucene's 33 stop words (model.queries.STOP_WORDS: the, of,
#           is…), Snowball stems — so BETWEEN, WHERE or ALL stay searchable. The
#           stop words are cut from the text before the parser sees it (ks_prepare),
#           and the ks_english configuration stems without a stop list (version 6;
#           versions 1–5 used PostgreSQL's english configuration, which drops
#           Snowball's 127 words). PostgreSQL takes a stop list only from a file in
#           the server's share directory, which a managed server does not let a
#           store install; the dictionary and configuration need only CREATE on the
#           schema. Cut from the text, a stop word leaves no gap in the positions
#           (ts_rank_cd's cover density and phrases see its neighbours adjacent, in
#           documents and queries alike).
#   title — the same analysis of the entity title
#   heading — the same analysis of the chunk's innermost heading below the title
#   ident — identifiers as written (pg_hba.conf, err-1042, pg_stat_activity),
#           lowercased; only tokens that are not plain words are kept as terms
#           (plain words already count, stemmed, in body), but every token counts
#           in the field's length, as in the embedded engine's Tantivy field.
# A query is analysed as documents are (ks_query_words, ks_query_idents); a natural-
# language one (model.queries.query_features, decided in lexical.py) also without its
# function words (model.queries.FUNCTION_WORDS: Snowball's list), and an identifier
# whose words are all stop words is no identifier term ("and/or").

_IDENT_PATTERN = r"[\w$](?:[\w$./:+#@-]*[\w$+#])?"

_FUNCTIONS = (
    # What is indexed and embedded: title, heading path, text (model.compose_context).
    """
CREATE OR REPLACE FUNCTION ks_context(title text, heading jsonb, body text)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN path = '' THEN title || E'\\n' || body
                ELSE title || E'\\n' || path || E'\\n' || body END
    FROM (SELECT coalesce(string_agg(h, ' > ' ORDER BY n), '') AS path
          FROM jsonb_array_elements_text(heading) WITH ORDINALITY AS x(h, n)
          WHERE h <> '' AND h <> title) AS p
$$""",
    # The English tsvector of a text. PostgreSQL's parser cuts words at "_"; joining
    # the parts first keeps pg_stat_activity one word ("pgstatact"), as a \w+
    # tokenizer would — measured on postgres-docs, splitting costs fused nDCG@10.
    """
CREATE OR REPLACE FUNCTION ks_tsv(doc text)
RETURNS tsvector LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT to_tsvector('english'::regconfig,
                       regexp_replace(doc, '([[:alnum:]])_+(?=[[:alnum:]])', '\\1', 'g'))
$$""",
    # Words with their frequencies (stemmed, stop words out).
    """
CREATE OR REPLACE FUNCTION ks_words(doc text)
RETURNS TABLE(term text, tf integer) LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT lexeme, coalesce(array_length(positions, 1), 1) FROM unnest(ks_tsv(doc))
$$""",
    # Identifier tokens that are not plain words, with their frequencies.
    f"""
CREATE OR REPLACE FUNCTION ks_idents(doc text)
RETURNS TABLE(term text, tf integer) LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT m[1], count(*)::integer
    FROM regexp_matches(lower(doc), '({_IDENT_PATTERN})', 'g') AS m
    WHERE length(m[1]) <= 64 AND m[1] !~ '^[[:alpha:]]+$'
    GROUP BY m[1]
$$""",
    # Every identifier token counts in the ident field's length.
    f"""
CREATE OR REPLACE FUNCTION ks_ident_length(doc text)
RETURNS integer LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT count(*)::integer
    FROM regexp_matches(lower(doc), '({_IDENT_PATTERN})', 'g') AS m
    WHERE length(m[1]) <= 64
$$""",
    # A query for ts_rank_cd: each whitespace-separated piece of the text as a phrase
    # (so pg_stat_activity matches its three adjacent lexemes), the pieces OR-ed.
    """
CREATE OR REPLACE FUNCTION ks_or_query(q text)
RETURNS tsquery LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ks_or_agg(p) FROM (
        SELECT phraseto_tsquery('english'::regconfig, piece) AS p
        FROM regexp_split_to_table(
            regexp_replace(q, '([[:alnum:]])_+(?=[[:alnum:]])', '\\1', 'g'), '\\s+') AS piece
    ) AS pieces WHERE numnode(p) > 0
$$""",
)

_OR_AGGREGATE = """
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                   WHERE p.proname = 'ks_or_agg' AND n.nspname = current_schema()) THEN
        CREATE AGGREGATE ks_or_agg(tsquery) (SFUNC = tsquery_or, STYPE = tsquery);
    END IF;
END $$"""

_V1 = (
    """
CREATE TABLE IF NOT EXISTS acl_sets (
    id  bigserial PRIMARY KEY,
    key text COLLATE "C" NOT NULL UNIQUE        -- the sorted principals, one per line (v2: their sha256)
)""",
    """
CREATE TABLE IF NOT EXISTS acl_set_principals (
    acl_set   bigint NOT NULL REFERENCES acl_sets(id),
    principal text COLLATE "C" NOT NULL,
    PRIMARY KEY (acl_set, principal)
)""",
    "CREATE INDEX IF NOT EXISTS acl_set_principals_by_principal"
    " ON acl_set_principals (principal, acl_set)",
    """
CREATE TABLE IF NOT EXISTS entities (
    id           bigserial PRIMARY KEY,
    uid          text COLLATE "C" NOT NULL UNIQUE,
    type         text COLLATE "C" NOT NULL,
    title        text COLLATE "C" NOT NULL,
    source       text COLLATE "C" NOT NULL,
    status       text COLLATE "C" NOT NULL,
    created_at   text COLLATE "C",
    updated_at   text COLLATE "C",
    href         text COLLATE "C",
    acl_set      bigint NOT NULL REFERENCES acl_sets(id),
    content_hash text NOT NULL,
    publish      bigint NOT NULL,
    chunk_count  integer NOT NULL DEFAULT 0
)""",
    "CREATE INDEX IF NOT EXISTS entities_by_type ON entities (type)",
    "CREATE INDEX IF NOT EXISTS entities_by_source ON entities (source)",
    "CREATE INDEX IF NOT EXISTS entities_by_status ON entities (status)",
    "CREATE INDEX IF NOT EXISTS entities_by_created_at ON entities (created_at)",
    "CREATE INDEX IF NOT EXISTS entities_by_updated_at ON entities (updated_at)",
    # covering: the visible entities (and their chunk counts) by an index-only scan
    "CREATE INDEX IF NOT EXISTS entities_by_acl_set ON entities (acl_set) INCLUDE (id, chunk_count)",
    "CREATE INDEX IF NOT EXISTS entities_by_href ON entities (href)",
    "CREATE INDEX IF NOT EXISTS entities_by_title ON entities (title)",
    # Bodies and attributes apart: ``entities`` stays narrow, so the ACL join's scans of
    # it (every primitive) read a few dozen bytes a row, not the text.
    """
CREATE TABLE IF NOT EXISTS entity_bodies (
    entity     bigint PRIMARY KEY REFERENCES entities(id) ON DELETE CASCADE,
    body       text NOT NULL,
    attributes json NOT NULL                   -- kept as written (json, not jsonb): hashes round-trip
)""",
    # Chunk ids come from a sequence and are never reused.
    """
CREATE TABLE IF NOT EXISTS chunks (
    id         bigint PRIMARY KEY,
    entity     bigint NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
    ordinal    integer NOT NULL,
    text       text NOT NULL,
    heading    jsonb NOT NULL,
    start      integer NOT NULL,
    "end"      integer NOT NULL,
    embedding  vector NOT NULL,               -- becomes vector(d) once the model is known
    tsv        tsvector NOT NULL,             -- english, over ks_context(title, heading, text)
    len_body   integer NOT NULL,
    len_title  integer NOT NULL,
    len_ident  integer NOT NULL
)""",
    "CREATE SEQUENCE IF NOT EXISTS chunks_id_seq OWNED BY chunks.id",
    "CREATE INDEX IF NOT EXISTS chunks_by_entity ON chunks (entity, ordinal)",
    "CREATE INDEX IF NOT EXISTS chunks_tsv ON chunks USING gin (tsv)",
    # Edges name uids, not rows: an edge to a uid not yet ingested is kept and
    # resolves when the target arrives; a dangling edge is invisible to readers.
    """
CREATE TABLE IF NOT EXISTS edges (
    src      text COLLATE "C" NOT NULL,
    label    text COLLATE "C" NOT NULL,
    dst      text COLLATE "C" NOT NULL,
    position integer,
    PRIMARY KEY (src, label, dst)
)""",
    "CREATE INDEX IF NOT EXISTS edges_by_dst ON edges (dst, label, src)",
    """
CREATE TABLE IF NOT EXISTS memberships (
    grp    text COLLATE "C" NOT NULL,
    member text COLLATE "C" NOT NULL,
    PRIMARY KEY (grp, member)
)""",
    "CREATE INDEX IF NOT EXISTS memberships_by_member ON memberships (member, grp)",
    """
CREATE TABLE IF NOT EXISTS publishes (
    id      bigint PRIMARY KEY,
    root    text NOT NULL,
    parent  text NOT NULL,
    kind    text NOT NULL,
    at      text NOT NULL,
    added   integer NOT NULL,
    updated integer NOT NULL,
    deleted integer NOT NULL
)""",
    # Embeddings by content hash of (model, embedded text): re-ingest embeds nothing.
    """
CREATE TABLE IF NOT EXISTS embedding_cache (
    key    text PRIMARY KEY,
    vector bytea NOT NULL
)""",
    # BM25 statistics, maintained in the publish transaction:
    #   lexical_postings — term frequency of each term in each chunk, per field, with the
    #                      chunk's field length and entity (scoring needs no chunk lookup)
    #   lexical_terms    — document frequency of each term, per field
    #   lexical_fields   — number of chunks and total length, per field (→ avgdl)
    """
CREATE TABLE IF NOT EXISTS lexical_postings (
    field  smallint NOT NULL,
    term   text COLLATE "C" NOT NULL,
    chunk  bigint NOT NULL,
    tf     integer NOT NULL,
    dl     integer NOT NULL,
    entity bigint NOT NULL,
    PRIMARY KEY (field, term, chunk) INCLUDE (tf, dl, entity)
)""",
    "CREATE INDEX IF NOT EXISTS lexical_postings_by_chunk ON lexical_postings (chunk)",
    """
CREATE TABLE IF NOT EXISTS lexical_terms (
    field smallint NOT NULL,
    term  text COLLATE "C" NOT NULL,
    df    integer NOT NULL,
    PRIMARY KEY (field, term)
)""",
    """
CREATE TABLE IF NOT EXISTS lexical_fields (
    field     smallint PRIMARY KEY,
    docs      bigint NOT NULL,
    total_len bigint NOT NULL
)""",
    "INSERT INTO lexical_fields (field, docs, total_len) VALUES (0, 0, 0), (1, 0, 0), (2, 0, 0)"
    " ON CONFLICT (field) DO NOTHING",
    _OR_AGGREGATE,
    *_FUNCTIONS,
)

#: Every schema version, oldest first. Append; never edit a released one.
#: Version 2: dates with four-digit years (older versions wrote years below 1000
#: unpadded, ``1-01-01T00:00:00Z``, which sorts wrong as text), and ACL-set keys as
#: sha256 of the principals (a long ACL's text did not fit in its b-tree entry).
_V2: tuple[str, ...] = (
    *(
        f"UPDATE entities SET {column} = lpad(split_part({column}, '-', 1), 4, '0')"
        f" || substr({column}, strpos({column}, '-')) WHERE {column} ~ '^[0-9]{{1,3}}-'"
        for column in ("created_at", "updated_at")
    ),
    "UPDATE acl_sets SET key = encode(sha256(convert_to(key, 'UTF8')), 'hex')"
    " WHERE key !~ '^[0-9a-f]{64}$'",  # a principal list never looks like that
)

#: Version 3: a row per source (its last ingest) and a crawl's validators per (source, url).
_V3: tuple[str, ...] = (SOURCES_DDL, CRAWL_PAGES_DDL)

#: Version 4: the facet columns (``FACETS``, generated). A facet declared later needs no
#: migration: opening a store adds the facet columns it lacks (``migrate.open_schema``).
_V4: tuple[str, ...] = tuple(s for name in FACET_NAMES for s in add_facet(POSTGRES, name))

#: The ``heading`` field's postings of the chunks ``{source}`` (a FROM item with alias ``c``):
#: the words of each chunk's innermost heading below the title (``model.last_heading``).
HEADING_POSTINGS = f"""
SELECT {FIELD_HEADING}, w.term, c.id, w.tf, c.len_heading, c.entity
FROM {{source}} JOIN entities AS e ON e.id = c.entity
CROSS JOIN LATERAL ks_words(ks_last_heading(e.title, c.heading)) AS w"""

#: Version 5: the ``heading`` field of the SQL BM25 (as the embedded engine's Tantivy
#: field), filled in place from the chunks already stored.
_V5: tuple[str, ...] = (
    """
CREATE OR REPLACE FUNCTION ks_last_heading(title text, heading jsonb)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce((SELECT h FROM jsonb_array_elements_text(heading) WITH ORDINALITY AS x(h, n)
                     WHERE h <> '' AND h <> title ORDER BY n DESC LIMIT 1), '')
$$""",
    "ALTER TABLE chunks ADD COLUMN IF NOT EXISTS len_heading integer NOT NULL DEFAULT 0",
    """UPDATE chunks AS c SET len_heading = (
        SELECT coalesce(sum(w.tf), 0) FROM ks_words(ks_last_heading(e.title, c.heading)) AS w)
    FROM entities AS e WHERE e.id = c.entity""",
    f"DELETE FROM lexical_postings WHERE field = {FIELD_HEADING}",
    f"DELETE FROM lexical_terms WHERE field = {FIELD_HEADING}",
    "INSERT INTO lexical_postings (field, term, chunk, tf, dl, entity)"
    + HEADING_POSTINGS.format(source="chunks AS c"),
    "INSERT INTO lexical_terms (field, term, df) SELECT field, term, count(*)"
    f" FROM lexical_postings WHERE field = {FIELD_HEADING} GROUP BY field, term",
    f"""INSERT INTO lexical_fields (field, docs, total_len)
    SELECT {FIELD_HEADING}, count(*), coalesce(sum(len_heading), 0) FROM chunks
    ON CONFLICT (field) DO UPDATE SET docs = excluded.docs, total_len = excluded.total_len""",
)

#: The word fields' postings (body, title, heading) of the chunks ``{source}`` (alias ``c``).
WORD_POSTINGS = f"""
SELECT {FIELD_BODY}, u.lexeme, c.id, coalesce(array_length(u.positions, 1), 1), c.len_body, c.entity
FROM {{source}} CROSS JOIN LATERAL unnest(c.tsv) AS u
UNION ALL
SELECT {FIELD_TITLE}, w.term, c.id, w.tf, c.len_title, c.entity
FROM {{source}} JOIN entities AS e ON e.id = c.entity CROSS JOIN LATERAL ks_words(e.title) AS w
UNION ALL{HEADING_POSTINGS}"""

#: The ``ident`` field's postings of the chunks ``{source}`` (alias ``c``).
IDENT_POSTINGS = f"""
SELECT {FIELD_IDENT}, i.term, c.id, i.tf, c.len_ident, c.entity
FROM {{source}} JOIN entities AS e ON e.id = c.entity
CROSS JOIN LATERAL ks_idents(ks_context(e.title, c.heading, c.text)) AS i"""

#: Every lexical statistic re-derived from the chunks' text with the current text functions:
#: each chunk's ``tsv`` and field lengths (one pass: every row is rewritten once), the
#: postings, document frequencies and field totals. ``rebuild`` runs it; so does version 6.
REDERIVE_LEXICAL: tuple[str, ...] = (
    "TRUNCATE lexical_postings, lexical_terms",
    """UPDATE chunks AS c
    SET tsv = n.tsv,
        len_body = (SELECT coalesce(sum(coalesce(array_length(u.positions, 1), 1)), 0)
                    FROM unnest(n.tsv) AS u),
        len_title = (SELECT coalesce(sum(w.tf), 0) FROM ks_words(n.title) AS w),
        len_ident = ks_ident_length(n.ctx),
        len_heading = (SELECT coalesce(sum(w.tf), 0)
                       FROM ks_words(ks_last_heading(n.title, n.heading)) AS w)
    FROM (SELECT k.id, e.title, k.heading, x.ctx, ks_tsv(x.ctx) AS tsv
          FROM chunks AS k JOIN entities AS e ON e.id = k.entity
          CROSS JOIN LATERAL (SELECT ks_context(e.title, k.heading, k.text) AS ctx) AS x) AS n
    WHERE n.id = c.id""",
    "INSERT INTO lexical_postings (field, term, chunk, tf, dl, entity)"
    + WORD_POSTINGS.format(source="chunks AS c")
    + "\nUNION ALL"
    + IDENT_POSTINGS.format(source="chunks AS c"),
    "INSERT INTO lexical_terms (field, term, df) SELECT field, term, count(*)"
    " FROM lexical_postings GROUP BY field, term",
    f"""INSERT INTO lexical_fields (field, docs, total_len)
    SELECT {FIELD_BODY}, count(*), coalesce(sum(len_body), 0) FROM chunks
    UNION ALL SELECT {FIELD_TITLE}, count(*), coalesce(sum(len_title), 0) FROM chunks
    UNION ALL SELECT {FIELD_IDENT}, count(*), coalesce(sum(len_ident), 0) FROM chunks
    UNION ALL SELECT {FIELD_HEADING}, count(*), coalesce(sum(len_heading), 0) FROM chunks
    ON CONFLICT (field) DO UPDATE SET docs = excluded.docs, total_len = excluded.total_len""",
)


def _whole_words(words: Sequence[str]) -> str:
    r"""A PostgreSQL regular expression (ARE) matching any of ``words`` as a whole word:
    ``\m`` and ``\M`` are a word's start and end, a word a run of letters, digits and ``_``
    — as the embedded engine's ``\w+`` tokens, which its stop filters compare whole."""
    assert all(w.isascii() and w.isalpha() and w.islower() for w in words)  # no quoting needed
    return r"\m(?:" + "|".join(sorted(words)) + r")\M"


#: Version 6: the embedded engine's analysis (see the text functions' comment above): a
#: stemming dictionary without stop words and a configuration using it; Lucene's 33 words
#: cut from the text before it is parsed; the query-side functions, which cut a natural-
#: language query's function words too. Then every chunk's ``tsv`` and field lengths, every
#: posting and statistic are re-derived in place (:data:`REDERIVE_LEXICAL`, what ``rebuild``
#: runs) — inside the opening transaction, under the migration lock. (``REDERIVE_LEXICAL``
#: must keep running on version 6's schema: a later change needing more gives version 6 a
#: frozen copy.)
#:
#: What that costs: 20 s on a 14,401-chunk store (postgres-docs; the chunks' UPDATE 11.6 s,
#: of which roughly half is re-inserting every row into the HNSW index, the postings 4.1 s).
#: Linearly, ~23 minutes at a million chunks — more in practice, as the HNSW graph and the
#: working set outgrow memory. Meanwhile the process opening the store waits, so do other
#: processes opening it (the lock) and any lexical read (the postings are truncated in the
#: same transaction); vector and catalog reads go on. ``needs_rebuild`` instead would make
#: the open fast but refuse every read until ``ks rebuild`` had run the same statements (and
#: reindexed): a longer outage that also needs an operator, so the migration converts in place.
#: An operator of a big store upgrades in a maintenance window: the first open after the
#: upgrade is the re-analysis.
_V6: tuple[str, ...] = (
    """
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_ts_dict AS d JOIN pg_namespace AS n ON n.oid = d.dictnamespace
                   WHERE d.dictname = 'ks_english_stem' AND n.nspname = current_schema()) THEN
        CREATE TEXT SEARCH DICTIONARY ks_english_stem (TEMPLATE = snowball, Language = english);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_ts_config AS c JOIN pg_namespace AS n ON n.oid = c.cfgnamespace
                   WHERE c.cfgname = 'ks_english' AND n.nspname = current_schema()) THEN
        CREATE TEXT SEARCH CONFIGURATION ks_english (COPY = pg_catalog.english);
        ALTER TEXT SEARCH CONFIGURATION ks_english
            ALTER MAPPING REPLACE pg_catalog.english_stem WITH ks_english_stem;
    END IF;
END $$""",
    # A document's text as the parser gets it: identifiers' _-joined parts as one word (the
    # parser cuts at "_"; a \w+ tokenizer does not — measured on postgres-docs, splitting
    # costs fused nDCG@10), and Lucene's stop words cut, before stemming: "being" → "be"
    # and "willing" → "will" stay terms, as in the embedded index.
    f"""
CREATE OR REPLACE FUNCTION ks_prepare(doc text)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT regexp_replace(regexp_replace(doc, '([[:alnum:]])_+(?=[[:alnum:]])', '\\1', 'g'),
                          '{_whole_words(STOP_WORDS)}', ' ', 'gi')
$$""",
    """
CREATE OR REPLACE FUNCTION ks_tsv(doc text)
RETURNS tsvector LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT to_tsvector('ks_english'::regconfig, ks_prepare(doc))
$$""",
    # A query's text: a natural-language query's function words cut as well.
    f"""
CREATE OR REPLACE FUNCTION ks_query_text(q text, question boolean)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN question THEN regexp_replace(q, '{_whole_words(FUNCTION_WORDS)}', ' ', 'gi')
                ELSE q END
$$""",
    """
CREATE OR REPLACE FUNCTION ks_query_words(q text, question boolean)
RETURNS TABLE(term text, tf integer) LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT * FROM ks_words(ks_query_text(q, question))
$$""",
    # Stop words are never identifiers: "and/or" must not match every and/or.
    """
CREATE OR REPLACE FUNCTION ks_query_idents(q text, question boolean)
RETURNS TABLE(term text, tf integer) LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT i.term, i.tf FROM ks_idents(q) AS i
    WHERE EXISTS (SELECT 1 FROM ks_query_words(i.term, question))
$$""",
    # ts_rank_cd's query: each whitespace-separated piece a phrase, the pieces OR-ed.
    "DROP FUNCTION IF EXISTS ks_or_query(text)",
    """
CREATE OR REPLACE FUNCTION ks_or_query(q text, question boolean)
RETURNS tsquery LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ks_or_agg(p) FROM (
        SELECT phraseto_tsquery('ks_english'::regconfig, ks_prepare(piece)) AS p
        FROM regexp_split_to_table(ks_query_text(q, question), '\\s+') AS piece
    ) AS pieces WHERE numnode(p) > 0
$$""",
    *REDERIVE_LEXICAL,
)

# Where a chunk of a paged document is ({"page": 3}); NULL elsewhere, and for every chunk
# stored before (no stored body has location markers). Adding a NULL column rewrites nothing.
_V7 = ("ALTER TABLE chunks ADD COLUMN IF NOT EXISTS location jsonb",)

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "entities, chunks, edges, ACL sets, publishes, BM25 statistics", _V1),
    Migration(2, "dates with four-digit years; ACL-set keys hashed", _V2),
    Migration(3, "sources and crawl state", _V3),
    Migration(4, "the facet columns", _V4),
    Migration(5, "the heading field of the SQL BM25", _V5),
    Migration(6, "the embedded engine's word analysis: Lucene's stop words only", _V6),
    Migration(7, "chunk locations (page, slide, sheet and rows)", _V7),
)
SCHEMA_VERSION = MIGRATIONS[-1].version


def vector_ddl(dimension: int) -> list[str]:
    """Give ``chunks.embedding`` its dimension and its HNSW index (cosine).

    Run once, when the store learns its model; the table is empty then, so the
    type change rewrites nothing. ``dimension`` is an int checked here: it is
    the only value ever formatted into DDL.
    """
    if isinstance(dimension, bool) or not isinstance(dimension, int) or not 0 < dimension <= 16000:
        raise ValueError(f"a vector dimension must be 1..16000, not {dimension!r}")
    return [
        f"ALTER TABLE chunks ALTER COLUMN embedding TYPE vector({dimension})",
        "CREATE INDEX IF NOT EXISTS chunks_embedding_hnsw ON chunks"
        " USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)",
    ]


# -- feature detection ------------------------------------------------------------------------------

_VERSION = re.compile(r"^\s*(\d+)(?:\.(\d+))?(?:\.(\d+))?")


def parse_version(text: str | None) -> tuple[int, int, int] | None:
    """``"0.8.0"`` → ``(0, 8, 0)``; ``"0.6"`` → ``(0, 6, 0)``; anything else → None."""
    if not text:
        return None
    m = _VERSION.match(text)
    if m is None:
        return None
    return (int(m.group(1)), int(m.group(2) or 0), int(m.group(3) or 0))


@dataclass(frozen=True)
class Features:
    """What the server offers beyond PostgreSQL itself, as detected on open."""

    pgvector: tuple[int, int, int] | None
    bm25_extension: str | None  # "pg_search" | "pg_textsearch" | None
    bm25_extension_version: str | None = None

    @property
    def iterative_scan(self) -> bool:
        """pgvector ≥ 0.8 continues an HNSW scan until enough rows pass the filter."""
        return self.pgvector is not None and self.pgvector >= (0, 8, 0)

    def to_dict(self) -> dict[str, object]:
        return {
            "pgvector": None if self.pgvector is None else ".".join(map(str, self.pgvector)),
            "iterative_scan": self.iterative_scan,
            "bm25_extension": self.bm25_extension,
            "bm25_extension_version": self.bm25_extension_version,
        }


def detect_features(installed: Sequence[tuple[str, str]]) -> Features:
    """Features from ``(extname, extversion)`` rows of ``pg_extension``.

    The first installed BM25 extension of :data:`BM25_EXTENSIONS` wins.
    """
    versions = {str(name): str(version) for name, version in installed}
    bm25 = next((name for name in BM25_EXTENSIONS if name in versions), None)
    return Features(
        pgvector=parse_version(versions.get("vector")),
        bm25_extension=bm25,
        bm25_extension_version=versions.get(bm25) if bm25 else None,
    )
