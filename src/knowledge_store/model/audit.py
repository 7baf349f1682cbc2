"""The audit log's record, its canonical form and hash chain, and the audit answers (DESIGN §8).

A record is one JSON object; what is hashed is its **canonical form**: keys sorted, no
whitespace, UTF-8 (no ``\\u`` escapes but for control characters), integers as written and
no NaN — ``json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False)``.
The chain: each record carries ``prev``, the digest of the record before it (the first
carries :data:`GENESIS`), and its own digest is ``sha256(prev + "\\n" + canonical form)``.
Change one byte of a record, remove one, or swap two, and every digest from there on no
longer follows from the records (:func:`chain_digest`).
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import Field

from knowledge_store.model.answers import Answer
from knowledge_store.model.text import printable

__all__ = [
    "AT_FORM",
    "AUDIT_PROBLEM_KINDS",
    "GENESIS",
    "QUERY_TEXT_POLICIES",
    "AuditAnchor",
    "AuditList",
    "AuditName",
    "AuditProblem",
    "AuditProblemKind",
    "AuditRecord",
    "AuditReplay",
    "AuditSettings",
    "AuditVerification",
    "GcReport",
    "QueryTextPolicy",
    "ReplayAccess",
    "ReplayComparison",
    "ReplayDifference",
    "canonical_json",
    "chain_digest",
    "duration_seconds",
    "moment",
    "principals_digest",
]

#: The ``prev`` of the first record of a log.
GENESIS = hashlib.sha256(b"knowledge-store:audit").hexdigest()

QueryTextPolicy = Literal["keep", "hash", "drop"]
#: What a record keeps of a query's text (it may be personal data): the text, a keyed hash of
#: it (equal texts have equal hashes; the key stays in the store), or nothing.
QUERY_TEXT_POLICIES: tuple[QueryTextPolicy, ...] = ("keep", "hash", "drop")


def canonical_json(value: Any) -> str:
    """The canonical JSON text of ``value`` (what the chain hashes). Text that is not Unicode
    (a file name's stray byte, a lone surrogate) is written as :func:`printable` writes it."""
    text = json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return canonical_json(_printable(value))
    return text


def _printable(value: Any) -> Any:
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable(str(k)): _printable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_printable(v) for v in value]
    return value


def chain_digest(prev: str, text: str) -> str:
    """The digest of a record whose canonical form is ``text``, after the record ``prev``."""
    return hashlib.sha256(f"{prev}\n{text}".encode()).hexdigest()


def principals_digest(held: tuple[str, ...] | list[str]) -> str:
    """A digest of the principals an identity held (sorted, one a line): equal sets, equal
    digests; the set itself is not in the record."""
    return hashlib.sha256("\n".join(sorted(held)).encode()).hexdigest()


class AuditName(Answer):
    """An entity a record names: what an answer returned (its rank, the chunks it showed), or
    what a change touched (rank null)."""

    uid: str
    rank: int | None = None
    chunks: list[int] = Field(default_factory=list, description="the chunk ids shown of it")


class AuditRecord(Answer):
    """One record of the audit log, as stored (every field is hashed) with its digest."""

    seq: int = Field(description="its place in the log: 1, 2, 3 …")
    at: str = Field(description="when the request arrived (UTC, ISO 8601 with microseconds)")
    surface: str = Field(description="cli, python, rest, graphql, mcp, page or scim")
    operation: str = Field(description="the operation of the table (search, acl_grant, …)")
    subject: str | None = Field(
        description="who authenticated: a token (token:<digest prefix>), an OAuth subject"
        " (oidc:<issuer>#<sub>), the operating system user of a CLI (os:<user>); null: none"
    )
    identity: str | None = Field(description="the identity the request acted as")
    groups: list[str] = Field(
        default_factory=list,
        description="groups the identity held by its credential (an access token's), not by"
        " memberships",
    )
    admin: bool = Field(description="whether the caller held the admin scope")
    principals: str | None = Field(
        None, description="digest of the principals the identity held (sha256 of the sorted set)"
    )
    request: dict[str, Any] = Field(description="the request as the operation parsed it")
    query_text: QueryTextPolicy = Field(description="what the request keeps of its query text")
    content_root: str | None = Field(None, description="the content root the answer was read at")
    publish: int | None = Field(None, description="the publish of that content root")
    returned: list[AuditName] = Field(
        default_factory=list, description="what the answer named, in its order"
    )
    answer: str | None = Field(None, description="sha256 of the answer's JSON")
    vector: dict[str, Any] | None = Field(
        None, description="how the vector list ran: strategy, exhaustive (approximate: false)"
    )
    changed: dict[str, Any] | None = Field(None, description="what a change changed")
    us: int = Field(description="how long the operation took, in microseconds")
    outcome: Literal["ok", "error"]
    error: dict[str, Any] | None = Field(None, description="the error's code (and message)")
    prev: str = Field(description="the digest of the record before")
    digest: str = Field(description="sha256(prev + newline + this record's canonical JSON)")


class AuditList(Answer):
    """``audit list``: records, newest first."""

    records: list[AuditRecord]
    truncated: bool = Field(description="more records matched than were returned")


AuditProblemKind = Literal["edited", "missing", "reordered", "truncated", "index"]
#: What ``audit verify`` can find: a record whose digest no longer follows from it (edited), a
#: seq with no record (missing: deleted), a record in another record's place (reordered), the
#: log ending before its head or a checkpoint (truncated), the lookup tables not agreeing with
#: the records (index: ``audit list`` would lie).
AUDIT_PROBLEM_KINDS: tuple[AuditProblemKind, ...] = (
    "edited",
    "missing",
    "reordered",
    "truncated",
    "index",
)


class AuditProblem(Answer):
    kind: AuditProblemKind
    seq: int | None
    message: str


class AuditAnchor(Answer):
    """A place in the chain: a record's seq and digest."""

    seq: int
    digest: str


class AuditVerification(Answer):
    """``audit verify``: whether every record follows from the one before, from the first kept
    to the head, and agrees with the head and the checkpoints."""

    ok: bool
    records: int = Field(description="records checked")
    first: AuditAnchor | None = Field(
        description="where the kept chain starts (after gc: its base)"
    )
    head: AuditAnchor | None = Field(
        description="the last record: keep it elsewhere to check later"
    )
    checkpoints: int = Field(description="checkpoints in the catalog checked against the log")
    problems: list[AuditProblem]

    @property
    def exit_status(self) -> int:
        """The CLI's exit status: 1 when the log was tampered with."""
        return 0 if self.ok else 1


class AuditSettings(Answer):
    """The store's audit settings (``audit settings``)."""

    enabled: bool = Field(description="every request of every surface appends a record")
    query_text: QueryTextPolicy = Field(description="keep, hash or drop a query's text")
    python: bool = Field(description="calls of the Python API are recorded too (surface python)")
    retain_days: int = Field(description="how long records and history are kept (ks gc)")
    fsync: bool = Field(
        description="flush each append to disk before answering (embedded; PostgreSQL follows"
        " its synchronous_commit)"
    )


# -- moments and durations, as the audit commands take them ------------------------------------
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
#: The form of a record's ``at`` (sorts as text).
AT_FORM = "%Y-%m-%dT%H:%M:%S.%fZ"


def duration_seconds(text: str) -> int:
    """``90s``, ``15m``, ``12h``, ``180d``, ``4w`` → seconds; ValueError otherwise."""
    value = text.strip().lower()
    if len(value) < 2 or value[-1] not in _UNITS or not value[:-1].isdigit():
        raise ValueError(
            f"{text!r} is not a duration: write a whole number and a unit, s m h d or w (180d)"
        )
    return int(value[:-1]) * _UNITS[value[-1]]


def moment(text: str, now: datetime | None = None) -> str:
    """A moment as records write ``at``: an ISO date (midnight UTC), an ISO date and time
    (UTC without an offset), or a duration before now (``7d``: seven days ago)."""
    now = now or datetime.now(UTC)
    value = text.strip()
    if value and value[-1].lower() in _UNITS and value[:-1].isdigit():
        return (now - timedelta(seconds=duration_seconds(value))).strftime(AT_FORM)
    try:
        found = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{text!r} is not a moment: write an ISO date (2025-01-31), a date and time"
            " (2025-01-31T14:00:00Z) or a time ago (30d, 12h, 15m)"
        ) from None
    if found.tzinfo is None:
        found = found.replace(tzinfo=UTC)
    return found.astimezone(UTC).strftime(AT_FORM)


# -- replay ----------------------------------------------------------------------------------------------
class ReplayDifference(Answer):
    """An entity in one answer and not the other (or at another rank), and why."""

    uid: str
    before: int | None = Field(description="its rank in the earlier answer (null: absent)")
    after: int | None = Field(description="its rank in the later answer (null: absent)")
    explained: bool
    causes: list[str] = Field(description="the changes that made the difference, one a line")


class ReplayComparison(Answer):
    """Two answers to one request, compared by what they named and in which order."""

    identical: bool = Field(description="the same entities, ranks and chunks")
    same_answer: bool | None = Field(
        None, description="the answers' JSON is byte for byte the same (digest); null: unknown"
    )
    differences: list[ReplayDifference]


class ReplayAccess(Answer):
    """Whether the identity could read an entity the record names, at the record's moment."""

    uid: str
    readable: bool
    present: bool = Field(description="the entity was in the content root")
    through: str | None = Field(None, description="the ACL entry it held, and how")


class AuditReplay(Answer):
    """``audit replay``: a recorded read run again at its content root under the memberships
    of its moment (``then``: against the record), and now (``now``: against ``then``), every
    difference explained by the change that caused it."""

    seq: int
    operation: str
    identity: str | None
    at: str
    content_root: str | None
    publish: int | None
    replayed: bool = Field(description="the read was run again (see note when not)")
    note: str | None = None
    memberships_at: str | None = Field(
        None, description="the moment whose memberships gave the record's principals"
    )
    principals_match: bool | None = Field(
        None, description="the principals held then, rebuilt from the history, match the record"
    )
    access: list[ReplayAccess] = Field(
        default_factory=list, description="each entity the record names: readable then?"
    )
    then: ReplayComparison | None = Field(
        None, description="the record against the read run again at its root, then"
    )
    now: ReplayComparison | None = Field(
        None, description="the read run again then, against the same read now"
    )
    now_root: str | None = None
    explained: bool = Field(description="every difference is explained (no leak, no unknown)")

    @property
    def exit_status(self) -> int:
        """The CLI's exit status: 1 when a difference is not explained."""
        return 0 if self.explained else 1


class GcReport(Answer):
    """``ks gc``: what the retention removed (``dry_run``: would remove) of the audit log and
    of the history."""

    retain_days: int
    before: str = Field(description="what is older than this moment goes")
    dry_run: bool
    records: int = Field(description="audit records removed")
    history: dict[str, int] = Field(
        description="history rows removed: entity versions, chunks, memberships"
    )
    history_from: int = Field(
        description="the first publish whose content can still be rebuilt (replay, acl explain at a moment)"
    )
