"""What a store's requests and changes append to its audit log (DESIGN §8).

Every surface records through one door, :meth:`Auditor.recording` (the operation table's
``perform`` for CLI, REST, GraphQL, MCP and the page; SCIM and the CLI's own commands
directly; the Python API's methods through :func:`audited` when the store's settings say
so). A recording knows the surface, the operation, who authenticated (``subject``), the
identity acted as and the parsed request; the store notes in it what its reader read at —
the publish, the content root, the principals the identity held (:meth:`note_reader`) —
and the answer names what it returned (:func:`returned_of`). When the operation ends the
record is appended, and only then is the answer handed back: an answer is never given
without its record (an append that fails fails the request, ``store_error``).

Appending is a group commit: a request that finds no append running appends every record
queued so far in one transaction, then wakes those it carried; the others wait for it
(:class:`_GroupCommit`). A lone request pays one commit; concurrent ones share it.

A record never holds more than its caller saw: the uids and chunk ids its answer named,
the digest of that answer, the request as given (its query text kept, hashed with a key of
the store, or dropped — :data:`~knowledge_store.model.audit.QUERY_TEXT_POLICIES`).
"""

from __future__ import annotations

import functools
import getpass
import hashlib
import hmac
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np
from pydantic import BaseModel

from knowledge_store.engines.sql.audit import AuditStorage
from knowledge_store.errors import KnowledgeStoreError, StoreError
from knowledge_store.model import Answer, ChunkHits, Content, GraphHits, SearchAnswer, SqlHits
from knowledge_store.model.audit import (
    QUERY_TEXT_POLICIES,
    AuditSettings,
    canonical_json,
    principals_digest,
)
from knowledge_store.requests import Request

if TYPE_CHECKING:
    from knowledge_store.store import KnowledgeStore

__all__ = [
    "CHANGES",
    "DEFAULT_SETTINGS",
    "QUERY_TEXT_POLICIES",
    "Auditor",
    "Recording",
    "audited",
    "current_recording",
    "operating_system_user",
    "request_view",
    "returned_of",
]

log = logging.getLogger(__name__)

#: The operations that change the store (their records carry ``changed``; each one moves the
#: checkpoint in the catalog).
CHANGES = frozenset(
    {
        "ingest",
        "delete",
        "acl_grant",
        "acl_revoke",
        "principals_add_member",
        "principals_remove_member",
        "principals_load",
        "rebuild",
        "reembed",
        "audit_settings",
        "gc",
    }
)

#: How many uids a change's record names at most (``changed.uids``; ``changed.more`` counts
#: the rest).
CHANGED_UIDS = 1000
#: A request that could not be parsed is kept as given, cut at this many characters of JSON.
RAW_REQUEST_CHARS = 4096
#: How often (seconds) a store that only reads moves the checkpoint in the catalog.
CHECKPOINT_EVERY_S = 1.0
#: How long the settings read from the log are trusted before they are read again.
SETTINGS_TTL_S = 1.0

DEFAULT_SETTINGS = AuditSettings(
    enabled=True, query_text="keep", python=False, retain_days=180, fsync=False
)

_CURRENT: ContextVar[Recording | None] = ContextVar("knowledge_store_audit", default=None)


def current_recording() -> Recording | None:
    """The recording of the request this thread is serving (None: none, or the log is off)."""
    found = _CURRENT.get()
    return None if found is _OFF else found


def operating_system_user() -> str:
    """The subject of a local caller: ``os:<login name>``."""
    try:
        return f"os:{getpass.getuser()}"
    except (KeyError, OSError):  # no name for this uid (a container)
        import os

        return f"os:uid-{os.getuid()}"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# -- what a record says of a request and its answer ------------------------------------------------
def _plain(value: Any) -> Any:
    """A value as JSON can hold it (a request's own model dump, arrays as lists)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_defaults=True)
    if isinstance(value, np.ndarray):
        return [float(x) for x in value.reshape(-1)]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return repr(value)


def request_view(request: Any, policy: str, key: bytes) -> tuple[dict[str, Any], str]:
    """What a record keeps of ``request`` and what it did with its query text."""
    if isinstance(request, Request):
        view: dict[str, Any] = request.model_dump(mode="json", exclude_defaults=True)
        text_fields = type(request).text_fields
        records = view.get("records")
        if isinstance(records, list):  # an ingest's records are its changes, not its request
            view["records"] = len(records)
    else:
        view = cast(dict[str, Any], _plain(dict(request or {})))
        text_fields = ("query", "vector", "params", "ref", "text")
        text = canonical_json(view)
        if len(text) > RAW_REQUEST_CHARS:
            view = {"raw": text[:RAW_REQUEST_CHARS], "cut": True}
            text_fields = ("raw",)
    present = [name for name in text_fields if name in view]
    if not present:
        return view, "keep"
    for name in present:
        if policy == "drop":
            del view[name]
        elif policy == "hash":
            mac = hmac.new(key, canonical_json(view[name]).encode(), hashlib.sha256)
            view[name] = f"hmac-sha256:{mac.hexdigest()}"
    return view, policy


def _names_in(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The uids of a list of answer items (and the chunk ids each showed), in order, once
    each; rank: the item's own (``rank``), else its place."""
    out: dict[str, dict[str, Any]] = {}
    for place, row in enumerate(rows, 1):
        uid = row.get("uid")
        if not isinstance(uid, str):
            continue
        rank = row.get("rank")
        named = out.setdefault(
            uid, {"uid": uid, "rank": rank if isinstance(rank, int) else place, "chunks": []}
        )
        chunk = row.get("chunk_id")
        if isinstance(chunk, int):
            named["chunks"].append(chunk)
        for part in ("evidence", "chunks", "passages"):
            for item in row.get(part) or ():
                if isinstance(item, dict) and isinstance(item.get("chunk_id"), int):
                    named["chunks"].append(item["chunk_id"])
    return [_compact(n) for n in out.values()]


def _compact(named: dict[str, Any]) -> dict[str, Any]:
    if not named["chunks"]:
        del named["chunks"]
    return named


def _walk(value: Any, found: list[dict[str, Any]]) -> None:
    """Every list of items with a uid, depth first (the generic answer)."""
    if isinstance(value, dict):
        for item in value.values():
            _walk(item, found)
    elif isinstance(value, list):
        if value and all(isinstance(v, dict) for v in value) and any("uid" in v for v in value):
            found.extend(_names_in(value))
        for item in value:
            _walk(item, found)


def returned_of(answer: Any) -> list[dict[str, Any]]:
    """What ``answer`` named: ``[{"uid", "rank", "chunks"?}]`` in its order.

    The ranked answers are read from their items; content names its entity (with the chunks
    it showed) first; any other answer is walked for the items that carry a uid (content's
    edges, a learning path …), and query_graph's rows give the values of their ``uid``
    columns."""
    if isinstance(answer, SearchAnswer):
        return [
            _compact({"uid": r.uid, "rank": i, "chunks": [e.chunk_id for e in r.evidence]})
            for i, r in enumerate(answer.results, 1)
        ]
    if isinstance(answer, ChunkHits):
        out: dict[str, dict[str, Any]] = {}
        for hit in answer.hits:
            named = out.setdefault(hit.uid, {"uid": hit.uid, "rank": hit.rank, "chunks": []})
            named["chunks"].append(hit.chunk_id)
        return list(out.values())
    if isinstance(answer, SqlHits | GraphHits):
        return [{"uid": h.uid, "rank": h.rank} for h in answer.hits]
    if not isinstance(answer, BaseModel):
        return []
    data = answer.model_dump(mode="json")
    columns = data.get("columns")
    if isinstance(columns, list) and isinstance(data.get("rows"), list):
        picked = [i for i, c in enumerate(columns) if str(c).split(".")[-1] == "uid"]
        rows = [{"uid": row[i]} for row in data["rows"] for i in picked if isinstance(row, list)]
        return _names_in(rows)
    found: list[dict[str, Any]] = []
    if isinstance(answer, Content):  # the entity read, with the chunks shown; then its edges
        chunks = [c.chunk_id for c in answer.chunks]
        found.append(_compact({"uid": answer.entity.uid, "chunks": chunks}))
    elif isinstance(data.get("uid"), str):
        found.append({"uid": data["uid"]})
    _walk(data, found)
    seen: dict[str, dict[str, Any]] = {}
    for named in found:
        seen.setdefault(named["uid"], named)
    return list(seen.values())


def changed_of(request: Any, answer: Any) -> dict[str, Any]:
    """What a change's record says it changed: the answer's counts and the uids it named."""
    data = answer.to_dict() if isinstance(answer, Answer) else {}
    uids: list[str] = []
    for name in ("uid",):
        if isinstance(data.get(name), str):
            uids.append(data[name])
    if isinstance(request, Request):
        given = request.model_dump(mode="python")
        for record in given.get("records") or ():
            if isinstance(record, dict) and isinstance(record.get("uid"), str):
                uids.append(record["uid"])
        uids += [u for u in given.get("uids") or () if isinstance(u, str)]
    uids += [u for u in data.get("deleted_uids") or () if isinstance(u, str)]
    uids = list(dict.fromkeys(uids))
    changed: dict[str, Any] = {
        k: v for k, v in data.items() if isinstance(v, int | str | bool) and k != "content_root"
    }
    if isinstance(data.get("acl"), list):
        changed["acl"] = data["acl"]
    if uids:
        changed["uids"] = uids[:CHANGED_UIDS]
        if len(uids) > CHANGED_UIDS:
            changed["more"] = len(uids) - CHANGED_UIDS
    return changed


def answer_digest(answer: Any) -> str | None:
    """sha256 of the answer's JSON (as the REST body has it; text that is not Unicode as
    :func:`~knowledge_store.model.printable` writes it)."""
    if not isinstance(answer, BaseModel):
        return None
    try:
        body = answer.model_dump_json().encode()
    except ValueError:  # a lone surrogate: pydantic writes no JSON of it
        body = canonical_json(answer.model_dump(mode="json")).encode()
    return hashlib.sha256(body).hexdigest()


# -- one request being recorded --------------------------------------------------------------------
class Recording:
    """One request: what its surface said, what its reader read at, how it ended."""

    __slots__ = (
        "_auditor",
        "_started",
        "admin",
        "answer",
        "appended",
        "at",
        "content_root",
        "error",
        "groups",
        "held",
        "identity",
        "operation",
        "publish",
        "request",
        "subject",
        "surface",
    )

    def __init__(
        self,
        auditor: Auditor,
        surface: str,
        operation: str,
        subject: str | None,
        identity: str | None,
        admin: bool,
        request: Any,
        groups: tuple[str, ...] = (),
    ) -> None:
        self._auditor = auditor
        self.groups = groups
        self._started = time.perf_counter()
        self.at = _now()
        self.surface = surface
        self.operation = operation
        self.subject = subject
        self.identity = identity
        self.admin = admin
        self.request = request
        self.publish: int | None = None
        self.content_root: str | None = None
        self.held: tuple[str, ...] | None = None
        self.answer: Any = None
        self.error: KnowledgeStoreError | Exception | None = None
        #: The record's (seq, digest) once it is appended (durable).
        self.appended: tuple[int, str] | None = None

    def note_reader(self, publish: int, content_root: str, held: Sequence[str]) -> None:
        """The reader the request read on (the first one: a request reads on one)."""
        if self.held is None:
            self.publish, self.content_root, self.held = publish, content_root, tuple(held)

    def note_request(self, request: Any) -> None:
        """The request as the operation parsed it (when the surface had only its fields)."""
        self.request = request

    def fields(self, settings: AuditSettings, key: bytes) -> dict[str, Any]:
        """The record (without its seq and chain digest)."""
        view, kept = request_view(self.request, settings.query_text, key)
        answer = self.answer
        root = getattr(answer, "content_root", None)
        record: dict[str, Any] = {
            "at": self.at,
            "surface": self.surface,
            "operation": self.operation,
            "subject": self.subject,
            "identity": self.identity,
            "admin": self.admin,
            "request": view,
            "query_text": kept,
            "us": int((time.perf_counter() - self._started) * 1e6),
            "outcome": "ok" if self.error is None else "error",
        }
        if self.groups:  # held by the credential (an access token's groups), not memberships
            record["groups"] = list(self.groups)
        if self.held is not None:
            record["principals"] = principals_digest(self.held)
        if isinstance(root, str):
            record["content_root"] = root
            if root == self.content_root and self.publish is not None:
                record["publish"] = self.publish
        elif self.content_root is not None:
            record["content_root"], record["publish"] = self.content_root, self.publish
        if self.error is None:
            # the log's own answers name what other records named: not what this one saw
            named = not self.operation.startswith("audit_")
            record["returned"] = returned_of(answer) if named else []
            digest = answer_digest(answer)
            if digest is not None:
                record["answer"] = digest
            vector = getattr(answer, "vector", None)
            if vector is not None and hasattr(vector, "exhaustive"):  # how the vector list ran
                record["vector"] = {"strategy": vector.strategy, "exhaustive": vector.exhaustive}
            if self.operation in CHANGES:
                record["changed"] = changed_of(self.request, answer)
                record["returned"] = []
        else:
            code = getattr(self.error, "code", None) or "store_error"
            error: dict[str, Any] = {"code": code}
            if kept == "keep":
                error["message"] = str(getattr(self.error, "message", self.error))[:1000]
            record["error"] = error
        return record


# -- appending -----------------------------------------------------------------------------------------
class _Slot:
    __slots__ = ("done", "error", "fields", "result")

    def __init__(self, fields: dict[str, Any]) -> None:
        self.fields = fields
        self.done = False
        self.result: tuple[int, str] | None = None
        self.error: BaseException | None = None


class _GroupCommit:
    """Appends with one leader at a time: the leader writes every record queued, in one
    transaction, and wakes the requests it carried."""

    def __init__(self, append: Callable[[list[dict[str, Any]]], list[tuple[int, str]]]) -> None:
        self._append = append
        self._cond = threading.Condition()
        self._queue: list[_Slot] = []
        self._leading = False

    def append(self, fields: dict[str, Any]) -> tuple[int, str]:
        slot = _Slot(fields)
        with self._cond:
            self._queue.append(slot)
            while self._leading and not slot.done:
                self._cond.wait()
            if not slot.done:
                self._leading = True
                batch, self._queue = self._queue, []
            else:
                batch = []
        if batch:
            try:
                results = self._append([s.fields for s in batch])
                for s, result in zip(batch, results, strict=True):
                    s.result = result
            except BaseException as exc:
                for s in batch:
                    s.error = exc
            with self._cond:
                for s in batch:
                    s.done = True
                self._leading = False
                self._cond.notify_all()
        if slot.error is not None:
            raise slot.error
        assert slot.result is not None
        return slot.result


class Auditor:
    """A store's audit log: its settings, the door every request is recorded through, and
    the appends (the reads of the log are :mod:`.audit_log`'s)."""

    def __init__(self, storage: AuditStorage) -> None:
        self.storage = storage
        self._group = _GroupCommit(self._append)
        self._settings: AuditSettings | None = None
        self._key: bytes | None = None
        self._read_at = 0.0
        self._checkpointed = 0.0
        self._lock = threading.Lock()
        #: The subject of the Python API's records.
        self.python_subject = operating_system_user()

    # -- settings ----------------------------------------------------------------------------
    def settings(self) -> AuditSettings:
        """The store's settings (read from the log at most once a second)."""
        now = time.monotonic()
        found = self._settings
        if found is not None and now - self._read_at < SETTINGS_TTL_S:
            return found
        head = self.storage.head()
        own = {k: v for k, v in head.settings.items() if k in AuditSettings.model_fields}
        found = AuditSettings.model_validate({**DEFAULT_SETTINGS.model_dump(), **own})
        with self._lock:
            self._settings, self._key, self._read_at = found, bytes.fromhex(head.key), now
        self.storage.fsync = found.fsync
        return found

    def key(self) -> bytes:
        if self._key is None:
            self.settings()
        assert self._key is not None
        return self._key

    def kept(self) -> dict[str, Any]:
        """What the log's head keeps beside the settings (``history_from``: the first publish
        whose history gc kept)."""
        head = self.storage.head().settings
        return {k: v for k, v in head.items() if k not in AuditSettings.model_fields}

    def keep(self, **values: Any) -> None:
        settings = self.settings()
        self.storage.save_settings({**self.kept(), **values, **settings.model_dump()})

    def save_settings(self, settings: AuditSettings) -> None:
        self.storage.save_settings({**self.kept(), **settings.model_dump()})
        with self._lock:
            self._settings, self._read_at = settings, time.monotonic()
        self.storage.fsync = settings.fsync

    # -- recording --------------------------------------------------------------------------------
    @contextmanager
    def recording(
        self,
        surface: str,
        operation: str,
        *,
        subject: str | None,
        identity: str | None,
        admin: bool,
        request: Any,
        groups: tuple[str, ...] = (),
    ) -> Iterator[Recording | None]:
        """Record the block: the answer it sets (``recording.answer``), or the error it
        raises. The record is appended before the block's answer goes anywhere; None (and
        nothing recorded) when the store's audit log is off."""
        if _CURRENT.get() is not None:  # a request inside a request: the outer one records
            yield None
            return
        settings = self.settings()
        if not settings.enabled and operation != "audit_settings":
            token = _CURRENT.set(_OFF)
            try:
                yield None
            finally:
                _CURRENT.reset(token)
            return
        rec = Recording(self, surface, operation, subject, identity, admin, request, groups)
        token = _CURRENT.set(rec)
        try:
            yield rec
        except BaseException as exc:
            _CURRENT.reset(token)
            if isinstance(exc, Exception):
                rec.error = exc
                rec.appended = self.append(rec, settings)
            raise
        _CURRENT.reset(token)
        rec.appended = self.append(rec, settings)

    def append(self, rec: Recording, settings: AuditSettings | None = None) -> tuple[int, str]:
        """Append ``rec``'s record; its (seq, digest), durable."""
        settings = settings or self.settings()
        fields = rec.fields(settings, self.key())
        try:
            return self._group.append(fields)
        except KnowledgeStoreError:
            raise
        except Exception as exc:
            raise StoreError(f"the audit log could not be written: {exc}") from exc

    def _append(self, batch: list[dict[str, Any]]) -> list[tuple[int, str]]:
        results = self.storage.append(batch)
        change = any(fields["operation"] in CHANGES for fields in batch)
        now = time.monotonic()
        if change or now - self._checkpointed >= CHECKPOINT_EVERY_S:
            seq, digest = results[-1]
            try:
                if self.storage.set_checkpoint(seq, digest, wait=change):
                    self._checkpointed = now
            except KnowledgeStoreError as exc:  # the record is kept; the checkpoint lags
                log.warning("the audit checkpoint could not be kept: %s", exc.message)
        return results


#: The recording of a request made while the audit log is off (nested calls record nothing).
_OFF: Recording = object.__new__(Recording)


# -- the Python API ---------------------------------------------------------------------------
F = TypeVar("F", bound=Callable[..., Any])


def audited(
    operation: str, request: type[Request] | None = None, positional: tuple[str, ...] = ()
) -> Callable[[F], F]:
    """Record a ``KnowledgeStore`` method called from Python (surface ``python``) when the
    store's settings say so (``python``); a call made while a surface records is its own.

    ``request``/``positional``: the request model the method takes, and the fields its
    positional arguments stand for — the record keeps the request as that model parses it
    (what the operation table's surfaces record), else the arguments as given."""

    def wrap(method: F) -> F:
        @functools.wraps(method)
        def run(self: KnowledgeStore, *args: Any, **kwargs: Any) -> Any:
            if _CURRENT.get() is not None:
                return method(self, *args, **kwargs)
            auditor = self.auditor
            if not auditor.settings().python:
                return method(self, *args, **kwargs)
            identity = kwargs.get("identity")
            who = str(getattr(identity, "principal", identity) or "everyone")
            groups = tuple(getattr(identity, "groups", ()))
            given = _python_request(request, positional, args, kwargs)
            with auditor.recording(
                "python",
                operation,
                subject=auditor.python_subject,
                identity=who,
                admin=True,
                request=given,
                groups=groups,
            ) as rec:
                answer = method(self, *args, **kwargs)
                if rec is not None:
                    rec.answer = answer
                return answer

        return cast(F, run)

    return wrap


def _python_request(
    model: type[Request] | None,
    positional: tuple[str, ...],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
) -> Any:
    if args and isinstance(args[0], Request):
        return args[0]
    given = {name: value for name, value in zip(positional, args, strict=False)}
    given.update({k: v for k, v in kwargs.items() if k != "identity" and v is not None})
    if model is not None:
        try:
            return model.parse(_plain({k: v for k, v in given.items() if k in model.model_fields}))
        except (KnowledgeStoreError, TypeError, ValueError):
            pass
    return given
