"""Docs tools on the one bounded traversal: related entities, learning paths, xrefs, facets.

``KnowledgeStore.get_related`` & co. (and ``knowledge_store.get_related(store, …)``)
open a reader and call these.

Engine-agnostic: each tool runs on one reader (one snapshot for all its
steps) and calls its ``graph`` primitive (the bounded breadth-first walk) or
``query_graph`` (whose variable-length patterns compile the same step) —
there is no other path into the graph, and both apply the caller's ACL inside
their statements. Each tool returns a pydantic answer (``to_dict()`` is its
JSON); an entity the caller can't read answers exactly like one that doesn't
exist (``NotFound``).
"""

from __future__ import annotations

import functools
import posixpath
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pydantic import Field

from knowledge_store.errors import NotFound
from knowledge_store.graphquery.nodes import Query
from knowledge_store.graphquery.params import check_params
from knowledge_store.graphquery.parser import parse
from knowledge_store.graphquery.problems import raise_errors
from knowledge_store.model import Answer, Direction, GraphHit, GraphQuery, QueryAnswer
from knowledge_store.requests import RelatedRequest

if TYPE_CHECKING:
    from knowledge_store.retrieval.reader import StoreReader

__all__ = [
    "GraphFacets",
    "LearningPath",
    "LearningUnit",
    "Related",
    "RelatedHit",
    "XrefMatch",
    "XrefResolution",
    "facets",
    "learning_path",
    "related",
    "xref",
]

#: Levels of partOf walked up to find a path's root, and down to list its tree.
LEARNING_DEPTH = 3
_MAX_CANDIDATES = 20


class XrefMatch(Answer):
    """An entity found by uid, href or title."""

    uid: str
    title: str
    type: str
    href: str | None

    @classmethod
    def from_node(cls, node: dict[str, Any]) -> XrefMatch:
        return cls(
            uid=str(node["uid"]),
            title=str(node["title"]),
            type=str(node["type"]),
            href=node.get("href"),
        )


@functools.cache
def _parsed(text: str) -> Query:
    """One of this module's queries, parsed and validated once (immutable nodes, shared)."""
    return parse(text)


def _query(r: StoreReader, text: str, params: Mapping[str, Any]) -> QueryAnswer:
    """A docs tool's query: its text is one of this module's constants, parsed once
    (:func:`_parsed`); only the parameters are checked per call."""
    query = _parsed(text)
    raise_errors(check_params(query, params), all_of_them=False)
    return r.engine.query_graph(query, params)


_BY_UID = "MATCH (n {uid: $uid}) RETURN n"
_POSITIONS = (
    "MATCH (c)-[r:partOf]->(p) WHERE c.uid IN $children AND p.uid IN $parents"
    " RETURN c.uid, p.uid, r.position ORDER BY c.uid, p.uid SKIP $skip LIMIT 1000"
)
_BY_HREF = (
    "MATCH (n) WHERE n.href = $ref OR n.href IN $hrefs OR n.href STARTS WITH $prefix"
    " RETURN n ORDER BY n.uid LIMIT $limit"
)
_BY_TITLE = "MATCH (n) WHERE n.title = $title RETURN n ORDER BY n.uid LIMIT $limit"
_BY_PATH_TAIL = (
    "MATCH (n) WHERE n.href = $tail OR n.href ENDS WITH $end RETURN n ORDER BY n.uid LIMIT $limit"
)


def _lookup(r: StoreReader, uid: str) -> XrefMatch | None:
    answer = _query(r, _BY_UID, {"uid": uid})
    return XrefMatch.from_node(answer.rows[0][0]) if answer.rows else None


def _require(r: StoreReader, uid: str) -> XrefMatch:
    found = _lookup(r, uid)
    if found is None:
        raise NotFound(f"no entity with uid {uid!r}", uid=uid)
    return found


# -- get_related --------------------------------------------------------------------------------


class RelatedHit(GraphHit):
    """A neighbour: a graph hit with its href."""

    href: str | None = None


class Related(Answer):
    """Neighbours of one entity with hop distance and one path each."""

    uid: str
    title: str
    content_root: str
    related: list[RelatedHit]
    capped: bool


def related(r: StoreReader, request: RelatedRequest) -> Related:
    """:func:`get_related` on one reader."""
    start = _require(r, request.uid)
    answer = r.engine.graph(
        GraphQuery(
            starts=(request.uid,),
            depth=request.depth,
            labels=tuple(request.labels),
            direction=request.direction,
            k=request.k,
        ),
    )
    return Related(
        uid=request.uid,
        title=start.title,
        content_root=answer.content_root,
        related=[RelatedHit(**h.model_dump(), href=h.href) for h in answer.hits],
        capped=answer.capped,
    )


# -- get_learning_path ------------------------------------------------------------------------------


class LearningUnit(Answer):
    uid: str
    title: str
    type: str
    href: str | None
    depth: int  # 0 for the root
    position: int | None  # the partOf position under its parent
    parent: str | None


class LearningPath(Answer):
    """The ordered tree (depth-first, by partOf ``position``) an entity belongs to."""

    uid: str
    root: str
    ancestors: tuple[str, ...]  # root … parent of ``uid``
    units: list[LearningUnit]
    index: int | None  # ``uid``'s place in ``units`` (0-based), None if it is below the depth
    count: int
    content_root: str
    capped: bool = False


def _root_chain(r: StoreReader, uid: str) -> list[str]:
    """``[uid, parent, …, root]`` along partOf, walking up in bounded steps."""
    chain = [uid]
    for _ in range(4):
        up = r.engine.graph(_part_of(chain[-1], "out"))
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


def _positions(r: StoreReader, pairs: dict[str, str]) -> dict[str, int | None]:
    """The partOf position of each child under its chosen parent (``pairs``: child → parent)."""
    out: dict[str, int | None] = {}
    children = sorted(pairs)
    for i in range(0, len(children), 500):
        part = children[i : i + 500]
        parents = sorted({pairs[c] for c in part})
        skip = 0
        while True:
            answer = _query(r, _POSITIONS, {"children": part, "parents": parents, "skip": skip})
            for child, parent, position in answer.rows:
                if pairs.get(child) == parent:
                    out[child] = position
            if not answer.truncated:
                break
            skip += 1000
    return out


def learning_path(r: StoreReader, uid: str) -> LearningPath:
    """:func:`get_learning_path` on one reader."""
    start = _require(r, uid)
    chain = _root_chain(r, uid)
    root = chain[-1]
    root_entity = start if root == uid else _require(r, root)
    down = r.engine.graph(_part_of(root, "in"))
    parent_of = {h.uid: h.path[-2].uid for h in down.hits}
    positions = _positions(r, parent_of) if parent_of else {}
    children: dict[str, list[GraphHit]] = {}
    for h in down.hits:
        children.setdefault(parent_of[h.uid], []).append(h)
    for siblings in children.values():
        siblings.sort(
            key=lambda h: (positions.get(h.uid) is None, positions.get(h.uid) or 0, h.title, h.uid)
        )
    units = [
        LearningUnit(
            uid=root,
            title=root_entity.title,
            type=root_entity.type,
            href=root_entity.href,
            depth=0,
            position=None,
            parent=None,
        )
    ]

    def visit(node: str, depth: int) -> None:
        for h in children.get(node, []):
            units.append(
                LearningUnit(
                    uid=h.uid,
                    title=h.title,
                    type=h.type,
                    href=h.href,
                    depth=depth,
                    position=positions.get(h.uid),
                    parent=node,
                )
            )
            visit(h.uid, depth + 1)

    visit(root, 1)
    index = next((i for i, u in enumerate(units) if u.uid == uid), None)
    return LearningPath(
        uid=uid,
        root=root,
        ancestors=tuple(reversed(chain[1:])),
        units=units,
        index=index,
        count=len(units),
        content_root=down.content_root,
        capped=down.capped,
    )


def _part_of(uid: str, direction: Direction) -> GraphQuery:
    """partOf up (``out``) or down (``in``) from ``uid``, as deep as a learning path goes."""
    return GraphQuery(
        starts=(uid,), depth=LEARNING_DEPTH, labels=("partOf",), direction=direction, k=1000
    )


# -- resolve_xref ---------------------------------------------------------------------------------------


class XrefResolution(Answer):
    """What a reference points at: one entity, or the candidates when it is ambiguous."""

    ref: str
    matched_by: str  # uid | href | title
    entity: XrefMatch | None
    candidates: list[XrefMatch] = Field(default_factory=list)
    anchor: str | None = None


_PAGE_SUFFIXES = (".md", ".markdown", ".html", ".htm")


def _href_variants(base: str) -> list[str]:
    variants = [base]
    stem, dot, suffix = base.rpartition(".")
    if dot and f".{suffix.lower()}" in _PAGE_SUFFIXES:  # a page saved as .md or as .html
        variants += [stem + other for other in _PAGE_SUFFIXES]
    parts = urlsplit(base)
    if parts.scheme and parts.netloc and parts.path:
        variants.append(parts.path + (f"?{parts.query}" if parts.query else ""))
    for v in list(variants):
        variants.append(v[:-1] if v.endswith("/") and len(v) > 1 else v + "/")
    return list(dict.fromkeys(variants))


def _path_tails(base: str) -> list[str]:
    """A relative file path without its leading ``./`` and ``../`` (with its page-suffix
    variants), or nothing for a URL or a bare word."""
    if urlsplit(base).scheme or ("/" not in base and "." not in base):
        return []
    parts = [p for p in posixpath.normpath(base).split("/") if p not in ("", ".", "..")]
    return _href_variants("/".join(parts)) if parts else []


def xref(r: StoreReader, ref: str) -> XrefResolution:
    """:func:`resolve_xref` on one reader."""
    found = _lookup(r, ref)
    if found is not None:
        return XrefResolution(ref=ref, matched_by="uid", entity=found)
    base, sep, anchor = ref.partition("#")
    if base:
        variants = _href_variants(base)
        answer = _query(
            r,
            _BY_HREF,
            {"ref": ref, "hrefs": variants, "prefix": base + "#", "limit": _MAX_CANDIDATES},
        )
        if answer.rows:
            matches = [XrefMatch.from_node(r[0]) for r in answer.rows]
            exact = [m for m in matches if m.href == ref] or [
                m for m in matches if m.href in variants
            ]
            pick = exact if len(exact) == 1 else matches
            return _resolution(ref, "href", pick, anchor if sep else None)
        # A relative link from another page (../guide/intro.html, records.md): the pages
        # whose href is that path, or ends with it.
        for tail in _path_tails(base):
            answer = _query(
                r, _BY_PATH_TAIL, {"tail": tail, "end": "/" + tail, "limit": _MAX_CANDIDATES}
            )
            if answer.rows:
                matches = [XrefMatch.from_node(r[0]) for r in answer.rows]
                return _resolution(ref, "href", matches, anchor if sep else None)
    answer = _query(r, _BY_TITLE, {"title": ref, "limit": _MAX_CANDIDATES})
    if answer.rows:
        return _resolution(ref, "title", [XrefMatch.from_node(r[0]) for r in answer.rows], None)
    raise NotFound(f"nothing matches {ref!r} as a uid, an href or a title", ref=ref)


def _resolution(ref: str, how: str, matches: list[XrefMatch], anchor: str | None) -> XrefResolution:
    if len(matches) == 1:
        return XrefResolution(
            ref=ref, matched_by=how, entity=matches[0], candidates=[], anchor=anchor or None
        )
    return XrefResolution(
        ref=ref, matched_by=how, entity=None, candidates=matches, anchor=anchor or None
    )


# -- graph_facets --------------------------------------------------------------------------------------


class GraphFacets(Answer):
    """Visible neighbours of a result set (the set itself excluded), counted by label and type."""

    uids: tuple[str, ...]
    neighbours: int
    by_label: dict[str, int]
    by_type: dict[str, int]
    content_root: str


_FACET_MATCH = "MATCH (s)-[r]-(n) WHERE s.uid IN $uids AND NOT n.uid IN $uids"
_FACET_TOTAL = _FACET_MATCH + " RETURN count(DISTINCT n) AS n"
_FACET_LABELS = (
    _FACET_MATCH + " RETURN type(r) AS label, count(DISTINCT n) AS n ORDER BY n DESC, label"
)
_FACET_TYPES = _FACET_MATCH + " RETURN n.type AS type, count(DISTINCT n) AS n ORDER BY n DESC, type"


def facets(r: StoreReader, uids: Sequence[str]) -> GraphFacets:
    """:func:`graph_facets` on one reader."""
    unique = list(dict.fromkeys(uids))
    params = {"uids": unique}
    total = _query(r, _FACET_TOTAL, params)
    by_label = _query(r, _FACET_LABELS, params)
    by_type = _query(r, _FACET_TYPES, params)
    return GraphFacets(
        uids=tuple(unique),
        neighbours=int(total.rows[0][0]) if total.rows else 0,
        by_label={str(k): int(v) for k, v in by_label.rows},
        by_type={str(k): int(v) for k, v in by_type.rows},
        content_root=total.content_root,
    )
