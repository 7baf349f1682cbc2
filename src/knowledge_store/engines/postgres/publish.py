"""The write path: one publish = one transaction, under the store's advisory write lock.

A publish replaces the chunks and outgoing edges of every upserted entity,
removes deleted ones, re-points ACL-only changes to another ACL set, keeps
the BM25 statistics (postings, document frequencies, field lengths) exact,
and appends a ``publishes`` row — planned by the pure planner both engines
share (:mod:`knowledge_store.engines.sql.publish`), so the same changes give
the same counts and the same roots.

Bulk work is set-based: entities go in as one ``INSERT … SELECT FROM unnest``,
chunks through binary ``COPY`` into a session temp table and one
``INSERT … SELECT`` that computes the tsvector and field lengths in the
database, postings and statistics as ``INSERT … SELECT … GROUP BY``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence

import numpy as np

from knowledge_store.engines.base import PreparedEntity, Published
from knowledge_store.engines.postgres.db import Connection
from knowledge_store.engines.postgres.schema import (
    FIELD_BODY,
    FIELD_HEADING,
    FIELD_IDENT,
    FIELD_TITLE,
    IDENT_POSTINGS,
    REDERIVE_LEXICAL,
    WORD_POSTINGS,
)
from knowledge_store.engines.sql.batch import BatchScope, settle_batch
from knowledge_store.engines.sql.declared import write_values
from knowledge_store.engines.sql.dialect import POSTGRES
from knowledge_store.engines.sql.publish import (
    EMPTY_ROOT,
    PublishPlan,
    content_root_of,
    plan_publish,
    plan_row,
    publish_row,
)
from knowledge_store.engines.sql.sources import SourceSync, record_source
from knowledge_store.engines.sql.statements import location_text
from knowledge_store.errors import StoreError
from knowledge_store.model import ENTITY_FIELDS, Entity

__all__ = [
    "REBUILD_LEXICAL",
    "acl_set_id",
    "acl_set_key",
    "apply_publish",
    "latest_publish",
    "replace_embeddings",
]

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

#: The ``entities`` columns a publish writes, with their types: the entity's fields (its body
#: and attributes go to ``entity_bodies``), then ours.
_ENTITY_COLUMNS: tuple[tuple[str, str], ...] = (
    *((name, "text") for name in ENTITY_FIELDS if name not in ("body", "attributes")),
    ("acl_set", "bigint"),
    ("content_hash", "text"),
    ("chunk_count", "integer"),
)
_NAMES = [name for name, _ in _ENTITY_COLUMNS]
_UPSERT_ENTITIES = f"""
INSERT INTO entities ({", ".join(_NAMES)}, publish)
SELECT {", ".join(f"u.{name}" for name in _NAMES)}, %(publish)s
FROM unnest({", ".join(f"%({name})s::{kind}[]" for name, kind in _ENTITY_COLUMNS)})
     AS u({", ".join(_NAMES)})
ON CONFLICT (uid) DO UPDATE SET
    {", ".join(f"{name} = excluded.{name}" for name in [*_NAMES[1:], "publish"])}
RETURNING uid, id
"""

_UPSERT_BODIES = """
INSERT INTO entity_bodies (entity, body, attributes)
SELECT e.id, u.body, u.attributes::json
FROM unnest(%(uid)s::text[], %(body)s::text[], %(attributes)s::text[]) AS u(uid, body, attributes)
JOIN entities AS e ON e.uid = u.uid
ON CONFLICT (entity) DO UPDATE SET body = excluded.body, attributes = excluded.attributes
"""


def latest_publish(conn: Connection) -> tuple[int, str]:
    row = conn.execute("SELECT id, root FROM publishes ORDER BY id DESC LIMIT 1").fetchone()
    return (0, EMPTY_ROOT) if row is None else (int(row[0]), str(row[1]))


def acl_set_key(principals: Sequence[str]) -> str:
    """The unique key of an ACL set: sha256 of its sorted principals, one per line.

    A hash, not the text: 1,000 principals of 256 characters would not fit in a
    b-tree entry (schema version 2 rewrote the older keys the same way).
    """
    return hashlib.sha256("\n".join(sorted(set(principals))).encode()).hexdigest()


def acl_set_id(conn: Connection, principals: Sequence[str]) -> int:
    """The id of the deduplicated ACL set holding exactly ``principals`` (made if new)."""
    members = sorted(set(principals))
    key = acl_set_key(members)
    row = conn.execute("SELECT id FROM acl_sets WHERE key = %s", (key,)).fetchone()
    if row is not None:
        return int(row[0])
    made = conn.execute("INSERT INTO acl_sets (key) VALUES (%s) RETURNING id", (key,)).fetchone()
    assert made is not None
    acl_set = int(made[0])
    if members:
        conn.execute(
            "INSERT INTO acl_set_principals (acl_set, principal)"
            " SELECT %s, p FROM unnest(%s::text[]) AS p",
            (acl_set, members),
        )
    return acl_set


def _drop_chunks(conn: Connection, entity_ids: Sequence[int]) -> None:
    """Remove the chunks of these entities with their postings, keeping the statistics exact."""
    if not entity_ids:
        return
    gone = [
        int(c)
        for (c,) in conn.execute(
            "SELECT id FROM chunks WHERE entity = ANY(%s::bigint[])", (list(entity_ids),)
        )
    ]
    if not gone:
        return
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
    conn.execute("DELETE FROM chunks WHERE id = ANY(%(ids)s)", {"ids": gone})


def _upsert(conn: Connection, publish: int, upserts: Sequence[PreparedEntity]) -> dict[str, int]:
    acl_ids: dict[tuple[str, ...], int] = {}
    for prepared in upserts:
        acl = tuple(sorted(set(prepared.entity.acl)))
        if acl not in acl_ids:
            acl_ids[acl] = acl_set_id(conn, acl)
    columns: dict[str, list[object]] = {
        name: [] for name in [*ENTITY_FIELDS, "acl_set", "content_hash", "chunk_count"]
    }
    for prepared in upserts:
        e = prepared.entity
        fields = dict(zip(ENTITY_FIELDS, e.field_values(), strict=True))
        fields["attributes"] = json.dumps(dict(e.attributes), ensure_ascii=False, sort_keys=True)
        for name, value in fields.items():
            columns[name].append(value)
        columns["acl_set"].append(acl_ids[tuple(sorted(set(e.acl)))])
        columns["content_hash"].append(e.content_hash)
        columns["chunk_count"].append(len(prepared.chunks))
    bodies = {name: columns.pop(name) for name in ("body", "attributes")}
    rows = conn.execute(_UPSERT_ENTITIES, {"publish": publish, **columns}).fetchall()
    conn.execute(_UPSERT_BODIES, {"uid": columns["uid"], **bodies})
    return {str(uid): int(row_id) for uid, row_id in rows}


def _insert_chunks(
    conn: Connection, upserts: Sequence[PreparedEntity], entity_ids: dict[str, int]
) -> None:
    total = sum(len(p.chunks) for p in upserts)
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
        copy.set_types(["int8", "int8", "int4", "text", "text", "int4", "int4", "vector", "text"])
        for prepared in upserts:
            entity = entity_ids[prepared.entity.uid]
            vectors = np.asarray(prepared.vectors, dtype=np.float32)
            for chunk, vector in zip(prepared.chunks, vectors, strict=True):
                copy.write_row(
                    (
                        next(next_id),
                        entity,
                        chunk.ordinal,
                        chunk.text.replace("\x00", " "),
                        json.dumps(list(chunk.heading), ensure_ascii=False).replace("\\u0000", " "),
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


def _insert_edges(conn: Connection, upserts: Sequence[PreparedEntity]) -> None:
    edges: dict[tuple[str, str, str], int | None] = {}
    for prepared in upserts:
        for edge in prepared.entity.edges:
            edges[(prepared.entity.uid, edge.label, edge.dst)] = edge.position
    if not edges:
        return
    keys = list(edges)
    conn.execute(
        "INSERT INTO edges (src, label, dst, position)"
        " SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::integer[])"
        " ON CONFLICT (src, label, dst) DO UPDATE SET position = excluded.position",
        (
            [k[0] for k in keys],
            [k[1] for k in keys],
            [k[2] for k in keys],
            [edges[k] for k in keys],
        ),
    )


def apply_publish(
    conn: Connection,
    upserts: Sequence[PreparedEntity],
    deletes: Sequence[str],
    *,
    kind: str,
    acl_only: Sequence[Entity] = (),
    source: SourceSync | None = None,
    scope: BatchScope | None = None,
) -> PublishPlan:
    """Plan (:func:`~knowledge_store.engines.sql.publish.plan_publish`) and write one publish
    inside the caller's write transaction (which holds the lock).

    With ``source``, a sync deletes the source's entities the batch does not hold, and
    the source's catalog row is written here (``engines.sql.sources``).

    ``acl_only`` are entities whose ACL changed and nothing else: they keep their
    chunks and postings; only their ACL set (and content hash) changes — the ACL
    is a join in every statement, so nothing else needs touching.
    """
    latest = latest_publish(conn)
    batch = settle_batch(
        conn, POSTGRES, upserts, deletes, source=source, scope=scope, acl_only=acl_only
    )
    upserts, deletes, acl_only = batch.upserts, batch.deletes, batch.acl_only
    uids = [p.entity.uid for p in upserts] + list(deletes) + [e.uid for e in acl_only]
    existing: dict[str, int] = {}  # uid → row id
    hashes: dict[str, str] = {}  # uid → content hash, read under the lock
    for uid, row_id, content_hash in conn.execute(
        "SELECT uid, id, content_hash FROM entities WHERE uid = ANY(%s::text[])", (uids,)
    ):
        existing[str(uid)] = int(row_id)
        hashes[str(uid)] = str(content_hash)
    plan = plan_publish(latest, hashes, upserts, deletes, acl_only)
    if plan.empty:
        record_source(conn, POSTGRES, source, Published.of(plan))
        return plan
    replaced = [existing[u] for u in plan.replaced]
    _drop_chunks(conn, replaced + [existing[u] for u in plan.deletes])
    stale_edges = [*plan.replaced, *plan.deletes]
    if stale_edges:
        conn.execute("DELETE FROM edges WHERE src = ANY(%s::text[])", (stale_edges,))
    if plan.deletes:
        conn.execute(
            "DELETE FROM entities WHERE id = ANY(%s::bigint[])",
            ([existing[u] for u in plan.deletes],),
        )
    if plan.upserts:
        entity_ids = _upsert(conn, plan.publish, plan.upserts)
        _insert_chunks(conn, plan.upserts, entity_ids)
        _insert_edges(conn, plan.upserts)
    for entity in plan.acl_only:
        conn.execute(
            "UPDATE entities SET acl_set = %s, content_hash = %s, publish = %s WHERE uid = %s",
            (acl_set_id(conn, entity.acl), entity.content_hash, plan.publish, entity.uid),
        )
    conn.execute(*plan_row(POSTGRES, plan, kind))
    write_values(conn, POSTGRES, plan)  # the declared facets' values
    record_source(conn, POSTGRES, source, Published.of(plan))
    return plan


def replace_embeddings(
    conn: Connection,
    ids: Sequence[int],
    vectors: np.ndarray,
    meta: Mapping[str, str],
    *,
    base_root: str,
) -> Published:
    """Every chunk's embedding and the model ``meta``, as one publish (kind ``reembed``).

    Inside the caller's write transaction; refused if the store moved on from
    ``base_root`` or ``ids`` are not all its chunks.
    """
    publish, parent = latest_publish(conn)
    row = conn.execute("SELECT count(*) FROM chunks").fetchone()
    if parent != base_root or row is None or int(row[0]) != len(ids):
        raise StoreError(
            "the store changed while it was being re-embedded; nothing was replaced —"
            " run it again (the vectors made so far are cached)"
        )
    publish += 1
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
    for key, value in meta.items():
        conn.execute(
            "INSERT INTO meta (key, value) VALUES (%s, %s)"
            " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )
    root = content_root_of(parent, {})
    conn.execute(*publish_row(POSTGRES, publish, root, parent, "reembed"))
    return Published(publish, root)
