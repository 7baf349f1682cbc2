"""``ks audit replay``: a recorded read, run again at its content root under the memberships
of its moment, then now — every difference explained by the change that caused it.

**Then.** The content root's publish is rebuilt in a *replica* (``Engine.replica``: a fresh
store of the same engine, naming chunks with the store's key) from the catalog's history
(``engines.sql.history``): every entity as it was at that publish, its chunks and their
vectors. The replica's derived indexes are built fresh from that content — the store's own
are at its latest publish only — and its memberships are those held at the record's
moment: the one among the request's start and the membership changes during it whose
principals have the record's digest (``principals_match``). The read runs there through
the same code as every read (``StoreReader.answer``) and is compared with the record: what
it named, in which order, with which chunks, and the answer's digest.

**Access.** For each entity the record names: was it in the content root, and could the
identity read it then — through which ACL entry and membership chain.

**Now.** The same read on the store as it is, compared with the answer of then: an entity
that left or came is explained by its own history — deleted, its ACL changed (a principal
revoked or granted), a membership on the identity's chain removed or added, its content
updated — each with when and by whom (the audit record of the change: its subject and
identity); one that only moved, or left for another that came, by the changes between the
two roots.

A difference nothing explains is reported as such (``explained`` false): that is a record
naming an entity its identity could not read at its root, or an answer that changed while
nothing did.
"""

from __future__ import annotations

import hashlib
import itertools
from collections import OrderedDict, deque
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from knowledge_store.engines.base import Engine, PreparedEntity, Replica
from knowledge_store.engines.shared import explain_access
from knowledge_store.engines.sql.audit import RecordFilter
from knowledge_store.engines.sql.history import EntityVersion, History, Publish
from knowledge_store.errors import KnowledgeStoreError, NotFound
from knowledge_store.model import EVERYONE, AclExplanation, Identity, check_principal
from knowledge_store.model.audit import (
    AuditRecord,
    AuditReplay,
    ReplayAccess,
    ReplayComparison,
    ReplayDifference,
    canonical_json,
    principals_digest,
)
from knowledge_store.retrieval.reader import READS
from knowledge_store.store.audit import CHANGES, answer_digest, returned_of

if TYPE_CHECKING:
    from knowledge_store.store import KnowledgeStore

__all__ = ["INDEXED_READS", "Replayer", "explain_at"]

#: The reads ranked by a derived index (whose state at the read a replica rebuilds fresh):
#: the lexical list, the vector list.
_FUSED = frozenset({"search", "docs_search", "code_sample_search", "search_knowledge"})
LEXICAL_READS = _FUSED | {"lexical", "fuzzy"}
VECTOR_READS = _FUSED | {"vector"}
INDEXED_READS = LEXICAL_READS | VECTOR_READS
#: Replicas kept between records (one per publish).
REPLICAS = 4
_MEMBERSHIP_OPS = ("principals_add_member", "principals_remove_member", "principals_load")


def _content(record: Mapping[str, Any]) -> dict[str, Any]:
    """A record without its ACL: what an update changes."""
    return {k: v for k, v in record.items() if k != "acl"}


def _at(versions: Sequence[EntityVersion], publish: int) -> EntityVersion | None:
    for v in versions:
        if v.valid_from <= publish and (v.valid_to is None or v.valid_to > publish):
            return v
    return None


def _path(start: str, goal: str, pairs: Sequence[tuple[str, str]]) -> list[str] | None:
    """A membership chain ``start → … → goal`` over ``pairs`` ((group, member))."""
    groups: dict[str, list[str]] = {}
    for g, m in pairs:
        groups.setdefault(m, []).append(g)
    seen = {start: [start]}
    queue = deque([start])
    while queue:
        here = queue.popleft()
        if here == goal:
            return seen[here]
        for g in sorted(groups.get(here, ())):
            if g not in seen:
                seen[g] = [*seen[here], g]
                queue.append(g)
    return None


@dataclass
class _Actor:
    at: str
    us: int
    subject: str | None
    identity: str | None
    request: dict[str, Any]
    operation: str

    def words(self) -> str:
        who = self.subject or "an unknown subject"
        if self.identity and self.identity != "everyone":
            who += f" as {self.identity}"
        return f"by {who}"


@dataclass
class _Then:
    """What a replay found of its record's moment."""

    publish: int
    moment: str | None
    pairs: list[tuple[str, str]]
    held: tuple[str, ...]
    match: bool | None


class Replayer:
    """Replays the records of one store, keeping a few replicas between them."""

    def __init__(self, store: KnowledgeStore, keep: int = REPLICAS) -> None:
        self.store = store
        self._keep = keep
        self._replicas: OrderedDict[int, Replica] = OrderedDict()

    def close(self) -> None:
        while self._replicas:
            _, replica = self._replicas.popitem()
            replica.discard()

    def __enter__(self) -> Replayer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the replica of a publish -------------------------------------------------------------------
    def _replica(self, history: History, publish: int) -> Replica:
        found = self._replicas.get(publish)
        if found is not None:
            self._replicas.move_to_end(publish)
            return found
        replica = self.store.engine.replica()
        try:
            dimension = (self.store.engine.writer.model() or ("", 0))[1]
            prepared = [
                PreparedEntity(
                    v.entity,
                    v.chunks,
                    v.vectors
                    if len(v.vectors)
                    else np.zeros((len(v.chunks), dimension), dtype=np.float32),
                )
                for v in sorted(
                    (v for batch in history.entities_at(publish) for v in batch),
                    key=lambda v: (min(v.rows, default=0), v.entity.uid),
                )
            ]
            # one publish: one commit of each derived index, none of its documents deleted;
            # the chunks in the order they were written, as the store's rows were
            replica.engine.writer.publish(prepared, [], kind="replica")
        except BaseException:
            replica.discard()
            raise
        self._replicas[publish] = replica
        while len(self._replicas) > self._keep:
            _, old = self._replicas.popitem(last=False)
            old.discard()
        return replica

    @contextmanager
    def _reading(self, replica: Replica, identity: Identity) -> Iterator[Any]:
        from knowledge_store.store import KnowledgeStore

        view = KnowledgeStore(replica.engine, embedder=self.store.embedder)
        with view.reader(identity) as reader:
            yield reader

    # -- one record -------------------------------------------------------------------------------------
    def replay(self, record: AuditRecord) -> AuditReplay:
        base: dict[str, Any] = {
            "seq": record.seq,
            "operation": record.operation,
            "identity": record.identity,
            "at": record.at,
            "content_root": record.content_root,
            "publish": record.publish,
        }
        method = record.operation if record.operation in READS else None
        failed = None if record.outcome == "ok" else str((record.error or {}).get("code"))
        if failed is not None and self._request(method, record) is None:
            note = f"the request failed ({failed}): it read nothing to replay"
            return AuditReplay(**base, replayed=False, note=note, explained=True)
        identity = Identity(record.identity or "everyone", tuple(record.groups))
        with self.store.engine.history() as history:
            publish = record.publish
            if publish is None and record.content_root is not None:
                found = history.publish_of(record.content_root)
                publish = found.id if found is not None else None
            if publish is None:
                note = "the record names no content root: it read no content"
                return AuditReplay(**base, replayed=False, note=note, explained=True)
            base["publish"] = publish
            kept_from = int(self.store.auditor.kept().get("history_from", 0))
            if publish < kept_from:
                note = f"the history before publish {kept_from} was removed (ks gc): nothing to rebuild"
                return AuditReplay(**base, replayed=False, note=note, explained=True)
            replica = self._replica(history, publish)
            then = self._moment(history, replica, identity, record, publish)
            uids = [n.uid for n in record.returned]
            versions = history.versions(uids)
            access = [self._access(uid, versions[uid], then, identity) for uid in uids]
            leak = [a.uid for a in access if not (a.present and a.readable)]
            request = self._request(method, record)
            if method is None or request is None:
                why = (
                    f"{record.operation} is not a read the store runs again"
                    if method is None
                    else f"the record keeps no query text (query_text: {record.query_text})"
                )
                return AuditReplay(
                    **base,
                    replayed=False,
                    note=why + "; access checked at the root",
                    memberships_at=then.moment,
                    principals_match=then.match,
                    access=access,
                    explained=not leak and then.match is not False,
                )
            with self._reading(replica, identity) as reader:
                answer_then = _answer(reader, method, request)
            if record.content_root is not None and hasattr(answer_then, "content_root"):
                answer_then = answer_then.model_copy(update={"content_root": record.content_root})
            names_then = returned_of(answer_then)
            recorded = [n.to_dict() for n in record.returned]
            compared_then = _compare(recorded, names_then)
            same_then = answer_digest(answer_then) == record.answer if record.answer else None
            then_diffs = [
                self._index_difference(d, method, access, record, history, publish)
                for d in compared_then
            ]
            then_diffs += _outcome_difference(failed, answer_then, request)
            with self.store.reader(identity) as reader:
                answer_now = _answer(reader, method, request)
                held_now = reader.held
                now_root = reader.content_root
            names_now = returned_of(answer_now)
            changes = _Changes(self.store, history, publish, then, held_now)
            # now against the record (the read as it was), not against the replay of it
            moved = _compare(recorded, names_now)
            now_diffs = [changes.explain(d, method, moved) for d in moved]
            if isinstance(answer_now, KnowledgeStoreError):
                now_diffs = _failed_now(now_diffs, answer_now)
            same_now: bool | None = None
            if not now_diffs and names_now:
                # the same entities in the same places: what they say may have changed
                for named in names_now:
                    own = changes.updated(str(named["uid"]))
                    if own:
                        rank = named.get("rank")
                        now_diffs.append(
                            ReplayDifference(
                                uid=str(named["uid"]),
                                before=rank,
                                after=rank,
                                explained=True,
                                causes=own,
                            )
                        )
            elif not names_now and not recorded:
                # an answer that names nothing (counts): its values, then against now
                same_now = _comparable(answer_then) == _comparable(answer_now)
                if not same_now:
                    now_diffs.append(changes.values_changed())
            replay = AuditReplay(
                **base,
                replayed=True,
                note=None
                if failed is None
                else f"the read failed ({failed}): run again to see that it fails alike",
                memberships_at=then.moment,
                principals_match=then.match,
                access=access,
                then=ReplayComparison(
                    identical=not then_diffs, same_answer=same_then, differences=then_diffs
                ),
                now=ReplayComparison(
                    identical=not now_diffs, same_answer=same_now, differences=now_diffs
                ),
                now_root=now_root,
                explained=not leak
                and then.match is not False
                and all(d.explained for d in [*then_diffs, *now_diffs]),
            )
        return replay

    def _request(self, method: str | None, record: AuditRecord) -> Any:
        if method is None:
            return None
        model = READS[method]
        if record.query_text != "keep":  # its text was hashed or dropped: no request to run
            return None
        try:
            return model.parse(dict(record.request))
        except ValueError:
            return None

    def _moment(
        self,
        history: History,
        replica: Replica,
        identity: Identity,
        record: AuditRecord,
        publish: int,
    ) -> _Then:
        """The memberships of the record's moment: at its start, or after a change that
        landed while it ran — the one whose principals have the record's digest."""
        end = _plus_us(record.at, record.us + 1000)
        moments = [record.at] + [
            at for at, _, _, _ in history.membership_changes(record.at) if at <= end
        ]
        first: _Then | None = None
        for moment in dict.fromkeys(moments):
            pairs = history.memberships_at(moment)
            replica.set_memberships(pairs)
            with self._reading(replica, identity) as reader:
                held = reader.held
            match = (
                None if record.principals is None else principals_digest(held) == record.principals
            )
            found = _Then(publish, moment, pairs, held, match)
            if first is None:
                first = found
            if match is not False:
                return found
        assert first is not None
        replica.set_memberships(first.pairs)
        return first

    def _access(
        self, uid: str, versions: Sequence[EntityVersion], then: _Then, identity: Identity
    ) -> ReplayAccess:
        version = _at(versions, then.publish)
        if version is None:
            return ReplayAccess(uid=uid, readable=False, present=False)
        entries = sorted(set(version.acl) & set(then.held))
        if not entries:
            return ReplayAccess(uid=uid, readable=False, present=True)
        entry = entries[0]
        chain = _path(identity.principal, entry, then.pairs)
        if chain is None:
            for group in identity.groups:
                chain = _path(group, entry, then.pairs)
                if chain is not None:
                    chain = [f"{identity.principal} (token group)", *chain]
                    break
        how = " → ".join(chain) if chain and len(chain) > 1 else entry
        return ReplayAccess(uid=uid, readable=True, present=True, through=how)

    def _index_difference(
        self,
        diff: _Diff,
        method: str,
        access: Sequence[ReplayAccess],
        record: AuditRecord,
        history: History,
        publish: int,
    ) -> ReplayDifference:
        """A difference between the record and the read run again at its root: the content
        and memberships are those of then, so only the state of a derived index can make one
        — where the record says its vector search was approximate, or where the lexical
        index's statistics could count chunks already deleted (this engine's may, and some
        were by then). Each entity the record names must have been readable at the root."""
        readable = {a.uid for a in access if a.readable and a.present}
        causes = []
        if method in LEXICAL_READS and not self.store.engine.exact_lexical_statistics:
            removed = history.chunks_removed_by(publish)
            if publish > 1 or removed:
                causes.append(
                    "BM25 statistics: the lexical index that read counted documents deleted by"
                    f" then and not yet merged away (each commit's old watermark document, the"
                    f" {removed} chunks removed at or before publish {publish}); the replay's"
                    " index is one fresh commit of the same content"
                )
        vector = record.vector or {}
        if method in VECTOR_READS and vector.get("exhaustive") is False:
            causes.append(
                f"the vector list ran {vector.get('strategy')} (approximate) at the read; the"
                " replay's index is built fresh"
            )
        named_ok = diff.came or diff.uid in readable
        explained = bool(causes) and named_ok
        if not named_ok:
            causes.insert(0, f"{diff.uid} was not readable at the root: not explained")
        elif not causes:
            causes = ["the same content and memberships gave another answer: not explained"]
        return ReplayDifference(
            uid=diff.uid, before=diff.before, after=diff.after, explained=explained, causes=causes
        )


# -- comparing two answers --------------------------------------------------------------------------
@dataclass(frozen=True)
class _Diff:
    uid: str
    before: int | None
    after: int | None
    chunks: bool  # only the chunks shown differ
    #: named by the earlier answer only (it left), by the later only (it came): an answer
    #: that names without ranks (content, its edges) has neither rank in both
    left: bool = False
    came: bool = False


def _compare(
    before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]]
) -> list[_Diff]:
    """Where two answers' names differ: an entity in one only, at another rank, or with other
    chunks shown."""
    old = {str(n["uid"]): n for n in before}
    new = {str(n["uid"]): n for n in after}
    out = []
    for uid in [*old, *(u for u in new if u not in old)]:
        a, b = old.get(uid), new.get(uid)
        rank_a = a.get("rank") if a else None
        rank_b = b.get("rank") if b else None
        chunks_a = list(a.get("chunks") or []) if a else []
        chunks_b = list(b.get("chunks") or []) if b else []
        if a is None or b is None or rank_a != rank_b or chunks_a != chunks_b:
            same_place = a is not None and b is not None and rank_a == rank_b
            out.append(_Diff(uid, rank_a, rank_b, same_place, left=b is None, came=a is None))
    return out


def _outcome_difference(failed: str | None, answer: Any, request: Any) -> list[ReplayDifference]:
    """The read run again at its root ends otherwise than the record did (it failed with
    ``failed``, or answered: None): the content and memberships are those of then, so
    nothing explains it — a record of a failure that was not one, or the reverse."""
    code = answer.code if isinstance(answer, KnowledgeStoreError) else None
    if code == failed:
        return []
    recorded = "answered" if failed is None else f"failed ({failed})"
    replayed = "answers" if code is None else f"fails ({code})"
    sentence = f"the read {recorded}; at its root it {replayed}: not explained"
    uid = str(getattr(request, "uid", None) or "(the answer)")
    return [ReplayDifference(uid=uid, before=None, after=None, explained=False, causes=[sentence])]


def _failed_now(
    diffs: list[ReplayDifference], error: KnowledgeStoreError
) -> list[ReplayDifference]:
    """The read now ends in an error (``not_found``: the entity it reads is gone or hidden):
    what it named left with it — explained when one of them left for a change of its own
    (a deletion, a revocation, a membership), which is why the read fails."""
    sentence = f"the read now answers {error.code}: {error.message}"
    own = any(
        d.explained and not any(c.startswith(("the content changed", "readable")) for c in d.causes)
        for d in diffs
    )
    return [
        d.model_copy(update={"causes": [*d.causes, sentence], "explained": d.explained or own})
        for d in diffs
    ]


def _answer(reader: Any, method: str, request: Any) -> Any:
    """The read's answer, or the error it ended with (an entity gone or hidden now: a
    ``content`` or ``get_related`` of it is ``not_found``, and names nothing)."""
    try:
        return reader.answer(method, request)
    except KnowledgeStoreError as exc:
        return exc


def _comparable(answer: Any) -> str | None:
    """A digest of an answer without what differs between two reads of the same thing: its
    content root and its ``explain`` (timings)."""
    if not hasattr(answer, "model_dump"):
        return None
    data = answer.model_dump(mode="json")
    data.pop("content_root", None)
    data.pop("explain", None)
    return hashlib.sha256(canonical_json(data).encode()).hexdigest()


def _plus_us(at: str, us: int) -> str:
    from datetime import datetime, timedelta

    from knowledge_store.model.audit import AT_FORM

    moment = datetime.strptime(at, AT_FORM) + timedelta(microseconds=us)
    return moment.strftime(AT_FORM)


# -- explaining then against now ------------------------------------------------------------------------
class _Changes:
    """The changes between a record's moment and now, and who made them."""

    def __init__(
        self,
        store: KnowledgeStore,
        history: History,
        publish: int,
        then: _Then,
        held_now: tuple[str, ...],
    ) -> None:
        self.history = history
        self.publish = publish
        self.then = then
        self.held_now = held_now
        self.publishes = {p.id: p for p in history.publishes(publish)}
        self.pairs_now = history.memberships_at("9999")
        self.membership_events = history.membership_changes(then.moment or "")
        since = min(
            [p.moment for p in self.publishes.values()]
            + [e[0] for e in self.membership_events]
            + [then.moment or ""],
        )
        self.actors = self._actors(store, _minus_hours(since, 24))
        self._versions: dict[str, list[EntityVersion]] = {}

    def _actors(self, store: KnowledgeStore, since: str) -> list[_Actor]:
        found: list[_Actor] = []
        for operation in sorted(CHANGES):
            for stored in store.engine.audit.find(
                RecordFilter(since=since, operation=operation), 100_000, newest_first=False
            ):
                fields = stored.fields()
                if fields.get("outcome") != "ok":
                    continue
                found.append(
                    _Actor(
                        str(fields["at"]),
                        int(fields.get("us") or 0),
                        fields.get("subject"),
                        fields.get("identity"),
                        dict(fields.get("request") or {}),
                        operation,
                    )
                )
                found[-1].request["__root"] = fields.get("content_root")
        return found

    def _publish_words(self, publish: int) -> str:
        row = self.publishes.get(publish)
        when = f"at {row.at}" if row else ""
        actor = self._publish_actor(row) if row else None
        return f"{when} (publish {publish})" + (f" {actor.words()}" if actor else "")

    def _publish_actor(self, row: Publish) -> _Actor | None:
        for actor in self.actors:
            if actor.request.get("__root") == row.root and actor.operation not in _MEMBERSHIP_OPS:
                return actor
        return None

    def _membership_words(self, at: str, op: str, group: str, member: str) -> str:
        verb = "added to" if op == "add" else "removed from"
        text = f"{member} {verb} {group} at {at}"
        for actor in self.actors:
            if actor.operation not in _MEMBERSHIP_OPS:
                continue
            if not (actor.at <= at <= _plus_us(actor.at, actor.us + 1000)):
                continue
            named = actor.request.get("group") == group and actor.request.get("member") == member
            loaded = actor.operation == "principals_load" and any(
                isinstance(p, dict) and p.get("group") == group
                for p in actor.request.get("memberships") or ()
            )
            if named or loaded or actor.operation == "principals_load":
                return f"{text} {actor.words()}"
        return text

    def versions(self, uid: str) -> list[EntityVersion]:
        if uid not in self._versions:
            self._versions.update(self.history.versions([uid]))
        return self._versions[uid]

    # -- one entity ----------------------------------------------------------------------------------
    def explain(self, diff: _Diff, method: str, others: Sequence[_Diff] = ()) -> ReplayDifference:
        causes: list[str] = []
        versions = self.versions(diff.uid)
        then = _at(versions, self.publish)
        now = versions[-1] if versions and versions[-1].valid_to is None else None
        if diff.left:
            causes += self._left(diff.uid, versions, then, now)
        elif diff.came:
            causes += self._came(diff.uid, versions, then, now)
        if not causes:
            causes += self._moved(diff, versions, others)
        explained = bool(causes)
        if not causes:
            causes = ["nothing changed between the two reads: not explained"]
        return ReplayDifference(
            uid=diff.uid, before=diff.before, after=diff.after, explained=explained, causes=causes
        )

    def values_changed(self) -> ReplayDifference:
        causes = self._corpus() or self._groups()
        return ReplayDifference(
            uid="*",
            before=None,
            after=None,
            explained=bool(causes),
            causes=causes or ["the answer's values changed while nothing did: not explained"],
        )

    def _left(
        self,
        uid: str,
        versions: Sequence[EntityVersion],
        then: EntityVersion | None,
        now: EntityVersion | None,
    ) -> list[str]:
        if now is None:
            ended = [v for v in versions if v.valid_to is not None and v.valid_to > self.publish]
            if ended:
                return [f"deleted {self._publish_words(ended[-1].valid_to or 0)}"]
            return []
        if then is None:
            return []
        via_then = sorted(set(then.acl) & set(self.then.held))
        if set(now.acl) & set(self.held_now):
            return self._content(uid, versions)
        out = []
        for entry in via_then:
            if entry not in now.acl:
                for v in versions:
                    if v.valid_from > self.publish and entry not in v.acl:
                        out.append(
                            f"{entry} revoked from its ACL {self._publish_words(v.valid_from)}"
                        )
                        break
            if entry not in self.held_now:  # every way in it had then, and what closed each
                out += self._chain_lost(entry)
        return out

    def _came(
        self,
        uid: str,
        versions: Sequence[EntityVersion],
        then: EntityVersion | None,
        now: EntityVersion | None,
    ) -> list[str]:
        if now is None:
            return []
        if then is None:
            first = next((v for v in versions if v.valid_from > self.publish), None)
            return [f"added {self._publish_words(first.valid_from)}"] if first else []
        if set(then.acl) & set(self.then.held):
            return self._content(uid, versions)
        out = []
        for entry in sorted(set(now.acl) & set(self.held_now)):
            if entry not in then.acl:
                for v in versions:
                    if v.valid_from > self.publish and entry in v.acl:
                        out.append(f"{entry} granted {self._publish_words(v.valid_from)}")
                        break
            if entry not in self.then.held:  # every way in it has now, and what opened each
                out += self._chain_gained(entry)
        return out

    def updated(self, uid: str) -> list[str]:
        """How ``uid``'s content changed since then (its last update), or nothing."""
        return self._content(uid, self.versions(uid))

    def _content(self, uid: str, versions: Sequence[EntityVersion]) -> list[str]:
        before = _at(versions, self.publish)
        out = []
        for v in versions:
            if v.valid_from > self.publish and before is not None:
                if _content(v.record) != _content(before.record):
                    out.append(f"{uid} updated {self._publish_words(v.valid_from)}")
                before = v
        return out[-1:]

    def _moved(
        self, diff: _Diff, versions: Sequence[EntityVersion], others: Sequence[_Diff]
    ) -> list[str]:
        """An entity that only moved, or came or left while unchanged and readable: its own
        update, else the entities that left or came around it, and the changes since."""
        own = self._content(diff.uid, versions)
        if own:
            return own
        left = [d.uid for d in others if d.left and d.uid != diff.uid]
        came = [d.uid for d in others if d.came and d.uid != diff.uid]
        around = []
        if left:
            around.append(f"{', '.join(left[:5])} left the answer")
        if came:
            around.append(f"{', '.join(came[:5])} came into it")
        context = self._corpus() or self._groups()
        if not context:
            return []
        if around:
            return [f"readable and unchanged; moved as {' and '.join(around)}", *context]
        return context

    def _corpus(self) -> list[str]:
        rows = sorted(self.publishes.values(), key=lambda p: p.id)
        if not rows:
            return []
        kinds = ", ".join(sorted({p.kind for p in rows}))
        return [
            f"the content changed: {len(rows)} publishes since ({kinds}; publish {rows[0].id}"
            f" at {rows[0].at} to {rows[-1].id} at {rows[-1].at}) changed what ranks and what"
            " the cut keeps"
        ]

    def _groups(self) -> list[str]:
        gained = sorted(set(self.held_now) - set(self.then.held))
        lost = sorted(set(self.then.held) - set(self.held_now))
        if not gained and not lost:
            return []
        return [
            f"the identity's principals changed: {', '.join(gained) or 'none'} gained,"
            f" {', '.join(lost) or 'none'} lost"
        ]

    def _chain_lost(self, entry: str) -> list[str]:
        return self._chain_changes(entry, "remove", self.then.pairs, self.pairs_now)

    def _chain_gained(self, entry: str) -> list[str]:
        return self._chain_changes(entry, "add", self.pairs_now, self.then.pairs)

    def _chain_changes(
        self,
        entry: str,
        kind: str,
        held: Sequence[tuple[str, str]],
        other: Sequence[tuple[str, str]],
    ) -> list[str]:
        """The membership changes of ``kind`` on the chain to ``entry`` over ``held`` that
        ``other`` lacks: the chain lost since (``remove``) or gained since (``add``)."""
        path = self._chain(held)(entry)
        if path is None:
            return []
        kept = set(other)
        out = []
        for member, group in itertools.pairwise(path):
            if (group, member) not in kept:
                event = next(
                    (
                        e
                        for e in self.membership_events
                        if e[1] == kind and e[2] == group and e[3] == member
                    ),
                    None,
                )
                at = event[0] if event else "an unrecorded moment"
                out.append(self._membership_words(at, kind, group, member))
        return out

    def _chain(self, pairs: Sequence[tuple[str, str]]) -> Any:
        starts = [principal for principal in self.then.held if not principal.startswith("group:")]

        def find(entry: str) -> list[str] | None:
            for start in starts:
                path = _path(start, entry, pairs)
                if path is not None:
                    return path
            return None

        return find


def _minus_hours(at: str, hours: int) -> str:
    from datetime import datetime, timedelta

    from knowledge_store.model.audit import AT_FORM

    if not at:
        return ""
    return (datetime.strptime(at, AT_FORM) - timedelta(hours=hours)).strftime(AT_FORM)


# -- acl explain --at -----------------------------------------------------------------------------------
def _held(principal: str, pairs: Sequence[tuple[str, str]]) -> list[str]:
    groups: dict[str, list[str]] = {}
    for g, m in pairs:
        groups.setdefault(m, []).append(g)
    held = {principal, EVERYONE}
    queue = deque([principal])
    while queue:
        for g in groups.get(queue.popleft(), ()):
            if g not in held:
                held.add(g)
                queue.append(g)
    return sorted(held)


def explain_at(
    engine: Engine, principal: str, uid: str, at: str, kept_from: int = 0
) -> AclExplanation:
    """``acl explain`` as of a content root (its publish, the memberships of its moment) or a
    moment (the latest publish by then, the memberships then), from the history."""
    check_principal(principal)
    with engine.history() as history:
        if len(at) == 64 and "T" not in at:
            row = history.publish_of(at)
            if row is None:
                raise NotFound(f"no publish has the content root {at}", at=at)
            publish, moment = row.id, row.moment
        else:
            moment = at
            rows = [p for p in history.publishes() if p.moment <= moment]
            if not rows:
                raise NotFound(f"the store held nothing yet at {at}", at=at)
            row, publish = rows[-1], rows[-1].id
        if publish < kept_from:
            raise NotFound(f"the history before publish {kept_from} was removed", at=at)
        version = _at(history.versions([uid]).get(uid, []), publish)
        if version is None:
            raise NotFound(
                f"no entity with uid {uid!r} in the content root {row.root[:16]}… ({row.at})",
                uid=uid,
            )
        pairs = history.memberships_at(moment)
    held = _held(principal, pairs)
    found = explain_access(principal, uid, version.acl, held, lambda e: _path(principal, e, pairs))
    return found.model_copy(update={"content_root": row.root, "at": moment})
