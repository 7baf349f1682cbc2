"""What a batch may change, settled in the publish's own write transaction — both engines.

The planner (:mod:`.publish`) is pure. Before it runs, each engine calls
:func:`settle_batch` on its write connection, which applies the rules that depend on
what the store holds at that moment — so that no concurrent writer can slip between
a read and the publish:

* **No takeover.** An entity belongs to one source. An upsert of a uid the store holds
  under another source is refused (:class:`~knowledge_store.errors.SourceTakeoverRefused`,
  naming both sources and the uids) unless the batch allows moves
  (:attr:`BatchScope.allow_move`, ``ks ingest --allow-move``).
* **A sync** deletes what its source holds beyond the batch (:func:`.sources.sync_deletes`).
* **Derived entities follow their parent.** A *derived* entity names the entity it was
  split off in ``attributes.acl_from`` and has a ``partOf`` edge to it (a page's code
  samples, ``shared.DERIVED_LINK``). On every publish that writes or deletes a parent, the
  parent's stored derived entities are exactly those the batch holds: the others are
  deleted in the same publish, with what was split off them in turn. And every derived
  entity carries its parent's ACL: an upsert gets the parent's ACL (the batch's version of
  the parent, else the stored one), and one the batch holds unchanged while its parent's
  ACL changes gets an ACL-only change. A derived entity whose parent neither the batch nor
  the store holds, or whose parent this publish deletes, is refused.

Grants and revokes reach the derived entities through ``shared.acl_change``; deletes
through ``shared.deletion`` (and the walk here, which finds the same entities).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from knowledge_store.engines.shared import DERIVED_LINK, acl_parent, stored_entity
from knowledge_store.engines.sql import statements
from knowledge_store.engines.sql.dialect import SqlDialect
from knowledge_store.engines.sql.sources import Executes, SourceSync, sync_deletes
from knowledge_store.errors import InvalidRequest, SourceTakeoverRefused
from knowledge_store.model import ACL_FROM, Edge, Entity

if TYPE_CHECKING:
    from knowledge_store.engines.base import PreparedEntity

__all__ = ["BatchScope", "Settled", "settle_batch", "takeover_error"]

#: How many uids an error names (its details list up to :data:`_LISTED`).
_NAMED = 5
_LISTED = 100


@dataclass(frozen=True)
class BatchScope:
    """What an ingest batch holds beyond the entities it sends, and what it may take over.

    ``holds``: every uid of the batch, those found unchanged (not sent) included — a
    derived entity the batch holds unchanged is not an orphan of its re-written parent.
    ``allow_move``: the batch may move entities another source holds into its own.
    """

    holds: frozenset[str] = frozenset()
    allow_move: bool = False


@dataclass(frozen=True)
class Settled:
    """The batch as the planner takes it: upserts with their parents' ACLs, every deletion
    (the caller's, a sync's, the orphans'), every ACL-only change."""

    upserts: tuple[PreparedEntity, ...]
    deletes: tuple[str, ...]
    acl_only: tuple[Entity, ...]


def settle_batch(
    conn: Executes,
    d: SqlDialect,
    upserts: Sequence[PreparedEntity],
    deletes: Sequence[str],
    *,
    source: SourceSync | None = None,
    scope: BatchScope | None = None,
    acl_only: Sequence[Entity] = (),
) -> Settled:
    """Apply the module's rules to a batch, reading the store on ``conn`` (the publish's
    write transaction). Raises ``SourceTakeoverRefused`` or ``InvalidRequest``; nothing
    is written here."""
    scope = scope or BatchScope()
    latest: dict[str, PreparedEntity] = {}
    for prepared in upserts:  # the last one of a uid wins, as in the planner
        latest.pop(prepared.entity.uid, None)
        latest[prepared.entity.uid] = prepared
    doomed = dict.fromkeys(sync_deletes(conn, d, source, deletes))
    for uid in doomed:
        latest.pop(uid, None)  # upserted and deleted: it ends deleted
    if latest:
        owners = _stored_sources(conn, d, list(latest))
        moves = [
            (uid, owners[uid], p.entity.source)
            for uid, p in latest.items()
            if uid in owners and owners[uid] != p.entity.source
        ]
        if moves and not scope.allow_move:
            raise takeover_error(moves)
    holds = scope.holds | set(latest)
    followers = _walk_derived(conn, d, latest, doomed, holds)
    parents = {p for p in (acl_parent(u.entity) for u in latest.values()) if p is not None}
    stored = _stored_acls(conn, d, sorted((parents - set(latest)) | set(followers)))
    acls = _Acls(latest, followers, stored, doomed)
    settled = [
        dataclasses.replace(p, entity=dataclasses.replace(p.entity, acl=acl))
        if set(acl := acls.of(uid)) != set(p.entity.acl)
        else p
        for uid, p in latest.items()
    ]
    following = [
        dataclasses.replace(_load_entity(conn, d, child), acl=acls.of(child))
        for child in followers
        if set(acls.of(child)) != set(stored[child])
    ]
    return Settled(tuple(settled), tuple(doomed), (*acl_only, *following))


def _walk_derived(
    conn: Executes,
    d: SqlDialect,
    latest: Mapping[str, PreparedEntity],
    doomed: dict[str, None],
    holds: set[str] | frozenset[str],
) -> dict[str, str]:
    """Walk down from the parents this publish writes or deletes: a stored derived entity
    the batch does not hold (or whose parent goes) is added to ``doomed``; one the batch
    holds as stored is a *follower* of its parent. Returns follower → parent."""
    followers: dict[str, str] = {}
    frontier = [*latest, *doomed]
    seen = set(frontier)
    while frontier:
        found: list[str] = []
        for child, parent in _derived_of(conn, d, frontier):
            if child in seen:
                continue
            seen.add(child)
            found.append(child)
            if child in holds and parent not in doomed:
                followers[child] = parent
            elif child in holds:
                raise _orphan_error(child, parent, "this publish deletes")
            else:
                doomed[child] = None
        frontier = found
    return followers


class _Acls:
    """The ACL each entity of the batch ends with: a derived one's is its parent's."""

    def __init__(
        self,
        latest: Mapping[str, PreparedEntity],
        followers: Mapping[str, str],
        stored: Mapping[str, tuple[str, ...]],
        doomed: Mapping[str, None],
    ) -> None:
        self._latest = latest
        self._followers = followers
        self._stored = stored
        self._doomed = doomed
        self._known: dict[str, tuple[str, ...]] = {}

    def of(self, uid: str, trail: tuple[str, ...] = ()) -> tuple[str, ...]:
        known = self._known.get(uid)
        if known is not None:
            return known
        prepared = self._latest.get(uid)
        parent = self._followers.get(uid) if prepared is None else acl_parent(prepared.entity)
        if parent is None:
            acl = self._stored[uid] if prepared is None else prepared.entity.acl
        elif parent in trail or parent == uid:
            raise InvalidRequest(
                f"{uid!r} shares the ACL of {parent!r} (attributes.{ACL_FROM}), which shares"
                f" {uid!r}'s: a cycle of acl_from names no ACL; give one of them its own acl",
                uid=uid,
                field=f"attributes.{ACL_FROM}",
                cycle=[*trail, uid, parent],
            )
        elif parent in self._doomed:
            raise _orphan_error(uid, parent, "this publish deletes")
        elif parent not in self._latest and parent not in self._stored:
            raise _orphan_error(uid, parent, "neither this batch nor the store holds")
        else:
            acl = self.of(parent, (*trail, uid))
        self._known[uid] = tuple(sorted(set(acl)))
        return self._known[uid]


def _orphan_error(uid: str, parent: str, why: str) -> InvalidRequest:
    return InvalidRequest(
        f"{uid!r} shares the ACL of {parent!r} (attributes.{ACL_FROM}), which {why}; nothing"
        f" was published. Ingest {uid!r} with its parent, or without {ACL_FROM} (and with"
        " its own acl)",
        uid=uid,
        field=f"attributes.{ACL_FROM}",
        parent=parent,
    )


def takeover_error(moves: Sequence[tuple[str, str, str]]) -> SourceTakeoverRefused:
    """The refusal of a batch that would move ``(uid, stored source, batch source)`` entities
    from their source to another."""
    pairs: dict[tuple[str, str], list[str]] = {}
    for uid, old, new in moves:
        pairs.setdefault((old, new), []).append(uid)
    parts = []
    for (old, new), uids in sorted(pairs.items()):
        shown = ", ".join(repr(u) for u in uids[:_NAMED]) + (" …" if len(uids) > _NAMED else "")
        what = "entity" if len(uids) == 1 else "entities"
        parts.append(
            f"source {new!r} would take over {len(uids)} {what} of source {old!r}: {shown}"
        )
    return SourceTakeoverRefused(
        f"this batch would overwrite what another source holds — {'; '.join(parts)};"
        " nothing was published. An entity belongs to one source: give this batch's"
        " entities other uids (a folder: --uid-prefix; records: other uids), or move them"
        " to this source on purpose (--allow-move)",
        field="uid",
        uids=[uid for uid, _, _ in moves[:_LISTED]],
        moves=[{"uid": uid, "from": old, "to": new} for uid, old, new in moves[:_LISTED]],
    )


# -- what is read, on the publish's connection -----------------------------------------------------
def _stored_sources(conn: Executes, d: SqlDialect, uids: Sequence[str]) -> dict[str, str]:
    sql = f"SELECT uid, source FROM entities WHERE {d.in_array('uid', 'uids')}"
    rows = conn.execute(sql, {"uids": d.bind_array(uids)}).fetchall()
    return {str(uid): str(source) for uid, source in rows}


def _derived_of(conn: Executes, d: SqlDialect, parents: Sequence[str]) -> list[tuple[str, str]]:
    """``(child, parent)`` for each stored entity derived from one of ``parents``: a
    ``DERIVED_LINK`` edge to it, and ``attributes.acl_from`` naming it."""
    join, _, attributes = d.body("e")
    sql = (
        f"SELECT g.src, g.dst, {attributes} FROM edges AS g JOIN entities AS e ON e.uid = g.src"
        f"{join} WHERE g.label = {d.param('label')} AND {d.in_array('g.dst', 'parents')}"
        " ORDER BY g.dst, g.src"
    )
    params = {"label": DERIVED_LINK, "parents": d.bind_array(parents)}
    out = []
    for child, parent, attrs in conn.execute(sql, params).fetchall():
        decoded = json.loads(attrs) if isinstance(attrs, str | bytes) else attrs
        if isinstance(decoded, dict) and decoded.get(ACL_FROM) == parent and child != parent:
            out.append((str(child), str(parent)))
    return out


def _stored_acls(conn: Executes, d: SqlDialect, uids: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """The ACL of each stored one of ``uids`` (an empty ACL: ``()``)."""
    if not uids:
        return {}
    sql = (
        "SELECT e.uid, p.principal FROM entities AS e LEFT JOIN acl_set_principals AS p"
        f" ON p.acl_set = e.acl_set WHERE {d.in_array('e.uid', 'uids')}"
    )
    acls: dict[str, list[str]] = {}
    for uid, principal in conn.execute(sql, {"uids": d.bind_array(uids)}).fetchall():
        principals = acls.setdefault(str(uid), [])
        if principal is not None:
            principals.append(str(principal))
    return {uid: tuple(sorted(principals)) for uid, principals in acls.items()}


def _load_entity(conn: Executes, d: SqlDialect, uid: str) -> Entity:
    """The stored entity ``uid`` (it is there: the walk just read it, under the lock)."""
    entity_sql, acl_sql, edges_sql = statements.load_entity(d, uid)
    row = conn.execute(*entity_sql).fetchone()
    acl = tuple(str(p) for (p,) in conn.execute(*acl_sql).fetchall())
    edges = tuple(
        Edge(uid, str(label), str(dst), pos)
        for label, dst, pos in conn.execute(*edges_sql).fetchall()
    )
    return stored_entity(row, edges, acl)
