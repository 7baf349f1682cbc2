"""Rules and answer shapes that both engines share, whatever their SQL.

Membership chains (breadth-first, one lookup per level), the cycle error, the
``acl explain`` sentences, ``principals show`` and the content answer are the
same on SQLite and PostgreSQL; each engine only supplies the rows.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from knowledge_store.engines.sql.statements import location_value
from knowledge_store.errors import InvalidRequest, NotFound, StoreError
from knowledge_store.model import (
    ACL_FROM,
    ENTITY_FIELDS,
    EVERYONE,
    MAX_CHUNK_CHARS,
    AclExplanation,
    Content,
    ContentChunk,
    ContentEdge,
    ContentEdges,
    ContentEntity,
    Edge,
    Entity,
    PrincipalInfo,
)

if TYPE_CHECKING:
    from knowledge_store.engines.base import PreparedEntity

__all__ = [
    "CHUNK_KEY_META",
    "DERIVED_LINK",
    "EDGE_DIRECTIONS",
    "ChunkIds",
    "acl_change",
    "acl_parent",
    "check_own_directory",
    "check_prepared",
    "check_store_directory",
    "check_vectors",
    "content_answer",
    "cycle_error",
    "deletion",
    "explain_access",
    "membership_path",
    "no_store",
    "principal_info",
    "stored_entity",
]

#: ``(direction, near end, far end)`` of the content answer's edge lists.
EDGE_DIRECTIONS: tuple[tuple[str, str, str], ...] = (("out", "src", "dst"), ("in", "dst", "src"))

GroupsOf = Callable[[Sequence[str]], Mapping[str, Sequence[str]]]

#: The meta key of the store's secret for public chunk ids (hex).
CHUNK_KEY_META = "chunk_id_key"


#: The edge a derived entity points at its parent with (where the engines look for them).
DERIVED_LINK = "partOf"


def acl_parent(entity: Entity) -> str | None:
    """The uid whose ACL ``entity`` shares (``attributes.acl_from``), or None: its own."""
    parent = entity.attributes.get(ACL_FROM)
    return parent if isinstance(parent, str) and parent != entity.uid else None


def acl_change(
    entity: Entity, change: str, principal: str, derived: Callable[[str], Iterable[Entity]]
) -> list[Entity]:
    """The entities a grant or revoke of ``principal`` on ``entity`` changes: ``entity``
    and, transitively, the entities that share its ACL (``derived(uid)``: the entities
    with a ``DERIVED_LINK`` edge to ``uid``; those whose ``acl_from`` names it follow),
    all given its new ACL (one publish).

    A derived entity has no ACL of its own to change: the grant goes to its parent.
    """
    parent = acl_parent(entity)
    if parent is not None:
        raise InvalidRequest(
            f"{entity.uid!r} shares the ACL of {parent!r}, the entity it was split off;"
            f" {change} on {parent!r} (it applies to both), or ingest {entity.uid!r} as a"
            " record with its own acl",
            field="uid",
            inherited_from=parent,
        )
    acl = set(entity.acl)
    if change == "grant":
        acl.add(principal)
    else:
        acl.discard(principal)
    new = tuple(sorted(acl))
    followers: list[Entity] = []
    seen = {entity.uid}
    pending = [entity.uid]
    while pending:
        parent = pending.pop()
        for child in derived(parent):
            if child.uid not in seen and acl_parent(child) == parent:
                seen.add(child.uid)
                followers.append(child)
                pending.append(child.uid)
    return [
        replace(e, acl=new)
        for e in (entity, *followers)
        if replace(e, acl=new).content_hash != e.content_hash
    ]


def deletion(
    uids: Sequence[str],
    stored: Mapping[str, str],
    derived: Callable[[str], Iterable[Entity]],
) -> list[str]:
    """What deleting ``uids`` deletes: each of them and, transitively, the entities split off
    them — those with a ``DERIVED_LINK`` edge to one that share its ACL (a page's code
    samples), which no record of their own brings back and whose ACL only their parent
    could change. ``stored``: the content hashes of the stored ones of ``uids``; one
    missing fails the whole delete (``NotFound``), nothing deleted. ``derived(uid)``: the
    entities with a ``DERIVED_LINK`` edge to ``uid``.
    """
    missing = sorted(set(uids) - set(stored))
    if missing:
        raise NotFound(
            f"no entity with uid {', '.join(repr(u) for u in missing[:5])}; nothing was deleted",
            uids=missing,
        )
    doomed = list(dict.fromkeys(uids))
    seen = set(doomed)
    pending = list(doomed)
    while pending:
        parent = pending.pop()
        for child in derived(parent):
            if child.uid not in seen and acl_parent(child) == parent:
                seen.add(child.uid)
                doomed.append(child.uid)
                pending.append(child.uid)
    return doomed


def check_store_directory(path: Path, location: str) -> None:
    """A store location (``location``, as given) whose directory ``path`` is, or would lie
    under, a file: the caller's mistake (a mistyped ``--store``), said so — not a read's
    "no store" nor the OS error of ``mkdir``."""
    for where in (path, *path.parents):
        if where.exists():
            if where.is_dir():
                return
            what = "it" if where == path else str(where)
            raise InvalidRequest(
                f"{location} is not a store: {what} is a file, not a directory; a store needs"
                " a directory of its own",
                store=location,
            )


def check_own_directory(path: Path, location: str, own: Callable[[str], bool]) -> None:
    """A new store at ``location`` (directory ``path``) goes into a directory of its own: a
    directory that holds anything but the store's files (``own(name)``) is refused, so that
    a mistyped ``--store`` (a project folder, the home directory) does not get a catalog
    and index files written among what is there. A directory that does not exist, is
    empty, or holds only what a store creates (a start that was killed) is fine."""
    try:
        foreign = sorted(entry.name for entry in path.iterdir() if not own(entry.name))
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StoreError(f"cannot read the store directory {path}: {exc}") from exc
    if foreign:
        shown = ", ".join(repr(name) for name in foreign[:3])
        more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        raise InvalidRequest(
            f"{location} is not a store, and it is not empty (it holds {shown}{more}): a new"
            " store needs a directory of its own; name a new or empty directory, or an"
            " existing store",
            store=location,
        )


def no_store(location: str) -> NotFound:
    """The answer of a read on a store that does not exist (it is not created)."""
    return NotFound(f"no store at {location}; create one with `ks ingest`", store=location)


class ChunkIds:
    """Public chunk ids: a keyed hash of ``(uid, ordinal)`` under the store's secret.

    The row ids the engines keep are a global sequence, so gaps between the ids a
    reader sees would count the chunks hidden from it. A public id depends only on
    the chunk's own entity and position (and a per-store secret, so that it can't be
    computed for a guessed uid): it carries no signal about any other chunk. 53 bits,
    so that JavaScript clients read it exactly. The same chunk has the same id in
    ``lexical``, ``vector``, ``search`` evidence and the content API.
    """

    BITS = 53
    #: Ids remembered (hot chunks come back in answer after answer); then it starts over.
    MEMO = 65_536

    def __init__(self, key_hex: str) -> None:
        self._key = bytes.fromhex(key_hex)
        self._keyed = hashlib.blake2b(key=self._key, digest_size=8)  # copied per id: no re-keying
        self._memo: dict[tuple[str, int], int] = {}

    @staticmethod
    def new_key() -> str:
        return secrets.token_hex(32)

    @property
    def key(self) -> str:
        """The secret (hex): a replica of the store names its chunks with it too."""
        return self._key.hex()

    def derived_key(self, purpose: str) -> bytes:
        """A key for another use of the store's secret (``purpose``: ``cursors`` …)."""
        from knowledge_store.engines.cursors import derive_key

        return derive_key(self._key, purpose)

    def __call__(self, uid: str, ordinal: int) -> int:
        known = self._memo.get((uid, ordinal))
        if known is not None:
            return known
        h = self._keyed.copy()
        h.update(f"{uid}\x00{int(ordinal)}".encode())
        public = int.from_bytes(h.digest(), "big") & ((1 << self.BITS) - 1)
        if len(self._memo) >= self.MEMO:
            self._memo.clear()
        self._memo[(uid, ordinal)] = public
        return public


def check_vectors(what: str, vectors: Any, rows: int, dimension: int | None) -> None:
    """Refuse vectors a derived index could not take: ``rows`` of them, of ``dimension`` (when
    the store has one), finite and not zero. Raises ``StoreError`` naming ``what``."""
    matrix = np.asarray(vectors)
    if rows == 0 and matrix.size == 0:
        return  # no chunk, no vector: nothing reaches a derived index
    expected = (rows, dimension or (matrix.shape[-1] if matrix.ndim else 0))
    if matrix.ndim != 2 or matrix.shape != expected:
        raise StoreError(
            f"{what}: {rows} chunks came with vectors of shape {matrix.shape}, not {expected};"
            " nothing was published"
        )
    if not np.isfinite(matrix).all():
        raise StoreError(
            f"{what}: the embedder returned NaN or infinite values; nothing was published"
        )
    if not (np.linalg.norm(matrix, axis=1) > 0).all():
        raise StoreError(f"{what}: the embedder returned an all-zero vector; nothing was published")


def check_prepared(upserts: Sequence[PreparedEntity], dimension: int | None) -> None:
    """Refuse, before anything is written, chunks and vectors a derived index could not take.

    One vector per chunk (see ``check_vectors``); chunk texts within ``MAX_CHUNK_CHARS``.
    Raises ``StoreError``: the records were valid, the embedder (or the caller of
    ``Engine.publish``) was not.
    """
    for prepared in upserts:
        uid = prepared.entity.uid
        check_vectors(f"entity {uid!r}", prepared.vectors, len(prepared.chunks), dimension)
        for chunk in prepared.chunks:
            if len(chunk.text) > MAX_CHUNK_CHARS:
                raise StoreError(
                    f"entity {uid!r}: chunk {chunk.ordinal} has {len(chunk.text):,} characters;"
                    f" the limit is {MAX_CHUNK_CHARS:,}; nothing was published",
                    uid=uid,
                )


def membership_path(start: str, goal: str, groups_of: GroupsOf) -> list[str] | None:
    """A membership chain ``start → … → goal`` (breadth-first), or None.

    ``groups_of(members)`` gives the direct groups of each of ``members``: one
    lookup per level of the search.
    """
    if start == goal:
        return [start]
    parents: dict[str, str] = {}
    frontier = [start]
    seen = {start}
    while frontier:
        groups = groups_of(frontier)
        nxt: list[str] = []
        for p in frontier:
            for g in groups.get(p, ()):
                if g in seen:
                    continue
                seen.add(g)
                parents[g] = p
                if g == goal:
                    chain = [g]
                    while chain[-1] != start:
                        chain.append(parents[chain[-1]])
                    return chain[::-1]
                nxt.append(g)
        frontier = nxt
    return None


def cycle_error(group: str, member: str, chain: Sequence[str], *, bulk: bool) -> InvalidRequest:
    """The error for a membership that would close a cycle, naming it.

    ``chain`` runs from ``group`` to ``member`` over existing memberships;
    ``bulk``: the error of ``principals load``, which loads nothing.
    """
    cycle = [member, *chain]
    named = " → ".join(cycle)
    if bulk:
        return InvalidRequest(
            f"the memberships would make a cycle: {named}; nothing was loaded", cycle=cycle
        )
    return InvalidRequest(
        f"adding {member} to {group} would make a membership cycle: {named}", cycle=cycle
    )


def explain_access(
    principal: str,
    uid: str,
    acl: Sequence[str],
    held: Sequence[str],
    chain_to: Callable[[str], list[str] | None],
) -> AclExplanation:
    """Whether ``principal`` (holding ``held``) may read ``uid`` with ``acl``, and how.

    ``chain_to(entry)`` is the membership chain from ``principal`` to an ACL entry.
    """
    holds = set(held)
    for entry in acl:
        if entry not in holds:
            continue
        if entry == EVERYONE:
            chain = [principal] if principal == EVERYONE else [principal, EVERYONE]
            reason = f"{uid} is readable by everyone"
        else:
            chain = chain_to(entry) or [principal]
            reason = (
                f"{principal} is listed in the ACL of {uid}"
                if len(chain) == 1
                else f"{principal} reaches {entry} through " + " → ".join(chain)
            )
        return AclExplanation(
            principal=principal, uid=uid, allowed=True, chain=tuple(chain), reason=reason
        )
    listed = ", ".join(acl) or "nobody (empty ACL: default deny)"
    return AclExplanation(
        principal=principal,
        uid=uid,
        allowed=False,
        chain=(),
        reason=f"{principal} holds {', '.join(held)}; the ACL of {uid} is {listed};"
        " none of them matches",
    )


def principal_info(
    principal: str, direct: Sequence[str], held: Iterable[str], members: Sequence[str]
) -> PrincipalInfo:
    """``principals show``: direct groups, groups reached through them, direct members."""
    inherited = [p for p in held if p not in direct and p not in (principal, EVERYONE)]
    return PrincipalInfo(
        principal=principal,
        direct_groups=tuple(direct),
        inherited_groups=tuple(inherited),
        members=tuple(members),
    )


def stored_entity(row: Sequence[Any], edges: tuple[Edge, ...], acl: tuple[str, ...]) -> Entity:
    """The entity of a ``statements.load_entity`` row: ``ENTITY_FIELDS`` first (attributes
    as JSON text, or decoded), then whatever else the row holds."""
    fields = dict(zip(ENTITY_FIELDS, row[: len(ENTITY_FIELDS)], strict=True))
    if isinstance(fields["attributes"], str):
        fields["attributes"] = json.loads(fields["attributes"])
    return Entity.from_fields(fields, edges=edges, acl=acl)


def content_answer(
    content_root: str,
    entity: Sequence[Any],
    chunks: Iterable[Sequence[Any]],
    edges: Mapping[str, Iterable[Sequence[Any]]],
    chunk_ids: ChunkIds,
) -> Content:
    """The content API's answer from rows.

    ``entity``: the values of ``ENTITY_FIELDS`` (attributes decoded); ``chunks``:
    ``(row id, ordinal, text, heading, start, end, location)`` with the heading a list (the row
    id stays inside: each chunk is named by its public id, ``chunk_ids``);
    ``edges``: per direction (``out``, ``in``), ``(label, uid, position, title, type, href)``.
    """
    edge_lists = {
        direction: [
            ContentEdge(label=e[0], uid=e[1], position=e[2], title=e[3], type=e[4], href=e[5])
            for e in rows
        ]
        for direction, rows in edges.items()
    }
    return Content(
        content_root=content_root,
        entity=ContentEntity(**dict(zip(ENTITY_FIELDS, entity, strict=True))),
        chunks=[
            ContentChunk(
                chunk_id=chunk_ids(str(entity[0]), int(c[1])),
                ordinal=int(c[1]),
                text=c[2],
                heading=tuple(c[3]),
                start=int(c[4]),
                end=int(c[5]),
                location=location_value(c[6]),
            )
            for c in chunks
        ],
        edges=ContentEdges(out=edge_lists.get("out", []), in_=edge_lists.get("in", [])),
    )
