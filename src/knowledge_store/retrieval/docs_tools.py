"""Docs tools on the one bounded traversal: related entities, learning paths, xrefs, facets.

Engine-agnostic: each tool calls the engine's ``graph`` primitive (the bounded
breadth-first traversal) or ``query_graph`` (whose variable-length patterns
walk the same traversal) — there is no other path into the graph, and both
apply the caller's ACL inside their statements. Each tool returns a plain
dataclass with ``to_dict()``; an entity the caller can't read answers exactly
like one that doesn't exist (``NotFound``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

from knowledge_store.errors import InvalidRequest, NotFound
from knowledge_store.model import GraphHit, Identity

if TYPE_CHECKING:
    from knowledge_store.engines.base import Engine
    from knowledge_store.store import KnowledgeStore

__all__ = [
    "GraphFacets",
    "LearningPath",
    "LearningUnit",
    "Related",
    "XrefMatch",
    "XrefResolution",
    "get_learning_path",
    "get_related",
    "graph_facets",
    "resolve_xref",
]

IdentityLike = Identity | str | None
#: Levels of partOf walked up to find a path's root, and down to list its tree.
LEARNING_DEPTH = 3
_MAX_CANDIDATES = 20


def _engine(source: Engine | KnowledgeStore) -> Engine:
    return cast("Engine", getattr(source, "engine", source))


def _identity(who: IdentityLike) -> Identity:
    if isinstance(who, Identity):
        return who
    return Identity(who or os.environ.get("KS_AS") or "everyone")


@dataclass(frozen=True)
class XrefMatch:
    """An entity found by uid, href or title."""

    uid: str
    title: str
    type: str
    href: str | None

    @classmethod
    def from_node(cls, node: dict[str, Any]) -> XrefMatch:
        return cls(str(node["uid"]), str(node["title"]), str(node["type"]), node.get("href"))

    def to_dict(self) -> dict[str, Any]:
        return {"uid": self.uid, "title": self.title, "type": self.type, "href": self.href}


def _lookup(engine: Engine, identity: Identity, uid: str) -> XrefMatch | None:
    answer = engine.query_graph(identity, "MATCH (n {uid: $uid}) RETURN n", {"uid": uid})
    return XrefMatch.from_node(answer.rows[0][0]) if answer.rows else None


def _require(engine: Engine, identity: Identity, uid: str) -> XrefMatch:
    if not isinstance(uid, str) or not uid:
        raise InvalidRequest("a uid is needed", field="uid")
    found = _lookup(engine, identity, uid)
    if found is None:
        raise NotFound(f"no entity with uid {uid!r}", uid=uid)
    return found


# -- get_related --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Related:
    """Neighbours of one entity with hop distance and one path each."""

    uid: str
    title: str
    content_root: str
    hits: list[GraphHit]
    capped: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "title": self.title,
            "content_root": self.content_root,
            "related": [{**h.to_dict(), "href": h.href} for h in self.hits],
            "capped": self.capped,
        }


def get_related(
    source: Engine | KnowledgeStore,
    uid: str,
    *,
    identity: IdentityLike = None,
    labels: Sequence[str] = (),
    depth: int = 1,
    direction: str = "both",
    k: int = 10,
) -> Related:
    """Entities linked to ``uid`` within ``depth`` ≤ 3 hops, ranked as the graph primitive."""
    engine, who = _engine(source), _identity(identity)
    start = _require(engine, who, uid)
    answer = engine.graph(who, [uid], depth=depth, labels=labels, direction=direction, k=k)
    return Related(uid, start.title, answer.content_root, answer.hits, answer.capped)


# -- get_learning_path ------------------------------------------------------------------------------


@dataclass(frozen=True)
class LearningUnit:
    uid: str
    title: str
    type: str
    href: str | None
    depth: int  # 0 for the root
    position: int | None  # the partOf position under its parent
    parent: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "title": self.title,
            "type": self.type,
            "href": self.href,
            "depth": self.depth,
            "position": self.position,
            "parent": self.parent,
        }


@dataclass(frozen=True)
class LearningPath:
    """The ordered tree (depth-first, by partOf ``position``) an entity belongs to."""

    uid: str
    root: str
    ancestors: tuple[str, ...]  # root … parent of ``uid``
    units: list[LearningUnit]
    index: int | None  # ``uid``'s place in ``units`` (0-based), None if it is below the depth
    content_root: str
    capped: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "root": self.root,
            "ancestors": list(self.ancestors),
            "units": [u.to_dict() for u in self.units],
            "index": self.index,
            "count": len(self.units),
            "content_root": self.content_root,
            "capped": self.capped,
        }


def _root_chain(engine: Engine, who: Identity, uid: str) -> list[str]:
    """``[uid, parent, …, root]`` along partOf, walking up in bounded steps."""
    chain = [uid]
    for _ in range(4):
        up = engine.graph(
            who, [chain[-1]], depth=LEARNING_DEPTH, labels=["partOf"], direction="out", k=1000
        )
        if not up.hits:
            break
        top = max(h.hops for h in up.hits)
        best = next(h for h in up.hits if h.hops == top)
        steps = [s.uid for s in best.path[1:]]
        if any(s in chain for s in steps):  # a partOf cycle: stop before it closes
            steps = steps[: next(i for i, s in enumerate(steps) if s in chain)]
            chain.extend(steps)
            break
        chain.extend(steps)
        if top < LEARNING_DEPTH:
            break
    return chain


def _positions(engine: Engine, who: Identity, pairs: dict[str, str]) -> dict[str, int | None]:
    """The partOf position of each child under its chosen parent (``pairs``: child → parent)."""
    out: dict[str, int | None] = {}
    children = sorted(pairs)
    for i in range(0, len(children), 500):
        part = children[i : i + 500]
        parents = sorted({pairs[c] for c in part})
        skip = 0
        while True:
            answer = engine.query_graph(
                who,
                "MATCH (c)-[r:partOf]->(p) WHERE c.uid IN $children AND p.uid IN $parents"
                " RETURN c.uid, p.uid, r.position ORDER BY c.uid, p.uid SKIP $skip LIMIT 1000",
                {"children": part, "parents": parents, "skip": skip},
            )
            for child, parent, position in answer.rows:
                if pairs.get(child) == parent:
                    out[child] = position
            if not answer.truncated:
                break
            skip += 1000
    return out


def get_learning_path(
    source: Engine | KnowledgeStore, uid: str, *, identity: IdentityLike = None
) -> LearningPath:
    """The path/module ``uid`` belongs to, in order, with ``uid``'s place in it.

    Walks partOf up to the root (the top ancestor, choosing the best-ranked
    parent where there are several), then lists the root's tree depth-first,
    siblings by ``position`` (then title, uid). For a root uid, its whole tree.
    """
    engine, who = _engine(source), _identity(identity)
    start = _require(engine, who, uid)
    chain = _root_chain(engine, who, uid)
    root = chain[-1]
    root_entity = start if root == uid else _require(engine, who, root)
    down = engine.graph(
        who, [root], depth=LEARNING_DEPTH, labels=["partOf"], direction="in", k=1000
    )
    parent_of = {h.uid: h.path[-2].uid for h in down.hits}
    positions = _positions(engine, who, parent_of) if parent_of else {}
    children: dict[str, list[GraphHit]] = {}
    for h in down.hits:
        children.setdefault(parent_of[h.uid], []).append(h)
    for siblings in children.values():
        siblings.sort(
            key=lambda h: (positions.get(h.uid) is None, positions.get(h.uid) or 0, h.title, h.uid)
        )
    units = [
        LearningUnit(root, root_entity.title, root_entity.type, root_entity.href, 0, None, None)
    ]

    def visit(node: str, depth: int) -> None:
        for h in children.get(node, []):
            units.append(
                LearningUnit(h.uid, h.title, h.type, h.href, depth, positions.get(h.uid), node)
            )
            visit(h.uid, depth + 1)

    visit(root, 1)
    index = next((i for i, u in enumerate(units) if u.uid == uid), None)
    ancestors = tuple(reversed(chain[1:]))
    return LearningPath(uid, root, ancestors, units, index, down.content_root, down.capped)


# -- resolve_xref ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class XrefResolution:
    """What a reference points at: one entity, or the candidates when it is ambiguous."""

    ref: str
    matched_by: str  # uid | href | title
    entity: XrefMatch | None
    candidates: list[XrefMatch] = field(default_factory=list)
    anchor: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "ref": self.ref,
            "matched_by": self.matched_by,
            "entity": self.entity.to_dict() if self.entity else None,
            "candidates": [c.to_dict() for c in self.candidates],
            "anchor": self.anchor,
        }


def _href_variants(base: str) -> list[str]:
    variants = [base]
    parts = urlsplit(base)
    if parts.scheme and parts.netloc and parts.path:
        variants.append(parts.path + (f"?{parts.query}" if parts.query else ""))
    for v in list(variants):
        variants.append(v[:-1] if v.endswith("/") and len(v) > 1 else v + "/")
    return list(dict.fromkeys(variants))


def resolve_xref(
    source: Engine | KnowledgeStore, ref: str, *, identity: IdentityLike = None
) -> XrefResolution:
    """Resolve a uid, an href (with or without ``#anchor``) or an exact title."""
    engine, who = _engine(source), _identity(identity)
    if not isinstance(ref, str) or not ref.strip():
        raise InvalidRequest("resolve_xref needs a uid, an href or a title", field="ref")
    ref = ref.strip()
    found = _lookup(engine, who, ref)
    if found is not None:
        return XrefResolution(ref, "uid", found)
    base, sep, anchor = ref.partition("#")
    if base:
        variants = _href_variants(base)
        answer = engine.query_graph(
            who,
            "MATCH (n) WHERE n.href = $ref OR n.href IN $hrefs OR n.href STARTS WITH $prefix"
            " RETURN n ORDER BY n.uid LIMIT $limit",
            {"ref": ref, "hrefs": variants, "prefix": base + "#", "limit": _MAX_CANDIDATES},
        )
        if answer.rows:
            matches = [XrefMatch.from_node(r[0]) for r in answer.rows]
            exact = [m for m in matches if m.href == ref] or [
                m for m in matches if m.href in variants
            ]
            pick = exact if len(exact) == 1 else matches
            return _resolution(ref, "href", pick, anchor if sep else None)
    answer = engine.query_graph(
        who,
        "MATCH (n) WHERE n.title = $title RETURN n ORDER BY n.uid LIMIT $limit",
        {"title": ref, "limit": _MAX_CANDIDATES},
    )
    if answer.rows:
        return _resolution(ref, "title", [XrefMatch.from_node(r[0]) for r in answer.rows], None)
    raise NotFound(f"nothing matches {ref!r} as a uid, an href or a title", ref=ref)


def _resolution(ref: str, how: str, matches: list[XrefMatch], anchor: str | None) -> XrefResolution:
    if len(matches) == 1:
        return XrefResolution(ref, how, matches[0], [], anchor or None)
    return XrefResolution(ref, how, None, matches, anchor or None)


# -- graph_facets --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GraphFacets:
    """Visible neighbours of a result set (the set itself excluded), counted by label and type."""

    uids: tuple[str, ...]
    neighbours: int
    by_label: dict[str, int]
    by_type: dict[str, int]
    content_root: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "uids": list(self.uids),
            "neighbours": self.neighbours,
            "by_label": dict(self.by_label),
            "by_type": dict(self.by_type),
            "content_root": self.content_root,
        }


_FACET_MATCH = "MATCH (s)-[r]-(n) WHERE s.uid IN $uids AND NOT n.uid IN $uids"


def graph_facets(
    source: Engine | KnowledgeStore, uids: Sequence[str], *, identity: IdentityLike = None
) -> GraphFacets:
    """Counts of distinct visible neighbours of ``uids``, by edge label and by entity type.

    A neighbour linked by two labels counts once under each label and once in
    total. Unreadable or missing uids contribute nothing.
    """
    engine, who = _engine(source), _identity(identity)
    unique = list(dict.fromkeys(uids))
    if not unique:
        raise InvalidRequest("graph_facets needs at least one uid", field="uids")
    params = {"uids": unique}
    total = engine.query_graph(who, _FACET_MATCH + " RETURN count(DISTINCT n) AS n", params)
    by_label = engine.query_graph(
        who,
        _FACET_MATCH + " RETURN type(r) AS label, count(DISTINCT n) AS n ORDER BY n DESC, label",
        params,
    )
    by_type = engine.query_graph(
        who,
        _FACET_MATCH + " RETURN n.type AS type, count(DISTINCT n) AS n ORDER BY n DESC, type",
        params,
    )
    return GraphFacets(
        uids=tuple(unique),
        neighbours=int(total.rows[0][0]) if total.rows else 0,
        by_label={str(k): int(v) for k, v in by_label.rows},
        by_type={str(k): int(v) for k, v in by_type.rows},
        content_root=total.content_root,
    )
