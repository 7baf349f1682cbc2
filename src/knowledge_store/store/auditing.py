"""Reading the audit log: list, show, verify, export, and its settings (``ks audit …``).

Reading the log is administration (every operation here needs the admin scope over HTTP),
and is itself recorded. ``verify`` walks the chain from the first kept record to the head
(:func:`verify_chain`); ``export`` writes JSON Lines, or OpenTelemetry spans
(:func:`otlp_line`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

from knowledge_store.engines.sql.audit import (
    INDEXED,
    AuditStorage,
    RecordFilter,
    StoredRecord,
    names_of,
)
from knowledge_store.errors import NotFound, StoreError
from knowledge_store.model.audit import (
    AT_FORM,
    AuditAnchor,
    AuditList,
    AuditProblem,
    AuditRecord,
    AuditReplay,
    AuditSettings,
    AuditVerification,
    GcReport,
    chain_digest,
    duration_seconds,
)
from knowledge_store.requests import (
    AuditExportRequest,
    AuditListRequest,
    AuditReplayRequest,
    AuditSettingsRequest,
    AuditShowRequest,
    AuditVerifyRequest,
    GcRequest,
)
from knowledge_store.requests.audit import _Which
from knowledge_store.store.audit import Auditor, audited
from knowledge_store.store.replay import Replayer

if TYPE_CHECKING:
    from knowledge_store.engines.base import Engine
    from knowledge_store.store import KnowledgeStore

__all__ = ["Auditing", "otlp_line", "verify_chain"]

#: Problems one verify lists at most (the count of each kind is exact).
PROBLEMS_SHOWN = 100


def _filter(request: _Which) -> RecordFilter:
    return RecordFilter(
        since=request.since,
        until=request.until,
        identity=request.identity,
        uid=request.uid,
        operation=request.operation,
    )


def parsed(stored: StoredRecord) -> AuditRecord:
    """A stored record as the answer shows it (a record that no longer parses is damage)."""
    try:
        return AuditRecord.model_validate(stored.fields())
    except ValueError as exc:
        raise StoreError(
            f"audit record {stored.seq} cannot be read ({str(exc)[:200]}): the log was changed"
            " by hand; ks audit verify says where",
            seq=stored.seq,
        ) from exc


class Auditing:
    """The audit log's operations; mixed into ``KnowledgeStore``."""

    engine: Engine
    auditor: Auditor

    @audited("audit_list", AuditListRequest)
    def audit_list(self, request: AuditListRequest | None = None) -> AuditList:
        """Records, newest first (``k`` at most) — e.g. every read whose answer named ``uid``:
        who saw this document, as whom, and when."""
        request = request or AuditListRequest()
        found = self.engine.audit.find(_filter(request), request.k + 1)
        return AuditList(
            records=[parsed(r) for r in found[: request.k]], truncated=len(found) > request.k
        )

    @audited("audit_show", AuditShowRequest, ("seq",))
    def audit_show(self, request: AuditShowRequest | int) -> AuditRecord:
        seq = (
            request.seq
            if isinstance(request, AuditShowRequest)
            else AuditShowRequest(seq=request).seq
        )
        stored = self.engine.audit.record(seq)
        if stored is None:
            raise NotFound(f"no audit record {seq}", seq=seq)
        return parsed(stored)

    @audited("audit_verify", AuditVerifyRequest)
    def audit_verify(self, request: AuditVerifyRequest | None = None) -> AuditVerification:
        """Every record from the first kept to the head checked against the one before, the
        head row, the checkpoint in the catalog and (``head``) a head kept elsewhere."""
        request = request or AuditVerifyRequest()
        kept = None
        if request.head is not None:
            seq, _, digest = request.head.partition(":")
            kept = (int(seq), digest)
        return verify_chain(self.engine.audit, kept)

    @audited("audit_export", AuditExportRequest)
    def audit_export(self, request: AuditExportRequest | None = None) -> Iterator[str]:
        """The records of a range, oldest first, one line each (``jsonl``: the record with its
        digest; ``otlp``: an OTLP/JSON export request holding its span). The export is
        recorded as one record, before its first line is read."""
        return _export_lines(self.engine.audit, request or AuditExportRequest())

    @audited("audit_replay", AuditReplayRequest, ("seq",))
    def audit_replay(self, request: AuditReplayRequest | int) -> AuditReplay:
        """Run recorded read ``seq`` again at its content root under the memberships of its
        moment, and now; explain every difference (:mod:`.replay`)."""
        seq = request.seq if isinstance(request, AuditReplayRequest) else int(request)
        stored = self.engine.audit.record(seq)
        if stored is None:
            raise NotFound(f"no audit record {seq}", seq=seq)
        with Replayer(cast("KnowledgeStore", self)) as replayer:
            return replayer.replay(parsed(stored))

    @audited("gc", GcRequest)
    def gc(self, request: GcRequest | None = None) -> GcReport:
        """Remove the audit records older than the retention, and the history no retained
        moment needs (``dry_run``: count them)."""
        request = request or GcRequest()
        days = (
            duration_seconds(request.retain) // 86400
            if request.retain is not None
            else self.auditor.settings().retain_days
        )
        before = (datetime.now(UTC) - timedelta(days=days)).strftime(AT_FORM)
        with self.engine.history() as history:
            # the latest publish at the cut: a read after it may have read that root
            kept = [p.id for p in history.publishes() if p.moment <= before]
        boundary = max(kept, default=0)
        storage = self.engine.audit
        records = storage.count_before(before) if request.dry_run else storage.prune(before)
        removed = self.engine.prune_history(boundary, before, dry_run=request.dry_run)
        history_from = max(boundary, int(self.auditor.kept().get("history_from", 0)))
        if not request.dry_run:
            self.auditor.keep(history_from=history_from)
        return GcReport(
            retain_days=days,
            before=before,
            dry_run=request.dry_run,
            records=records,
            history=removed,
            history_from=history_from,
        )

    @audited("audit_settings", AuditSettingsRequest)
    def audit_settings(self, request: AuditSettingsRequest | None = None) -> AuditSettings:
        """The audit settings; with any field set, changed (the change is recorded, even the
        one that turns the log off)."""
        request = request or AuditSettingsRequest()
        current = self.auditor.settings()
        changes: dict[str, Any] = {}
        for name in ("enabled", "python", "fsync"):
            value = getattr(request, name)
            if value is not None:
                changes[name] = value == "on"
        if request.query_text is not None:
            changes["query_text"] = request.query_text
        if request.retain is not None:
            changes["retain_days"] = duration_seconds(request.retain) // 86400
        if not changes:
            return current
        updated = current.model_copy(update=changes)
        self.auditor.save_settings(updated)
        return updated


def _export_lines(storage: AuditStorage, request: AuditExportRequest) -> Iterator[str]:
    for stored in storage.scan(_filter(request)):
        fields = stored.fields()
        if request.format == "otlp":
            yield otlp_line(fields)
        else:
            yield json.dumps(fields, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _nanos(at: str) -> int:
    from datetime import datetime

    found = datetime.fromisoformat(at.replace("Z", "+00:00"))
    return int(found.timestamp()) * 1_000_000_000 + found.microsecond * 1000


def _attr(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    if isinstance(value, str):
        return {"key": key, "value": {"stringValue": value}}
    return {
        "key": key,
        "value": {"stringValue": json.dumps(value, ensure_ascii=False, sort_keys=True)},
    }


def otlp_line(record: dict[str, Any]) -> str:
    """One record as an OTLP/JSON ``ExportTraceServiceRequest`` holding one span (the line
    format of the OpenTelemetry Collector's file exporter and ``otlpjsonfile`` receiver):
    trace and span ids from the record's digest, the operation its name, the request's
    time its start and the record's duration its length, every field an attribute
    (``ks.*``), an error its status."""
    digest = str(record["digest"])
    start = _nanos(str(record["at"]))
    attributes = [
        _attr(f"ks.{key}", value)
        for key, value in sorted(record.items())
        if value is not None and key not in ("at", "us")
    ]
    error = record.get("error")
    span = {
        "traceId": digest[:32],
        "spanId": digest[32:48],
        "name": f"ks.{record['operation']}",
        "kind": 2,  # SPAN_KIND_SERVER
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + int(record.get("us") or 0) * 1000),
        "attributes": attributes,
        "status": {"code": 2, "message": str(error.get("code"))}
        if isinstance(error, dict)
        else {"code": 1},
    }
    body = {
        "resourceSpans": [
            {
                "resource": {"attributes": [_attr("service.name", "knowledge-store")]},
                "scopeSpans": [{"scope": {"name": "knowledge_store.audit"}, "spans": [span]}],
            }
        ]
    }
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


# -- verify ------------------------------------------------------------------------------------------
def verify_chain(
    storage: AuditStorage, kept: tuple[int, str] | None = None, batch: int = 1000
) -> AuditVerification:
    """Walk the log (see :class:`~knowledge_store.model.audit.AuditVerification`)."""
    head = storage.head()
    problems: list[AuditProblem] = []

    def problem(kind: str, seq: int | None, message: str) -> None:
        problems.append(AuditProblem(kind=kind, seq=seq, message=message))

    prev = head.base_digest
    expected = head.base_seq + 1
    checked = 0
    last = head.base_seq
    digests: dict[int, str] = {}
    wanted = {s for s, _ in [kept or (0, ""), storage.checkpoint() or (0, "")] if s}
    pending: list[tuple[StoredRecord, dict[str, Any]]] = []
    flagged = False

    def check_names(rows: list[tuple[StoredRecord, dict[str, Any]]]) -> None:
        if not rows:
            return
        stored_names = storage.names(rows[0][0].seq, rows[-1][0].seq)
        for stored, fields in rows:
            if stored_names.get(stored.seq, set()) != set(names_of(fields)):
                problem(
                    "index",
                    stored.seq,
                    f"the entities listed for record {stored.seq} are not those it names:"
                    " a lookup by entity would not find it where it should",
                )

    for stored in storage.scan(RecordFilter(after=head.base_seq), batch):
        checked += 1
        suspect = len(problems)
        if stored.seq > expected:
            gone = f"{expected}" if stored.seq == expected + 1 else f"{expected}–{stored.seq - 1}"
            problem("missing", expected, f"records {gone} are missing: deleted from the log")
        try:
            fields = json.loads(stored.record)
            if not isinstance(fields, dict):
                raise ValueError("not an object")
        except ValueError:
            problem("edited", stored.seq, f"record {stored.seq} is not a JSON object any more")
            prev, expected, last, flagged = stored.digest, stored.seq + 1, stored.seq, True
            continue
        own = fields.get("seq")
        if own != stored.seq:
            problem(
                "reordered",
                stored.seq,
                f"the record in place {stored.seq} is record {own}: records were moved",
            )
        elif chain_digest(str(fields.get("prev")), stored.record) != stored.digest:
            problem("edited", stored.seq, f"record {stored.seq} was changed after it was written")
        elif fields.get("prev") != prev and stored.seq == expected and not flagged:
            problem(
                "edited",
                stored.seq - 1,
                f"record {stored.seq} does not follow record {stored.seq - 1}: record"
                f" {stored.seq - 1} was replaced",
            )
        for name in INDEXED:
            if getattr(stored, name) != fields.get(name):
                problem(
                    "index",
                    stored.seq,
                    f"record {stored.seq}'s {name} column says {getattr(stored, name)!r}, the"
                    f" record {fields.get(name)!r}: lookups by {name} would mislead",
                )
        if stored.seq in wanted:
            digests[stored.seq] = stored.digest
        pending.append((stored, fields))
        if len(pending) >= batch:
            check_names(pending)
            pending = []
        # the next record's link to a record found wrong says nothing more
        flagged = any(p.kind != "index" for p in problems[suspect:])
        prev, expected, last = stored.digest, stored.seq + 1, stored.seq
    check_names(pending)
    if last < head.seq:
        problem(
            "truncated",
            last + 1,
            f"the log ends at record {last}, its head at {head.seq}: the records after {last}"
            " were removed",
        )
    elif last > head.seq:
        problem(
            "index",
            head.seq + 1,
            f"records after the head ({head.seq}) are in the log: they were not appended by"
            " the store",
        )
    elif head.seq > head.base_seq and prev != head.digest:
        problem("edited", head.seq, f"record {head.seq} is not the head the log recorded")
    checkpoints = 0
    for label, anchor in (
        ("the checkpoint in the catalog", storage.checkpoint()),
        ("the head given", kept),
    ):
        if anchor is None:
            continue
        seq, digest = anchor
        if seq <= head.base_seq:
            continue  # removed by gc: nothing to compare
        checkpoints += 1
        if seq > last:
            problem(
                "truncated",
                last + 1,
                f"{label} names record {seq}, but the log ends at {last}: records were removed"
                " (and the head rewritten)",
            )
        elif digests.get(seq) != digest:
            problem(
                "edited",
                seq,
                f"record {seq} is not the one {label} names: the log up to it was rewritten",
            )
    first = AuditAnchor(seq=head.base_seq, digest=head.base_digest) if head.base_seq else None
    return AuditVerification(
        ok=not problems,
        records=checked,
        first=first,
        head=AuditAnchor(seq=last, digest=prev) if last > head.base_seq else None,
        checkpoints=checkpoints,
        problems=problems[:PROBLEMS_SHOWN],
    )
