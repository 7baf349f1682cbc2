"""``KnowledgeStore``: the Python API over one engine (DESIGN §6) — the boundary.

Every CLI command, tool and endpoint calls one method of this class. Each
read takes either its request model (:mod:`knowledge_store.requests`) or the
keyword arguments that build it: the request is validated once into the typed
values engines take, so every surface has the same bounds and the same
errors. Each read runs on one reader (:meth:`KnowledgeStore.reader`): one
snapshot, the identity expanded once. The library never reads the
environment: the CLI and the server decide defaults (``KS_AS``, ``KS_STORE``).
What changes a store — ingest, sync, delete, ACLs, memberships — is in :mod:`.admin`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from knowledge_store.engines.base import Engine, EngineSettings
from knowledge_store.engines.registry import open_engine  # the engine of a location
from knowledge_store.errors import ModelMismatch
from knowledge_store.ingest.embedding import (
    Embedder,
    EmbedderSettings,
    embedder_for,
    open_embedder,
    spec_of,
)
from knowledge_store.model import (
    AggregateAnswer,
    BackupReport,
    ChunkHits,
    Content,
    ExportReport,
    Filters,
    GraphHits,
    Identity,
    QueryAnswer,
    RestoreReport,
    SearchAnswer,
    SqlHits,
    StoreStats,
)
from knowledge_store.model.queries import TextAnalysis
from knowledge_store.requests import (
    AggregateRequest,
    ContentRequest,
    DocsSearchRequest,
    FacetsRequest,
    FilterSpec,
    FuzzyRequest,
    GraphRequest,
    KnowledgeRequest,
    LearningPathRequest,
    LexicalRequest,
    QueryGraphRequest,
    RelatedRequest,
    Request,
    SearchRequest,
    SqlRequest,
    VectorRequest,
    XrefRequest,
)
from knowledge_store.retrieval.docs_tools import (
    GraphFacets,
    LearningPath,
    Related,
    XrefResolution,
)
from knowledge_store.retrieval.knowledge import CodeSamples, Knowledge
from knowledge_store.retrieval.reader import (
    StoreReader,
    TypesSeen,
    lexical_request,
    search_request,
    vector_request,
)
from knowledge_store.retrieval.retrievers import Retriever
from knowledge_store.store.admin import Administration
from knowledge_store.store.audit import Auditor, audited, current_recording
from knowledge_store.store.auditing import Auditing
from knowledge_store.store.facets import Facets

__all__ = [
    "DEFAULT_STORE",
    "EngineSettings",
    "KnowledgeStore",
    "get_learning_path",
    "get_related",
    "graph_facets",
    "resolve_xref",
]

DEFAULT_STORE = ".ks"
IdentityLike = Identity | str | None


def _filters_of(given: object, filters: Any) -> Filters:
    """The FILTERS of a read that has run (so they are valid): its request's, else the keyword's."""
    spec = getattr(given, "filters", None)
    if isinstance(given, Request) and isinstance(spec, FilterSpec):
        return spec.value
    return FilterSpec.model_validate(filters if filters is not None else {}).value


def _identity(who: IdentityLike) -> Identity:
    if isinstance(who, Identity):
        return who
    return Identity(who or "everyone")


class KnowledgeStore(Administration, Auditing, Facets):
    """A knowledge store: ingest an estate, search it under the caller's identity."""

    def __init__(
        self,
        engine: Engine,
        *,
        embedder: str | Embedder | None = None,
        embedder_settings: EmbedderSettings | None = None,
    ) -> None:
        self.engine = engine
        #: The audit log's door (:mod:`.audit`): what every surface records through.
        self.auditor = Auditor(engine.audit)
        self._types_seen = TypesSeen()
        self._embedder_arg = embedder
        self._embedder_settings = embedder_settings or EmbedderSettings()
        self._embedder: Embedder | None = embedder if not isinstance(embedder, str | None) else None

    @classmethod
    def open(
        cls,
        location: str | Path | None = None,
        *,
        embedder: str | Embedder | None = None,
        create: bool = True,
        engine_settings: EngineSettings | None = None,
        embedder_settings: EmbedderSettings | None = None,
    ) -> KnowledgeStore:
        """Open (or create) the store at ``location`` (default ``./.ks``).

        ``embedder``: a spec or an :class:`Embedder`; without one, the store embeds
        with the model it records, and a new store with the default.
        ``engine_settings`` / ``embedder_settings``: how the engine opens and how
        embedders run. (The library reads no environment: ``ks`` and the servers
        map ``KS_STORE``, ``KS_EMBEDDER``, ``KS_PG_*``, ``KS_ONNX_*`` —
        :mod:`knowledge_store.surfaces.environment`.)
        ``create=False``: a store that does not exist is ``NotFound`` and is not made
        (what a read does: a mistyped path must not become an empty store).
        """
        where = location or DEFAULT_STORE
        return cls(
            open_engine(where, engine_settings, create=create),
            embedder=embedder,
            embedder_settings=embedder_settings,
        )

    def close(self) -> None:
        self.engine.close()

    def __enter__(self) -> KnowledgeStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def text_analysis(self) -> TextAnalysis:
        """How this store's lexical index reads text: a query's terms, where a text holds them."""
        return self.engine.text_analysis

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
        writer = self.engine.writer
        recorded = writer.model()
        if self._embedder is None:
            if isinstance(self._embedder_arg, str):
                self._embedder = open_embedder(self._embedder_arg, self._embedder_settings)
            elif recorded is None:
                self._embedder = open_embedder(None, self._embedder_settings)
            else:
                self._embedder = embedder_for(
                    recorded[0], writer.model_spec(), self._embedder_settings
                )
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

    # -- reading ---------------------------------------------------------------------------------
    @contextmanager
    def reader(self, identity: IdentityLike = None) -> Iterator[StoreReader]:
        """One point-in-time view for ``identity`` (default: everyone), for several reads.

        ``with store.reader("user:sam") as r: r.search(…); r.content(uid)`` — one
        catalog snapshot, the derived indexes at that snapshot, the identity
        expanded once: every answer carries the same content root.
        """
        with self.engine.reader(_identity(identity)) as engine_reader:
            recording = current_recording()
            if recording is not None:
                recording.note_reader(
                    engine_reader.publish, engine_reader.content_root, engine_reader.held
                )
            yield StoreReader(
                engine_reader, lambda: self.embedder, self._types_seen, self.engine.cursors
            )

    @audited("lexical", LexicalRequest, ("query",))
    def lexical(
        self,
        text: str | LexicalRequest,
        *,
        identity: IdentityLike = None,
        k: int | None = None,
        filters: Any = None,
        explain: bool = False,
        cursor: str | None = None,
    ) -> ChunkHits:
        """BM25 over chunks (exact terms, identifiers, codes); ``cursor``: ``"*"`` pages
        through up to 1,000 hits (the answer's ``next`` names the next page)."""
        request = lexical_request(text, k=k, filters=filters, explain=explain, cursor=cursor)
        with self.reader(identity) as r:
            return r.noted(r.lexical(request), request.filters.value)

    @audited("fuzzy", FuzzyRequest, ("query",))
    def fuzzy(
        self,
        text: str | FuzzyRequest,
        *,
        identity: IdentityLike = None,
        k: int | None = None,
        filters: Any = None,
        explain: bool = False,
        cursor: str | None = None,
    ) -> ChunkHits:
        """BM25 over chunks, each misspelt word searched as the nearest word the store holds."""
        with self.reader(identity) as r:
            answer = r.fuzzy(text, k=k, filters=filters, explain=explain, cursor=cursor)
            return r.noted(answer, _filters_of(text, filters))

    @audited("vector", VectorRequest, ("query",))
    def vector(
        self,
        query: str | np.ndarray | VectorRequest,
        *,
        identity: IdentityLike = None,
        k: int | None = None,
        filters: Any = None,
        explain: bool = False,
        cursor: str | None = None,
    ) -> ChunkHits:
        """Dense nearest chunks by meaning; ``query`` is a text or a vector."""
        request = vector_request(query, k=k, filters=filters, explain=explain, cursor=cursor)
        with self.reader(identity) as r:
            return r.noted(r.vector(request), request.filters.value)

    @audited("search", SearchRequest, ("query",))
    def search(
        self,
        text: str | SearchRequest | None = None,
        *,
        identity: IdentityLike = None,
        k: int | None = None,
        filters: Any = None,
        mode: str | None = None,
        weights: Mapping[str, float] | None = None,
        explain: bool = False,
        retrievers: Sequence[str | Retriever] | None = None,
        cursor: str | None = None,
    ) -> SearchAnswer:
        """Fused retrieval (DESIGN §3); ``text`` None or blank is a pure filter request.
        ``cursor``: ``"*"`` pages through up to 1,000 results (``retrieval/paging.py``)."""
        request = search_request(
            text, k=k, filters=filters, mode=mode, weights=weights, explain=explain, cursor=cursor
        )
        with self.reader(identity) as r:
            return r.noted(r.search(request, retrievers=retrievers), request.filters.value)

    @audited("sql", SqlRequest, ("filters",))
    def sql(
        self,
        filters: Any = None,
        *,
        identity: IdentityLike = None,
        order: str | None = None,
        k: int | None = None,
        cursor: str | None = None,
    ) -> SqlHits:
        """Entities by their typed fields (closed list), ``order`` = ``FIELD[:asc|:desc]``."""
        with self.reader(identity) as r:
            answer = r.sql(filters, order=order, k=k, cursor=cursor)
            return r.noted(answer, _filters_of(filters, filters))

    @audited("aggregate", AggregateRequest, ("metric", "dimension"))
    def aggregate(
        self,
        metric: str | AggregateRequest,
        dimension: str | None = None,
        *,
        identity: IdentityLike = None,
        filters: Any = None,
    ) -> AggregateAnswer:
        """A catalog metric by a dimension over the visible slice (DESIGN §2)."""
        with self.reader(identity) as r:
            answer = r.aggregate(metric, dimension, filters=filters)
            return r.noted(answer, _filters_of(metric, filters))

    @audited("graph", GraphRequest, ("starts",))
    def graph(
        self,
        starts: Sequence[str] | GraphRequest,
        *,
        identity: IdentityLike = None,
        depth: int | None = None,
        labels: Sequence[str] = (),
        direction: str | None = None,
        k: int | None = None,
        cursor: str | None = None,
    ) -> GraphHits:
        """Entities linked to ``starts`` (depth 1–3), ranked by hops, paths, recency."""
        with self.reader(identity) as r:
            return r.graph(
                starts, depth=depth, labels=labels, direction=direction, k=k, cursor=cursor
            )

    @audited("query_graph", QueryGraphRequest, ("query", "params"))
    def query_graph(
        self,
        text: str | QueryGraphRequest,
        params: Mapping[str, Any] | None = None,
        *,
        identity: IdentityLike = None,
        lenient: bool = False,
    ) -> QueryAnswer:
        """Run a bounded, read-only openCypher query (docs/query_graph.md)."""
        with self.reader(identity) as r:
            return r.query_graph(text, params, lenient=lenient)

    @audited("content", ContentRequest, ("uid",))
    def content(self, uid: str | ContentRequest, *, identity: IdentityLike = None) -> Content:
        """The entity ``uid`` with its chunks and its edges to entities the caller can read.

        Raises ``NotFound`` alike for a missing uid and for one the caller may not read.
        """
        with self.reader(identity) as r:
            return r.content(uid)

    # -- docs tools ------------------------------------------------------------------------------
    @audited("docs_search", DocsSearchRequest, ("query",))
    def docs_search(
        self,
        text: str | DocsSearchRequest | None = None,
        *,
        identity: IdentityLike = None,
        k: int | None = None,
        filters: Any = None,
    ) -> SearchAnswer:
        """Fused search over every type but ``codeSample``."""
        with self.reader(identity) as r:
            return r.docs_search(text, k=k, filters=filters)

    @audited("code_sample_search", DocsSearchRequest, ("query",))
    def code_sample_search(
        self,
        text: str | DocsSearchRequest | None = None,
        *,
        identity: IdentityLike = None,
        k: int | None = None,
        filters: Any = None,
    ) -> CodeSamples:
        """Fused search over ``codeSample`` entities: each with its code, language and page."""
        with self.reader(identity) as r:
            return r.code_sample_search(text, k=k, filters=filters)

    @audited("search_knowledge", KnowledgeRequest, ("query",))
    def search_knowledge(
        self,
        text: str | KnowledgeRequest,
        *,
        identity: IdentityLike = None,
        k: int | None = None,
        filters: Any = None,
    ) -> Knowledge:
        """Fused search as cited passages and one context block, for a chat model."""
        with self.reader(identity) as r:
            return r.search_knowledge(text, k=k, filters=filters)

    @audited("get_related", RelatedRequest, ("uid",))
    def get_related(
        self,
        uid: str | RelatedRequest,
        *,
        identity: IdentityLike = None,
        labels: Sequence[str] = (),
        depth: int | None = None,
        direction: str | None = None,
        k: int | None = None,
    ) -> Related:
        """Entities linked to ``uid`` within ``depth`` hops, ranked as the graph primitive."""
        with self.reader(identity) as r:
            return r.get_related(uid, labels=labels, depth=depth, direction=direction, k=k)

    @audited("get_learning_path", LearningPathRequest, ("uid",))
    def get_learning_path(
        self, uid: str | LearningPathRequest, *, identity: IdentityLike = None
    ) -> LearningPath:
        """The ordered path or module ``uid`` belongs to, with ``uid``'s place in it."""
        with self.reader(identity) as r:
            return r.get_learning_path(uid)

    @audited("resolve_xref", XrefRequest, ("ref",))
    def resolve_xref(
        self, ref: str | XrefRequest, *, identity: IdentityLike = None
    ) -> XrefResolution:
        """A uid, an href (with or without ``#anchor``) or an exact title → the entity."""
        with self.reader(identity) as r:
            return r.resolve_xref(ref)

    @audited("graph_facets", FacetsRequest, ("uids",))
    def graph_facets(
        self, uids: Sequence[str] | FacetsRequest, *, identity: IdentityLike = None
    ) -> GraphFacets:
        """Visible neighbours of a result set, counted by edge label and entity type."""
        with self.reader(identity) as r:
            return r.graph_facets(uids)

    # -- store -------------------------------------------------------------------------------------
    def stats(self) -> StoreStats:
        return self.engine.writer.stats()

    @property
    def is_empty(self) -> bool:
        return self.engine.writer.is_empty()

    def content_root(self) -> str:
        return self.engine.writer.content_root()

    @audited("rebuild")
    def rebuild(self, *, progress: bool = False) -> None:
        self.engine.writer.rebuild(progress=progress)

    # -- export ------------------------------------------------------------------------------------
    def export(self, out: TextIO, *, filters: Any = None) -> ExportReport:
        """Write the records (the ingest format, one a line) that ``filters`` select to
        ``out`` — every entity by default, read on one snapshot; an ingest of them into an
        empty store gives the same entities, content digest and answers (:mod:`.export`)."""
        from knowledge_store.store.export import export_records

        return export_records(self.engine, out, _filters_of(None, filters))

    def export_principals(self, out: TextIO) -> int:
        """Write every membership as a ``{"group", "member"}`` line (``principals load``'s)."""
        from knowledge_store.store.export import export_memberships

        return export_memberships(self.engine, out)

    def backup(self, dest: str | Path) -> BackupReport:
        """Write a consistent copy of this store, at one publish, to the new directory
        ``dest`` — online: readers and writers go on (:mod:`.backup`)."""
        from knowledge_store.store.backup import backup

        return backup(self.engine, dest)

    @staticmethod
    def restore(src: str | Path, location: str | Path) -> RestoreReport:
        """Verify the backup ``src`` and make it a new store at ``location`` (which must not
        hold one), at the backup's publish and content root (:mod:`.backup`)."""
        from knowledge_store.store.backup import restore

        return restore(src, location)

    def digest(self) -> str:
        """The content digest of every entity: sha256 over the sorted ``uid:content_hash``
        lines. Two stores holding the same entities have the same digest, whatever their
        engine or history (a content root also depends on the publishes that led there)."""
        from knowledge_store.store.export import store_digest_of

        return store_digest_of(self.engine)[1]

    @audited("reembed")
    def reembed(self, embedder: str | Embedder | None = None, *, progress: bool = False) -> str:
        """Embed every chunk again with ``embedder`` (default: the default) as one publish.

        Vectors come from the embedding cache where it has them and go into it as
        they are made, so an interrupted re-embed resumes where it stopped. The
        store then records the new model; returns the new content root.
        """
        from knowledge_store.ingest.reembed import reembed_store

        target = (
            embedder
            if isinstance(embedder, Embedder)
            else open_embedder(embedder, self._embedder_settings)
        )
        root = reembed_store(self.engine.writer, target, progress=progress)
        self._embedder_arg = self._embedder = target
        return root


# -- the docs tools as functions of a store (the public API of ``knowledge_store``) --------------
Source = KnowledgeStore | StoreReader | Engine


@contextmanager
def _reading(source: Source, identity: IdentityLike) -> Iterator[StoreReader]:
    if isinstance(source, StoreReader):
        yield source
        return
    store = source if isinstance(source, KnowledgeStore) else KnowledgeStore(source)
    with store.reader(identity) as r:
        yield r


def get_related(
    source: Source,
    uid: str,
    *,
    identity: IdentityLike = None,
    labels: Sequence[str] = (),
    depth: int | None = None,
    direction: str | None = None,
    k: int | None = None,
) -> Related:
    """Entities linked to ``uid`` within ``depth`` ≤ 3 hops, ranked as the graph primitive."""
    with _reading(source, identity) as r:
        return r.get_related(uid, labels=labels, depth=depth, direction=direction, k=k)


def get_learning_path(source: Source, uid: str, *, identity: IdentityLike = None) -> LearningPath:
    """The path/module ``uid`` belongs to, in order, with ``uid``'s place in it.

    Walks partOf up to the root (the top ancestor, choosing the best-ranked
    parent where there are several), then lists the root's tree depth-first,
    siblings by ``position`` (then title, uid). For a root uid, its whole tree.
    """
    with _reading(source, identity) as r:
        return r.get_learning_path(uid)


def resolve_xref(source: Source, ref: str, *, identity: IdentityLike = None) -> XrefResolution:
    """Resolve a uid, an href (with or without ``#anchor``) or an exact title."""
    with _reading(source, identity) as r:
        return r.resolve_xref(ref)


def graph_facets(
    source: Source, uids: Sequence[str], *, identity: IdentityLike = None
) -> GraphFacets:
    """Counts of distinct visible neighbours of ``uids``, by edge label and by entity type.

    A neighbour linked by two labels counts once under each label and once in
    total. Unreadable or missing uids contribute nothing.
    """
    with _reading(source, identity) as r:
        return r.graph_facets(list(uids))
