"""Paging a ranked read with a cursor (issue 31 item 3): ``cursor="*"``, then ``next``.

**What a cursor is.** A request that asks for one (``cursor="*"``) ranks once, to the
bound — the first :data:`MAX_PAGED` results, never more — at the reader's content root
``R``, and that ranking (ids, scores, ranks; no text) is kept in the store's cursor table
(``engines/cursors.py``). Every page, the first one included, is a slice of it; the
answer's ``next`` names the following slice. So a result never appears on two pages and
none is skipped, however the store changes between them: the order and the membership of
the list are ``R``'s. ``next`` is opaque — ``c1.<id>.<offset>.<mac>`` — and MAC'd with
the store's secret over the ranking, the offset, ``R``, the caller's identity and the
request (every field but ``k``, ``cursor`` and ``explain``): a cursor made for another
identity or another request, or an offset not handed out, is refused. Rankings expire
after :data:`~knowledge_store.engines.cursors.CURSOR_TTL_S`.

**Why keep the ranking rather than re-run the request at ``R``.** Re-running needs the
store as it was at ``R``: PostgreSQL keeps no snapshot past its transaction, and the
embedded engine's derived indexes (Tantivy, HNSW) are at the latest publish only. The
ranking is small (a thousand ids, 10–30 KB compressed), cheap to keep, and is the one
thing that decides what repeats or is skipped.

**What a later page shows** of each result is read from the reader that serves it,
under the caller's permissions *now*: a result deleted since ``R``, or that the caller may
no longer read (a revoked grant, a changed membership), is left out — never shown from
memory — and the answer's warnings count them; one that changed shows as it is now. The
answer's ``content_root`` is ``R``, the root its ranking was read at; a warning says when
the page was read at a later one. (Reading each result as it was at ``R`` needs the
catalog's history, which the audit work adds; a page would then hydrate there.)

**Cost.** The first page of a paged read ranks to the bound (1,000 results) instead of
``k``: a few times a ``k``-sized read (``bench/bench_paging.py``); later pages cost one
lookup and the hydration of ``k`` results. A read without ``cursor`` is unchanged.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import secrets
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from knowledge_store.engines.components import ListQuery
from knowledge_store.engines.cursors import CURSOR_TTL_S
from knowledge_store.errors import InvalidRequest
from knowledge_store.model import (
    LIST_NAMES,
    MAX_K,
    ChunkHits,
    GraphHit,
    GraphHits,
    PathStep,
    SearchAnswer,
    SqlHits,
    VectorInfo,
)
from knowledge_store.requests import (
    FilterSpec,
    GraphRequest,
    LexicalRequest,
    Request,
    SearchRequest,
    SqlRequest,
    VectorRequest,
)

if TYPE_CHECKING:
    from knowledge_store.retrieval.reader import StoreReader

__all__ = [
    "MAX_PAGED",
    "START",
    "chunk_page",
    "cursor_offset",
    "graph_page",
    "search_page",
    "sql_page",
]

#: A cursor never reaches past the first this-many results (the primitives' own bound).
MAX_PAGED = MAX_K
#: The cursor that starts paging: the first page, and a ranking kept for the next ones.
START = "*"
_VERSION = "c1"
_UNUSABLE = (
    "cursor {shown} is not one this store handed out for this request and identity, or it"
    " expired (cursors last {ttl} minutes); send the same request with cursor '*' to start"
    " again"
)


@dataclass(frozen=True)
class _Ranking:
    """What a cursor pages through: its root, its items (kind-specific rows) and extras."""

    root: str
    items: list[Any]
    extra: dict[str, Any]


# -- the cursor: token, MAC, the kept ranking -------------------------------------------------------
def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _digest(request: Request) -> str:
    """What a cursor is bound to of its request: every field but the page's own."""
    fields = request.model_dump(mode="json", exclude={"k", "cursor", "explain"})
    spec = fields.get("filters") and getattr(request, "filters", None)
    if isinstance(spec, FilterSpec):  # as normalised: equal filters bind equally
        fields["filters"] = spec.value.to_dict()
    text = json.dumps([type(request).__name__, fields], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _mac(reader: StoreReader, cursor: str, offset: int, root: str, request: Request) -> str:
    identity = reader.identity
    message = "\x1f".join(
        [cursor, str(offset), root, identity.principal, ",".join(identity.groups), _digest(request)]
    )
    key = reader.engine_cursors.key
    return _b64(hmac.new(key, message.encode(), hashlib.sha256).digest()[:16])


def _token(reader: StoreReader, cursor: str, offset: int, root: str, request: Request) -> str:
    return f"{_VERSION}.{cursor}.{offset}.{_mac(reader, cursor, offset, root, request)}"


def cursor_offset(token: str) -> int:
    """How many results come before the page a ``next`` cursor names (0: not one)."""
    parts = token.split(".")
    return int(parts[2]) if len(parts) == 4 and parts[2].isdigit() else 0


def _unusable(token: str) -> InvalidRequest:
    shown = repr(token[:40] + ("…" if len(token) > 40 else ""))
    return InvalidRequest(
        _UNUSABLE.format(shown=shown, ttl=int(CURSOR_TTL_S // 60)), field="cursor"
    )


def _save(reader: StoreReader, ranking: _Ranking) -> str:
    cursor = _b64(secrets.token_bytes(16))
    payload = zlib.compress(
        json.dumps({"root": ranking.root, "items": ranking.items, "extra": ranking.extra}).encode()
    )
    reader.engine_cursors.save(cursor, payload, time.time() + CURSOR_TTL_S)
    return cursor


def _open(reader: StoreReader, token: str, request: Request) -> tuple[str, int, _Ranking]:
    """The ranking and offset a ``next`` cursor names, checked (else ``InvalidRequest``)."""
    parts = token.split(".")
    if len(parts) != 4 or parts[0] != _VERSION or not parts[2].isdigit():
        raise _unusable(token)
    _, cursor, offset_text, mac = parts
    try:
        payload = reader.engine_cursors.load(cursor, time.time())
        kept = None if payload is None else json.loads(zlib.decompress(payload))
    except (zlib.error, ValueError):
        kept = None
    if not isinstance(kept, dict):
        raise _unusable(token)
    ranking = _Ranking(str(kept["root"]), list(kept["items"]), dict(kept["extra"]))
    offset = int(offset_text)
    want = _mac(reader, cursor, offset, ranking.root, request)
    if not hmac.compare_digest(want, mac) or offset > len(ranking.items):
        raise _unusable(token)
    return cursor, offset, ranking


def _paged(
    reader: StoreReader,
    request: Any,
    rank: Callable[[], _Ranking],
) -> tuple[_Ranking, int, str | None, list[Any]]:
    """The ranking, this page's offset, the ``next`` cursor and this page's items."""
    token: str = request.cursor
    if token == START:
        ranking = rank()
        cursor, offset = _save(reader, ranking), 0
    else:
        cursor, offset, ranking = _open(reader, token, request)
    end = min(offset + request.k, len(ranking.items))
    following = (
        _token(reader, cursor, end, ranking.root, request) if end < len(ranking.items) else None
    )
    return ranking, offset, following, ranking.items[offset:end]


def _notes(reader: StoreReader, ranking: _Ranking, asked: int, shown: int) -> tuple[str, ...]:
    notes = []
    if reader.content_root != ranking.root:
        notes.append(
            f"this page of the ranking made at content root {ranking.root[:12]} was read at"
            f" {reader.content_root[:12]}: results changed since show as they are now"
        )
    if shown < asked:
        gone = asked - shown
        notes.append(
            f"{gone} result{'s' if gone > 1 else ''} of this page {'are' if gone > 1 else 'is'}"
            " gone or no longer readable since the ranking was made, and left out"
        )
    return tuple(notes)


# -- the chunk lists: lexical, fuzzy, vector ------------------------------------------------------
def chunk_page(
    reader: StoreReader, name: str, request: LexicalRequest | VectorRequest, vector: Any = None
) -> ChunkHits:
    """A page of the chunk list ``name`` (``lexical``, ``fuzzy``, ``vector``)."""
    filters = reader.resolved(request.filters)

    def rank() -> _Ranking:
        asked = ListQuery(request.query, MAX_PAGED, filters, vector() if vector else None)
        ranked = reader.engine.rank(name, asked)
        ids = ranked.ids[:MAX_PAGED]
        places = reader.engine.chunk_places(ids)
        items = [
            [int(c), float(s), *places[c]]
            for c, s in zip(ids, ranked.scores, strict=False)
            if c in places
        ]
        info = None if ranked.vector is None else ranked.vector.model_dump(mode="json")
        return _Ranking(reader.content_root, items, {"vector": info})

    ranking, offset, following, page = _paged(reader, request, rank)
    # a chunk is named by its row id, else by its place: an entity updated since keeps its
    # chunks' places (and their public ids), with new rows
    rows = reader.engine.chunk_places([item[0] for item in page])
    moved = [(item[2], item[3]) for item in page if item[0] not in rows]
    now = reader.engine.chunks_at(moved)
    ids = [item[0] if item[0] in rows else now.get((item[2], item[3]), -1) for item in page]
    found, hits = reader.engine.chunk_hits(
        [c for c in ids if c >= 0], [item[1] for item, c in zip(page, ids, strict=True) if c >= 0]
    )
    visible = reader.engine.entities(list({h.uid for h in hits}), filters)
    positions = {c: offset + i + 1 for i, c in enumerate(ids) if c >= 0}
    kept = [
        h.model_copy(update={"rank": positions[c]})
        for c, h in zip(found, hits, strict=True)
        if h.uid in visible
    ]
    vector_info = ranking.extra.get("vector")
    return ChunkHits.model_validate(
        {
            "content_root": ranking.root,
            "hits": kept,
            "vector": None if vector_info is None else VectorInfo.model_validate(vector_info),
            "warnings": _notes(reader, ranking, len(page), len(kept)),
            "next": following,
        }
    )


# -- sql ----------------------------------------------------------------------------------------------
def sql_page(reader: StoreReader, request: SqlRequest) -> SqlHits:
    """A page of ``sql``'s ordered entities."""
    filters = reader.resolved(request.filters)

    def rank() -> _Ranking:
        found = reader.engine.sql(filters, request.order_value, MAX_PAGED)
        return _Ranking(reader.content_root, [h.uid for h in found.hits], {})

    ranking, offset, following, page = _paged(reader, request, rank)
    hits = {}
    if page:
        found = reader.engine.sql(filters.with_values("uid", page), request.order_value, len(page))
        hits = {h.uid: h for h in found.hits}
    kept = [
        hits[uid].model_copy(update={"rank": offset + i + 1})
        for i, uid in enumerate(page)
        if uid in hits
    ]
    return SqlHits(
        content_root=ranking.root,
        hits=kept,
        warnings=_notes(reader, ranking, len(page), len(kept)),
        next=following,
    )


# -- graph ----------------------------------------------------------------------------------------------
def graph_page(reader: StoreReader, request: GraphRequest) -> GraphHits:
    """A page of ``graph``'s linked entities (ranked by hops, paths, recency at ``R``)."""

    def rank() -> _Ranking:
        walked = reader.engine.graph(dataclasses.replace(request.value, k=MAX_PAGED))
        items = [
            [h.uid, h.hops, h.paths, [[s.uid, s.label, s.direction] for s in h.path]]
            for h in walked.hits
        ]
        return _Ranking(reader.content_root, items, {"capped": walked.capped})

    ranking, offset, following, page = _paged(reader, request, rank)
    # a result and every entity on its path must be readable now (a path names uids)
    named = list({step[0] for item in page for step in item[3]} | {item[0] for item in page})
    cards = reader.engine.entities(named)
    kept = []
    for i, (uid, hops, paths, path) in enumerate(page):
        if uid not in cards or any(step[0] not in cards for step in path):
            continue
        card = cards[uid]
        kept.append(
            GraphHit(
                uid=uid,
                title=card.title,
                type=card.type,
                rank=offset + i + 1,
                hops=hops,
                paths=paths,
                path=tuple(PathStep(uid=s[0], label=s[1], direction=s[2]) for s in path),
                href=card.href,
                updated_at=card.updated_at,
            )
        )
    return GraphHits(
        content_root=ranking.root,
        hits=kept,
        capped=bool(ranking.extra.get("capped")),
        next=following,
        warnings=_notes(reader, ranking, len(page), len(kept)),
    )


# -- fused search ---------------------------------------------------------------------------------------
def search_page(
    reader: StoreReader, request: SearchRequest, retrievers: Any = None
) -> SearchAnswer:
    """A page of fused search: the fusion's order at ``R`` (supersession applied), each
    result with its score, its ranks and its evidence chunks."""
    from knowledge_store.retrieval import search as planner

    filters = reader.resolved(request.filters)

    def rank() -> _Ranking:
        p = planner.plan(
            request.query,
            k=MAX_PAGED,
            filters=filters,
            mode=request.mode,
            weights=request.weights,
            retrievers=retrievers,
        )
        run = planner.run(reader, p)
        items = planner.result_items(p, run)
        lexical = run.rankings.get("lexical")
        vector = next((rk.vector for rk in run.rankings.values() if rk.vector is not None), None)
        extra = {
            "mode": p.mode,
            "names": p.names,
            "vector": None if vector is None else vector.model_dump(mode="json"),
            "words_matched": None
            if lexical is None or not lexical.ran
            else bool(lexical.candidates),
        }
        return _Ranking(reader.content_root, items, extra)

    ranking, _, following, page = _paged(reader, request, rank)
    uids = [item[0] for item in page]
    cards = reader.engine.entities(uids, filters)
    successors = [item[1] for item in page if item[1] is not None and item[1] not in cards]
    readable = set(cards) | set(reader.engine.entities(successors, filters))
    wanted = [c for item in page for c in item[4]]
    chunks = {c: r for c, r in reader.engine.chunks(wanted).items() if r.uid in cards}
    results = []
    names: Sequence[str] = ranking.extra.get("names") or LIST_NAMES
    for uid, superseded_by, score, ranks, evidence, similarity in page:
        card = cards.get(uid)
        if card is None:
            continue
        results.append(
            {
                "uid": uid,
                "title": card.title,
                "type": card.type,
                "href": card.href,
                "score": score,
                "ranks": {**dict.fromkeys([*LIST_NAMES, *names]), **ranks},
                "superseded_by": superseded_by if superseded_by in readable else None,
                "evidence": [planner.evidence_item(chunks[i]) for i in evidence if i in chunks],
                "similarity": similarity,
            }
        )
    vector_info = ranking.extra.get("vector")
    return SearchAnswer(
        content_root=ranking.root,
        mode=str(ranking.extra.get("mode")),
        results=results,  # validated into Result here
        vector=None if vector_info is None else VectorInfo.model_validate(vector_info),
        words_matched=ranking.extra.get("words_matched"),
        warnings=_notes(reader, ranking, len(page), len(results)),
        next=following,
    )
