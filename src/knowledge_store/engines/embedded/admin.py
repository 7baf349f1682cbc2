"""ACL administration of the embedded engine: grants, revokes, memberships, explanations.

A grant or revoke is a publish (the entity's content hash covers its ACL);
membership changes are not — identity expansion is live, so the next reader
sees them. The rules and sentences are the shared ones of
:mod:`knowledge_store.engines.shared`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING

from knowledge_store.engines.shared import (
    DERIVED_LINK,
    acl_change,
    acl_parent,
    cycle_error,
    explain_access,
    principal_info,
)
from knowledge_store.engines.sql import statements
from knowledge_store.engines.sql.dialect import SQLITE
from knowledge_store.errors import NotFound
from knowledge_store.model import (
    AclExplanation,
    Entity,
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
        """One publish: ``uid`` and the entities split off it (``shared.acl_change``)."""
        check_principal(principal)
        with self._engine._writer():
            with self._catalog.read() as conn:
                entity = self._entity(conn, uid)
                changed = acl_change(
                    entity, change, principal, lambda parent: self.derived_from(conn, parent)
                )
            if not changed:
                return self._engine.content_root()
            return self._engine.publish([], [], kind=change, acl_only=changed).root

    def _entity(self, conn: sqlite3.Connection, uid: str) -> Entity:
        entity = self._catalog.load_entity(conn, uid)
        if entity is None:
            raise NotFound(f"no entity with uid {uid!r}", uid=uid)
        return entity

    def derived_from(self, conn: sqlite3.Connection, uid: str) -> list[Entity]:
        """The entities linked to ``uid`` by ``shared.DERIVED_LINK`` (those sharing its ACL
        among them are ``acl_change``'s to pick)."""
        rows = conn.execute(*statements.derived_candidates(SQLITE, uid, DERIVED_LINK))
        found = [self._catalog.load_entity(conn, str(src)) for (src,) in rows.fetchall()]
        return [e for e in found if e is not None]

    def acl_show(self, uid: str) -> tuple[str, ...]:
        with self._catalog.read() as conn:
            return self._entity(conn, uid).acl

    def acl_inherited_from(self, uid: str) -> str | None:
        with self._catalog.read() as conn:
            return acl_parent(self._entity(conn, uid))

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
