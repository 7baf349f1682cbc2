"""The PostgreSQL engine: the whole store in one database (pgvector, tsvector, SQL BM25).

``PostgresEngine(url)`` opens (creating or migrating) the store in schema
``ks`` of the database at ``url``; ``PostgresEngine.open("pg:DIR")`` first
starts a local server with pgserver. Every primitive is one parameterised
statement (psycopg 3, server-side binding) that begins with identity
expansion (a recursive CTE over memberships) and the visible ACL sets, then
ranks only what those allow; each read is one ``REPEATABLE READ`` snapshot,
so the content root an answer reports is the one its rows come from. Writes
are serialised by an advisory lock and never block readers (MVCC).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from psycopg import sql

from knowledge_store.engines.base import EngineSettings, Published
from knowledge_store.engines.components import Components
from knowledge_store.engines.embedded.analysis import Analyzers
from knowledge_store.engines.postgres import components as _components  # noqa: F401  (registers)
from knowledge_store.engines.postgres import fuzzy as _fuzzy  # noqa: F401  (registers)
from knowledge_store.engines.postgres import lexical as lexical_sql
from knowledge_store.engines.postgres.audit import AuditTables
from knowledge_store.engines.postgres.check import INVALID_INDEXES, check_store
from knowledge_store.engines.postgres.cursors import CursorTable
from knowledge_store.engines.postgres.db import Connection, Database, _redacted, translate
from knowledge_store.engines.postgres.migrate import open_schema
from knowledge_store.engines.postgres.publish import (
    REBUILD_LEXICAL,
    PostgresChunks,
    chunk_vector_bytes,
)
from knowledge_store.engines.postgres.reader import PostgresReader
from knowledge_store.engines.postgres.replica import PostgresReplica
from knowledge_store.engines.postgres.schema import (
    MIGRATIONS,
    SCHEMA_VERSION,
    Features,
    Migration,
)
from knowledge_store.engines.shared import (
    CHUNK_KEY_META,
    ChunkIds,
    check_own_directory,
    check_store_directory,
    no_store,
)
from knowledge_store.engines.sql.acl import AclAdministration
from knowledge_store.engines.sql.audit import AuditStorage
from knowledge_store.engines.sql.dialect import POSTGRES
from knowledge_store.engines.sql.export import Snapshot
from knowledge_store.engines.sql.history import History, prune
from knowledge_store.engines.sql.publish import EMPTY_ROOT
from knowledge_store.engines.sql.write import Batch, Reembedding, publish_batch, reembed
from knowledge_store.engines.sql.writer import CatalogWriter
from knowledge_store.errors import (
    InvalidRequest,
    NotFound,
    StoreError,
)
from knowledge_store.model import (
    EVERYONE,
    QUERY_GRAPH_TIME_LIMIT_S,
    CheckReport,
    Filters,
    Identity,
    StoreStats,
)

__all__ = ["DEFAULT_SCHEMA", "PostgresEngine", "open_store", "split_location"]

DEFAULT_SCHEMA = "ks"
#: ANALYZE after a publish that changed at least this many chunks (fresh planner statistics).
_ANALYZE_AFTER = 2_000
_PLAN_CACHE = 256

_SNAPSHOT = (
    "SELECT coalesce((SELECT id FROM publishes ORDER BY id DESC LIMIT 1), 0),"
    " coalesce((SELECT root FROM publishes ORDER BY id DESC LIMIT 1), %s),"
    " (SELECT value FROM meta WHERE key = 'membership_version'),"
    " (SELECT value FROM meta WHERE key = 'needs_rebuild')"
)


def open_store(location: str, settings: EngineSettings, create: bool) -> PostgresEngine:
    """The engine registry's opener (``engines.registry``): ``pg:DIR`` or a URL."""
    return PostgresEngine.open(
        location,
        create=create,
        keep_server=settings.keep_server,
        lexical_ranker=settings.lexical_ranker,
        graph_time_limit_s=settings.graph_time_limit_s,
    )


def split_location(text: str) -> tuple[str, str | None]:
    """``postgresql://…?schema=s&…`` → (the URL without ``schema``, ``s``)."""
    parts = urlsplit(text)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schemas = [v for k, v in query if k == "schema"]
    if not schemas:
        return text, None
    rest = urlencode([(k, v) for k, v in query if k != "schema"], safe="/")
    return urlunsplit(parts._replace(query=rest)), schemas[-1]


def _with_schema(url: str, schema: str) -> str:
    parts = urlsplit(url)
    query = [*parse_qsl(parts.query, keep_blank_values=True), ("schema", schema)]
    return urlunsplit(parts._replace(query=urlencode(query, safe="/")))


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


class PostgresEngine:
    """The production engine. ``PostgresEngine(url)`` opens or creates the store."""

    name = "postgres"
    #: BM25 statistics kept exact in the publish transaction (engines/postgres/publish.py).
    exact_lexical_statistics = True

    def __init__(
        self,
        url: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        lexical_ranker: str | None = None,
        migrations: Sequence[Migration] = MIGRATIONS,
        create: bool = True,
        graph_time_limit_s: float = QUERY_GRAPH_TIME_LIMIT_S,
    ) -> None:
        self.url = url
        #: query_graph's wall-clock bound, ``statement_timeout`` (EngineSettings).
        self.graph_time_limit_s = graph_time_limit_s
        #: How to open this store again (``ks --store``); ``open`` sets what it was given.
        self.path = url if schema == DEFAULT_SCHEMA else _with_schema(url, schema)
        self.db = Database(url, schema)
        if not create and not self._exists():
            raise no_store(_redacted(self.path))
        self.features = self._open(migrations)
        self.lexical_ranker = (
            lexical_ranker or self.features.bm25_extension or lexical_sql.DEFAULT_RANKER
        )
        if self.lexical_ranker not in lexical_sql.LEXICAL_RANKERS:
            lexical_sql.lexical_statement(self.lexical_ranker, [EVERYONE], "", 1, Filters())
        self._plans: OrderedDict[tuple[Any, ...], tuple[int, int]] = OrderedDict()
        self._plans_lock = threading.Lock()
        self._changed_since_analyze = 0
        self.chunk_ids = self._chunk_ids()
        #: Where paged reads keep their rankings (``engines/cursors.py``).
        self.cursors = CursorTable(self.db, self.chunk_ids.derived_key("cursors"))
        #: ACL administration and the store's writer: the shared ones, over this engine.
        self.admin = AclAdministration(self)
        self.writer = CatalogWriter(self)
        #: The audit log (:mod:`.audit`: tables in the store's schema).
        self.audit = AuditStorage(AuditTables(self.db))
        #: The index components by list (``engines.components``; registered by .components, .fuzzy).
        self.components = Components(self.name, self)
        #: How the lexical statements read text: the reference analysis they mirror in SQL
        #: (schema.py; tests/conformance/test_postgres_analysis.py holds them together).
        self.text_analysis = Analyzers()

    @classmethod
    def open(
        cls,
        location: str | Path,
        *,
        create: bool = True,
        keep_server: bool = False,
        **kwargs: Any,
    ) -> PostgresEngine:
        """``postgresql://…`` / ``postgres://…``, or ``pg:DIR`` (a local pgserver instance;
        ``keep_server`` leaves it running after this process exits).

        A ``schema=NAME`` query parameter of a URL names the schema the store lives
        in (default ``ks``), so one database can hold several stores. ``create=False``:
        only a store that exists (else NotFound; no server is started in a new DIR).
        """
        text = str(location)
        if text.startswith("pg:"):
            from knowledge_store.engines.postgres.server import local_server_url

            directory = text[3:]
            if not directory:
                raise InvalidRequest("pg: needs a directory, e.g. pg:./.ks-pg", store=text)
            root = Path(directory).expanduser()
            check_store_directory(root, text)
            if not (root / "pgdata").is_dir():
                if not create:
                    raise no_store(text)
                check_own_directory(root, text, lambda name: name == "pgdata")
            try:
                engine = cls(
                    local_server_url(directory, keep_running=keep_server), create=create, **kwargs
                )
            except NotFound as exc:
                raise no_store(text) from exc
        else:
            url, schema = split_location(text)
            if schema is not None:
                kwargs.setdefault("schema", schema)
            engine = cls(url, create=create, **kwargs)
        engine.path = text
        return engine

    # -- the engine protocol ---------------------------------------------------------------------------
    @contextmanager
    def reader(self, identity: Identity) -> Iterator[PostgresReader]:
        """A point-in-time reader: one REPEATABLE READ transaction on a connection of its own."""
        conn = self.db.borrow()
        try:
            with translate("opening a reader"):
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                publish, root, _ = self._snapshot(conn)
            yield PostgresReader(self, conn, identity, publish, root)
        finally:
            self.db.give(conn)

    @contextmanager
    def snapshot(self) -> Iterator[Snapshot]:
        """One ``REPEATABLE READ`` transaction, for reading the whole store back (``ks export``)."""
        conn = self.db.borrow()
        try:
            with translate("opening a snapshot"):
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                publish, root, _ = self._snapshot(conn)

            def run(statement: str, params: Mapping[str, Any]) -> Sequence[Sequence[Any]]:
                with translate("reading the store"):
                    return conn.execute(statement, params).fetchall()

            yield Snapshot(run, POSTGRES, publish, root)
        finally:
            self.db.give(conn)

    # -- what the shared write path needs (engines.base.Writer) -------------------------------
    dialect = POSTGRES
    #: What a publish writes of chunks (``engines.sql.write``).
    chunk_store = PostgresChunks()

    @contextmanager
    def connection(self) -> Iterator[Connection]:
        with translate("reading"):
            yield self.db.conn()

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        with self.db.read() as conn, translate("reading"):
            yield conn

    @contextmanager
    def writing(self) -> Iterator[Connection]:
        with self.db.write() as conn, translate("writing"):
            yield conn

    def visible_counts(self, key: tuple[Any, ...]) -> tuple[int, int] | None:
        """Visible and total chunks of the vector planner, cached per (publish, held, FILTERS)."""
        with self._plans_lock:
            if key in self._plans:
                self._plans.move_to_end(key)
                return self._plans[key]
        return None

    def remember_counts(self, key: tuple[Any, ...], counts: tuple[int, int]) -> None:
        with self._plans_lock:
            self._plans[key] = counts
            while len(self._plans) > _PLAN_CACHE:
                self._plans.popitem(last=False)

    # -- opening ---------------------------------------------------------------------------------------
    def _exists(self) -> bool:
        """Whether the store's schema has been made (its ``meta`` records a version)."""
        conn = self.db.connect(register=False)
        try:
            with translate("looking for the store"):
                found = conn.execute(
                    "SELECT to_regclass(format('%%I.meta', %s::text)) IS NOT NULL",
                    (self.db.schema,),
                ).fetchone()
                if not (found and found[0]):
                    return False
                version = conn.execute(
                    sql.SQL("SELECT 1 FROM {}.meta WHERE key = 'schema_version'").format(
                        sql.Identifier(self.db.schema)
                    )
                ).fetchone()
            return version is not None
        finally:
            conn.close()

    def _open(self, migrations: Sequence[Migration]) -> Features:
        """pgvector, the schema, migrations (under an advisory lock); the search path."""
        conn = self.db.connect(register=False)
        try:
            path, features = open_schema(
                conn, self.db.schema, migrations, lexical_sql.EXTENSION_INDEX
            )
        finally:
            conn.close()
        self.db.search_path = path
        return features

    def _chunk_ids(self) -> ChunkIds:
        """The store's public chunk ids (its secret made on first open)."""
        with self.db.write() as conn, translate("reading the chunk id key"):
            conn.execute(
                "INSERT INTO meta (key, value) VALUES (%s, %s) ON CONFLICT (key) DO NOTHING",
                (CHUNK_KEY_META, ChunkIds.new_key()),
            )
            key = self._meta(conn, CHUNK_KEY_META)
        assert key is not None
        return ChunkIds(key)

    # -- snapshot helpers ---------------------------------------------------------------------------
    def _snapshot(self, conn: Connection) -> tuple[int, str, str | None]:
        row = conn.execute(_SNAPSHOT, (EMPTY_ROOT,)).fetchone()
        assert row is not None
        if row[3] is not None:
            raise StoreError(
                f"this store was migrated to schema version {row[3]}, which changed how it"
                f" indexes text; run `ks --store {self._shown_location()} rebuild` once",
                needs_rebuild=True,
            )
        return int(row[0]), str(row[1]), row[2]

    def _shown_location(self) -> str:
        from knowledge_store.engines.postgres.db import _redacted

        return _redacted(self.url)

    # -- model and content ---------------------------------------------------------------------------
    def _meta(self, conn: Connection, key: str) -> str | None:
        row = conn.execute("SELECT value FROM meta WHERE key = %s", (key,)).fetchone()
        return None if row is None else str(row[0])

    def replace_embeddings(self, job: Reembedding) -> str:
        with self.db.write() as conn, translate("re-embedding"):
            _, root = reembed(conn, POSTGRES, self.chunk_store, job)
        with translate("vacuuming after the re-embedding"):
            # Every vector was replaced: the old row versions stay in pgvector's HNSW graph,
            # where a search still walks them (and spends ef on them) until a vacuum removes
            # them. Measured on postgres-docs: vector nDCG@10 0.7288 → 0.7349 and R@100
            # 0.9564 → 0.9673 once vacuumed (docs/embedding.md).
            self.db.conn().execute("VACUUM ANALYZE chunks")
        return root

    def publish(self, batch: Batch) -> Published:
        """One publish (``engines.base.Writer.publish``): ``engines.sql.write.publish_batch``
        in one write transaction; the planner's statistics refreshed after big ones."""
        with self.db.write() as conn, translate("publishing"):
            plan = publish_batch(conn, POSTGRES, self.chunk_store, batch)
        self._after_write(sum(len(p.chunks) for p in batch.upserts) + plan.deleted)
        return Published.of(plan)

    def _after_write(self, changed: int) -> None:
        """Fresh planner statistics after big changes (autovacuum would, a minute later)."""
        self._changed_since_analyze += changed
        if self._changed_since_analyze < _ANALYZE_AFTER:
            return
        self._changed_since_analyze = 0
        with translate("analyzing"):
            self.db.conn().execute(
                "ANALYZE entities, chunks, edges, lexical_postings, lexical_terms, acl_set_principals"
            )

    def stats(self) -> StoreStats:
        with self.db.read() as conn, translate("reading statistics"):
            row = conn.execute(_SNAPSHOT, (EMPTY_ROOT,)).fetchone()
            assert row is not None
            counts = conn.execute(
                "SELECT (SELECT count(*) FROM entities), (SELECT count(*) FROM chunks)"
            ).fetchone()
            assert counts is not None
            edges = {
                str(label): int(n)
                for label, n in conn.execute(
                    "SELECT label, count(*) FROM edges GROUP BY label ORDER BY label"
                )
            }
            server = conn.execute("SHOW server_version").fetchone()
        model = self.writer.model()
        chunks = int(counts[1])
        return StoreStats(
            content_root=str(row[1]),
            entities=int(counts[0]),
            chunks=chunks,
            edges=edges,
            segments=0,
            model=model[0] if model else None,
            dimension=model[1] if model else None,
            is_empty=chunks == 0,
            engine=self.name,
            url=self._shown_location(),
            schema=self.db.schema,
            schema_version=SCHEMA_VERSION,
            server_version=None if server is None else str(server[0]),
            lexical_ranker=self.lexical_ranker,
            needs_rebuild=row[3] is not None,
            **self.features.to_dict(),
        )

    def check(self) -> CheckReport:
        """The catalog verified and what SQL derives from it (``engines/postgres/check``)."""
        return check_store(self)

    def rebuild(self, *, progress: bool = False) -> None:
        """Recompute the tsvectors and BM25 statistics from the chunks; reindex (an index left
        invalid too, which ``REINDEX TABLE CONCURRENTLY`` skips); analyze."""
        with self.db.write() as conn, translate("rebuilding"):
            for statement in REBUILD_LEXICAL:
                conn.execute(statement)
            conn.execute("DELETE FROM meta WHERE key = 'needs_rebuild'")
        with translate("reindexing"):
            conn = self.db.conn()
            conn.execute("REINDEX TABLE CONCURRENTLY chunks")
            conn.execute("REINDEX TABLE CONCURRENTLY lexical_postings")
            for (invalid,) in conn.execute(INVALID_INDEXES, (self.db.schema,)).fetchall():
                index = sql.Identifier(self.db.schema, str(invalid))
                conn.execute(sql.SQL("REINDEX INDEX CONCURRENTLY {}").format(index))
            conn.execute("VACUUM ANALYZE entities, chunks, edges, lexical_postings, lexical_terms")
        with self._plans_lock:
            self._plans.clear()

    # -- history ---------------------------------------------------------------------------------
    def replica(self) -> PostgresReplica:
        """A new, empty replica of this store (``engines.base.Replica``)."""
        return PostgresReplica(self)

    @contextmanager
    def history(self) -> Iterator[History]:
        """The catalog's history on one read snapshot."""
        with self.db.read() as conn, translate("reading the history"):
            yield History(conn, POSTGRES, chunk_vector_bytes)

    def prune_history(
        self, before_publish: int, before: str, *, dry_run: bool = False
    ) -> dict[str, int]:
        with self.db.write() as conn, translate("removing old history"):
            return prune(conn, POSTGRES, before_publish, before, dry_run=dry_run)

    def close(self) -> None:
        self.db.close()
