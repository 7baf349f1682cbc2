"""The operation table: every operation of every surface, declared once.

An :class:`Operation` is a name, its request model (:mod:`knowledge_store.requests`,
carrying every bound), what it runs on the store, its answer model, a summary,
a description written for models (when to use it, what it returns), whether it
needs the admin scope — and how each surface spells it: the REST route, the
GraphQL field, the MCP tool and the CLI command. :mod:`.rest`, :mod:`.graphql`,
:mod:`.tools` (MCP) and :mod:`.cli` generate themselves from :data:`OPERATIONS`;
none of them declares a request, a bound or an answer of its own. A test walks
the table and checks that every surface exposes what it says, with the same
limits.

A surface spells an operation's *fields* its own way — a CLI flag
(``--created-from``), a GraphQL argument (``createdFrom``), a JSON field path
(``filters.created_from``, REST and MCP) — and translates the field names in
the store's error messages the same way (:mod:`.spelling`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from knowledge_store.model import (
    DIMENSIONS,
    FILTER_NAMES,
    LABELS,
    METRICS,
    ORDER_FIELDS,
    AclChange,
    AclExplanation,
    AggregateAnswer,
    Answer,
    CheckReport,
    ChunkHits,
    Content,
    DeclaredFacets,
    DeleteReport,
    GraphHits,
    IngestReport,
    MembershipsLoaded,
    PrincipalInfo,
    QueryAnswer,
    SearchAnswer,
    SourcesAnswer,
    SqlHits,
    StoreStats,
)
from knowledge_store.model.audit import (
    AuditList,
    AuditRecord,
    AuditReplay,
    AuditSettings,
    AuditVerification,
    GcReport,
)
from knowledge_store.requests import (
    AclExplainRequest,
    AclRequest,
    AclShowRequest,
    AggregateRequest,
    AuditListRequest,
    AuditReplayRequest,
    AuditSettingsRequest,
    AuditShowRequest,
    AuditVerifyRequest,
    CheckRequest,
    ContentRequest,
    DeclaredFacetsRequest,
    DeclareFacetRequest,
    DeleteRequest,
    DocsSearchRequest,
    FacetsRequest,
    FuzzyRequest,
    GcRequest,
    GraphRequest,
    IngestRequest,
    KnowledgeRequest,
    LearningPathRequest,
    LexicalRequest,
    MemberRequest,
    MembershipsRequest,
    PrincipalRequest,
    QueryGraphRequest,
    RelatedRequest,
    RemoveFacetRequest,
    Request,
    SearchRequest,
    SourcesRequest,
    SqlRequest,
    StatsRequest,
    VectorRequest,
    XrefRequest,
)
from knowledge_store.retrieval.docs_tools import GraphFacets, LearningPath, Related, XrefResolution
from knowledge_store.retrieval.knowledge import CodeSamples, Knowledge
from knowledge_store.surfaces import shapes as runners
from knowledge_store.surfaces.auth import Caller
from knowledge_store.surfaces.shapes import (
    AclShown,
    FetchContentRequest,
    FetchedContent,
    ReaderStats,
)

if TYPE_CHECKING:
    from knowledge_store.retrieval.reader import StoreReader
    from knowledge_store.store import KnowledgeStore

__all__ = [
    "OPERATIONS",
    "Cli",
    "Operation",
    "Rest",
    "operation",
    "perform",
    "read_on",
]

#: What an operation runs: the store, the caller (identity, admin scope), the validated request.
Runner = Callable[["KnowledgeStore", Caller, Any], Answer]


@dataclass(frozen=True)
class Rest:
    """A REST route under ``/v1``: ``{name}`` in the path is a request field.

    ``params`` maps a path parameter to its request field where the names
    differ (a list field takes the one value). A ``POST`` sends the request
    model as its JSON body; with ``body="records"`` the body is the records
    (JSON Lines, a JSON list or ``{"records": [...]}``) and the other fields
    are query parameters.
    """

    method: Literal["GET", "POST", "DELETE"]
    path: str
    params: Mapping[str, str] = field(default_factory=dict)
    body: Literal["json", "records"] = "json"


@dataclass(frozen=True)
class Cli:
    """A ``ks`` command: which fields are positional, and how flags and placeholders read.

    Every other field of the request is an option ``--<field-with-dashes>``
    (``flags`` renames one), FILTERS expand to the shared filter options,
    ``hidden`` fields are not offered on the command line, and ``optional``
    arguments may be left out (another option stands for them).
    """

    command: str
    arguments: tuple[str, ...] = ()
    flags: Mapping[str, str] = field(default_factory=dict)
    metavars: Mapping[str, str] = field(default_factory=dict)
    hidden: frozenset[str] = frozenset()
    #: The help of a field the command line takes in another form than the request (a file
    #: of what the request lists); the others show the request's description.
    helps: Mapping[str, str] = field(default_factory=dict)
    #: A writing command that makes the store where there is none (every other one on a
    #: path without a store is ``not_found`` and leaves nothing there).
    creates_store: bool = False
    optional: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Operation:
    """One operation, and how every surface spells it."""

    name: str
    request: type[Request]
    run: Runner
    answers: tuple[type[Answer], ...]
    summary: str
    description: str
    admin: bool = False
    #: Runs in the heavy worker lane whatever its arguments (``workers.is_heavy``).
    heavy: bool = False
    rest: tuple[Rest, ...] = ()
    graphql: str | None = None
    #: The MCP tool, and the value of its ``mode`` argument where operations share a tool.
    mcp: str | None = None
    mcp_mode: str | None = None
    cli: Cli | None = None

    @property
    def answer(self) -> type[Answer]:
        """The answer model (the first, where a caller's scope chooses between two)."""
        return self.answers[0]

    @property
    def reads(self) -> str | None:
        """The reader method of a read (None: an operation that is not one read)."""
        return getattr(self.run, "reads", None)


# -- what runs ------------------------------------------------------------------------------------
def _read(method: str) -> Runner:
    """A read: the store method ``method``, with the request, as the caller (one reader);
    :func:`read_on` runs it on a reader the caller holds (the reader method of that name)."""

    def run(store: KnowledgeStore, caller: Caller, request: Any) -> Answer:
        answer: Answer = getattr(store, method)(request, identity=caller.identity)
        return answer

    run.__name__ = method
    run.reads = method  # type: ignore[attr-defined]
    return run


def _call(method: str) -> Runner:
    """An administration call: the store method ``method`` with the request."""

    def run(store: KnowledgeStore, caller: Caller, request: Any) -> Answer:
        answer: Answer = getattr(store, method)(request)
        return answer

    run.__name__ = method
    return run


# -- what a model reads ------------------------------------------------------------------------------
_FILTERS = (
    f" Filters (optional): {', '.join(FILTER_NAMES)}, and the store's declared facets (see"
    " the filters' schema) — lists mean any of; date ranges are inclusive ISO 8601 dates."
)
_UNREADABLE = " An entity you may not read answers exactly like one that does not exist."
_SEARCH = (
    "Find the passages and documents that answer a question or mention a term. Use it first"
    " for any information need stated in words — a question, a topic, an error message, an"
    " identifier. It ranks by meaning and by exact words at once and fuses the two (plus the"
    " entities linked to the best hits), returning up to k entities, best first: uid, title,"
    " type, href, score, the rank each retriever gave it, superseded_by (a newer entity"
    " replaces it: prefer that one), and evidence chunks (text with heading path) to quote."
)
_SQL = (
    "Select entities by their typed fields — never by words: list the entities matching the"
    f" filters, ordered by {' / '.join(ORDER_FIELDS)} (e.g. 'the 5 most recently updated open"
    " tickets'). Returns uid, title, type, source, status and dates, in order."
)
_AGGREGATE = (
    f"Count entities by their typed fields: a metric ({', '.join(METRICS)}) in total or by a"
    f" dimension ({', '.join(DIMENSIONS)}), e.g. 'how many pages per source', 'tickets"
    " created per week'; date trends list every bucket in the range, zeros included. Counts"
    " cover only what you may read."
)
_GRAPH = (
    "Follow the links between entities you already know (uids from search or sql): what a"
    " page is part of, what it links to (xref), what supersedes it, its code samples"
    f" (implementedBy), prerequisites (dependsOn). Labels: {', '.join(LABELS)}. Returns the"
    " linked entities ranked by hop distance, then number of distinct paths, then recency,"
    " each with its hop count and one path (uids, labels, and each edge's direction from the"
    " step before: out = previous -label-> this, in = this -label-> previous). Use it to"
    " explore around a result, not to search by words."
)
_QUERY_GRAPH = (
    "Run a bounded, read-only openCypher query over the entity graph when search, graph and"
    " get_related can't express the question (multi-hop patterns, counts, OPTIONAL MATCH)."
    " Node labels are entity types; properties: uid, type, title, source, status, href,"
    f" created_at, updated_at; relationships: {', '.join(LABELS)}, variable length *1..4 at"
    " most. Every value must be a $parameter passed in params (no literals). LIMIT defaults"
    " to 100 (capped at 1000, with a warning); a time bound, 250 ms unless the server sets"
    " another. Returns columns, rows and truncated (and warnings, when the LIMIT was"
    " capped). Errors say"
    " what to change. Example: MATCH (p {uid: $uid})<-[:partOf]-(c) RETURN c.uid, c.title"
    " ORDER BY c.title with params {uid: '…'}."
)

OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "search",
        SearchRequest,
        _read("search"),
        (SearchAnswer,),
        "Fused search: vector + lexical (sql without text), graph from the top results, fused",
        _SEARCH + _FILTERS,
        rest=(Rest("POST", "/search"),),
        graphql="search",
        mcp="search",
        cli=Cli("search", ("query",), metavars={"query": "TEXT", "weights": "LIST=W,…"}),
    ),
    Operation(
        "docs_search",
        DocsSearchRequest,
        _read("docs_search"),
        (SearchAnswer,),
        "Fused search over every type but codeSample",
        "Search the documentation pages only (every type except codeSample): the same fused"
        " ranking as search (meaning + exact words + linked entities), returning entities"
        " with uid, title, type, href, score, the rank each list gave it, superseded_by and"
        " evidence chunks with heading paths. Use it for conceptual questions and"
        " explanations; use code_sample_search when you need code." + _FILTERS,
        rest=(Rest("POST", "/docs_search"),),
        graphql="docsSearch",
        mcp="docs_search",
    ),
    Operation(
        "code_sample_search",
        DocsSearchRequest,
        _read("code_sample_search"),
        (CodeSamples,),
        "Fused search over codeSample entities: code, language and page",
        "Find code examples (codeSample entities only) for a task, an API, a command or an"
        " error. Each result gives the code itself, its language (null when the source does"
        " not say), the heading it sits under, the page it belongs to (uid, title, href — open"
        " it with fetch_content for the surrounding explanation) and superseded_by." + _FILTERS,
        rest=(Rest("POST", "/code_sample_search"),),
        graphql="codeSampleSearch",
        mcp="code_sample_search",
    ),
    Operation(
        "search_knowledge",
        KnowledgeRequest,
        _read("search_knowledge"),
        (Knowledge,),
        "Fused search as cited passages for context packing",
        "Answer a user's question from the knowledge base: use it in a chat before you answer"
        " anything the documents may cover. Returns up to k sources, best first, each with n"
        " (its citation number), uid, title, type, href, superseded_by (a newer source"
        " replaces it — prefer and cite that one) and passages: the text to quote, each with"
        " its heading path and a ready-made citation 'Title › Heading (href)'. 'context' packs"
        " every passage as '[n] citation' + text, ready to paste into your context; cite"
        " sources as [n]." + _FILTERS,
        rest=(Rest("POST", "/search_knowledge"),),
        graphql="searchKnowledge",
        mcp="search_knowledge",
    ),
    Operation(
        "lexical",
        LexicalRequest,
        _read("lexical"),
        (ChunkHits,),
        "BM25 over chunks: exact terms, identifiers, codes, names",
        "Rank chunks by BM25 over their words: exact terms, identifiers, error codes, names."
        " A question is searched without its function words (how, do, I, what…); a keyword"
        " query keeps every word. Returns up to k chunks, best first, each with its entity (uid, title, type), score,"
        " rank, text, heading path and offsets into the entity's body." + _FILTERS,
        rest=(Rest("POST", "/lexical"),),
        graphql="lexical",
        cli=Cli("lexical", ("query",), metavars={"query": "TEXT"}),
    ),
    Operation(
        "fuzzy",
        FuzzyRequest,
        _read("fuzzy"),
        (ChunkHits,),
        "BM25 over chunks, tolerating typos: a misspelt word is searched as the nearest word"
        " the store holds",
        "Rank chunks by BM25 like lexical, after replacing each word that no chunk you can"
        " read holds with the word one edit away (a letter added, dropped, changed or two"
        " swapped) that most of them hold: 'replicaton' is searched as 'replication'. Use it"
        " when lexical finds nothing for a word that may be misspelt. The answer's warnings"
        " say which words were replaced. Returns chunks like lexical." + _FILTERS,
        rest=(Rest("POST", "/fuzzy"),),
        graphql="fuzzy",
        cli=Cli("fuzzy", ("query",), metavars={"query": "TEXT"}),
    ),
    Operation(
        "vector",
        VectorRequest,
        _read("vector"),
        (ChunkHits,),
        "Dense nearest chunks by meaning (HNSW; exact when few are visible)",
        "Rank chunks by meaning: the nearest chunks to a text (or a query vector) by the"
        " store's embedding model. Returns up to k chunks like lexical, and how the search was"
        " done (strategy, rows scanned, whether it was exhaustive)." + _FILTERS,
        rest=(Rest("POST", "/vector"),),
        graphql="vector",
        cli=Cli("vector", ("query",), metavars={"query": "TEXT"}, hidden=frozenset({"vector"})),
    ),
    Operation(
        "graph",
        GraphRequest,
        _read("graph"),
        (GraphHits,),
        "Entities linked to start uids: ranked by hops, then paths, then recency, one path each",
        _GRAPH,
        rest=(Rest("POST", "/graph"),),
        graphql="graph",
        mcp="graph",
        cli=Cli(
            "graph",
            ("starts",),
            flags={"labels": "--label"},
            metavars={"starts": "UID", "labels": "L", "direction": "out|in|both"},
        ),
    ),
    Operation(
        "sql",
        SqlRequest,
        _read("sql"),
        (SqlHits,),
        "Entities by their typed fields (closed list), ordered",
        _SQL + _FILTERS,
        rest=(Rest("POST", "/sql"),),
        graphql="sql",
        mcp="sql",
        mcp_mode="filter",
        cli=Cli("sql", metavars={"order": "FIELD[:asc|:desc]"}),
    ),
    Operation(
        "aggregate",
        AggregateRequest,
        _read("aggregate"),
        (AggregateAnswer,),
        "Count entities you can read, in total or by a dimension (trends list every bucket)",
        _AGGREGATE + _FILTERS,
        rest=(Rest("POST", "/aggregate"),),
        graphql="aggregate",
        mcp="sql",
        mcp_mode="aggregate",
        cli=Cli(
            "aggregate",
            ("metric",),
            flags={"dimension": "--by"},
            metavars={"metric": "METRIC"},
        ),
    ),
    Operation(
        "query_graph",
        QueryGraphRequest,
        _read("query_graph"),
        (QueryAnswer,),
        "query_graph: a bounded, read-only openCypher subset; values only as $parameters",
        _QUERY_GRAPH,
        heavy=True,
        rest=(Rest("POST", "/query_graph"),),
        graphql="queryGraph",
        mcp="query_graph",
        cli=Cli(
            "query",
            ("query",),
            flags={"params": "--param"},
            metavars={"query": "CYPHER", "params": "NAME=VALUE"},
            hidden=frozenset({"lenient"}),
        ),
    ),
    Operation(
        "content",
        ContentRequest,
        _read("content"),
        (Content,),
        "One entity: fields, chunks, edges to visible entities",
        "Read one entity by uid: its fields, its whole body, its chunks (heading path and"
        " offsets) and its edges to the entities you can read (out and in)." + _UNREADABLE,
        rest=(Rest("GET", "/content/{uid}"),),
        graphql="content",
    ),
    Operation(
        "fetch_content",
        FetchContentRequest,
        runners.fetch_content,
        (FetchedContent,),
        "One entity for a model: its body cut at max_chars, a code sample's code",
        "Read one entity in full by uid: its fields (type, title, source, status, dates, href,"
        " attributes), its body (Markdown; cut at max_chars with body_truncated), its edges to"
        " entities you can read (out and in, with label, uid, title), for a code sample its"
        " code and language, and optionally its chunks. Use it after a search to read a whole"
        " page." + _UNREADABLE,
        mcp="fetch_content",
    ),
    Operation(
        "get_related",
        RelatedRequest,
        _read("get_related"),
        (Related,),
        "Neighbours of an entity (get_related)",
        "List the entities linked to one entity (by uid): what it is part of, its parts, its"
        " cross-references, prerequisites, successors, code samples. Ranked by hop distance,"
        " then number of paths; each with hops and one path of uids, labels and directions"
        " (out: the step before links to it; in: it links to the step before). Use it to"
        " explore around a search result." + _UNREADABLE,
        rest=(Rest("POST", "/related"),),
        graphql="related",
        mcp="get_related",
    ),
    Operation(
        "get_learning_path",
        LearningPathRequest,
        _read("get_learning_path"),
        (LearningPath,),
        "The ordered path an entity belongs to",
        "Show the ordered learning path (module, chapter, book) an entity belongs to: the"
        " root, then every unit depth-first in reading order (partOf positions), and the"
        " entity's index in that list. Use it to say what to read before and after a page, or"
        " to outline a whole path from its root uid." + _UNREADABLE,
        rest=(Rest("POST", "/learning_path"),),
        graphql="learningPath",
        mcp="get_learning_path",
    ),
    Operation(
        "resolve_xref",
        XrefRequest,
        _read("resolve_xref"),
        (XrefResolution,),
        "A uid, href or exact title → the entity (or the candidates)",
        "Resolve a reference found in a text — a uid, a link/href (with or without #anchor) or"
        " an exact title — to the entity it names. Returns the entity (uid, title, type, href)"
        " or, when ambiguous, the candidates; fails with not_found when nothing matches."
        + _UNREADABLE,
        rest=(Rest("POST", "/resolve_xref"),),
        graphql="resolveXref",
        mcp="resolve_xref",
    ),
    Operation(
        "graph_facets",
        FacetsRequest,
        _read("graph_facets"),
        (GraphFacets,),
        "Neighbours of a result set, counted by label and type",
        "Count the visible neighbours of a set of entities (a page of results) by edge label"
        " and by entity type: what the results link to, as facets to narrow by.",
        rest=(Rest("POST", "/graph_facets"),),
        graphql="graphFacets",
    ),
    Operation(
        "stats",
        StatsRequest,
        runners.stats,
        (StoreStats, ReaderStats),
        "Counts, content root, model and whether the store is empty",
        "Store figures: the content root, counts of entities, chunks, edges by label and index"
        " segments, the embedding model and whether the store is empty — global with the admin"
        " scope; without it, the entities the caller can read.",
        rest=(Rest("GET", "/stats"),),
        graphql="stats",
        cli=Cli("stats"),
    ),
    # -- administration ---------------------------------------------------------------------------
    Operation(
        "ingest",
        IngestRequest,
        runners.ingest,
        (IngestReport,),
        "Publish records as one atomic batch",
        "Administration: publish canonical records as one atomic batch (a bad record rejects"
        " the batch unless skip_invalid). Every record needs an ACL (its own 'acl' or the"
        " default 'acl' argument). With source, every record gets that source; with sync too,"
        " the records are the whole source and what it no longer holds is deleted in the same"
        " publish (more than half of it only with allow_mass_delete). Returns added, updated,"
        " unchanged, deleted (with deleted_uids) and the rejected records with the reason.",
        admin=True,
        heavy=True,
        rest=(Rest("POST", "/admin/ingest", body="records"),),
        mcp="ingest_records",
    ),
    Operation(
        "delete",
        DeleteRequest,
        _call("delete"),
        (DeleteReport,),
        "Delete entities (or a whole --source), their chunks and outgoing edges (one publish);"
        " a page's code samples go with it",
        "Administration: delete entities by uid (their chunks and outgoing edges) as one"
        " publish, with the entities split off them (a page's code samples, which share its"
        " ACL); an unknown uid deletes nothing and says which. Or delete every entity of a"
        " source (source, instead of uids). Returns the new content root and the number"
        " deleted (with the uids when more went than were named, and for a source).",
        admin=True,
        heavy=True,
        rest=(
            Rest("POST", "/admin/delete"),
            Rest("DELETE", "/admin/entities/{uid}", {"uid": "uids"}),
            Rest("DELETE", "/admin/sources/{name}", {"name": "source"}),
        ),
        mcp="delete_entities",
        cli=Cli(
            "delete",
            ("uids",),
            metavars={"uids": "UID", "source": "NAME"},
            optional=frozenset({"uids"}),  # or --source NAME
        ),
    ),
    Operation(
        "sources",
        SourcesRequest,
        runners.sources,
        (SourcesAnswer,),
        "Each source: entities and chunks it holds, its last ingest or sync, loader and paths",
        "Administration: every source (the entities' source field) — how many entities and"
        " chunks it holds (all of them, whatever their ACL), and its last ingest under its"
        " name: when, sync or upsert, the content root, added/updated/unchanged/deleted, the"
        " loader and the paths or URLs it came from.",
        admin=True,
        rest=(Rest("GET", "/admin/sources"),),
        graphql="sources",
        cli=Cli("sources"),
    ),
    Operation(
        "check",
        CheckRequest,
        _call("check"),
        (CheckReport,),
        "Verify the store: content hashes recomputed, chunks, the database's own checks and"
        " each derived index against the catalog; exit status 1 when damage is found",
        "Administration: verify the whole store on one snapshot — every entity's content hash"
        " recomputed from its stored fields, edges and ACL, every chunk against its entity's"
        " body, the database's own integrity checks, and each derived index (lexical, dense,"
        " full-text vectors, BM25 statistics) against the catalog. Returns ok, what was"
        " checked, and each kind of damage found with its count, uids, what it means and what"
        " repairs it. Reads everything: minutes on a large store.",
        admin=True,
        heavy=True,
        rest=(Rest("GET", "/admin/check"),),
        cli=Cli("check"),
    ),
    Operation(
        "acl_grant",
        AclRequest,
        _call("grant"),
        (AclChange,),
        "Let PRINCIPAL read UID (one publish; only that entity's index documents change, and"
        " those of the entities split off it, which share its ACL)",
        "Administration: let a principal read an entity. Returns the publish's content root"
        " and the entity's ACL after it.",
        admin=True,
        rest=(Rest("POST", "/admin/acl/grant"),),
        cli=Cli("acl grant", ("uid", "principal")),
    ),
    Operation(
        "acl_revoke",
        AclRequest,
        _call("revoke"),
        (AclChange,),
        "Stop PRINCIPAL reading UID through its ACL; holds from the next query",
        "Administration: stop a principal reading an entity through its ACL (it may still"
        " read it through a group). Returns the publish's content root and the ACL after it.",
        admin=True,
        rest=(Rest("POST", "/admin/acl/revoke"),),
        cli=Cli("acl revoke", ("uid", "principal")),
    ),
    Operation(
        "acl_show",
        AclShowRequest,
        runners.acl_show,
        (AclShown,),
        "The principals in UID's ACL, and where it comes from (its own, or its parent's)",
        "Administration: the principals in an entity's ACL, and inherited_from: the entity"
        " whose ACL it shares (a code sample's page), null when the ACL is its own.",
        admin=True,
        rest=(Rest("GET", "/admin/acl/{uid}"),),
        cli=Cli("acl show", ("uid",)),
    ),
    Operation(
        "acl_explain",
        AclExplainRequest,
        runners.acl_explain,
        (AclExplanation,),
        "Whether PRINCIPAL can read UID, and through which membership chain (or why not)",
        "Administration: whether a principal can read an entity, the membership chain that"
        " grants it (principal → group → … → the ACL entry), or why not.",
        admin=True,
        rest=(Rest("POST", "/admin/acl/explain"),),
        cli=Cli("acl explain", ("principal", "uid")),
    ),
    Operation(
        "facets_list",
        DeclaredFacetsRequest,
        _call("facets"),
        (DeclaredFacets,),
        "The facets declared on this store: their kinds, filters and dimensions",
        "The store's own fields, declared by its operator from the entities' attributes: each"
        " facet's name, kind (keyword, date, number), the filters it adds (keyword: NAME,"
        " not_NAME; date and number: NAME_from, NAME_to) and its aggregate dimensions, with"
        " how many entities have a value.",
        rest=(Rest("GET", "/facets"),),
        graphql="facets",
        cli=Cli("facets list"),
    ),
    Operation(
        "facets_add",
        DeclareFacetRequest,
        _call("declare_facet"),
        (DeclaredFacets,),
        "Declare a facet read from every entity's attributes[NAME] (keyword, date or number):"
        " a filter and an aggregate dimension everywhere, filled in one transaction",
        "Administration: declare a facet — the attributes key NAME of every entity, as a"
        " keyword (filters NAME and not_NAME), a date (NAME_from, NAME_to; trends by day, week,"
        " month) or a number (NAME_from, NAME_to) — filled from every entity at once and kept"
        " up to date by every publish. Refused for a name that is, or brings, a built-in"
        " filter, dimension or field. Returns the declared facets.",
        admin=True,
        heavy=True,
        rest=(Rest("POST", "/admin/facets"),),
        cli=Cli(
            "facets add",
            ("name", "kind"),
            metavars={"name": "NAME", "kind": "keyword|date|number"},
            optional=frozenset({"kind"}),
        ),
    ),
    Operation(
        "facets_remove",
        RemoveFacetRequest,
        _call("remove_facet"),
        (DeclaredFacets,),
        "Forget a declared facet and its values",
        "Administration: forget a declared facet and its values (its filters and dimension"
        " are refused from then on). Returns the declared facets.",
        admin=True,
        rest=(Rest("DELETE", "/admin/facets/{name}"),),
        cli=Cli("facets remove", ("name",), metavars={"name": "NAME"}),
    ),
    Operation(
        "principals_add_member",
        MemberRequest,
        _call("add_member"),
        (PrincipalInfo,),
        "Make MEMBER (a user or a group) a member of GROUP; cycles are rejected",
        "Administration: make a user or a group a member of a group (a cycle is refused)."
        " Returns the member's groups after it.",
        admin=True,
        rest=(Rest("POST", "/admin/principals/add-member"),),
        cli=Cli("principals add-member", ("group", "member"), creates_store=True),
    ),
    Operation(
        "principals_remove_member",
        MemberRequest,
        _call("remove_member"),
        (PrincipalInfo,),
        "Remove MEMBER from GROUP; visible to the very next query",
        "Administration: remove a member from a group. Returns the member's groups after it.",
        admin=True,
        rest=(Rest("POST", "/admin/principals/remove-member"),),
        cli=Cli("principals remove-member", ("group", "member")),
    ),
    Operation(
        "principals_show",
        PrincipalRequest,
        _call("principal_show"),
        (PrincipalInfo,),
        "PRINCIPAL's direct and inherited groups (and a group's members)",
        "Administration: a principal's direct and inherited groups, and a group's members.",
        admin=True,
        rest=(Rest("GET", "/admin/principals/{principal}"),),
        cli=Cli("principals show", ("principal",)),
    ),
    Operation(
        "principals_load",
        MembershipsRequest,
        runners.load_memberships,
        (MembershipsLoaded,),
        'Load {"group", "member"} lines; replaces the memberships of the groups the file names',
        "Administration: replace the memberships of every group named by the pairs with"
        " those pairs. Returns how many groups and memberships were loaded.",
        admin=True,
        rest=(Rest("POST", "/admin/principals/load"),),
        cli=Cli(
            "principals load",
            ("memberships",),
            metavars={"memberships": "FILE.jsonl"},
            helps={"memberships": 'JSON Lines: one {"group", "member"} object a line'},
            creates_store=True,
        ),
    ),
    # -- the audit log (DESIGN §8) ------------------------------------------------------------------
    Operation(
        "audit_list",
        AuditListRequest,
        _call("audit_list"),
        (AuditList,),
        "Audit records, newest first: who read or changed what, as whom, when (--uid U: who saw"
        " this entity)",
        "Administration: the audit log's records, newest first — each request of every surface"
        " with its time, surface, operation, who authenticated, the identity it acted as, the"
        " content root, what its answer named (uids, chunk ids, ranks) and its outcome; every"
        " change with what it changed. Narrow by a time range, an identity, an entity (the"
        " reads that returned it and the changes that touched it) or an operation.",
        admin=True,
        rest=(Rest("POST", "/admin/audit"),),
        cli=Cli(
            "audit list",
            flags={"identity": "--as"},
            metavars={"identity": "P", "uid": "U", "since": "T", "until": "T", "operation": "OP"},
        ),
    ),
    Operation(
        "audit_verify",
        AuditVerifyRequest,
        _call("audit_verify"),
        (AuditVerification,),
        "Check the audit log's hash chain: an edited, removed, reordered or cut record is found;"
        " exit status 1 when one is",
        "Administration: check that every audit record follows from the one before (its digest"
        " covers it and the previous digest), from the first kept record to the head, that the"
        " head and the checkpoint the catalog keeps are in the log, and optionally a head kept"
        " elsewhere (SEQ:DIGEST). Returns ok, the records checked, the head (keep it to check"
        " against later) and every problem with its record.",
        admin=True,
        rest=(Rest("POST", "/admin/audit/verify"),),
        cli=Cli("audit verify", metavars={"head": "SEQ:DIGEST"}),
    ),
    Operation(
        "audit_settings",
        AuditSettingsRequest,
        _call("audit_settings"),
        (AuditSettings,),
        "Show or change the audit settings: the log on or off, the query text kept, hashed or"
        " dropped, Python API calls recorded, the retention, fsync",
        "Administration: the audit settings of the store (every process that opens it follows"
        " them within a second); with any argument, change them — the change is recorded.",
        admin=True,
        rest=(Rest("POST", "/admin/audit/settings"),),
        cli=Cli("audit settings", metavars={"retain": "DURATION"}),
    ),
    Operation(
        "audit_replay",
        AuditReplayRequest,
        _call("audit_replay"),
        (AuditReplay,),
        "Run a recorded read again at its content root under that moment's ACLs and"
        " memberships, then now; explain every difference; exit status 1 when one is not",
        "Administration: a recorded read run again at the content root it read, with the ACLs"
        " and memberships of its moment (rebuilt from the history), compared with the record —"
        " which entities, ranks and chunks; whether each was readable then and through what —"
        " and the same read now, every entity that left or came explained by the change that"
        " caused it (deleted, revoked or granted, a membership removed or added, updated), with"
        " when and by whom.",
        admin=True,
        heavy=True,
        rest=(Rest("POST", "/admin/audit/replay"),),
        cli=Cli("audit replay", ("seq",), metavars={"seq": "ID"}),
    ),
    Operation(
        "gc",
        GcRequest,
        _call("gc"),
        (GcReport,),
        "Remove the audit records older than the retention and the history no retained moment"
        " needs (--dry-run: count them)",
        "Administration: remove the audit records older than the retention (the audit"
        " settings', 180 days by default, or retain) and the catalog's history that no retained"
        " moment needs; the chain's first kept record is verified from its base.",
        admin=True,
        heavy=True,
        rest=(Rest("POST", "/admin/gc"),),
        cli=Cli("gc", metavars={"retain": "DURATION"}),
    ),
    Operation(
        "audit_show",
        AuditShowRequest,
        _call("audit_show"),
        (AuditRecord,),
        "One audit record by its seq, with its digest",
        "Administration: one audit record, every field, with its digest.",
        admin=True,
        rest=(Rest("GET", "/admin/audit/{seq}"),),
        cli=Cli("audit show", ("seq",), metavars={"seq": "ID"}),
    ),
)

_BY_NAME = {op.name: op for op in OPERATIONS}


def operation(name: str) -> Operation:
    """The operation called ``name``."""
    return _BY_NAME[name]


def perform(
    op: Operation,
    store: KnowledgeStore,
    caller: Caller,
    request: Request | Mapping[str, Any],
    *,
    surface: str,
    context: Mapping[str, Any] | None = None,
) -> Answer:
    """Run ``op`` for ``caller`` — the one way every surface runs an operation: recorded in
    the store's audit log (one record, appended before the answer is handed back; a request
    whose fields do not parse is recorded as given, with its error). ``request``: the parsed
    request, or its raw fields (parsed here, with ``context``)."""
    with store.auditor.recording(
        surface,
        op.name,
        subject=caller.subject,
        identity=caller.principal,
        admin=caller.admin,
        request=request,
        groups=caller.identity.groups,
    ) as recording:
        parsed = (
            request if isinstance(request, Request) else op.request.parse(request, context=context)
        )
        if recording is not None:
            recording.note_request(parsed)
        answer = op.run(store, caller, parsed)
        if recording is not None:
            recording.answer = answer
    return answer


def read_on(
    reader: StoreReader,
    name: str,
    fields: Mapping[str, Any],
    *,
    store: KnowledgeStore | None = None,
    caller: Caller | None = None,
    surface: str = "page",
) -> Any:
    """The read operation ``name`` on an open ``reader``: ``fields`` validated by its request
    model (every bound of every surface), answered as every surface answers it — for a
    surface that makes several reads for one request (the search page) on one reader. With
    ``store`` and ``caller``, each read is recorded in the audit log as :func:`perform`
    records (its own record, the reader's snapshot)."""
    op = _BY_NAME[name]
    if op.reads is None:
        raise ValueError(f"{name} is not a read")
    if store is None or caller is None:
        return reader.answer(op.reads, op.request.model_validate(dict(fields)))
    with store.auditor.recording(
        surface,
        name,
        subject=caller.subject,
        identity=caller.principal,
        admin=caller.admin,
        request=dict(fields),
        groups=caller.identity.groups,
    ) as recording:
        request = op.request.parse(dict(fields))
        if recording is not None:
            recording.note_request(request)
            recording.note_reader(reader.engine.publish, reader.content_root, reader.held)
        answer = reader.answer(op.reads, request)
        if recording is not None:
            recording.answer = answer
    return answer
