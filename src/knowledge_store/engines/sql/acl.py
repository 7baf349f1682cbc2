"""ACL administration, written once for both engines: grants, revokes, memberships, explanations.

A grant or revoke is a publish (the entity's content hash covers its ACL; the entities
split off it that share its ACL change with it, :func:`~..shared.acl_change`);
membership changes are not — identity expansion is live, so the next reader sees them —
and each bumps ``meta.membership_version`` (PostgreSQL's vector planner keys its cache on
it). A membership that would close a cycle is refused naming the cycle; ``acl explain``
finds the ACL entry the principal holds and the breadth-first membership chain that
reaches it. The statements are the dialect's (:mod:`.dialect`); what differs between the
engines — how a transaction is opened under the write lock, and how a publish is made —
is their :class:`~knowledge_store.engines.base.Writer`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from knowledge_store.engines.shared import (
    DERIVED_LINK,
    acl_change,
    acl_parent,
    cycle_error,
    explain_access,
    membership_path,
    principal_info,
    stored_entity,
)
from knowledge_store.engines.sql import statements
from knowledge_store.engines.sql.dialect import PRINCIPAL_PARAM, SqlDialect
from knowledge_store.engines.sql.history import note_memberships
from knowledge_store.engines.sql.write import Batch
from knowledge_store.errors import NotFound
from knowledge_store.model import (
    AclExplanation,
    Edge,
    Entity,
    MembershipsLoaded,
    PrincipalInfo,
    check_membership,
    check_principal,
)
from knowledge_store.model.audit import AT_FORM

if TYPE_CHECKING:
    from knowledge_store.engines.base import Writer

__all__ = ["AclAdministration", "derived_from", "load_entity"]


def load_entity(conn: Any, d: SqlDialect, uid: str) -> Entity | None:
    """The stored entity with its outgoing edges and ACL (no ACL check: administration)."""
    entity_sql, acl_sql, edges_sql = statements.load_entity(d, uid)
    row = conn.execute(*entity_sql).fetchone()
    if row is None:
        return None
    acl = tuple(str(p) for (p,) in conn.execute(*acl_sql).fetchall())
    edges = tuple(
        Edge(uid, str(lb), str(dst), pos) for lb, dst, pos in conn.execute(*edges_sql).fetchall()
    )
    return stored_entity(row, edges, acl)


def derived_from(conn: Any, d: SqlDialect, uid: str) -> list[Entity]:
    """The entities linked to ``uid`` by ``shared.DERIVED_LINK`` (those sharing its ACL among
    them are ``shared.acl_change``'s and ``shared.deletion``'s to pick)."""
    rows = conn.execute(*statements.derived_candidates(d, uid, DERIVED_LINK)).fetchall()
    found = [load_entity(conn, d, str(src)) for (src,) in rows]
    return [e for e in found if e is not None]


def _entity(conn: Any, d: SqlDialect, uid: str) -> Entity:
    entity = load_entity(conn, d, uid)
    if entity is None:
        raise NotFound(f"no entity with uid {uid!r}", uid=uid)
    return entity


def _held(conn: Any, d: SqlDialect, principal: str) -> list[str]:
    """What ``principal`` holds: itself, ``everyone`` and its groups (expanded now)."""
    rows = conn.execute(d.expand_identity(), {PRINCIPAL_PARAM: principal}).fetchall()
    return [str(p) for (p,) in rows]


def _groups_of(conn: Any, d: SqlDialect, members: Sequence[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    rows = conn.execute(
        "SELECT member, grp FROM memberships WHERE"
        f" {d.in_array('member', 'members')} ORDER BY member, grp",
        {"members": d.bind_array(list(members))},
    ).fetchall()
    for member, grp in rows:
        out.setdefault(str(member), []).append(str(grp))
    return out


def _path_between(conn: Any, d: SqlDialect, start: str, goal: str) -> list[str] | None:
    """A membership chain ``start → … → goal`` (breadth-first, one statement per level)."""
    return membership_path(start, goal, lambda members: _groups_of(conn, d, members))


def _now() -> str:
    """A membership change's moment, as the history and the audit log write it."""
    return datetime.now(UTC).strftime(AT_FORM)


def _bump(conn: Any, d: SqlDialect) -> None:
    """A membership changed: the next reader expands identities anew (a new cache key)."""
    conn.execute(
        "INSERT INTO meta (key, value) VALUES ('membership_version', '1') ON CONFLICT (key)"
        " DO UPDATE SET value = CAST(CAST(meta.value AS BIGINT) + 1 AS TEXT)"
    )


class AclAdministration:
    """The ``AclAdmin`` protocol of :mod:`knowledge_store.engines.base`, over an engine's
    ``Writer``."""

    def __init__(self, engine: Writer) -> None:
        self._engine = engine
        self._d = engine.dialect

    @property
    def catalog(self) -> Writer:
        return self._engine

    # -- ACLs: publishes ----------------------------------------------------------------------
    def grant(self, uid: str, principal: str) -> str:
        return self._change(uid, "grant", principal)

    def revoke(self, uid: str, principal: str) -> str:
        return self._change(uid, "revoke", principal)

    def _change(self, uid: str, change: str, principal: str) -> str:
        """One publish: ``uid`` and the entities split off it that share its ACL."""
        check_principal(principal)
        d = self._d

        def decide(conn: Any) -> list[Entity]:
            entity = _entity(conn, d, uid)
            return acl_change(
                entity, change, principal, lambda parent: derived_from(conn, d, parent)
            )

        return self._engine.publish(Batch(kind=change, acl_change=decide)).root

    def acl_show(self, uid: str) -> tuple[str, ...]:
        with self._engine.reading() as conn:
            return _entity(conn, self._d, uid).acl

    def acl_inherited_from(self, uid: str) -> str | None:
        with self._engine.reading() as conn:
            return acl_parent(_entity(conn, self._d, uid))

    def acl_explain(self, principal: str, uid: str) -> AclExplanation:
        check_principal(principal)
        d = self._d
        with self._engine.reading() as conn:
            entity = _entity(conn, d, uid)
            return explain_access(
                principal,
                uid,
                entity.acl,
                _held(conn, d, principal),
                lambda entry: _path_between(conn, d, principal, entry),
            )

    # -- memberships: live, not publishes ----------------------------------------------------------
    def add_member(self, group: str, member: str) -> None:
        check_membership(group, member)
        d = self._d
        with self._engine.writing() as conn:
            chain = _path_between(conn, d, group, member)
            if chain is not None:
                raise cycle_error(group, member, chain, bulk=False)
            cur = conn.execute(
                "INSERT INTO memberships (grp, member)"
                f" VALUES ({d.param('grp')}, {d.param('member')}) ON CONFLICT DO NOTHING",
                {"grp": group, "member": member},
            )
            if cur.rowcount:
                note_memberships(conn, d, [(group, member)], [], _now())
            _bump(conn, d)

    def remove_member(self, group: str, member: str) -> None:
        check_membership(group, member)
        d = self._d
        with self._engine.writing() as conn:
            cur = conn.execute(
                f"DELETE FROM memberships WHERE grp = {d.param('grp')}"
                f" AND member = {d.param('member')}",
                {"grp": group, "member": member},
            )
            if cur.rowcount == 0:
                raise NotFound(f"{member} is not a direct member of {group}", group=group)
            note_memberships(conn, d, [], [(group, member)], _now())
            _bump(conn, d)

    def principal_show(self, principal: str) -> PrincipalInfo:
        check_principal(principal)
        d = self._d
        with self._engine.reading() as conn:
            direct = _groups_of(conn, d, [principal]).get(principal, [])
            held = _held(conn, d, principal)
            members = [
                str(m)
                for (m,) in conn.execute(
                    f"SELECT member FROM memberships WHERE grp = {d.param('grp')} ORDER BY member",
                    {"grp": principal},
                ).fetchall()
            ]
        return principal_info(principal, direct, held, members)

    def load_memberships(self, pairs: Sequence[tuple[str, str]]) -> MembershipsLoaded:
        """Replace the memberships of the groups ``pairs`` names; a cycle loads nothing."""
        for group, member in pairs:
            check_membership(group, member)
        d = self._d
        groups = sorted({g for g, _ in pairs})
        unique = sorted(set(pairs))
        with self._engine.writing() as conn:
            before = {
                (str(g), str(m))
                for g, m in conn.execute(
                    f"SELECT grp, member FROM memberships WHERE {d.in_array('grp', 'groups')}",
                    {"groups": d.bind_array(groups)},
                ).fetchall()
            }
            conn.execute(
                f"DELETE FROM memberships WHERE {d.in_array('grp', 'groups')}",
                {"groups": d.bind_array(groups)},
            )
            conn.execute(
                "INSERT INTO memberships (grp, member) SELECT g.value, m.value"
                f" FROM ({d.indexed_array_rows('grps')}) AS g"
                f" JOIN ({d.indexed_array_rows('members')}) AS m ON m.pos = g.pos"
                " WHERE true ON CONFLICT DO NOTHING",  # WHERE: SQLite's upsert after a join
                {
                    "grps": d.bind_array([g for g, _ in unique]),
                    "members": d.bind_array([m for _, m in unique]),
                },
            )
            for group, member in pairs:
                if member.startswith("group:"):
                    chain = _path_between(conn, d, group, member)
                    if chain:
                        raise cycle_error(group, member, chain, bulk=True)
            after = set(unique)
            note_memberships(conn, d, sorted(after - before), sorted(before - after), _now())
            _bump(conn, d)
        return MembershipsLoaded(groups=len(groups), memberships=len(unique))
