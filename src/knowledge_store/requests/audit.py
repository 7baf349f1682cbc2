"""The request models of the audit log: list, show, verify, export, replay, its settings, gc."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from knowledge_store.model.audit import QueryTextPolicy, duration_seconds, moment
from knowledge_store.requests.base import Principal, Request, Uid

__all__ = [
    "AuditExportRequest",
    "AuditListRequest",
    "AuditReplayRequest",
    "AuditSettingsRequest",
    "AuditShowRequest",
    "AuditVerifyRequest",
    "GcRequest",
    "Moment",
]

#: The most records one ``audit list`` answer holds.
MAX_AUDIT_LIST = 10_000


def _moment(value: str) -> str:
    return moment(value)


def _duration(value: str) -> str:
    seconds = duration_seconds(value)
    if seconds < 86400:
        raise ValueError("retain at least one day (1d)")
    return value.strip().lower()


def _anchor(value: str) -> str:
    seq, sep, digest = value.strip().partition(":")
    if not sep or not seq.isdigit() or len(digest) != 64:
        raise ValueError(
            "a head is SEQ:DIGEST, as audit verify prints it (42:9f3c…, 64 hex digits)"
        )
    return value.strip()


#: A moment: an ISO date, an ISO date and time, or a time ago (``7d``); normalised to UTC.
Moment = Annotated[str, AfterValidator(_moment)]
Retention = Annotated[str, AfterValidator(_duration)]
Switch = Literal["on", "off"]


class _Which(Request):
    """Which records: a time range, an identity, an entity, an operation."""

    since: Moment | None = Field(
        None, description="records from this moment on: an ISO date or time, or a time ago (7d)"
    )
    until: Moment | None = Field(None, description="records before this moment")
    identity: Principal | None = Field(None, description="records of reads acting as this identity")
    uid: Uid | None = Field(
        None, description="records whose answer named this entity (or that changed it)"
    )
    operation: str | None = Field(None, max_length=100, description="records of this operation")


class AuditListRequest(_Which):
    """Audit records, newest first: who read what, as whom, when."""

    k: int = Field(100, ge=1, le=MAX_AUDIT_LIST, description="how many records")


class AuditExportRequest(_Which):
    """Every record of a range, oldest first, for a SIEM."""

    format: Literal["jsonl", "otlp"] = Field(
        "jsonl",
        description="jsonl: one record a line, with its digest; otlp: OpenTelemetry spans"
        " (OTLP/JSON, one export request a line)",
    )


class AuditShowRequest(Request):
    """One audit record by its seq."""

    seq: int = Field(..., ge=1, description="the record's seq (audit list shows it)")


class AuditReplayRequest(Request):
    """Run a recorded read again at its content root, under that moment's ACLs and
    memberships, and compare."""

    seq: int = Field(..., ge=1, description="the record's seq (audit list shows it)")


class AuditVerifyRequest(Request):
    """Check the hash chain from the first kept record to the head."""

    head: Annotated[str, AfterValidator(_anchor)] | None = Field(
        None,
        description="a head kept elsewhere (SEQ:DIGEST, from an earlier verify): the log must"
        " still hold that record, unchanged",
    )


class AuditSettingsRequest(Request):
    """Show or change the audit settings (no argument: show them)."""

    enabled: Switch | None = Field(
        None, description="record every request of every surface (on by default)"
    )
    query_text: QueryTextPolicy | None = Field(
        None, description="what a record keeps of a query's text (keep by default)"
    )
    python: Switch | None = Field(
        None, description="record calls of the Python API too (off by default)"
    )
    retain: Retention | None = Field(
        None, description="how long ks gc keeps records and history (180d by default)"
    )
    fsync: Switch | None = Field(
        None, description="flush every record to disk before answering (off by default)"
    )


class GcRequest(Request):
    """Remove the audit records and the history no retained moment needs."""

    retain: Retention | None = Field(
        None, description="keep this much (default: the audit settings' retention, 180d)"
    )
    dry_run: bool = Field(False, description="say what would go, remove nothing")
