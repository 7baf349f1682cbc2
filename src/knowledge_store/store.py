"""``KnowledgeStore``: the Python API over one engine (DESIGN §6) — the boundary.

Every CLI command, tool and endpoint calls one method of this class. Each
read method takes either its request model (:mod:`knowledge_store.requests`)
or the keyword arguments that build it: the request is validated once, here,
into the typed values engines take, so every surface has the same bounds and
the same errors.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from knowledge_store.engines.base import Engine
from knowledge_store.errors import InvalidRequest, ModelMismatch, NotFound
from knowledge_store.graphquery.runner import checked_query
from knowledge_store.ingest.embedding import Embedder, embedder_for, open_embedder, spec_of
from knowledge_store.ingest.pipeline import ingest_entities
from knowledge_store.ingest.records import record_to_entity
from knowledge_store.model import (
    MAX_ACL_PRINCIPALS,
    AclChange,
    AclExplanation,
    AggregateAnswer,
    ChunkHits,
    Content,
    DeleteReport,
    Entity,
    GraphHits,
    Identity,
    IngestReport,
    MembershipsLoaded,
    PrincipalInfo,
    QueryAnswer,
    SearchAnswer,
    SqlHits,
    StoreStats,
    check_list_bound,
)
from knowledge_store.requests import (
    AclRequest,
    AggregateRequest,
    ContentRequest,
    DeleteRequest,
    DocsSearchRequest,
    FacetsRequest,
    GraphRequest,
    KnowledgeRequest,
    LearningPathRequest,
    LexicalRequest,
    MemberRequest,
    PrincipalRequest,
    QueryGraphRequest,
    RelatedRequest,
    Request,
    SearchRequest,
    SqlRequest,
    VectorRequest,
    XrefRequest,
)
from knowledge_store.retrieval import docs_tools, knowledge
from knowledge_store.retrieval import search as fused
from knowledge_store.retrieval.retrievers import Retriever

__all__ = ["DEFAULT_STORE", "KnowledgeStore"]

DEFAULT_STORE = ".ks"
IdentityLike = Identity | str | None
R = TypeVar("R", bound=Request)


def _identity(who: IdentityLike) -> Identity:
    if isinstance(who, Identity):
        return who
    return Identity(who or os.environ.get("KS_AS") or "everyone")


def _request(model: type[R], given: object, **fields: Any) -> R:
    """``given`` if it is already the request, else the request built from ``fields``.

    A field passed as None takes the model's default.
    """
    if isinstance(given, model):
        return given
    return model.parse({k: v for k, v in fields.items() if v is not None})


def open_engine(location: str | Path) -> Engine:
    """A directory → embedded; ``pg:DIR`` or ``postgresql://…`` → PostgreSQL."""
    text = str(location)
    if text.startswith(("postgresql://", "postgres://", "pg:")):
        from knowledge_store.engines.postgres.engine import PostgresEngine

        return PostgresEngine.open(text)
    from knowledge_store.engines.embedded.engine import EmbeddedEngine

    return EmbeddedEngine(Path(text))


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
    ) -> IngestReport:
        """Load files/folders and publish them as one batch."""
        from knowledge_store.ingest.loaders import load_paths

        check_list_bound("acl", acl or (), MAX_ACL_PRINCIPALS, name="the default ACL")
        loaded = load_paths(paths, format=format, source=source, default_acl=acl or None)
        return ingest_entities(
            self.engine,
            self.embedder,
            self.embedder_spec,
            [r.entity for r in loaded.records],
            rejected=loaded.rejections,
            skipped=loaded.skipped,
            skip_invalid=skip_invalid,
            progress=progress,
        )

    def ingest_records(
        self,
        records: Iterable[Mapping[str, Any] | Entity],
        *,
        acl: Sequence[str] | None = None,
        skip_invalid: bool = False,
        progress: bool = False,
    ) -> IngestReport:
        """Publish canonical records (dicts as in DESIGN §1, or Entity objects) as one batch."""
        from knowledge_store.errors import InvalidRecord, Rejection

        check_list_bound("acl", acl or (), MAX_ACL_PRINCIPALS, name="the default ACL")
        entities: list[Entity] = []
        rejected: list[Rejection] = []
        seen: dict[str, int] = {}
        for line, record in enumerate(records, start=1):
            try:
                entity = (
                    record
                    if isinstance(record, Entity)
                    else record_to_entity(
                        record, file="<records>", line=line, default_acl=acl, source=None
                    )
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
        return ingest_entities(
            self.engine,
            self.embedder,
            self.embedder_spec,
            entities,
            rejected=rejected,
            skip_invalid=skip_invalid,
            progress=progress,
        )

    def delete(self, uids: Sequence[str] | DeleteRequest) -> DeleteReport:
        """Delete entities (their chunks and outgoing edges) as one publish."""
        if not isinstance(uids, DeleteRequest) and not uids:
            raise InvalidRequest("delete needs at least one uid", field="uids")
        request = _request(DeleteRequest, uids, uids=uids)
        unique = list(dict.fromkeys(request.uids))
        root = self.engine.delete(unique)
        return DeleteReport(content_root=root, deleted=len(unique))

    # -- primitives ------------------------------------------------------------------------------
    def lexical(
        self,
        text: str | LexicalRequest,
        *,
        identity: IdentityLike = None,
        k: int = 10,
        filters: Any = None,
        explain: bool = False,
    ) -> ChunkHits:
        """BM25 over chunks (exact terms, identifiers, codes)."""
        request = _request(LexicalRequest, text, query=text, k=k, filters=filters, explain=explain)
        answer = self.engine.lexical(
            _identity(identity), request.query, request.k, request.filters.value
        )
        return answer if request.explain else answer.model_copy(update={"explain": None})

    def vector(
        self,
        query: str | np.ndarray | VectorRequest,
        *,
        identity: IdentityLike = None,
        k: int = 10,
        filters: Any = None,
        explain: bool = False,
    ) -> ChunkHits:
        """Dense nearest chunks by meaning; ``query`` is a text or a vector."""
        if isinstance(query, np.ndarray):
            request = VectorRequest.parse(
                vector=np.asarray(query, dtype=np.float32).reshape(-1).tolist(),
                k=k,
                explain=explain,
                **({} if filters is None else {"filters": filters}),
            )
        else:
            request = _request(
                VectorRequest, query, query=query, k=k, filters=filters, explain=explain
            )
        who = _identity(identity)
        if request.vector is not None:
            vec = np.asarray(request.vector, dtype=np.float32)
        else:
            vec = self.embedder.embed_query(request.query)
        answer = self.engine.vector(who, vec, request.k, request.filters.value)
        return answer if request.explain else answer.model_copy(update={"explain": None})

    def search(
        self,
        text: str | SearchRequest | None = None,
        *,
        identity: IdentityLike = None,
        k: int = 10,
        filters: Any = None,
        mode: str | None = None,
        weights: Mapping[str, float] | None = None,
        explain: bool = False,
        retrievers: Sequence[str | Retriever] | None = None,
    ) -> SearchAnswer:
        """Fused retrieval (DESIGN §3); ``text`` None or blank is a pure filter request."""
        request = _request(
            SearchRequest,
            text,
            query=text,
            k=k,
            filters=filters,
            mode=mode,
            weights=weights,
            explain=explain,
        )
        return fused.search(
            self.engine,
            lambda: self.embedder,
            _identity(identity),
            request.query,
            k=request.k,
            filters=request.filters.value,
            mode=request.mode,
            weights=request.weights,
            explain=request.explain,
            retrievers=retrievers,
        )

    def sql(
        self,
        filters: Any = None,
        *,
        identity: IdentityLike = None,
        order: str | None = None,
        k: int = 10,
    ) -> SqlHits:
        """Entities by their typed fields (closed list), ``order`` = ``FIELD[:asc|:desc]``."""
        request = _request(SqlRequest, filters, filters=filters, order=order, k=k)
        return self.engine.sql(
            _identity(identity), request.filters.value, request.order_value, request.k
        )

    def aggregate(
        self,
        metric: str | AggregateRequest,
        dimension: str | None = None,
        *,
        identity: IdentityLike = None,
        filters: Any = None,
    ) -> AggregateAnswer:
        """A catalog metric by a dimension over the visible slice (DESIGN §2)."""
        request = _request(
            AggregateRequest, metric, metric=metric, dimension=dimension, filters=filters
        )
        return self.engine.aggregate(_identity(identity), request.spec, request.filters.value)

    def graph(
        self,
        starts: Sequence[str] | GraphRequest,
        *,
        identity: IdentityLike = None,
        depth: int = 1,
        labels: Sequence[str] = (),
        direction: str = "both",
        k: int = 10,
    ) -> GraphHits:
        """Entities linked to ``starts`` (depth 1–3), ranked by hops, paths, recency."""
        request = _request(
            GraphRequest,
            starts,
            starts=starts,
            depth=depth,
            labels=labels,
            direction=direction,
            k=k,
        )
        return self.engine.graph(_identity(identity), request.value)

    def query_graph(
        self,
        text: str | QueryGraphRequest,
        params: Mapping[str, Any] | None = None,
        *,
        identity: IdentityLike = None,
        lenient: bool = False,
    ) -> QueryAnswer:
        """Run a bounded, read-only openCypher query (docs/query_graph.md)."""
        request = _request(QueryGraphRequest, text, query=text, params=params, lenient=lenient)
        query = checked_query(request.query, request.params, lenient=request.lenient)
        return self.engine.query_graph(_identity(identity), query, request.params)

    def content(self, uid: str | ContentRequest, *, identity: IdentityLike = None) -> Content:
        """The entity ``uid`` with its chunks and its edges to entities the caller can read.

        Raises ``NotFound`` alike for a missing uid and for one the caller may not read.
        """
        request = _request(ContentRequest, uid, uid=uid)
        found = self.engine.content(_identity(identity), request.uid)
        if found is None:
            raise NotFound(f"no entity with uid {request.uid!r}", uid=request.uid)
        return found

    # -- docs tools ------------------------------------------------------------------------------
    def docs_search(
        self,
        text: str | DocsSearchRequest | None = None,
        *,
        identity: IdentityLike = None,
        k: int = 10,
        filters: Any = None,
    ) -> SearchAnswer:
        """Fused search over every type but ``codeSample``."""
        request = _request(DocsSearchRequest, text, query=text, k=k, filters=filters)
        return knowledge.docs_search(self, _identity(identity), request)

    def code_sample_search(
        self,
        text: str | DocsSearchRequest | None = None,
        *,
        identity: IdentityLike = None,
        k: int = 10,
        filters: Any = None,
    ) -> knowledge.CodeSamples:
        """Fused search over ``codeSample`` entities: each with its code, language and page."""
        request = _request(DocsSearchRequest, text, query=text, k=k, filters=filters)
        return knowledge.code_sample_search(self, _identity(identity), request)

    def search_knowledge(
        self,
        text: str | KnowledgeRequest,
        *,
        identity: IdentityLike = None,
        k: int = 5,
        filters: Any = None,
    ) -> knowledge.Knowledge:
        """Fused search as cited passages and one context block, for a chat model."""
        request = _request(KnowledgeRequest, text, query=text, k=k, filters=filters)
        return knowledge.search_knowledge(self, _identity(identity), request)

    def get_related(
        self,
        uid: str | RelatedRequest,
        *,
        identity: IdentityLike = None,
        labels: Sequence[str] = (),
        depth: int = 1,
        direction: str = "both",
        k: int = 10,
    ) -> docs_tools.Related:
        """Entities linked to ``uid`` within ``depth`` hops, ranked as the graph primitive."""
        request = _request(
            RelatedRequest, uid, uid=uid, labels=labels, depth=depth, direction=direction, k=k
        )
        return docs_tools.get_related(
            self,
            request.uid,
            identity=_identity(identity),
            labels=request.labels,
            depth=request.depth,
            direction=request.direction,
            k=request.k,
        )

    def get_learning_path(
        self, uid: str | LearningPathRequest, *, identity: IdentityLike = None
    ) -> docs_tools.LearningPath:
        """The ordered path or module ``uid`` belongs to, with ``uid``'s place in it."""
        request = _request(LearningPathRequest, uid, uid=uid)
        return docs_tools.get_learning_path(self, request.uid, identity=_identity(identity))

    def resolve_xref(
        self, ref: str | XrefRequest, *, identity: IdentityLike = None
    ) -> docs_tools.XrefResolution:
        """A uid, an href (with or without ``#anchor``) or an exact title → the entity."""
        request = _request(XrefRequest, ref, ref=ref)
        return docs_tools.resolve_xref(self, request.ref, identity=_identity(identity))

    def graph_facets(
        self, uids: Sequence[str] | FacetsRequest, *, identity: IdentityLike = None
    ) -> docs_tools.GraphFacets:
        """Visible neighbours of a result set, counted by edge label and entity type."""
        request = _request(FacetsRequest, uids, uids=uids)
        return docs_tools.graph_facets(self, request.uids, identity=_identity(identity))

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
    def grant(self, uid: str | AclRequest, principal: str | None = None) -> AclChange:
        """Let ``principal`` read ``uid`` (one publish)."""
        request = _request(AclRequest, uid, uid=uid, principal=principal)
        root = self.engine.grant(request.uid, request.principal)
        return AclChange(content_root=root, uid=request.uid, acl=self.acl_show(request.uid))

    def revoke(self, uid: str | AclRequest, principal: str | None = None) -> AclChange:
        """Stop ``principal`` reading ``uid`` through its ACL (one publish)."""
        request = _request(AclRequest, uid, uid=uid, principal=principal)
        root = self.engine.revoke(request.uid, request.principal)
        return AclChange(content_root=root, uid=request.uid, acl=self.acl_show(request.uid))

    def acl_show(self, uid: str) -> tuple[str, ...]:
        return self.engine.acl_show(uid)

    def acl_explain(self, principal: str, uid: str) -> AclExplanation:
        return self.engine.acl_explain(principal, uid)

    def add_member(self, group: str | MemberRequest, member: str | None = None) -> PrincipalInfo:
        """Make ``member`` a member of ``group``; the member's groups after it."""
        request = _request(MemberRequest, group, group=group, member=member)
        self.engine.add_member(request.group, request.member)
        return self.engine.principal_show(request.member)

    def remove_member(self, group: str | MemberRequest, member: str | None = None) -> PrincipalInfo:
        """Remove ``member`` from ``group``; the member's groups after it."""
        request = _request(MemberRequest, group, group=group, member=member)
        self.engine.remove_member(request.group, request.member)
        return self.engine.principal_show(request.member)

    def principal_show(self, principal: str | PrincipalRequest) -> PrincipalInfo:
        request = _request(PrincipalRequest, principal, principal=principal)
        return self.engine.principal_show(request.principal)

    def load_memberships(self, pairs: Sequence[tuple[str, str]]) -> MembershipsLoaded:
        return self.engine.load_memberships(pairs)
