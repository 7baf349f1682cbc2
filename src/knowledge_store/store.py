"""``KnowledgeStore``: the Python API over one engine (DESIGN §6).

Every CLI command, tool and endpoint calls one method of this class.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from knowledge_store.engines.base import (
    AclExplanation,
    Engine,
    PrincipalInfo,
    PublishResult,
    StoreStats,
)
from knowledge_store.engines.sources import SourceSync, SourceView
from knowledge_store.errors import InvalidRequest, ModelMismatch, NotFound
from knowledge_store.ingest.embedding import Embedder, embedder_for, open_embedder, spec_of
from knowledge_store.ingest.pipeline import ingest_entities
from knowledge_store.ingest.records import record_to_entity
from knowledge_store.model import (
    MAX_ACL_PRINCIPALS,
    AggregateAnswer,
    ChunkHits,
    Entity,
    Filters,
    GraphHits,
    Identity,
    IngestReport,
    QueryAnswer,
    SearchAnswer,
    SqlHits,
    check_list_bound,
    text_problem,
)
from knowledge_store.retrieval import search as fused
from knowledge_store.retrieval.filters import FiltersLike, coerce_filters
from knowledge_store.retrieval.retrievers import Retriever

__all__ = ["DEFAULT_STORE", "KnowledgeStore"]

if TYPE_CHECKING:
    from knowledge_store.ingest.loaders import LoadResult
    from knowledge_store.ingest.loaders.web import WebOptions
    from knowledge_store.ingest.watch import WatchSummary

DEFAULT_STORE = ".ks"
IdentityLike = Identity | str | None


#: The longest uid a lookup takes (stored uids are shorter: ``model.MAX_UID_CHARS``).
_MAX_LOOKUP_UID = 4096


def _uid(uid: object, field: str = "uid") -> str:
    """A uid to look up: text the engines can bind (a lone surrogate or NUL is not)."""
    if not isinstance(uid, str) or not uid or text_problem(uid, _MAX_LOOKUP_UID) is not None:
        raise InvalidRequest(
            f"a uid is a non-empty string of at most {_MAX_LOOKUP_UID} characters of Unicode"
            " text (no NUL, no lone surrogate)",
            field=field,
        )
    return uid


def _text(text: str) -> str:
    """A query text: any characters (NUL is matched literally) but lone surrogates, which
    are not text at all and no engine can bind."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequest(
            "the query text holds a lone surrogate (\\ud800–\\udfff), which is not Unicode"
            " text; send it as UTF-8",
            field="query",
        ) from None
    except AttributeError:
        pass  # not a string: the primitive says what it takes
    return text


def _identity(who: IdentityLike) -> Identity:
    if isinstance(who, Identity):
        return who
    return Identity(who or os.environ.get("KS_AS") or "everyone")


def open_engine(location: str | Path) -> Engine:
    """A directory → embedded; ``pg:DIR`` or ``postgresql://…`` → PostgreSQL."""
    text = str(location)
    if text.startswith(("postgresql://", "postgres://", "pg:")):
        from knowledge_store.engines.postgres.engine import PostgresEngine

        return PostgresEngine.open(text)
    from knowledge_store.engines.embedded.engine import EmbeddedEngine

    return EmbeddedEngine(Path(text))


def _check_sync(source: str | None, sync: bool) -> None:
    if sync and not source:
        raise InvalidRequest(
            "a sync replaces the content of one source: name it (source)", field="source"
        )


def _source_sync(loaded: LoadResult, source: str, sync: bool, allow_mass: bool) -> SourceSync:
    """The source an ingest names: what it read, and (for a sync) what is present in it —
    the records, what a crawl kept as stored, and records rejected this time (their
    stored version stays). A crawl cut short by its page bound deletes nothing."""
    kept = loaded.kept() | {r.uid for r in loaded.rejections if r.uid}
    return SourceSync(
        name=source,
        loader=",".join(sorted({info.loader for info in loaded.sources if info.loader})),
        locations=tuple(info.location for info in loaded.sources),
        sync=sync,
        present=frozenset(r.entity.uid for r in loaded.records),
        kept=frozenset(kept),
        delete_missing=not any(crawl.truncated for crawl in loaded.crawls),
        allow_mass_delete=allow_mass,
    )


class KnowledgeStore:
    """A knowledge store: ingest an estate, search it under the caller's identity."""

    def __init__(self, engine: Engine, *, embedder: str | Embedder | None = None) -> None:
        self.engine = engine
        self._embedder_arg = embedder
        self._embedder: Embedder | None = embedder if not isinstance(embedder, str | None) else None

    @classmethod
    def open(
        cls, location: str | Path | None = None, *, embedder: str | Embedder | None = None
    ) -> KnowledgeStore:
        """Open (or create) the store at ``location`` (default ``$KS_STORE``, else ``./.ks``).

        ``embedder`` (default ``$KS_EMBEDDER``): a spec or an :class:`Embedder`; without
        one, the store embeds with the model it records, and a new store with the default.
        """
        where = location or os.environ.get("KS_STORE") or DEFAULT_STORE
        return cls(open_engine(where), embedder=embedder or os.environ.get("KS_EMBEDDER") or None)

    def close(self) -> None:
        self.engine.close()

    def __enter__(self) -> KnowledgeStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- embedder ----------------------------------------------------------------------
    @property
    def embedder_spec(self) -> str:
        """The spec of the embedder this store embeds with (see :attr:`embedder`)."""
        return spec_of(self.embedder)

    @property
    def embedder(self) -> Embedder:
        """The store's embedder: the one given, else the fastest for the recorded model.

        Raises ``ModelMismatch`` when the given one makes other vectors than the
        store holds (``ks rebuild --reembed`` re-embeds the store in place).
        """
        recorded = self.engine.model()
        if self._embedder is None:
            if isinstance(self._embedder_arg, str):
                self._embedder = open_embedder(self._embedder_arg)
            elif recorded is None:
                self._embedder = open_embedder()
            else:
                self._embedder = embedder_for(recorded[0], self.engine.model_spec())
        if recorded is not None and recorded != (self._embedder.model_id, self._embedder.dimension):
            raise ModelMismatch(
                f"this store's vectors are {recorded[0]} ({recorded[1]} dimensions), not"
                f" {self._embedder.model_id} ({self._embedder.dimension}); open it with its"
                " model, or re-embed it in place: ks rebuild --reembed --embedder"
                f" {spec_of(self._embedder)}",
                store_model=recorded[0],
                model=self._embedder.model_id,
            )
        return self._embedder

    # -- ingest ------------------------------------------------------------------------------
    def ingest(
        self,
        paths: Sequence[str | Path],
        *,
        format: str | None = None,
        source: str | None = None,
        acl: Sequence[str] | None = None,
        skip_invalid: bool = False,
        progress: bool = False,
        sync: bool = False,
        allow_mass_delete: bool = False,
        web: WebOptions | None = None,
    ) -> IngestReport:
        """Load files, folders or web sites (``http(s)://`` strings) and publish them as one batch.

        With ``source``, the source's catalog row records this ingest (``sources()``).
        With ``sync`` (which needs ``source``), the batch is the whole source: what
        the source holds beyond it is deleted in the same publish; more than half of
        it only with ``allow_mass_delete`` (else ``MassDeleteRefused``). A crawl's
        state is kept in the store, per source, and saved once the publish is done.
        """
        from knowledge_store.ingest.loaders import load_paths

        check_list_bound("acl", acl or (), MAX_ACL_PRINCIPALS, name="the default ACL")
        _check_sync(source, sync)
        web, states = self._crawl_state(paths, source, web)
        loaded = load_paths(paths, format=format, source=source, default_acl=acl or None, web=web)
        report = ingest_entities(
            self.engine,
            self.embedder,
            self.embedder_spec,
            [r.entity for r in loaded.records],
            rejected=loaded.rejections,
            skipped=loaded.skipped,
            skip_invalid=skip_invalid,
            progress=progress,
            source=None
            if source is None
            else _source_sync(loaded, source, sync, allow_mass_delete),
        )
        for crawl in loaded.crawls:
            if crawl.source in states:
                self.engine.save_crawl_pages(
                    crawl.source,
                    {
                        url: None if page is None else json.dumps(page.to_dict())
                        for url, page in crawl.updates.items()
                    },
                )
        if not loaded.crawls:
            return report
        return dataclasses.replace(report, crawls=[crawl.to_dict() for crawl in loaded.crawls])

    def _crawl_state(
        self, paths: Sequence[str | Path], source: str | None, web: WebOptions | None
    ) -> tuple[WebOptions | None, set[str]]:
        """The crawl options, with the state the store keeps for each site's source loaded
        (unless the caller brings its own state); the sources whose state the store keeps."""
        from knowledge_store.ingest.crawl_state import MemoryCrawlState, PageState
        from knowledge_store.ingest.loaders import is_url
        from knowledge_store.ingest.loaders.web import WebOptions, site_source

        urls = [str(p) for p in paths if isinstance(p, str) and is_url(p)]
        if not urls or (web is not None and web.state is not None):
            return web, set()
        state = MemoryCrawlState()
        names = {source or site_source(url) for url in urls}
        for name in names:
            for url, text in self.engine.crawl_pages(name).items():
                state.put(name, url, PageState.from_dict(json.loads(text)))
        return dataclasses.replace(web or WebOptions(), state=state), names

    def sources(self) -> list[SourceView]:
        """Every source: entities and chunks it holds, and its last ingest (an admin view:
        the counts are of all its entities, whatever their ACL)."""
        return self.engine.sources()

    def delete_source(self, name: str) -> PublishResult:
        """Delete every entity of source ``name`` (its row and crawl state too) as one publish."""
        if not any(view.name == name for view in self.engine.sources()):
            raise NotFound(f"no source named {name!r}", source=name)
        return self.engine.delete_source(name)

    def watch(
        self,
        paths: Sequence[str | Path],
        *,
        source: str,
        format: str | None = None,
        acl: Sequence[str] | None = None,
        allow_mass_delete: bool = False,
        on_sync: Callable[[list[Path], IngestReport], None] | None = None,
        on_error: Callable[[list[Path], Exception], None] | None = None,
        stop: threading.Event | None = None,
        quiet_ms: int = 300,
        max_wait_ms: int = 10_000,
        force_polling: bool | None = None,
    ) -> WatchSummary[IngestReport]:
        """Sync ``paths`` into ``source`` now, then again after each burst of file changes.

        Each sync is one publish; a bad file is rejected (and its stored version
        kept) while the rest publishes; an error is handed to ``on_error`` and the
        watch goes on, until Ctrl-C or ``stop``.
        """
        from knowledge_store.ingest.loaders import EXTENSIONS, check_format, is_url
        from knowledge_store.ingest.watch import watch

        check_format(format)
        if any(isinstance(p, str) and is_url(p) for p in paths):
            raise InvalidRequest("--watch watches folders; a web site can't be watched")
        suffixes = EXTENSIONS.get(format or "", tuple(s for e in EXTENSIONS.values() for s in e))

        def sync(_changed: list[Path]) -> IngestReport:
            return self.ingest(
                paths,
                format=format,
                source=source,
                acl=acl,
                skip_invalid=True,
                sync=True,
                allow_mass_delete=allow_mass_delete,
            )

        return watch(
            paths,
            sync,
            on_sync=on_sync,
            on_error=on_error,
            suffixes=suffixes,
            quiet_ms=quiet_ms,
            max_wait_ms=max_wait_ms,
            initial_sync=True,
            stop=stop,
            force_polling=force_polling,
        )

    def ingest_records(
        self,
        records: Iterable[Mapping[str, Any] | Entity],
        *,
        acl: Sequence[str] | None = None,
        skip_invalid: bool = False,
        progress: bool = False,
        source: str | None = None,
        sync: bool = False,
        allow_mass_delete: bool = False,
    ) -> IngestReport:
        """Publish canonical records (dicts as in DESIGN §1, or Entity objects) as one batch.

        ``source`` sets every record's source and records the ingest in the source's
        row; ``sync`` and ``allow_mass_delete`` as for :meth:`ingest`.
        """
        from knowledge_store.errors import InvalidRecord, Rejection
        from knowledge_store.ingest.loaders import LoadedRecord, LoadResult, SourceInfo

        check_list_bound("acl", acl or (), MAX_ACL_PRINCIPALS, name="the default ACL")
        _check_sync(source, sync)
        entities: list[Entity] = []
        rejected: list[Rejection] = []
        seen: dict[str, int] = {}
        for line, record in enumerate(records, start=1):
            try:
                # An Entity is held to the same rules as a record: it is one, built in Python.
                entity = record_to_entity(
                    record.to_record() if isinstance(record, Entity) else record,
                    file="<records>",
                    line=line,
                    default_acl=acl,
                    source=source,
                )
            except InvalidRecord as exc:
                rejected.append(exc.rejection)
                continue
            if entity.uid in seen:
                rejected.append(
                    Rejection(
                        "<records>",
                        line,
                        entity.uid,
                        "uid",
                        f"duplicate uid in this batch (first at record {seen[entity.uid]})",
                    )
                )
                continue
            seen[entity.uid] = line
            entities.append(entity)
        read = LoadResult(
            records=[LoadedRecord("<records>", None, entity) for entity in entities],
            rejections=rejected,
            sources=[SourceInfo(source, "records", "<records>")],
        )
        return ingest_entities(
            self.engine,
            self.embedder,
            self.embedder_spec,
            entities,
            rejected=rejected,
            skip_invalid=skip_invalid,
            progress=progress,
            source=None if source is None else _source_sync(read, source, sync, allow_mass_delete),
        )

    def delete(self, uids: Sequence[str]) -> str:
        """Delete entities (their chunks and outgoing edges) as one publish."""
        if not uids:
            raise InvalidRequest("delete needs at least one uid")
        return self.engine.delete([_uid(uid) for uid in uids])

    # -- primitives ------------------------------------------------------------------------------
    def lexical(
        self,
        text: str,
        *,
        identity: IdentityLike = None,
        k: int = 10,
        filters: Filters | None = None,
    ) -> ChunkHits:
        """BM25 over chunks (exact terms, identifiers, codes)."""
        return self.engine.lexical(_identity(identity), _text(text), k, filters or Filters())

    def vector(
        self,
        query: str | np.ndarray,
        *,
        identity: IdentityLike = None,
        k: int = 10,
        filters: Filters | None = None,
    ) -> ChunkHits:
        """Dense nearest chunks by meaning; ``query`` is a text or a vector."""
        who = _identity(identity)
        if isinstance(query, str):
            _text(query)
            if not query.strip():
                raise InvalidRequest("vector needs a non-empty text")
            vec = self.embedder.embed_query(query)
        else:
            vec = np.asarray(query, dtype=np.float32)
        return self.engine.vector(who, vec, k, filters or Filters())

    def search(
        self,
        text: str | None,
        *,
        identity: IdentityLike = None,
        k: int = 10,
        filters: FiltersLike = None,
        mode: str | None = None,
        weights: Mapping[str, float] | None = None,
        explain: bool = False,
        retrievers: Sequence[str | Retriever] | None = None,
    ) -> SearchAnswer:
        """Fused retrieval (DESIGN §3); ``text`` None or blank is a pure filter request."""
        return fused.search(
            self.engine,
            lambda: self.embedder,
            _identity(identity),
            None if text is None else _text(text),
            k=k,
            filters=coerce_filters(filters),
            mode=mode,
            weights=weights,
            explain=explain,
            retrievers=retrievers,
        )

    def sql(
        self,
        filters: FiltersLike = None,
        *,
        identity: IdentityLike = None,
        order: str | None = None,
        k: int = 10,
    ) -> SqlHits:
        """Entities by their typed fields (closed list), ``order`` = ``FIELD[:asc|:desc]``."""
        return self.engine.sql(_identity(identity), coerce_filters(filters), order=order, k=k)

    def aggregate(
        self,
        metric: str,
        dimension: str | None = None,
        *,
        identity: IdentityLike = None,
        filters: FiltersLike = None,
    ) -> AggregateAnswer:
        """A catalog metric by a dimension over the visible slice (``retrieval.aggregates``)."""
        return self.engine.aggregate(
            _identity(identity), metric, dimension, coerce_filters(filters)
        )

    def graph(
        self,
        starts: Sequence[str],
        *,
        identity: IdentityLike = None,
        depth: int = 1,
        labels: Sequence[str] = (),
        direction: str = "both",
        k: int = 10,
    ) -> GraphHits:
        """Entities linked to ``starts`` (depth 1–3), ranked by hops, paths, recency."""
        return self.engine.graph(
            _identity(identity), starts, depth=depth, labels=labels, direction=direction, k=k
        )

    def query_graph(
        self,
        text: str,
        params: Mapping[str, Any] | None = None,
        *,
        identity: IdentityLike = None,
        lenient: bool = False,
    ) -> QueryAnswer:
        """Run a bounded, read-only openCypher query (docs/query_graph.md)."""
        return self.engine.query_graph(_identity(identity), text, params, lenient=lenient)

    def content(self, uid: str, *, identity: IdentityLike = None) -> dict[str, Any]:
        """The entity ``uid`` with its chunks and its edges to entities the caller can read.

        ``{"content_root", "entity": {…fields}, "chunks": […], "edges": {"out": […], "in": […]}}``.
        Raises ``NotFound`` alike for a missing uid and for one the caller may not read.
        """
        found = self.engine.content(_identity(identity), _uid(uid))
        if found is None:
            raise NotFound(f"no entity with uid {uid!r}", uid=uid)
        return found

    # -- store -------------------------------------------------------------------------------------
    def stats(self) -> StoreStats:
        return self.engine.stats()

    @property
    def is_empty(self) -> bool:
        return self.engine.is_empty()

    def content_root(self) -> str:
        return self.engine.content_root()

    def rebuild(self, *, progress: bool = False) -> None:
        self.engine.rebuild(progress=progress)

    def reembed(self, embedder: str | Embedder | None = None, *, progress: bool = False) -> str:
        """Embed every chunk again with ``embedder`` (default: the default) as one publish.

        Vectors come from the embedding cache where it has them and go into it as
        they are made, so an interrupted re-embed resumes where it stopped. The
        store then records the new model; returns the new content root.
        """
        from knowledge_store.ingest.reembed import reembed_store

        target = embedder if isinstance(embedder, Embedder) else open_embedder(embedder)
        root = reembed_store(self.engine, target, progress=progress)
        self._embedder_arg = self._embedder = target
        return root

    # -- ACL administration ---------------------------------------------------------------------------
    def grant(self, uid: str, principal: str) -> str:
        return self.engine.grant(_uid(uid), principal)

    def revoke(self, uid: str, principal: str) -> str:
        return self.engine.revoke(_uid(uid), principal)

    def acl_show(self, uid: str) -> tuple[str, ...]:
        return self.engine.acl_show(_uid(uid))

    def acl_explain(self, principal: str, uid: str) -> AclExplanation:
        return self.engine.acl_explain(principal, _uid(uid))

    def add_member(self, group: str, member: str) -> None:
        self.engine.add_member(group, member)

    def remove_member(self, group: str, member: str) -> None:
        self.engine.remove_member(group, member)

    def principal_show(self, principal: str) -> PrincipalInfo:
        return self.engine.principal_show(principal)

    def load_memberships(self, pairs: Sequence[tuple[str, str]]) -> dict[str, int]:
        return self.engine.load_memberships(pairs)
