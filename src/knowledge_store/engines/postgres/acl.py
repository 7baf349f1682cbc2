"""Principals and memberships on PostgreSQL: expansion, chains, cycles, explanations.

The same rules and sentences as the embedded engine: a membership that would
close a cycle is refused naming the cycle; ``acl explain`` finds the ACL entry
the principal holds and the breadth-first membership chain that reaches it.
Every function runs inside the caller's transaction (``conn``); every change
bumps ``meta.membership_version``, which keys the vector planner's cache.
"""

from __future__ import annotations

from collections.abc import Sequence

from knowledge_store.engines.postgres.db import Connection
from knowledge_store.engines.postgres.publish import load_entity
from knowledge_store.engines.shared import (
    cycle_error,
    explain_access,
    membership_path,
)
from knowledge_store.engines.shared import principal_info as shared_principal_info
from knowledge_store.engines.sql.dialect import POSTGRES
from knowledge_store.errors import NotFound
from knowledge_store.model import (
    AclExplanation,
    MembershipsLoaded,
    PrincipalInfo,
    check_membership,
)

__all__ = [
    "add_member",
    "check_membership",
    "explain",
    "held_principals",
    "load_memberships",
    "path_between",
    "principal_info",
    "remove_member",
]

_BUMP = (
    "INSERT INTO meta (key, value) VALUES ('membership_version', '1')"
    " ON CONFLICT (key) DO UPDATE SET value = (meta.value::bigint + 1)::text"
)


def held_principals(conn: Connection, principal: str) -> list[str]:
    """What ``principal`` holds: itself, ``everyone``, every group reached (sorted)."""
    return [str(p) for (p,) in conn.execute(POSTGRES.expand_identity(), {"principal": principal})]


def _groups_of(conn: Connection, members: Sequence[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for member, grp in conn.execute(
        "SELECT member, grp FROM memberships WHERE member = ANY(%s::text[]) ORDER BY member, grp",
        (list(members),),
    ):
        out.setdefault(str(member), []).append(str(grp))
    return out


def path_between(conn: Connection, start: str, goal: str) -> list[str] | None:
    """A membership chain ``start → … → goal`` (breadth-first, one query per level)."""
    return membership_path(start, goal, lambda members: _groups_of(conn, members))


def explain(conn: Connection, principal: str, uid: str) -> AclExplanation:
    entity = load_entity(conn, uid)
    if entity is None:
        raise NotFound(f"no entity with uid {uid!r}", uid=uid)
    held = held_principals(conn, principal)
    return explain_access(
        principal, uid, entity.acl, held, lambda entry: path_between(conn, principal, entry)
    )


def add_member(conn: Connection, group: str, member: str) -> None:
    chain = path_between(conn, group, member)
    if chain is not None:
        raise cycle_error(group, member, chain, bulk=False)
    conn.execute(
        "INSERT INTO memberships (grp, member) VALUES (%s, %s) ON CONFLICT DO NOTHING",
        (group, member),
    )
    conn.execute(_BUMP)


def remove_member(conn: Connection, group: str, member: str) -> None:
    cur = conn.execute("DELETE FROM memberships WHERE grp = %s AND member = %s", (group, member))
    if cur.rowcount == 0:
        raise NotFound(f"{member} is not a direct member of {group}", group=group)
    conn.execute(_BUMP)


def principal_info(conn: Connection, principal: str) -> PrincipalInfo:
    direct = _groups_of(conn, [principal]).get(principal, [])
    held = held_principals(conn, principal)
    members = [
        str(m)
        for (m,) in conn.execute(
            "SELECT member FROM memberships WHERE grp = %s ORDER BY member", (principal,)
        )
    ]
    return shared_principal_info(principal, direct, held, members)


def load_memberships(conn: Connection, pairs: Sequence[tuple[str, str]]) -> MembershipsLoaded:
    """Replace the memberships of the groups ``pairs`` names; a cycle loads nothing."""
    groups = sorted({g for g, _ in pairs})
    unique = sorted(set(pairs))
    conn.execute("DELETE FROM memberships WHERE grp = ANY(%s::text[])", (groups,))
    conn.execute(
        "INSERT INTO memberships (grp, member)"
        " SELECT * FROM unnest(%s::text[], %s::text[]) ON CONFLICT DO NOTHING",
        ([g for g, _ in unique], [m for _, m in unique]),
    )
    for group, member in pairs:
        if member.startswith("group:"):
            chain = path_between(conn, group, member)
            if chain:
                raise cycle_error(group, member, chain, bulk=True)
    conn.execute(_BUMP)
    return MembershipsLoaded(groups=len(groups), memberships=len(unique))
