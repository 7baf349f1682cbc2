"""ACL administration of the embedded engine: grants, revokes, memberships, explanations.

A grant or revoke is a publish (the entity's content hash covers its ACL);
membership changes are not — identity expansion is live, so the next reader
sees them. The rules and sentences are the shared ones of
:mod:`knowledge_store.engines.shared`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from knowledge_store.engines.shared import cycle_error, explain_access, principal_info
from knowledge_store.errors import NotFound
from knowledge_store.model import (
    AclExplanation,
    MembershipsLoaded,
    PrincipalInfo,
    check_membership,
    check_principal,
)

if TYPE_CHECKING:
    from knowledge_store.engines.embedded.engine import EmbeddedEngine

__all__ = ["EmbeddedAdmin"]


class EmbeddedAdmin:
    def __init__(self, engine: EmbeddedEngine) -> None:
        self._engine = engine
        self._catalog = engine.catalog

    def grant(self, uid: str, principal: str) -> str:
        return self._change(uid, "grant", principal)

    def revoke(self, uid: str, principal: str) -> str:
        return self._change(uid, "revoke", principal)

    def _change(self, uid: str, change: str, principal: str) -> str:
        check_principal(principal)
        with self._engine._writer():
            with self._catalog.read() as conn:
                entity = self._catalog.load_entity(conn, uid)
            if entity is None:
                raise NotFound(f"no entity with uid {uid!r}", uid=uid)
            acl = set(entity.acl)
            if change == "grant":
                acl.add(principal)
            else:
                acl.discard(principal)
            changed = replace(entity, acl=tuple(sorted(acl)))
            if changed.content_hash == entity.content_hash:
                return self._engine.content_root()
            return self._engine.publish([], [], kind=change, acl_only=[changed]).root

    def acl_show(self, uid: str) -> tuple[str, ...]:
        with self._catalog.read() as conn:
            entity = self._catalog.load_entity(conn, uid)
        if entity is None:
            raise NotFound(f"no entity with uid {uid!r}", uid=uid)
        return entity.acl

    def acl_explain(self, principal: str, uid: str) -> AclExplanation:
        check_principal(principal)
        with self._catalog.read() as conn:
            entity = self._catalog.load_entity(conn, uid)
            if entity is None:
                raise NotFound(f"no entity with uid {uid!r}", uid=uid)
            held = self._catalog.held_principals(conn, principal)
            return explain_access(
                principal,
                uid,
                entity.acl,
                held,
                lambda entry: self._catalog.path_between(conn, principal, entry),
            )

    def add_member(self, group: str, member: str) -> None:
        check_membership(group, member)
        with self._engine._writer(), self._catalog.write() as conn:
            chain = self._catalog.path_between(conn, group, member)
            if chain is not None:
                raise cycle_error(group, member, chain, bulk=False)
            conn.execute(
                "INSERT OR IGNORE INTO memberships(grp, member) VALUES (?, ?)", (group, member)
            )

    def remove_member(self, group: str, member: str) -> None:
        check_membership(group, member)
        with self._engine._writer(), self._catalog.write() as conn:
            cur = conn.execute(
                "DELETE FROM memberships WHERE grp = ? AND member = ?", (group, member)
            )
            if cur.rowcount == 0:
                raise NotFound(f"{member} is not a direct member of {group}", group=group)

    def principal_show(self, principal: str) -> PrincipalInfo:
        check_principal(principal)
        with self._catalog.read() as conn:
            direct = self._catalog.memberships_of(conn, principal)
            held = self._catalog.held_principals(conn, principal)
            members = self._catalog.members_of(conn, principal)
        return principal_info(principal, direct, held, members)

    def load_memberships(self, pairs: Sequence[tuple[str, str]]) -> MembershipsLoaded:
        for group, member in pairs:
            check_membership(group, member)
        groups = sorted({g for g, _ in pairs})
        with self._engine._writer(), self._catalog.write() as conn:
            conn.executemany("DELETE FROM memberships WHERE grp = ?", ((g,) for g in groups))
            conn.executemany("INSERT OR IGNORE INTO memberships(grp, member) VALUES (?, ?)", pairs)
            for group, member in pairs:
                if member.startswith("group:"):
                    chain = self._catalog.path_between(conn, group, member)
                    if chain:
                        raise cycle_error(group, member, chain, bulk=True)
        return MembershipsLoaded(groups=len(groups), memberships=len(set(pairs)))
