"""PostgreSQL's own part of a publish (``engines.sql.write.ChunkStore``): chunks with their
tsvector, field lengths and vector, and the BM25 statistics kept exact.

The catalog's rows (entities, bodies, ACL sets, edges, publishes, sources) are written
once for both engines (:mod:`knowledge_store.engines.sql.write`); what is PostgreSQL's is
what it derives from a chunk in the same transaction — the postings, document frequencies
and field lengths of BM25 in SQL, the tsvector, and the ``vector`` column (typed to the
model's dimension once it is known).

Bulk work is set-based: chunks through binary ``COPY`` into a session temp table and one
``INSERT … SELECT`` that computes the tsvector and field lengths in the database, postings
and statistics as ``INSERT … SELECT … GROUP BY``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from knowledge_store.engines.base import PreparedEntity
from knowledge_store.engines.postgres.db import Connection
from knowledge_store.engines.postgres.schema import (
    FIELD_BODY,
    FIELD_HEADING,
    FIELD_IDENT,
    FIELD_TITLE,
    IDENT_POSTINGS,
    REDERIVE_LEXICAL,
    WORD_POSTINGS,
    vector_ddl,
)
from knowledge_store.engines.sql.dialect import Column
from knowledge_store.engines.sql.statements import location_text
from knowledge_store.engines.sql.write import Placed

__all__ = ["REBUILD_LEXICAL", "PostgresChunks"]

_STAGE = """
CREATE TEMP TABLE IF NOT EXISTS ks_stage (
    id bigint, entity bigint, ordinal integer, text text, heading text,
    start integer, "end" integer, embedding vector, location text
) ON COMMIT DELETE ROWS"""

_INSERT_CHUNKS = """
INSERT INTO chunks (id, entity, ordinal, text, heading, start, "end", embedding, tsv,
                    len_body, len_title, len_ident, len_heading, location)
SELECT s.id, s.entity, s.ordinal, s.text, s.heading::jsonb, s.start, s."end", s.embedding, x.tsv,
       (SELECT coalesce(sum(coalesce(array_length(u.positions, 1), 1)), 0) FROM unnest(x.tsv) AS u),
       (SELECT coalesce(sum(w.tf), 0) FROM ks_words(e.title) AS w),
       ks_ident_length(x.ctx),
       (SELECT coalesce(sum(w.tf), 0) FROM ks_words(ks_last_heading(e.title, s.heading::jsonb)) AS w),
       s.location::jsonb
FROM ks_stage AS s
JOIN entities AS e ON e.id = s.entity
CROSS JOIN LATERAL (SELECT ks_context(e.title, s.heading::jsonb, s.text) AS ctx) AS c
CROSS JOIN LATERAL (SELECT c.ctx, ks_tsv(c.ctx) AS tsv) AS x
"""
#: The chunks a publish adds, as a FROM item with alias ``c``.
_STAGED = "ks_stage AS s JOIN chunks AS c ON c.id = s.id"

_INSERT_POSTINGS = (
    "INSERT INTO lexical_postings (field, term, chunk, tf, dl, entity)"
    + WORD_POSTINGS.format(source=_STAGED)
    + "\nUNION ALL"
    + IDENT_POSTINGS.format(source=_STAGED)
)

_ADD_TERMS = """
INSERT INTO lexical_terms (field, term, df)
SELECT p.field, p.term, count(*) FROM lexical_postings AS p
WHERE p.chunk IN (SELECT id FROM ks_stage)
GROUP BY p.field, p.term ORDER BY p.field, p.term
ON CONFLICT (field, term) DO UPDATE SET df = lexical_terms.df + excluded.df
"""

#: ``rebuild``: every statistic recomputed from the chunks' text, and the entities' chunk counts.
REBUILD_LEXICAL: tuple[str, ...] = (
    *REDERIVE_LEXICAL,
    "UPDATE entities AS e SET chunk_count = (SELECT count(*) FROM chunks AS c WHERE c.entity = e.id)",
)

#: Field lengths of a set of chunks, as (field, docs, total length) rows; ``%(sign)s`` ±1.
_FIELD_DELTA = f"""
UPDATE lexical_fields AS f
SET docs = f.docs + %(sign)s * d.docs, total_len = f.total_len + %(sign)s * d.len
FROM (
    SELECT {FIELD_BODY} AS field, count(*) AS docs, coalesce(sum(len_body), 0) AS len
    FROM chunks WHERE id = ANY(%(ids)s)
    UNION ALL
    SELECT {FIELD_TITLE}, count(*), coalesce(sum(len_title), 0) FROM chunks WHERE id = ANY(%(ids)s)
    UNION ALL
    SELECT {FIELD_IDENT}, count(*), coalesce(sum(len_ident), 0) FROM chunks WHERE id = ANY(%(ids)s)
    UNION ALL
    SELECT {FIELD_HEADING}, count(*), coalesce(sum(len_heading), 0)
    FROM chunks WHERE id = ANY(%(ids)s)
) AS d
WHERE f.field = d.field
"""


class PostgresChunks:
    """Chunks, their tsvector and vector, and the BM25 statistics, in the publish's transaction."""

    #: An entity's chunk count, kept on its row (the vector planner sums it per ACL set).
    entity_columns: Mapping[str, tuple[Column, Callable[[PreparedEntity], Any]]] = {
        "chunk_count": (("chunk_count", "integer"), lambda prepared: len(prepared.chunks))
    }

    def add(self, conn: Connection, publish: int, placed: Sequence[Placed]) -> None:
        total = sum(len(p.chunks) for _, p in placed)
        if total == 0:
            return
        ids = [
            int(i)
            for (i,) in conn.execute(
                "SELECT nextval('chunks_id_seq') FROM generate_series(1, %s)", (total,)
            )
        ]
        conn.execute(_STAGE)
        next_id = iter(ids)
        with conn.cursor().copy(
            'COPY ks_stage (id, entity, ordinal, text, heading, start, "end", embedding, location)'
            " FROM STDIN WITH (FORMAT BINARY)"
        ) as copy:
            copy.set_types(
                ["int8", "int8", "int4", "text", "text", "int4", "int4", "vector", "text"]
            )
            for entity, prepared in placed:
                vectors = np.asarray(prepared.vectors, dtype=np.float32)
                for chunk, vector in zip(prepared.chunks, vectors, strict=True):
                    heading = json.dumps(list(chunk.heading), ensure_ascii=False)
                    copy.write_row(
                        (
                            next(next_id),
                            entity,
                            chunk.ordinal,
                            chunk.text.replace("\x00", " "),
                            heading.replace("\\u0000", " "),
                            chunk.start,
                            chunk.end,
                            vector,
                            location_text(chunk.location),
                        )
                    )
        conn.execute("ANALYZE ks_stage")
        conn.execute(_INSERT_CHUNKS)
        conn.execute(_INSERT_POSTINGS)
        conn.execute(_ADD_TERMS)
        conn.execute(_FIELD_DELTA, {"sign": 1, "ids": ids})
        conn.execute("TRUNCATE ks_stage")

    def drop(self, conn: Connection, publish: int, chunk_ids: Sequence[int]) -> None:
        """Their postings go, and the statistics stay exact without them."""
        gone = list(chunk_ids)
        conn.execute(_FIELD_DELTA, {"sign": -1, "ids": gone})
        conn.execute(
            "UPDATE lexical_terms AS t SET df = t.df - d.n FROM ("
            " SELECT field, term, count(*) AS n FROM lexical_postings WHERE chunk = ANY(%(ids)s)"
            " GROUP BY field, term ORDER BY field, term) AS d"
            " WHERE t.field = d.field AND t.term = d.term",
            {"ids": gone},
        )
        conn.execute(
            "DELETE FROM lexical_terms AS t USING ("
            " SELECT DISTINCT field, term FROM lexical_postings WHERE chunk = ANY(%(ids)s)) AS d"
            " WHERE t.field = d.field AND t.term = d.term AND t.df <= 0",
            {"ids": gone},
        )
        conn.execute("DELETE FROM lexical_postings WHERE chunk = ANY(%(ids)s)", {"ids": gone})

    def repoint(self, conn: Connection, publish: int, uids: Sequence[str]) -> None:
        """Nothing to do: the ACL is a join in every statement."""

    def replace_vectors(
        self, conn: Connection, publish: int, ids: Sequence[int], vectors: np.ndarray
    ) -> None:
        conn.execute(
            "CREATE TEMP TABLE IF NOT EXISTS ks_vectors (id bigint, embedding vector)"
            " ON COMMIT DELETE ROWS"
        )
        with conn.cursor().copy(
            "COPY ks_vectors (id, embedding) FROM STDIN WITH (FORMAT BINARY)"
        ) as copy:
            copy.set_types(["int8", "vector"])
            for chunk_id, vector in zip(ids, np.asarray(vectors, dtype=np.float32), strict=True):
                copy.write_row((int(chunk_id), vector))
        conn.execute(
            "UPDATE chunks AS c SET embedding = v.embedding FROM ks_vectors AS v WHERE c.id = v.id"
        )

    def set_dimension(self, conn: Connection, dimension: int) -> None:
        """The vector column typed ``vector(dimension)`` and its HNSW index made."""
        for statement in vector_ddl(dimension):
            conn.execute(statement)
