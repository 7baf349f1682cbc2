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
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import numpy as np
from psycopg import sql

from knowledge_store.engines.base import EngineSettings, PreparedEntity, Published, Vector
from knowledge_store.engines.components import Components
from knowledge_store.engines.embedded.analysis import Analyzers
from knowledge_store.engines.postgres import components as _components  # noqa: F401  (registers)
from knowledge_store.engines.postgres import fuzzy as _fuzzy  # noqa: F401  (registers)
from knowledge_store.engines.postgres import lexical as lexical_sql
from knowledge_store.engines.postgres import publish as writes
from knowledge_store.engines.postgres.check import INVALID_INDEXES, check_store
from knowledge_store.engines.postgres.cursors import CursorTable
from knowledge_store.engines.postgres.db import Connection, Database, _redacted, translate
from knowledge_store.engines.postgres.migrate import open_schema
from knowledge_store.engines.postgres.reader import PostgresReader
from knowledge_store.engines.postgres.schema import (
    MIGRATIONS,
    SCHEMA_VERSION,
    Features,
    Migration,
    vector_ddl,
)
from knowledge_store.engines.shared import (
    CHUNK_KEY_META,
    ChunkIds,
    check_own_directory,
    check_prepared,
    check_store_directory,
    check_vectors,
    deletion,
    no_store,
)
from knowledge_store.engines.sql.acl import AclAdministration, derived_from
from knowledge_store.engines.sql.batch import BatchScope
from knowledge_store.engines.sql.dialect import POSTGRES
from knowledge_store.engines.sql.export import Snapshot
from knowledge_store.engines.sql.publish import EMPTY_ROOT
from knowledge_store.engines.sql.sources import (
    SourceSync,
    read_crawl_pages,
    read_sources,
    read_uid_prefix,
    write_crawl_pages,
)
from knowledge_store.errors import (
    InvalidRequest,
    ModelMismatch,
    NotFound,
    StoreError,
)
from knowledge_store.model import (
    EVERYONE,
    QUERY_GRAPH_TIME_LIMIT_S,
    CheckReport,
    Entity,
    Filters,
    Identity,
    SourceSummary,
    StoreStats,
    compose_context,
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


class _AclCatalog:
    """The PostgreSQL catalog as ACL administration needs it (``sql.acl.Catalog``): a write
    transaction holds the store's advisory lock; a grant or revoke is planned and written
    in that same transaction (the ACL is a join in every statement: no index to update)."""

    dialect = POSTGRES

    def __init__(self, db: Database) -> None:
        self._db = db

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        with self._db.read() as conn, translate("reading the ACLs"):
            yield conn

    @contextmanager
    def writing(self) -> Iterator[Connection]:
        with self._db.write() as conn, translate("changing memberships"):
            yield conn

    def publish_acl(self, change: str, decide: Callable[[Connection], list[Entity]]) -> str:
        with self._db.write() as conn, translate(change):
            changed = decide(conn)
            if not changed:
                return writes.latest_publish(conn)[1]
            plan = writes.apply_publish(conn, [], [], kind=change, acl_only=changed)
        return Published.of(plan).root


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
        self._admin = AclAdministration(_AclCatalog(self.db))
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

    @property
    def writer(self) -> PostgresEngine:
        return self

    @property
    def admin(self) -> AclAdministration:
        return self._admin

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

    def model(self) -> tuple[str, int] | None:
        # Read every time (one small statement): another process may re-embed the store.
        with translate("reading the model"):
            rows = dict(
                self.db.conn()
                .execute("SELECT key, value FROM meta WHERE key IN ('model', 'dimension')")
                .fetchall()
            )
        if "model" not in rows or "dimension" not in rows:
            return None
        return str(rows["model"]), int(rows["dimension"])

    def model_spec(self) -> str | None:
        with translate("reading the model"):
            return self._meta(self.db.conn(), "embedder")

    def set_model(self, model_id: str, dimension: int, spec: str) -> None:
        current = self.model()
        if current is None:
            with self.db.write() as conn, translate("recording the model"):
                model, dim = self._meta(conn, "model"), self._meta(conn, "dimension")
                if model is None or dim is None:
                    for key, value in (
                        ("model", model_id),
                        ("dimension", str(dimension)),
                        ("embedder", spec),
                    ):
                        conn.execute(
                            "INSERT INTO meta (key, value) VALUES (%s, %s)"
                            " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                            (key, value),
                        )
                    for statement in vector_ddl(dimension):
                        conn.execute(statement)
                    return
            current = self.model()
        if current is not None and current != (model_id, dimension):
            raise ModelMismatch(
                f"this store was built with {current[0]} ({current[1]} dimensions);"
                f" it cannot mix in {model_id} ({dimension} dimensions). Use the store's"
                " model, or ingest into a new store",
                store_model=current[0],
                store_dimension=current[1],
                model=model_id,
                dimension=dimension,
            )

    def chunk_contexts(self, after: int, limit: int) -> list[tuple[int, str]]:
        with translate("reading chunks"):
            rows = (
                self.db.conn()
                .execute(
                    "SELECT c.id, e.title, c.heading, c.text FROM chunks AS c"
                    " JOIN entities AS e ON e.id = c.entity WHERE c.id > %s ORDER BY c.id LIMIT %s",
                    (after, limit),
                )
                .fetchall()
            )
        return [(int(r[0]), compose_context(r[1], r[2], r[3])) for r in rows]

    def replace_embeddings(
        self,
        ids: Sequence[int],
        vectors: Vector,
        *,
        model_id: str,
        dimension: int,
        spec: str,
        base_root: str,
    ) -> str:
        check_vectors("the re-embedding", vectors, len(ids), dimension)
        meta = {"model": model_id, "dimension": str(dimension), "embedder": spec}
        with self.db.write() as conn, translate("re-embedding"):
            result = writes.replace_embeddings(conn, ids, vectors, meta, base_root=base_root)
        with translate("vacuuming after the re-embedding"):
            # Every vector was replaced: the old row versions stay in pgvector's HNSW graph,
            # where a search still walks them (and spends ef on them) until a vacuum removes
            # them. Measured on postgres-docs: vector nDCG@10 0.7288 → 0.7349 and R@100
            # 0.9564 → 0.9673 once vacuumed (docs/embedding.md).
            self.db.conn().execute("VACUUM ANALYZE chunks")
        return result.root

    def content_root(self) -> str:
        with translate("reading the content root"):
            row = (
                self.db.conn()
                .execute("SELECT root FROM publishes ORDER BY id DESC LIMIT 1")
                .fetchone()
            )
        return EMPTY_ROOT if row is None else str(row[0])

    def content_hashes(self, uids: Sequence[str]) -> dict[str, str]:
        with translate("reading content hashes"):
            rows = (
                self.db.conn()
                .execute(
                    "SELECT uid, content_hash FROM entities WHERE uid = ANY(%s::text[])",
                    (list(uids),),
                )
                .fetchall()
            )
        return {str(u): str(h) for u, h in rows}

    def cached_embeddings(self, keys: Sequence[str]) -> dict[str, Vector]:
        with translate("reading the embedding cache"):
            rows = (
                self.db.conn()
                .execute(
                    "SELECT key, vector FROM embedding_cache WHERE key = ANY(%s::text[])",
                    (list(keys),),
                )
                .fetchall()
            )
        return {str(k): np.frombuffer(bytes(v), dtype=np.float32) for k, v in rows}

    def cache_embeddings(self, items: Mapping[str, Vector]) -> None:
        if not items:
            return
        keys = list(items)
        blobs = [np.asarray(items[k], dtype=np.float32).tobytes() for k in keys]
        with translate("writing the embedding cache"):
            self.db.conn().execute(
                "INSERT INTO embedding_cache (key, vector)"
                " SELECT * FROM unnest(%s::text[], %s::bytea[]) ON CONFLICT (key) DO NOTHING",
                (keys, blobs),
            )

    def publish(
        self,
        upserts: Sequence[PreparedEntity],
        deletes: Sequence[str],
        *,
        kind: str,
        model: str | None = None,
        source: SourceSync | None = None,
        scope: BatchScope | None = None,
    ) -> Published:
        recorded_model = self.model()
        check_prepared(upserts, None if recorded_model is None else recorded_model[1])
        with self.db.write() as conn, translate("publishing"):
            recorded = self._meta(conn, "model")
            if model is not None and recorded is not None and recorded != model:
                raise ModelMismatch(
                    f"this store's vectors are now {recorded}, not {model} (it was re-embedded"
                    " meanwhile); nothing was published — ingest again",
                    store_model=recorded,
                    model=model,
                )
            plan = writes.apply_publish(
                conn, upserts, deletes, kind=kind, source=source, scope=scope
            )
        self._after_write(sum(len(p.chunks) for p in upserts) + plan.deleted)
        return Published.of(plan)

    # -- sources and crawl state (engines.sql.sources) ----------------------------------------------
    def sources(self) -> list[SourceSummary]:
        with self.db.read() as conn, translate("reading the sources"):
            return read_sources(conn, POSTGRES)

    def delete_source(self, name: str) -> Published:
        return self.publish([], [], kind="delete", source=SourceSync.removal(name))

    def crawl_pages(self, source: str) -> dict[str, str]:
        with self.db.read() as conn, translate("reading the crawl state"):
            return read_crawl_pages(conn, POSTGRES, source)

    def source_uid_prefix(self, name: str) -> str | None:
        with self.db.read() as conn, translate("reading the source"):
            return read_uid_prefix(conn, POSTGRES, name)

    def save_crawl_pages(self, source: str, pages: Mapping[str, str | None]) -> None:
        with self.db.write() as conn, translate("saving the crawl state"):
            write_crawl_pages(conn, POSTGRES, source, pages)

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

    def delete(self, uids: Sequence[str]) -> Published:
        stored = self.content_hashes(list(uids))
        with self.db.read() as conn, translate("reading what the entities split off"):
            doomed = deletion(uids, stored, lambda uid: derived_from(conn, POSTGRES, uid))
        return self.publish([], doomed, kind="delete")

    def is_empty(self) -> bool:
        with translate("reading"):
            row = self.db.conn().execute("SELECT EXISTS (SELECT 1 FROM chunks)").fetchone()
        return not (row and row[0])

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
        model = self.model()
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
            for statement in writes.REBUILD_LEXICAL:
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

    def close(self) -> None:
        self.db.close()
