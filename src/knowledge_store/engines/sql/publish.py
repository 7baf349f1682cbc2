"""The publish planner — pure: a batch and what the store holds → changes, counts, content root.

Both engines plan a publish here, in their write transaction, then apply the
plan in their own SQL. The same batch on the same content gives the same
counts and the same content root on either engine:

* upserts are unique by uid, the last one winning; an entity both upserted
  and deleted in one publish ends deleted;
* an upsert of an existing uid counts as updated, of a new one as added; a
  delete counts only when the uid exists (missing uids are the caller's
  concern: ``delete`` refuses them first); an ACL-only change of an existing
  entity counts as updated;
* the root is the hash of the parent root and every changed uid's content
  hash (None for a deletion); a batch that changes nothing publishes nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from knowledge_store.engines.sql.dialect import SqlDialect
from knowledge_store.model import Entity

if TYPE_CHECKING:
    from knowledge_store.engines.base import PreparedEntity

__all__ = [
    "EMPTY_ROOT",
    "PublishPlan",
    "content_root_of",
    "plan_publish",
    "plan_row",
    "publish_row",
]

#: The root of a store with no publish yet.
EMPTY_ROOT = hashlib.sha256(b"knowledge-store:empty").hexdigest()


def content_root_of(parent: str, changes: Mapping[str, str | None]) -> str:
    """Root of a publish: hash of the parent root and each changed uid's content hash."""
    lines = [parent] + [f"{uid}\t{h or '-'}" for uid, h in sorted(changes.items())]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


@dataclass(frozen=True)
class PublishPlan:
    """What one publish will do. ``empty`` when it changes nothing (nothing is written)."""

    publish: int  # the id it will have
    parent: str
    upserts: tuple[PreparedEntity, ...]
    replaced: tuple[str, ...]  # uids of upserts that exist (their chunks and edges go)
    deletes: tuple[str, ...]  # existing uids to delete
    acl_only: tuple[Entity, ...]  # existing entities whose ACL (and nothing else) changes
    changes: Mapping[str, str | None] = field(default_factory=dict)
    root: str = EMPTY_ROOT
    #: Upserts whose stored content hash already matched (another writer got there
    #: first): left as they are, counted here.
    unchanged: int = 0

    @property
    def empty(self) -> bool:
        return not self.changes

    @property
    def added(self) -> int:
        return len(self.upserts) - len(self.replaced)

    @property
    def updated(self) -> int:
        return len(self.replaced) + len(self.acl_only)

    @property
    def deleted(self) -> int:
        return len(self.deletes)


def plan_publish(
    latest: tuple[int, str],
    existing: Mapping[str, str],
    upserts: Sequence[PreparedEntity],
    deletes: Sequence[str],
    acl_only: Sequence[Entity] = (),
) -> PublishPlan:
    """The plan of a publish on top of ``latest`` = (publish id, root).

    ``existing``: uid → stored content hash of the uids of the batch (upserts,
    deletes, ACL-only) that the store holds now, read in the publish's own write
    transaction. An upsert whose hash is already stored is left as it is
    (``unchanged``): the counts are what this publish did, whatever was read before.
    """
    publish, parent = latest
    doomed = set(deletes)
    by_uid: dict[str, PreparedEntity] = {}
    for prepared in upserts:
        by_uid.pop(prepared.entity.uid, None)
        by_uid[prepared.entity.uid] = prepared
    fresh = {uid: p for uid, p in by_uid.items() if uid not in doomed}
    unique = tuple(p for uid, p in fresh.items() if existing.get(uid) != p.entity.content_hash)
    removed = tuple(uid for uid in dict.fromkeys(deletes) if uid in existing)
    acl = tuple(e for e in acl_only if e.uid in existing and e.uid not in doomed)
    changes: dict[str, str | None] = {p.entity.uid: p.entity.content_hash for p in unique}
    changes.update({e.uid: e.content_hash for e in acl})
    changes.update(dict.fromkeys(removed))
    return PublishPlan(
        publish=publish + 1,
        parent=parent,
        upserts=unique,
        replaced=tuple(p.entity.uid for p in unique if p.entity.uid in existing),
        deletes=removed,
        acl_only=acl,
        changes=changes,
        root=content_root_of(parent, changes) if changes else parent,
        unchanged=len(fresh) - len(unique),
    )


_PUBLISH_COLUMNS = ("id", "root", "parent", "kind", "at", "added", "updated", "deleted")


def publish_row(
    d: SqlDialect,
    publish: int,
    root: str,
    parent: str,
    kind: str,
    counts: tuple[int, int, int] = (0, 0, 0),
) -> tuple[str, dict[str, Any]]:
    """The statement that records a publish in ``publishes``, stamped now (UTC, microseconds:
    the history orders publishes and membership changes by it).

    ``counts``: the entities it added, updated and deleted (a re-embedding's are 0).
    """
    at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    values = (publish, root, parent, kind, at, *counts)
    columns = ", ".join(_PUBLISH_COLUMNS)
    params = ", ".join(d.param(c) for c in _PUBLISH_COLUMNS)
    return (
        f"INSERT INTO publishes ({columns}) VALUES ({params})",
        dict(zip(_PUBLISH_COLUMNS, values, strict=True)),
    )


def plan_row(d: SqlDialect, plan: PublishPlan, kind: str) -> tuple[str, dict[str, Any]]:
    """:func:`publish_row` of a planned publish, with its counts."""
    counts = (plan.added, plan.updated, plan.deleted)
    return publish_row(d, plan.publish, plan.root, plan.parent, kind, counts)
