"""``ks check`` on the PostgreSQL engine: the catalog, then what is derived from it in SQL.

On one ``REPEATABLE READ`` snapshot:

* the shared catalog checks (:func:`knowledge_store.engines.sql.check.check_catalog`):
  every content hash recomputed from the stored fields, edges and ACL — a body changed
  by an ``UPDATE`` behind the store's back is found here —, chunks against bodies, orphans;
* every chunk's vector: of the store's dimension, not zero;
* the full-text vectors: every chunk's ``tsv`` against what its title, heading path and
  text give (``ks_tsv(ks_context(…))``, the function the publish wrote it with);
* the BM25 statistics: postings of chunks that are gone, chunks with words but no
  postings, each field's document count against the chunks, each entity's chunk count;
* the database's own: indexes left invalid (a failed ``CREATE INDEX CONCURRENTLY``), and
  with the ``amcheck`` extension installed, every b-tree index of the store checked
  (``bt_index_check``); without it, a note says so. pgvector's HNSW index has no checker.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from knowledge_store.engines.postgres.db import Connection, translate
from knowledge_store.engines.sql.check import Findings, check_catalog
from knowledge_store.engines.sql.dialect import POSTGRES
from knowledge_store.engines.sql.publish import EMPTY_ROOT
from knowledge_store.model import CheckReport

if TYPE_CHECKING:
    from knowledge_store.engines.postgres.engine import PostgresEngine

__all__ = ["INVALID_INDEXES", "check_store"]

#: The store's indexes left invalid (a ``CREATE INDEX CONCURRENTLY`` or a reindex that failed).
INVALID_INDEXES = (
    "SELECT c.relname FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid"
    " JOIN pg_namespace AS n ON n.oid = c.relnamespace"
    " WHERE n.nspname = %s AND NOT (i.indisvalid AND i.indisready) ORDER BY c.relname"
)

_SNAPSHOT_ROOT = "SELECT coalesce((SELECT root FROM publishes ORDER BY id DESC LIMIT 1), %s)"


def check_store(engine: PostgresEngine) -> CheckReport:
    """Check the store of ``engine`` (see the module docstring)."""
    found = Findings()
    model = engine.writer.model()
    with engine.db.read() as conn, translate("checking the store"):

        def run(statement: str, params: Mapping[str, Any]) -> Sequence[Sequence[Any]]:
            return conn.execute(statement, params).fetchall()

        row = conn.execute(_SNAPSHOT_ROOT, (EMPTY_ROOT,)).fetchone()
        root = str(row[0]) if row else EMPTY_ROOT
        if conn.execute("SELECT 1 FROM meta WHERE key = 'needs_rebuild'").fetchone():
            found.notes.append("the store needs `ks rebuild` after a migration (see stats)")
        check_catalog(run, POSTGRES, found)
        if model is not None:
            _vectors(run, model[1], found)
        _text_index(run, found)
        _bm25(run, found)
        _indexes(conn, engine.db.schema, found)
    return found.report(root, engine.name)


def _vectors(run: Any, dimension: int, found: Findings) -> None:
    bad = run(
        "SELECT e.uid, count(*) FROM chunks AS c JOIN entities AS e ON e.id = c.entity"
        " WHERE vector_dims(c.embedding) <> %(dim)s OR vector_norm(c.embedding) = 0"
        " GROUP BY e.uid",
        {"dim": dimension},
    )
    found.checked["vectors"] = found.checked.get("chunks", 0)
    if bad:
        found.add("vectors", (str(u) for u, _ in bad), count=sum(int(n) for _, n in bad))


def _text_index(run: Any, found: Findings) -> None:
    stale = run(
        "SELECT e.uid, count(*) FROM chunks AS c JOIN entities AS e ON e.id = c.entity"
        " WHERE c.tsv IS DISTINCT FROM ks_tsv(ks_context(e.title, c.heading, c.text))"
        " GROUP BY e.uid",
        {},
    )
    found.checked["text_vectors"] = found.checked.get("chunks", 0)
    if stale:
        found.add("text_index", (str(u) for u, _ in stale), count=sum(int(n) for _, n in stale))


def _bm25(run: Any, found: Findings) -> None:
    details: list[str] = []
    uids: set[str] = set()
    count = 0
    ((gone,),) = run(
        "SELECT count(*) FROM (SELECT DISTINCT chunk FROM lexical_postings"
        " EXCEPT SELECT id FROM chunks) AS gone",
        {},
    )
    if int(gone):
        details.append(f"postings of {int(gone)} chunks that are gone")
        count += int(gone)
    bare = run(
        "SELECT e.uid, count(*) FROM chunks AS c JOIN entities AS e ON e.id = c.entity"
        " WHERE length(c.tsv) > 0"
        " AND NOT EXISTS (SELECT 1 FROM lexical_postings AS p WHERE p.chunk = c.id)"
        " GROUP BY e.uid",
        {},
    )
    if bare:
        n = sum(int(k) for _, k in bare)
        details.append(f"{n} chunks with words but no postings")
        uids |= {str(u) for u, _ in bare}
        count += n
    ((chunks,),) = run("SELECT count(*) FROM chunks", {})
    for field, docs in run("SELECT field, docs FROM lexical_fields ORDER BY field", {}):
        if int(docs) != int(chunks):
            details.append(f"field {field} counts {docs} documents; there are {chunks} chunks")
            count += 1
    miscounted = run(
        "SELECT e.uid FROM entities AS e"
        " WHERE e.chunk_count <> (SELECT count(*) FROM chunks AS c WHERE c.entity = e.id)",
        {},
    )
    if miscounted:
        details.append(f"{len(miscounted)} entities with a wrong chunk count")
        uids |= {str(u) for (u,) in miscounted}
        count += len(miscounted)
    if details:
        found.add("bm25_statistics", uids, count=count, details=details)


def _indexes(conn: Connection, schema: str, found: Findings) -> None:
    """Invalid indexes; with amcheck installed, every b-tree index of the store checked."""
    invalid = conn.execute(INVALID_INDEXES, (schema,)).fetchall()
    if invalid:
        names = [f"index {name} is invalid (`ks rebuild` reindexes it)" for (name,) in invalid]
        found.add("catalog_integrity", count=len(names), details=names)
    installed = conn.execute(
        "SELECT n.nspname FROM pg_extension AS x JOIN pg_namespace AS n"
        " ON n.oid = x.extnamespace WHERE x.extname = 'amcheck'"
    ).fetchone()
    if installed is None:
        available = conn.execute(
            "SELECT 1 FROM pg_available_extensions WHERE name = 'amcheck'"
        ).fetchone()
        found.notes.append(
            "amcheck is not installed in this database: the b-tree indexes were not checked"
            + (" (`CREATE EXTENSION amcheck;` makes `ks check` check them)" if available else "")
        )
        return
    btrees = conn.execute(
        "SELECT c.oid, c.relname FROM pg_class AS c JOIN pg_namespace AS n"
        " ON n.oid = c.relnamespace JOIN pg_am AS a ON a.oid = c.relam"
        " WHERE n.nspname = %s AND c.relkind = 'i' AND a.amname = 'btree' ORDER BY c.relname",
        (schema,),
    ).fetchall()
    problems: list[str] = []
    for oid, name in btrees:
        conn.execute("SAVEPOINT ks_check")
        try:
            check = sql.SQL("SELECT {}.bt_index_check(%s::oid::regclass)").format(
                sql.Identifier(installed[0])
            )
            conn.execute(check, (oid,)).fetchall()
        except psycopg.Error as exc:
            conn.execute("ROLLBACK TO SAVEPOINT ks_check")
            problems.append(f"index {name}: {str(exc).strip().splitlines()[0]}")
        else:
            conn.execute("RELEASE SAVEPOINT ks_check")
    found.checked["btree_indexes"] = len(btrees)
    if problems:
        found.add("catalog_integrity", count=len(problems), details=problems)
