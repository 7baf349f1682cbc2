"""Reading a whole store back out, on one snapshot — both engines (``ks export``).

An export is every entity as stored — its fields, outgoing edges and ACL — in id order,
a batch of :data:`BATCH` at a time, and every membership, all read on one snapshot
(:class:`Snapshot`: one catalog read transaction). The entities come back as
:class:`~knowledge_store.model.Entity` values, whose ``to_record()`` is the ingest
format: ingesting them gives each the same content hash, so the same content digest.

**Derived entities follow their parent** (``engines/sql/batch.py``): an export that
FILTERS narrow is closed under derivation — a selected entity brings the entity whose
ACL it shares (``attributes.acl_from``, transitively) and the entities split off it
(a page's code samples), so that ingesting the export neither orphans a sample (its
parent missing: refused) nor leaves a page without the samples it had.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from knowledge_store.engines.shared import DERIVED_LINK, stored_entity
from knowledge_store.engines.sql.dialect import SqlDialect
from knowledge_store.engines.sql.facets import entity_columns
from knowledge_store.engines.sql.filters import filter_clause
from knowledge_store.model import ACL_FROM, ENTITY_FIELDS, Edge, Entity, Filters

__all__ = [
    "BATCH",
    "Run",
    "Snapshot",
    "entities_digest",
    "exported_entities",
    "memberships",
    "selected_ids",
    "store_digest",
]

#: Runs one statement on the snapshot and returns its rows.
Run = Callable[[str, Mapping[str, Any]], Sequence[Sequence[Any]]]

#: Entities read at a time (with their edges and ACLs).
BATCH = 500


@dataclass(frozen=True)
class Snapshot:
    """One catalog read transaction: a statement runner, its dialect, its publish and root."""

    run: Run
    dialect: SqlDialect
    publish: int
    root: str


def entities_digest(hashes: Mapping[str, str]) -> str:
    """The content digest of a set of entities: sha256 over their ``uid:content_hash`` lines,
    sorted by uid. Equal sets of entities — whatever their history, whatever engine holds
    them — have equal digests (a content *root* also depends on the publishes that led there)."""
    digest = hashlib.sha256()
    for uid in sorted(hashes):
        digest.update(f"{uid}:{hashes[uid]}\n".encode())
    return digest.hexdigest()


def store_digest(snap: Snapshot) -> tuple[str, int]:
    """The content digest (:func:`entities_digest`) of every entity, and how many there are."""
    rows = snap.run("SELECT uid, content_hash FROM entities", {})
    return entities_digest({str(uid): str(h) for uid, h in rows}), len(rows)


def selected_ids(snap: Snapshot, filters: Filters) -> tuple[set[int] | None, int]:
    """The row ids FILTERS select, closed under derivation (module docstring), and how many
    of them the closure added; ``(None, 0)``: every entity."""
    if filters.is_empty:
        return None, 0
    d, run = snap.dialect, snap.run
    where, params = filter_clause(filters, d)
    rows = run(f"SELECT e.id, e.uid FROM entities AS e WHERE {where}", params)
    chosen = {str(uid): int(i) for i, uid in rows}
    selected = len(chosen)
    pending = list(chosen)
    while pending:  # up: the entities whose ACL a chosen one shares
        parents = _parents(snap, pending)
        pending = [p for p in parents if p not in chosen]
        chosen.update(_ids(snap, pending))
        pending = [p for p in pending if p in chosen]
    pending = list(chosen)
    while pending:  # down: what was split off a chosen one
        children = [c for c in _children(snap, pending) if c not in chosen]
        chosen.update(_ids(snap, children))
        pending = children
    return set(chosen.values()), len(chosen) - selected


def _ids(snap: Snapshot, uids: Sequence[str]) -> dict[str, int]:
    if not uids:
        return {}
    d = snap.dialect
    rows = snap.run(
        f"SELECT uid, id FROM entities WHERE {d.in_array('uid', 'uids')}",
        {"uids": d.bind_array(list(uids))},
    )
    return {str(uid): int(i) for uid, i in rows}


def _parents(snap: Snapshot, uids: Sequence[str]) -> list[str]:
    """The ``acl_from`` parents named by the entities ``uids``."""
    d = snap.dialect
    join, _, attributes = d.body("e")
    rows = snap.run(
        f"SELECT e.uid, {attributes} FROM entities AS e{join} WHERE {d.in_array('e.uid', 'uids')}",
        {"uids": d.bind_array(list(uids))},
    )
    out = []
    for uid, raw in rows:
        attrs = json.loads(raw) if isinstance(raw, str | bytes) else raw
        parent = attrs.get(ACL_FROM) if isinstance(attrs, dict) else None
        if isinstance(parent, str) and parent != uid:
            out.append(parent)
    return out


def _children(snap: Snapshot, parents: Sequence[str]) -> list[str]:
    """The entities split off ``parents``: a ``DERIVED_LINK`` edge to one, whose
    ``acl_from`` names it (as the publish finds them)."""
    d = snap.dialect
    join, _, attributes = d.body("e")
    rows = snap.run(
        f"SELECT g.src, g.dst, {attributes} FROM edges AS g JOIN entities AS e ON e.uid = g.src"
        f"{join} WHERE g.label = {d.param('label')} AND {d.in_array('g.dst', 'parents')}",
        {"label": DERIVED_LINK, "parents": d.bind_array(list(parents))},
    )
    out = []
    for child, parent, raw in rows:
        attrs = json.loads(raw) if isinstance(raw, str | bytes) else raw
        if isinstance(attrs, dict) and attrs.get(ACL_FROM) == parent and child != parent:
            out.append(str(child))
    return out


def exported_entities(snap: Snapshot, ids: set[int] | None = None) -> Iterator[list[Entity]]:
    """Every entity (or those of row ``ids``) as stored, in row id order, a batch at a time."""
    d, run = snap.dialect, snap.run
    join, body, attributes = d.body("e")
    columns = entity_columns("e", body, attributes)
    after = 0
    while True:
        rows = run(
            f"SELECT e.id, {columns}, e.acl_set FROM entities AS e{join}"
            f" WHERE e.id > {d.param('after')} ORDER BY e.id LIMIT {BATCH}",
            {"after": after},
        )
        if not rows:
            return
        after = int(rows[-1][0])
        if ids is not None:
            rows = [r for r in rows if int(r[0]) in ids]
        if rows:
            yield _entities(snap, rows)


def _entities(snap: Snapshot, rows: Sequence[Sequence[Any]]) -> list[Entity]:
    d, run = snap.dialect, snap.run
    width = len(ENTITY_FIELDS)
    uids = [str(r[1]) for r in rows]
    edges: dict[str, list[Edge]] = {}
    for src, label, dst, position in run(
        "SELECT src, label, dst, position FROM edges"
        f" WHERE {d.in_array('src', 'uids')} ORDER BY src, label, dst",
        {"uids": d.bind_array(uids)},
    ):
        edges.setdefault(str(src), []).append(Edge(str(src), str(label), str(dst), position))
    sets = sorted({int(r[width + 1]) for r in rows})
    acls: dict[int, list[str]] = {s: [] for s in sets}
    for acl_set, principal in run(
        "SELECT acl_set, principal FROM acl_set_principals"
        f" WHERE {d.in_array('acl_set', 'sets', 'bigint')} ORDER BY acl_set, principal",
        {"sets": d.bind_array(sets)},
    ):
        acls[int(acl_set)].append(str(principal))
    return [
        stored_entity(
            r[1 : 1 + width], tuple(edges.get(str(r[1]), ())), tuple(acls[int(r[width + 1])])
        )
        for r in rows
    ]


def memberships(snap: Snapshot) -> list[tuple[str, str]]:
    """Every ``(group, member)`` membership, sorted."""
    return [
        (str(g), str(m))
        for g, m in snap.run("SELECT grp, member FROM memberships ORDER BY grp, member", {})
    ]
