"""Writing and administration of a store: ingest, sync, watch, delete, the sources, ACLs
and memberships — the part of :class:`~knowledge_store.store.KnowledgeStore` that changes
what it holds (each call one publish, or an ACL/membership change)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from knowledge_store.engines.base import Engine
from knowledge_store.errors import InvalidRequest, NotFound
from knowledge_store.ingest.embedding import Embedder
from knowledge_store.ingest.pipeline import ingest_entities
from knowledge_store.ingest.records import record_to_entity
from knowledge_store.model import (
    DELETED_UIDS_SHOWN,
    MAX_ACL_PRINCIPALS,
    MAX_UID_LENGTH,
    AclChange,
    AclExplanation,
    CheckReport,
    DeleteReport,
    Entity,
    IngestReport,
    MembershipsLoaded,
    PrincipalInfo,
    SourceSummary,
    check_list_bound,
    text_problem,
)
from knowledge_store.requests import (
    AclExplainRequest,
    AclRequest,
    AclShowRequest,
    CheckRequest,
    DeleteRequest,
    IngestRequest,
    MemberRequest,
    PrincipalRequest,
    RecordLines,
)
from knowledge_store.retrieval.reader import request_of
from knowledge_store.store.audit import Auditor, audited

if TYPE_CHECKING:
    from knowledge_store.ingest.loaders.web import WebOptions
    from knowledge_store.ingest.watch import WatchSummary

__all__ = ["Administration", "check_uid"]


def check_uid(uid: object, field: str = "uid") -> str:
    """A uid to look up: text the engines can bind (a lone surrogate or NUL is not)."""
    if not isinstance(uid, str) or not uid or text_problem(uid, MAX_UID_LENGTH) is not None:
        raise InvalidRequest(
            f"a uid is a non-empty string of at most {MAX_UID_LENGTH} characters of Unicode"
            " text (no NUL, no lone surrogate)",
            field=field,
        )
    return uid


class Administration:
    """What changes a store; mixed into ``KnowledgeStore``, which gives it its engine and
    embedder."""

    engine: Engine
    auditor: Auditor

    if TYPE_CHECKING:

        @property
        def embedder(self) -> Embedder: ...

        @property
        def embedder_spec(self) -> str: ...

    # -- ingest ------------------------------------------------------------------------------
    @audited("ingest", None, ("paths",))
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
        uid_prefix: str | None = None,
        allow_move: bool = False,
    ) -> IngestReport:
        """Load files, folders or web sites (``http(s)://`` strings) and publish them as one batch.

        With ``source``, the source's catalog row records this ingest (``sources()``).
        With ``sync`` (which needs ``source``), the batch is the whole source: what
        the source holds beyond it is deleted in the same publish; more than half of
        it only with ``allow_mass_delete`` (else ``MassDeleteRefused``). A crawl's
        state is kept in the store, per source, and saved once the publish is done.

        ``uid_prefix`` goes before the uid of every page read from a folder (and of a
        site's pages, unless ``web`` names one). Without it, a folder's pages ingested
        under a ``source`` new to the store get ``"SOURCE:"``; a source the store knows
        keeps the prefix it has (``""`` for one made before prefixes) — recorded in the
        source's row (``ingest.sync.folder_uid_prefix``). An entity another source holds
        is refused (``SourceTakeoverRefused``) unless ``allow_move``.
        """
        from knowledge_store.ingest.loaders import load_paths
        from knowledge_store.ingest.sync import (
            check_sync,
            crawl_options,
            folder_uid_prefix,
            not_reread,
            save_crawl_state,
            source_sync,
            web_with_prefix,
        )

        check_list_bound("acl", acl or (), MAX_ACL_PRINCIPALS, name="the default ACL")
        check_sync(source, sync)
        writer = self.engine.writer
        web, kept = crawl_options(writer, paths, source, web_with_prefix(paths, web, uid_prefix))
        prefix = folder_uid_prefix(writer, paths, source, uid_prefix)
        loaded = load_paths(
            paths,
            format=format,
            source=source,
            default_acl=acl or None,
            web=web,
            uid_prefix=prefix,
        )
        report = ingest_entities(
            writer,
            self.embedder,
            self.embedder_spec,
            [r.entity for r in loaded.records],
            rejected=loaded.rejections,
            skipped=loaded.skipped,
            skip_invalid=skip_invalid,
            progress=progress,
            source=None
            if source is None
            else source_sync(loaded, source, sync, allow_mass_delete, uid_prefix=prefix),
            allow_move=allow_move,
        )
        save_crawl_state(writer, loaded, kept)
        if not loaded.crawls:
            return report
        crawls = [crawl.to_dict() for crawl in loaded.crawls]
        # pages a crawl found unchanged (304) are in the source, as stored: unchanged too
        unchanged = report.unchanged + len(not_reread(loaded))
        return report.model_copy(update={"crawls": crawls, "unchanged": unchanged})

    @audited("ingest", IngestRequest, ("records",))
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
        lines: RecordLines | None = None,
        allow_move: bool = False,
    ) -> IngestReport:
        """Publish canonical records (dicts as in DESIGN §1, or Entity objects) as one batch.

        ``source`` sets every record's source and records the ingest in the source's
        row; ``sync`` and ``allow_mass_delete`` as for :meth:`ingest`. ``lines`` says where
        the records of a JSON Lines body stood, and which of its lines were refused before
        they were records: rejections then name the body's lines, as the CLI's name a
        file's (without it, a rejection names the record's place in ``records``). A record
        whose uid another source holds is refused (``SourceTakeoverRefused``, the whole
        batch) unless ``allow_move``.
        """
        from knowledge_store.errors import InvalidRecord, Rejection
        from knowledge_store.ingest.loaders import LoadedRecord, LoadResult, SourceInfo
        from knowledge_store.ingest.sync import check_sync, source_sync

        check_list_bound("acl", acl or (), MAX_ACL_PRINCIPALS, name="the default ACL")
        check_sync(source, sync)
        records = list(records)
        numbers: Sequence[int] = range(1, len(records) + 1)
        file, what = "<records>", "record"
        rejected: list[Rejection] = []
        if lines is not None:
            file, numbers, what = lines.file, lines.lines, "line"  # the body's own lines
            rejected.extend(lines.refused)
        entities: list[Entity] = []
        seen: dict[str, int] = {}
        for line, record in zip(numbers, records, strict=True):
            try:
                # An Entity is held to the same rules as a record: it is one, built in Python.
                entity = record_to_entity(
                    record.to_record() if isinstance(record, Entity) else record,
                    file=file,
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
                        file,
                        line,
                        entity.uid,
                        "uid",
                        f"duplicate uid in this batch (first at {what} {seen[entity.uid]})",
                    )
                )
                continue
            seen[entity.uid] = line
            entities.append(entity)
        rejected.sort(key=lambda r: r.line or 0)
        read = LoadResult(
            records=[LoadedRecord(file, None, entity) for entity in entities],
            rejections=rejected,
            sources=[SourceInfo(source, "records", file)],
        )
        return ingest_entities(
            self.engine.writer,
            self.embedder,
            self.embedder_spec,
            entities,
            rejected=rejected,
            skip_invalid=skip_invalid,
            progress=progress,
            source=None if source is None else source_sync(read, source, sync, allow_mass_delete),
            allow_move=allow_move,
        )

    @audited("delete", DeleteRequest, ("uids",))
    def delete(
        self, uids: Sequence[str] | DeleteRequest | None = None, *, source: str | None = None
    ) -> DeleteReport:
        """Delete entities (their chunks and outgoing edges) — or a whole ``source`` — as one
        publish. The entities split off one of them (a page's code samples, which share its
        ACL) are deleted with it, and the report then lists every uid deleted."""
        if isinstance(uids, DeleteRequest):
            request = uids
        else:
            if not uids and source is None:
                raise InvalidRequest("delete needs at least one uid", field="uids")
            request = DeleteRequest.parse(uids=list(uids or []), source=source)
        if request.source is not None:
            return self.delete_source(request.source)
        unique = list(dict.fromkeys(request.uids))
        published = self.engine.writer.delete(unique)
        # the entities split off those named (a page's code samples) go with them: say which
        also = len(published.deleted_uids) > len(unique)
        return DeleteReport(
            content_root=published.root,
            deleted=published.deleted,
            deleted_uids=list(published.deleted_uids[:DELETED_UIDS_SHOWN]) if also else None,
        )

    def delete_source(self, name: str) -> DeleteReport:
        """Delete every entity of source ``name`` (its row and crawl state too) as one publish."""
        writer = self.engine.writer
        if not any(view.source == name for view in writer.sources()):
            raise NotFound(f"no source named {name!r}", source=name)
        published = writer.delete_source(name)
        return DeleteReport(
            content_root=published.root,
            deleted=published.deleted,
            deleted_uids=list(published.deleted_uids[:DELETED_UIDS_SHOWN]),
        )

    @audited("check")
    def check(self, request: CheckRequest | None = None) -> CheckReport:
        """Verify the store (``ks check``): every entity's content hash recomputed from its
        stored fields, edges and ACL, every chunk against its entity's body, the database's
        own checks, and each derived index against the catalog — on one snapshot. The answer
        lists each kind of damage with its uids; ``ok`` when there is none."""
        return self.engine.writer.check()

    @audited("sources")
    def sources(self) -> list[SourceSummary]:
        """Every source: entities and chunks it holds, and its last ingest (an admin view:
        the counts are of all its entities, whatever their ACL)."""
        return self.engine.writer.sources()

    def watch(
        self,
        paths: Sequence[str | Path],
        *,
        source: str,
        format: str | None = None,
        acl: Sequence[str] | None = None,
        allow_mass_delete: bool = False,
        uid_prefix: str | None = None,
        allow_move: bool = False,
        on_sync: Callable[[list[Path], IngestReport], None] | None = None,
        on_error: Callable[[list[Path], Exception], None] | None = None,
        stop: threading.Event | None = None,
        quiet_ms: int = 300,
        max_wait_ms: int = 10_000,
        force_polling: bool | None = None,
    ) -> WatchSummary[IngestReport]:
        """Sync ``paths`` into ``source`` now, then again after each burst of file changes
        (``ingest.sync.watch_source``): each sync one publish, a bad file rejected (its
        stored version kept), an error handed to ``on_error`` — until Ctrl-C or ``stop``."""
        from knowledge_store.ingest.sync import watch_source

        def sync(_changed: list[Path]) -> IngestReport:
            return self.ingest(
                paths,
                format=format,
                source=source,
                acl=acl,
                skip_invalid=True,
                sync=True,
                allow_mass_delete=allow_mass_delete,
                uid_prefix=uid_prefix,
                allow_move=allow_move,
            )

        return watch_source(
            paths,
            sync,
            format=format,
            on_sync=on_sync,
            on_error=on_error,
            quiet_ms=quiet_ms,
            max_wait_ms=max_wait_ms,
            stop=stop,
            force_polling=force_polling,
        )

    # -- ACL administration ---------------------------------------------------------------------------
    @audited("acl_grant", AclRequest, ("uid", "principal"))
    def grant(self, uid: str | AclRequest, principal: str | None = None) -> AclChange:
        """Let ``principal`` read ``uid`` (one publish)."""
        request = request_of(AclRequest, uid, uid=uid, principal=principal)
        held = request.principal in self.acl_show(request.uid)
        root = self.engine.admin.grant(request.uid, request.principal)
        notes = [f"{request.principal} was already in {request.uid}'s ACL: nothing changed"]
        return self._acl_change(request, root, notes if held else [])

    @audited("acl_revoke", AclRequest, ("uid", "principal"))
    def revoke(self, uid: str | AclRequest, principal: str | None = None) -> AclChange:
        """Stop ``principal`` reading ``uid`` through its ACL (one publish). The answer warns
        when the principal was not in the ACL, and when it still reads the entity through a
        group that is."""
        request = request_of(AclRequest, uid, uid=uid, principal=principal)
        held = request.principal in self.acl_show(request.uid)
        root = self.engine.admin.revoke(request.uid, request.principal)
        notes = (
            [] if held else [f"{request.principal} was not in {request.uid}'s ACL: nothing changed"]
        )
        still = self.acl_explain(request.principal, request.uid)
        if still.allowed:
            notes.append(
                f"{request.principal} still reads {request.uid}: {' → '.join(still.chain)}"
            )
        return self._acl_change(request, root, notes)

    def _acl_change(self, request: AclRequest, root: str, notes: list[str]) -> AclChange:
        acl = self.acl_show(request.uid)
        return AclChange(content_root=root, uid=request.uid, acl=acl, warnings=tuple(notes))

    @audited("acl_show", AclShowRequest, ("uid",))
    def acl_show(self, uid: str) -> tuple[str, ...]:
        return self.engine.admin.acl_show(check_uid(uid))

    def acl_inherited_from(self, uid: str) -> str | None:
        """The uid whose ACL ``uid`` shares (it was split off that entity, as a code sample
        off its page), or None when the ACL is its own."""
        return self.engine.admin.acl_inherited_from(check_uid(uid))

    @audited("acl_explain", AclExplainRequest, ("principal", "uid", "at"))
    def acl_explain(self, principal: str, uid: str, at: str | None = None) -> AclExplanation:
        """Whether ``principal`` can read ``uid`` and through which chain — now, or ``at`` a
        content root or a moment (an ISO time), from the history (``acl explain --at``)."""
        if at is None:
            return self.engine.admin.acl_explain(principal, check_uid(uid))
        from knowledge_store.store.replay import explain_at

        kept_from = int(self.auditor.kept().get("history_from", 0))
        return explain_at(self.engine, principal, check_uid(uid), at, kept_from)

    @audited("principals_add_member", MemberRequest, ("group", "member"))
    def add_member(self, group: str | MemberRequest, member: str | None = None) -> PrincipalInfo:
        """Make ``member`` a member of ``group``; the member's groups after it."""
        request = request_of(MemberRequest, group, group=group, member=member)
        self.engine.admin.add_member(request.group, request.member)
        return self.engine.admin.principal_show(request.member)

    @audited("principals_remove_member", MemberRequest, ("group", "member"))
    def remove_member(self, group: str | MemberRequest, member: str | None = None) -> PrincipalInfo:
        """Remove ``member`` from ``group``; the member's groups after it."""
        request = request_of(MemberRequest, group, group=group, member=member)
        self.engine.admin.remove_member(request.group, request.member)
        return self.engine.admin.principal_show(request.member)

    @audited("principals_show", PrincipalRequest, ("principal",))
    def principal_show(self, principal: str | PrincipalRequest) -> PrincipalInfo:
        request = request_of(PrincipalRequest, principal, principal=principal)
        return self.engine.admin.principal_show(request.principal)

    @audited("principals_load", None, ("pairs",))
    def load_memberships(self, pairs: Sequence[tuple[str, str]]) -> MembershipsLoaded:
        return self.engine.admin.load_memberships(pairs)
