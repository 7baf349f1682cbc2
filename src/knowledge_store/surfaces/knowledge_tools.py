"""The chat and docs tools (DESIGN §6), and the two admin tools — next to ``tools``' intent tools.

Each is a :class:`~knowledge_store.surfaces.tools.Tool`: a name, a description
written for a model, a pydantic input model (its JSON schema) and a function
calling one method of :class:`~knowledge_store.store.KnowledgeStore` or one
docs tool of :mod:`knowledge_store.retrieval.docs_tools`, so every surface ranks
and filters exactly like the API. Which of them a surface shows is decided in
one place, :func:`knowledge_store.surfaces.harness.visible_tools`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from knowledge_store.errors import InvalidRequest
from knowledge_store.model import MAX_ACL_PRINCIPALS, Identity
from knowledge_store.retrieval import docs_tools
from knowledge_store.surfaces.tools import (
    FilterArgs,
    Label,
    SearchArgs,
    Tool,
    _Args,  # the tools' shared base: extra arguments are errors, values are frozen
)

if TYPE_CHECKING:
    from knowledge_store.store import KnowledgeStore

__all__ = ["ADMIN_TOOLS", "CODE_SAMPLE_TYPE", "DOCS_TOOLS", "code_of"]

CODE_SAMPLE_TYPE = "codeSample"
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([^\n`]*)\n(.*?)^[ \t]*\1[ \t]*$", re.M | re.S)


# -- arguments ------------------------------------------------------------------------------------
class KnowledgeArgs(_Args):
    query: str = Field(
        ...,
        min_length=1,
        max_length=4096,
        description="the user's question or topic, in words",
    )
    k: int = Field(5, ge=1, le=20, description="how many sources to return")
    filters: FilterArgs = Field(default_factory=FilterArgs)


class UidArgs(_Args):
    uid: str = Field(..., min_length=1, max_length=4096, description="the entity's uid")


class RelatedArgs(UidArgs):
    labels: list[Label] = Field(
        default_factory=list, description="follow only these edge labels (default: all 9)"
    )
    depth: int = Field(1, ge=1, le=3, description="how many hops to follow (1–3)")
    direction: Literal["out", "in", "both"] = Field("both", description="edge direction")
    k: int = Field(10, ge=1, le=100, description="how many entities to return")


class XrefArgs(_Args):
    ref: str = Field(
        ...,
        min_length=1,
        max_length=4096,
        description="a uid, an href (with or without #anchor) or an exact title",
    )


class QueryGraphArgs(_Args):
    query: str = Field(
        ...,
        min_length=1,
        max_length=20000,
        description="a read-only openCypher query: MATCH … WHERE … RETURN … ORDER BY … SKIP …"
        " LIMIT …; every value as a $parameter",
    )
    params: dict[str, Any] = Field(
        default_factory=dict, description="the values of the query's $parameters, by name"
    )


class FetchArgs(UidArgs):
    max_chars: int = Field(
        20000, ge=100, le=500000, description="cut the body after this many characters"
    )
    include_chunks: bool = Field(
        False, description="also return the chunks (heading path and offsets of each slice)"
    )


class IngestArgs(_Args):
    records: list[dict[str, Any]] = Field(
        ...,
        min_length=1,
        max_length=1000,
        description="canonical records: {uid, type, title, body, source, status, created_at,"
        " updated_at, href, attributes, edges: [{label, to, position}], acl: [...]}",
    )
    acl: list[str] = Field(
        default_factory=list,
        max_length=MAX_ACL_PRINCIPALS,
        description="default ACL for records without an acl key",
    )
    skip_invalid: bool = Field(False, description="publish the good records, report the bad")


class DeleteArgs(_Args):
    uids: list[str] = Field(..., min_length=1, max_length=1000, description="uids to delete")


# -- functions ------------------------------------------------------------------------------------
def _with_filter(filters: FilterArgs, **extra: list[str]) -> dict[str, Any]:
    out = filters.as_mapping()
    for name, values in extra.items():
        out[name] = list(dict.fromkeys([*out.get(name, []), *values]))
    return out


def _citation(title: str, heading: list[str], href: str | None) -> str:
    path = " › ".join([title, *[h for h in heading if h and h != title]])
    return f"{path} ({href})" if href else path


def _search_knowledge(store: KnowledgeStore, who: Identity, args: KnowledgeArgs) -> dict[str, Any]:
    answer = store.search(args.query, identity=who, k=args.k, filters=args.filters.as_mapping())
    results: list[dict[str, Any]] = []
    blocks: list[str] = []
    for n, result in enumerate(answer.results, start=1):
        passages = []
        for ev in result.evidence:
            heading = list(ev.heading)
            passages.append(
                {
                    "chunk_id": ev.chunk_id,
                    "heading": heading,
                    "text": ev.text,
                    "start": ev.start,
                    "end": ev.end,
                    "citation": _citation(result.title, heading, result.href),
                }
            )
            blocks.append(f"[{n}] {_citation(result.title, heading, result.href)}\n{ev.text}")
        if not result.evidence:
            blocks.append(f"[{n}] {_citation(result.title, [], result.href)}")
        results.append(
            {
                "n": n,
                "uid": result.uid,
                "title": result.title,
                "type": result.type,
                "href": result.href,
                "score": result.score,
                "superseded_by": result.superseded_by,
                "passages": passages,
            }
        )
    return {
        "content_root": answer.content_root,
        "results": results,
        "context": "\n\n".join(blocks),
    }


def _docs_search(store: KnowledgeStore, who: Identity, args: SearchArgs) -> dict[str, Any]:
    filters = _with_filter(args.filters, not_type=[CODE_SAMPLE_TYPE])
    return store.search(args.query, identity=who, k=args.k, filters=filters).to_dict()


def code_of(body: str, attributes: dict[str, Any]) -> tuple[str, str | None]:
    """The code of a codeSample body (its first fence, else the body) and its language."""
    match = _FENCE.search(body)
    code = match.group(3).rstrip("\n") if match else body
    info = match.group(2).strip().split() if match else []
    language = attributes.get("language") or (info[0] if info else None)
    return code, str(language) if language else None


def _code_sample_search(store: KnowledgeStore, who: Identity, args: SearchArgs) -> dict[str, Any]:
    if args.filters.type and CODE_SAMPLE_TYPE not in args.filters.type:
        raise InvalidRequest(
            "code_sample_search returns only codeSample entities; drop the 'type' filter"
            " (or use search / docs_search for other types)",
            field="filters.type",
        )
    filters = {**args.filters.as_mapping(), "type": [CODE_SAMPLE_TYPE]}
    answer = store.search(args.query, identity=who, k=args.k, filters=filters)
    samples: list[dict[str, Any]] = []
    for result in answer.results:
        content = store.content(result.uid, identity=who)
        entity = content["entity"]
        code, language = code_of(entity["body"], entity["attributes"])
        page = next(
            (
                {"uid": e["uid"], "title": e["title"], "href": e["href"]}
                for e in content["edges"]["out"]
                if e["label"] == "partOf" and e["type"] != CODE_SAMPLE_TYPE
            ),
            None,
        )
        samples.append(
            {
                "uid": result.uid,
                "title": result.title,
                "href": result.href,
                "score": result.score,
                "language": language,
                "code": code,
                "heading": entity["attributes"].get("heading"),
                "page": page,
                "superseded_by": result.superseded_by,
                "ranks": {**result.to_dict()["ranks"]},
            }
        )
    return {"content_root": answer.content_root, "results": samples}


def _get_related(store: KnowledgeStore, who: Identity, args: RelatedArgs) -> dict[str, Any]:
    return docs_tools.get_related(
        store,
        args.uid,
        identity=who,
        labels=list(args.labels),
        depth=args.depth,
        direction=args.direction,
        k=args.k,
    ).to_dict()


def _get_learning_path(store: KnowledgeStore, who: Identity, args: UidArgs) -> dict[str, Any]:
    return docs_tools.get_learning_path(store, args.uid, identity=who).to_dict()


def _resolve_xref(store: KnowledgeStore, who: Identity, args: XrefArgs) -> dict[str, Any]:
    return docs_tools.resolve_xref(store, args.ref, identity=who).to_dict()


def _query_graph(store: KnowledgeStore, who: Identity, args: QueryGraphArgs) -> dict[str, Any]:
    return store.query_graph(args.query, args.params, identity=who).to_dict()


def _fetch_content(store: KnowledgeStore, who: Identity, args: FetchArgs) -> dict[str, Any]:
    content = store.content(args.uid, identity=who)
    entity = dict(content["entity"])
    body: str = entity["body"]
    entity["body"] = body[: args.max_chars]
    out: dict[str, Any] = {
        "content_root": content["content_root"],
        **entity,
        "body_truncated": len(body) > args.max_chars,
        "body_chars": len(body),
        "edges": content["edges"],
    }
    if entity["type"] == CODE_SAMPLE_TYPE:
        out["code"], out["language"] = code_of(body, entity["attributes"])
    if args.include_chunks:
        out["chunks"] = content["chunks"]
    return out


def _ingest(store: KnowledgeStore, who: Identity, args: IngestArgs) -> dict[str, Any]:
    return store.ingest_records(
        args.records, acl=args.acl or None, skip_invalid=args.skip_invalid
    ).to_dict()


def _delete(store: KnowledgeStore, who: Identity, args: DeleteArgs) -> dict[str, Any]:
    return {"content_root": store.delete(args.uids), "deleted": len(set(args.uids))}


# -- the tools ------------------------------------------------------------------------------------
_FILTERS = (
    " Filters (optional): type, not_type, source, status, uid (lists: any of), created_from,"
    " created_to, updated_from, updated_to (ISO dates, inclusive)."
)
_UNREADABLE = " An entity you may not read answers exactly like one that does not exist."

DOCS_TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (
        Tool(
            "search_knowledge",
            "Answer a user's question from the knowledge base: use it in a chat before you"
            " answer anything the documents may cover. Returns up to k sources, best first, each"
            " with n (its citation number), uid, title, type, href, superseded_by (a newer source"
            " replaces it — prefer and cite that one) and passages: the text to quote, each with"
            " its heading path and a ready-made citation 'Title › Heading (href)'. 'context' packs"
            " every passage as '[n] citation' + text, ready to paste into your context; cite"
            " sources as [n]." + _FILTERS,
            KnowledgeArgs,
            _search_knowledge,
        ),
        Tool(
            "docs_search",
            "Search the documentation pages only (every type except codeSample): the same fused"
            " ranking as search (meaning + exact words + linked entities), returning entities"
            " with uid, title, type, href, score, the rank each list gave it, superseded_by and"
            " evidence chunks with heading paths. Use it for conceptual questions and"
            " explanations; use code_sample_search when you need code." + _FILTERS,
            SearchArgs,
            _docs_search,
        ),
        Tool(
            "code_sample_search",
            "Find code examples (codeSample entities only) for a task, an API, a command or an"
            " error. Each result gives the code itself, its language (null when the source does"
            " not say), the heading it sits under, the page it belongs to (uid, title, href — open"
            " it with fetch_content for the surrounding explanation) and superseded_by." + _FILTERS,
            SearchArgs,
            _code_sample_search,
        ),
        Tool(
            "get_related",
            "List the entities linked to one entity (by uid): what it is part of, its parts, its"
            " cross-references, prerequisites, successors, code samples. Ranked by hop distance,"
            " then number of paths; each with hops and one path of uids and labels. Use it to"
            " explore around a search result." + _UNREADABLE,
            RelatedArgs,
            _get_related,
        ),
        Tool(
            "get_learning_path",
            "Show the ordered learning path (module, chapter, book) an entity belongs to: the"
            " root, then every unit depth-first in reading order (partOf positions), and the"
            " entity's index in that list. Use it to say what to read before and after a page,"
            " or to outline a whole path from its root uid." + _UNREADABLE,
            UidArgs,
            _get_learning_path,
        ),
        Tool(
            "resolve_xref",
            "Resolve a reference found in a text — a uid, a link/href (with or without #anchor)"
            " or an exact title — to the entity it names. Returns the entity (uid, title, type,"
            " href) or, when ambiguous, the candidates; fails with not_found when nothing"
            " matches." + _UNREADABLE,
            XrefArgs,
            _resolve_xref,
        ),
        Tool(
            "query_graph",
            "Run a bounded, read-only openCypher query over the entity graph when search, graph"
            " and get_related can't express the question (multi-hop patterns, counts, OPTIONAL"
            " MATCH). Node labels are entity types; properties: uid, type, title, source, status,"
            " href, created_at, updated_at; relationships: partOf, dependsOn, xref, appliesTo,"
            " forRole, teachesSkill, supersededBy, implementedBy, derivedFrom, variable length"
            " *1..4 at most. Every value must be a $parameter passed in params (no literals)."
            " LIMIT defaults to 100 (max 1000), ~250 ms time bound. Returns columns, rows and"
            " truncated. Errors say what to change. Example: MATCH (p {uid: $uid})<-[:partOf]-(c)"
            " RETURN c.uid, c.title ORDER BY c.title with params {uid: '…'}.",
            QueryGraphArgs,
            _query_graph,
        ),
        Tool(
            "fetch_content",
            "Read one entity in full by uid: its fields (type, title, source, status, dates,"
            " href, attributes), its body (Markdown; cut at max_chars with body_truncated), its"
            " edges to entities you can read (out and in, with label, uid, title), for a code"
            " sample its code and language, and optionally its chunks. Use it after a search to"
            " read a whole page." + _UNREADABLE,
            FetchArgs,
            _fetch_content,
        ),
    )
}

ADMIN_TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (
        Tool(
            "ingest_records",
            "Administration: publish canonical records as one atomic batch (a bad record"
            " rejects the batch unless skip_invalid). Every record needs an ACL (its own 'acl'"
            " or the default 'acl' argument). Returns added, updated, unchanged, deleted and the"
            " rejected records with the reason.",
            IngestArgs,
            _ingest,
        ),
        Tool(
            "delete_entities",
            "Administration: delete entities by uid (their chunks and outgoing edges) as one"
            " publish; an unknown uid deletes nothing and says which. Returns the new content"
            " root and the number deleted.",
            DeleteArgs,
            _delete,
        ),
    )
}
