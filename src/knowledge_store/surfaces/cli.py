"""The ``ks`` command line (DESIGN §6). Thin: every command calls one library method.

Errors become CLI errors only here: with ``--json`` the one error shape is
printed on stdout; otherwise a sentence on stderr. Exit status 2 for the
caller's input, 1 for anything else.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from knowledge_store.engines.sources import DELETED_UIDS_SHOWN
from knowledge_store.errors import InvalidRequest, KnowledgeStoreError, StoreError
from knowledge_store.ingest.records import JsonProblem, loads_strict
from knowledge_store.model import ChunkHits, Filters, SearchAnswer
from knowledge_store.surfaces.terminal import safe, strip_controls

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

app = typer.Typer(
    name="ks",
    help="knowledge-store: ingest an estate; search it by words, meaning, graph and fields.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
acl_app = typer.Typer(help="Entity ACLs: grant, revoke, show, explain.", no_args_is_help=True)
principals_app = typer.Typer(help="Principals and group memberships.", no_args_is_help=True)
app.add_typer(acl_app, name="acl")
app.add_typer(principals_app, name="principals")

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


class _State:
    store_location: str | None = None


state = _State()


@app.callback()
def _main(
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            help="a directory (embedded) · pg:DIR · postgresql://… (default: $KS_STORE, else ./.ks)",
            show_default=False,
        ),
    ] = None,
) -> None:
    state.store_location = store


# -- shared options -------------------------------------------------------------------------
AsOpt = Annotated[
    str | None,
    typer.Option(
        "--as", help="identity to read as (default: $KS_AS, else everyone)", show_default=False
    ),
]
KOpt = Annotated[int, typer.Option("--k", help="number of results", min=1, max=1000)]
JsonOpt = Annotated[bool, typer.Option("--json", help="print one JSON object on stdout")]
ExplainOpt = Annotated[bool, typer.Option("--explain", help="show how the answer was computed")]
TypeOpt = Annotated[
    list[str] | None, typer.Option("--type", help="entity type (repeatable: any of)")
]
NotTypeOpt = Annotated[list[str] | None, typer.Option("--not-type", help="exclude an entity type")]
SourceOpt = Annotated[list[str] | None, typer.Option("--source", help="source (repeatable)")]
StatusOpt = Annotated[list[str] | None, typer.Option("--status", help="status (repeatable)")]
UidOpt = Annotated[list[str] | None, typer.Option("--uid", help="entity uid (repeatable)")]
CreatedFrom = Annotated[str | None, typer.Option("--created-from", help="ISO date, inclusive")]
CreatedTo = Annotated[str | None, typer.Option("--created-to", help="ISO date, inclusive")]
UpdatedFrom = Annotated[str | None, typer.Option("--updated-from", help="ISO date, inclusive")]
UpdatedTo = Annotated[str | None, typer.Option("--updated-to", help="ISO date, inclusive")]


def _filters(
    types: list[str] | None,
    not_types: list[str] | None,
    sources: list[str] | None,
    statuses: list[str] | None,
    uids: list[str] | None,
    created_from: str | None,
    created_to: str | None,
    updated_from: str | None,
    updated_to: str | None,
) -> Filters:
    return Filters.build(
        types=types or (),
        not_types=not_types or (),
        sources=sources or (),
        statuses=statuses or (),
        uids=uids or (),
        created_from=created_from,
        created_to=created_to,
        updated_from=updated_from,
        updated_to=updated_to,
    )


@contextmanager
def _store() -> Iterator[Any]:
    from knowledge_store.store import KnowledgeStore

    store = KnowledgeStore.open(state.store_location)
    try:
        yield store
    finally:
        store.close()


def _run(as_json: bool, action: Callable[[], Any], show: Callable[[Any], None]) -> None:
    """Run ``action``; print its result as JSON or with ``show``; map errors to exit codes."""
    try:
        result = action()
    except KnowledgeStoreError as exc:
        _fail(exc, as_json)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # a bug or an environment failure: still one error shape
        _fail(StoreError(f"{type(exc).__name__}: {exc}"), as_json)
    if as_json:
        payload = result.to_dict() if hasattr(result, "to_dict") else result
        sys.stdout.write(json.dumps(payload, ensure_ascii=False) + "\n")
    else:
        show(result)


def _fail(exc: KnowledgeStoreError, as_json: bool) -> NoReturn:
    if as_json:
        sys.stdout.write(json.dumps(exc.to_dict(), ensure_ascii=False) + "\n")
    else:
        err.print(f"[bold red]error[/] ({exc.code}): {safe(exc.message)}", markup=True)
    raise typer.Exit(exc.exit_status)


def _snippet(text: str, width: int = 160) -> str:
    """One line of at most ``width`` characters, safe for rich."""
    flat = " ".join(strip_controls(text).split())
    return escape(flat if len(flat) <= width else flat[: width - 1] + "…")


def _show_chunk_hits(answer: ChunkHits, explain: bool) -> None:
    table = Table(show_lines=False, box=None, pad_edge=False)
    for col in ("#", "score", "uid", "title / heading", "text"):
        table.add_column(col, overflow="fold")
    for h in answer.hits:
        heading = safe(" › ".join(h.heading)) if h.heading else ""
        table.add_row(
            str(h.rank),
            f"{h.score:.3f}",
            safe(h.uid),
            safe(h.title) + (f"\n[dim]{heading}[/]" if heading else ""),
            _snippet(h.text),
        )
    out.print(table)
    if answer.vector is not None:
        v = answer.vector
        out.print(f"[dim]vector: {v.strategy}, scanned {v.scanned}, exhaustive {v.exhaustive}[/]")
    if explain and answer.explain:
        out.print_json(data=answer.explain)
    out.print(f"[dim]content root {answer.content_root[:16]} · {len(answer.hits)} hits[/]")


def _show_search(answer: SearchAnswer, explain: bool) -> None:
    for i, r in enumerate(answer.results, start=1):
        ranks = safe(" ".join(f"{k}={v}" for k, v in r.ranks.items() if v is not None))
        out.print(
            f"[bold]{i}. {safe(r.title)}[/]  [dim]{safe(r.uid)} · {safe(r.type)}"
            f" · {r.score:.4f} · {ranks}[/]"
        )
        if r.superseded_by:
            out.print(f"   [yellow]superseded by {safe(r.superseded_by)}[/]")
        for ev in r.evidence[:1]:
            heading = safe(" › ".join(ev.heading))
            out.print(f"   [dim]{heading}[/]" if heading else "", end="\n" if heading else "")
            out.print(f"   {_snippet(ev.text)}")
    if answer.vector is not None:
        v = answer.vector
        out.print(f"[dim]vector: {v.strategy}, scanned {v.scanned}, exhaustive {v.exhaustive}[/]")
    if explain and answer.explain:
        from knowledge_store.surfaces.cli_show import show_search_explain

        show_search_explain(out, answer)
    out.print(f"[dim]mode {answer.mode} · content root {answer.content_root[:16]}[/]")


# -- commands ------------------------------------------------------------------------------------
@app.command()
def ingest(
    paths: Annotated[
        list[str], typer.Argument(help="files, folders or web site URLs (http:// https://)")
    ],
    format: Annotated[
        str | None,
        typer.Option(
            "--format", help="jsonl | learn | markdown | html | web (default: by extension)"
        ),
    ] = None,
    source: Annotated[
        str | None, typer.Option("--source", help="source name for the records")
    ] = None,
    acl: Annotated[
        list[str] | None,
        typer.Option("--acl", help="default ACL principal for records without one (repeatable)"),
    ] = None,
    skip_invalid: Annotated[
        bool, typer.Option("--skip-invalid", help="publish the good records, report the bad ones")
    ] = False,
    sync: Annotated[
        bool,
        typer.Option(
            "--sync", help="the batch is the whole source: delete what it no longer holds"
        ),
    ] = False,
    allow_mass_delete: Annotated[
        bool,
        typer.Option("--allow-mass-delete", help="let a sync delete more than half its source"),
    ] = False,
    watch: Annotated[
        bool,
        typer.Option("--watch", help="sync again on every burst of file changes (with --sync)"),
    ] = False,
    max_pages: Annotated[
        int | None, typer.Option("--max-pages", help="web: pages to crawl at most (1000)")
    ] = None,
    max_depth: Annotated[
        int | None, typer.Option("--max-depth", help="web: links from the start page (10)")
    ] = None,
    delay: Annotated[
        float | None, typer.Option("--delay", help="web: seconds between requests (0.5)")
    ] = None,
    uid_prefix: Annotated[
        str, typer.Option("--uid-prefix", help="web: put before every page's uid")
    ] = "",
    as_json: JsonOpt = False,
) -> None:
    """Ingest files, folders or web sites as one atomic batch (a failed batch publishes nothing)."""
    from knowledge_store.surfaces import cli_sources

    web = cli_sources.web_options(max_pages, max_depth, delay, uid_prefix)
    if watch:
        cli_sources.watch(
            _store,
            paths,
            format=format,
            source=source,
            acl=acl,
            sync=sync,
            allow_mass_delete=allow_mass_delete,
            as_json=as_json,
            fail=_fail,
        )
        return

    def action() -> Any:
        with _store() as store:
            return store.ingest(
                paths,
                format=format,
                source=source,
                acl=acl,
                skip_invalid=skip_invalid,
                progress=not as_json and sys.stderr.isatty(),
                sync=sync,
                allow_mass_delete=allow_mass_delete,
                web=web,
            )

    _run(as_json, action, lambda report: cli_sources.show_ingest(out, err, report))


@app.command()
def delete(
    uids: Annotated[list[str] | None, typer.Argument(help="entity uids")] = None,
    source: Annotated[
        str | None, typer.Option("--source", help="delete every entity of this source")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Delete entities (or a whole source), their chunks and outgoing edges (one publish)."""

    def action() -> Any:
        if source is not None and uids:
            raise InvalidRequest("delete takes uids or --source NAME, not both")
        with _store() as store:
            if source is not None:
                result = store.delete_source(source)
                return {
                    "content_root": result.root,
                    "deleted": result.deleted,
                    "deleted_uids": list(result.deleted_uids[:DELETED_UIDS_SHOWN]),
                }
            return {"content_root": store.delete(uids or []), "deleted": len(set(uids or []))}

    _run(
        as_json,
        action,
        lambda r: out.print(f"deleted {r['deleted']} · root {safe(r['content_root'])}"),
    )


@app.command()
def sources(as_json: JsonOpt = False) -> None:
    """Each source: entities and chunks it holds, its last ingest or sync, loader and paths."""
    from knowledge_store.surfaces import cli_sources

    def action() -> Any:
        with _store() as store:
            return {
                "content_root": store.content_root(),
                "sources": [view.to_dict() for view in store.sources()],
            }

    _run(as_json, action, lambda answer: cli_sources.show_sources(out, answer))


@app.command()
def search(
    text: Annotated[str, typer.Argument(help="what to look for ('' for a pure filter request)")],
    as_: AsOpt = None,
    k: KOpt = 10,
    type_: TypeOpt = None,
    not_type: NotTypeOpt = None,
    source: SourceOpt = None,
    status: StatusOpt = None,
    uid: UidOpt = None,
    created_from: CreatedFrom = None,
    created_to: CreatedTo = None,
    updated_from: UpdatedFrom = None,
    updated_to: UpdatedTo = None,
    mode: Annotated[
        str | None, typer.Option("--mode", help="adaptive (default) | convex | rrf")
    ] = None,
    weights: Annotated[
        str | None, typer.Option("--weights", help="e.g. vector=1,lexical=1,graph=1,sql=1")
    ] = None,
    explain: ExplainOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Fused search: vector + lexical (sql without text), graph from the top results, fused."""
    from knowledge_store.retrieval.fusion import parse_weights

    def action() -> Any:
        filters = _filters(
            type_, not_type, source, status, uid, created_from, created_to, updated_from, updated_to
        )
        parsed = parse_weights(weights) if weights else None
        with _store() as store:
            return store.search(
                text, identity=as_, k=k, filters=filters, mode=mode, weights=parsed, explain=explain
            )

    _run(as_json, action, lambda a: _show_search(a, explain))


def _primitive(name: str) -> Callable[..., None]:
    def command(
        text: Annotated[str, typer.Argument(help="what to look for")],
        as_: AsOpt = None,
        k: KOpt = 10,
        type_: TypeOpt = None,
        not_type: NotTypeOpt = None,
        source: SourceOpt = None,
        status: StatusOpt = None,
        uid: UidOpt = None,
        created_from: CreatedFrom = None,
        created_to: CreatedTo = None,
        updated_from: UpdatedFrom = None,
        updated_to: UpdatedTo = None,
        explain: ExplainOpt = False,
        as_json: JsonOpt = False,
    ) -> None:
        def action() -> Any:
            filters = _filters(
                type_,
                not_type,
                source,
                status,
                uid,
                created_from,
                created_to,
                updated_from,
                updated_to,
            )
            with _store() as store:
                answer = getattr(store, name)(text, identity=as_, k=k, filters=filters)
                if not explain and answer.explain is not None:
                    from dataclasses import replace

                    answer = replace(answer, explain=None)
                return answer

        _run(as_json, action, lambda a: _show_chunk_hits(a, explain))

    return command


app.command("lexical", help="BM25 over chunks: exact terms, identifiers, codes, names.")(
    _primitive("lexical")
)
app.command("vector", help="Dense nearest chunks by meaning (HNSW; exact when few are visible).")(
    _primitive("vector")
)


@app.command("sql")
def sql_(
    as_: AsOpt = None,
    k: KOpt = 10,
    type_: TypeOpt = None,
    not_type: NotTypeOpt = None,
    source: SourceOpt = None,
    status: StatusOpt = None,
    uid: UidOpt = None,
    created_from: CreatedFrom = None,
    created_to: CreatedTo = None,
    updated_from: UpdatedFrom = None,
    updated_to: UpdatedTo = None,
    order: Annotated[
        str | None,
        typer.Option(
            "--order",
            help="updated_at | created_at | title, optionally :asc or :desc"
            " (default updated_at:desc)",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Entities by their typed fields: FILTERS on type, source, status, uid, dates; ordered."""

    def action() -> Any:
        filters = _filters(
            type_, not_type, source, status, uid, created_from, created_to, updated_from, updated_to
        )
        with _store() as store:
            return store.sql(filters, identity=as_, order=order, k=k)

    from knowledge_store.surfaces.cli_show import show_sql

    _run(as_json, action, lambda a: show_sql(out, a))


@app.command("aggregate")
def aggregate_(
    metric: Annotated[
        str, typer.Argument(help="count | count_distinct:source | count_distinct:type")
    ],
    by: Annotated[
        str | None,
        typer.Option(
            "--by",
            help="type | source | status | created_at:day|week|month | updated_at:day|week|month",
        ),
    ] = None,
    as_: AsOpt = None,
    type_: TypeOpt = None,
    not_type: NotTypeOpt = None,
    source: SourceOpt = None,
    status: StatusOpt = None,
    uid: UidOpt = None,
    created_from: CreatedFrom = None,
    created_to: CreatedTo = None,
    updated_from: UpdatedFrom = None,
    updated_to: UpdatedTo = None,
    as_json: JsonOpt = False,
) -> None:
    """Count entities you can read, in total or by a dimension (trends list every bucket)."""

    def action() -> Any:
        filters = _filters(
            type_, not_type, source, status, uid, created_from, created_to, updated_from, updated_to
        )
        with _store() as store:
            return store.aggregate(metric, by, identity=as_, filters=filters)

    from knowledge_store.surfaces.cli_show import show_aggregate

    _run(as_json, action, lambda a: show_aggregate(out, a))


@app.command("graph")
def graph_(
    uids: Annotated[list[str], typer.Argument(help="start entity uids")],
    depth: Annotated[int, typer.Option("--depth", help="hops, 1..3")] = 1,
    label: Annotated[
        list[str] | None, typer.Option("--label", help="edge label (repeatable: any of)")
    ] = None,
    direction: Annotated[str, typer.Option("--direction", help="out | in | both")] = "both",
    k: KOpt = 10,
    as_: AsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Entities linked to UIDs: ranked by hops, then paths, then recency, with one path each."""
    from knowledge_store.surfaces.cli_graph import show_graph

    def action() -> Any:
        with _store() as store:
            return store.graph(
                uids, identity=as_, depth=depth, labels=label or (), direction=direction, k=k
            )

    _run(as_json, action, lambda a: show_graph(out, a))


@app.command("query")
def query_(
    cypher: Annotated[str, typer.Argument(help="MATCH … RETURN … (docs/query_graph.md)")],
    param: Annotated[
        list[str] | None,
        typer.Option("--param", help="NAME=VALUE, JSON if valid JSON else a string (repeatable)"),
    ] = None,
    as_: AsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """query_graph: a bounded, read-only openCypher subset; values only as $parameters."""
    from knowledge_store.surfaces.cli_graph import parse_params, show_query

    def action() -> Any:
        params = parse_params(param or [])
        with _store() as store:
            return store.query_graph(cypher, params, identity=as_)

    _run(as_json, action, lambda a: show_query(out, a))


@app.command()
def stats(as_json: JsonOpt = False) -> None:
    """Counts, content root, model and whether the store is empty."""

    def action() -> Any:
        with _store() as store:
            return store.stats()

    def show(s: Any) -> None:
        d = s.to_dict()
        for key in (
            "content_root",
            "entities",
            "chunks",
            "segments",
            "model",
            "dimension",
            "is_empty",
        ):
            out.print(f"{key:>13}  {safe(d[key])}")
        out.print(f"{'edges':>13}  " + safe(", ".join(f"{k}={v}" for k, v in d["edges"].items())))

    _run(as_json, action, show)


@app.command()
def rebuild(
    reembed: Annotated[
        bool,
        typer.Option(
            "--reembed",
            help="also embed every chunk again (one publish; resumable): after a model_mismatch,"
            " or to move the store to another embedder of the same dimension",
        ),
    ] = False,
    embedder: Annotated[
        str | None,
        typer.Option(
            "--embedder",
            help="with --reembed: the embedder spec (default $KS_EMBEDDER, else the default,"
            " onnx:int8); see docs/embedding.md",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Rebuild the derived indexes from the source of truth (embedded: Tantivy + HNSW; postgres: text index, BM25 statistics, HNSW)."""

    def action() -> Any:
        if embedder is not None and not reembed:
            raise InvalidRequest("--embedder goes with --reembed", field="embedder")
        progress = not as_json and sys.stderr.isatty()
        with _store() as store:
            if reembed:
                store.reembed(embedder or os.environ.get("KS_EMBEDDER"), progress=progress)
            else:
                store.rebuild(progress=progress)
            return store.stats()

    def show(s: Any) -> None:
        if reembed:
            out.print(f"re-embedded: {s.chunks} chunks · model {s.model}")
        else:
            out.print(f"rebuilt: {s.chunks} chunks · {s.segments} segments")

    _run(as_json, action, show)


@app.command("eval")
def eval_(
    queries: Annotated[Path, typer.Option("--queries", help="JSON Lines of {qid, text}")],
    qrels: Annotated[Path, typer.Option("--qrels", help="TSV: query-id, corpus-id, score")],
    as_: AsOpt = None,
    type_: TypeOpt = None,
    not_type: NotTypeOpt = None,
    source: SourceOpt = None,
    status: StatusOpt = None,
    uid: UidOpt = None,
    created_from: CreatedFrom = None,
    created_to: CreatedTo = None,
    updated_from: UpdatedFrom = None,
    updated_to: UpdatedTo = None,
    mode: Annotated[
        str | None, typer.Option("--mode", help="adaptive (default) | convex | rrf")
    ] = None,
    weights: Annotated[str | None, typer.Option("--weights", help="fusion weights")] = None,
    as_json: JsonOpt = False,
) -> None:
    """nDCG@10, Recall@100 and MRR@10 of lexical, vector and fused search on a query set."""
    from knowledge_store.model import Identity
    from knowledge_store.retrieval.evaluation import evaluate
    from knowledge_store.retrieval.fusion import parse_weights

    def action() -> Any:
        filters = _filters(
            type_, not_type, source, status, uid, created_from, created_to, updated_from, updated_to
        )
        with _store() as store:
            return evaluate(
                store,
                queries,
                qrels,
                filters=filters,
                identity=Identity(as_ or os.environ.get("KS_AS") or "everyone"),
                mode=mode,
                weights=parse_weights(weights) if weights else None,
                progress=not as_json and sys.stderr.isatty(),
            )

    def show(result: dict[str, Any]) -> None:
        table = Table(title=f"{result['queries']} queries")
        for col in ("list", "nDCG@10", "Recall@100", "MRR@10"):
            table.add_column(col)
        for name in ("lexical", "vector", "fused"):
            m = result[name]
            table.add_row(
                name, f"{m['ndcg@10']:.4f}", f"{m['recall@100']:.4f}", f"{m['mrr@10']:.4f}"
            )
        out.print(table)

    _run(as_json, action, show)


@app.command()
def serve(
    host: Annotated[str, typer.Option("--host", help="interface to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port")] = 8000,
    tokens: Annotated[
        Path | None, typer.Option("--tokens", help="token file: tokens → identities (+ admin)")
    ] = None,
    anonymous: Annotated[
        bool, typer.Option("--anonymous", help="callers without a token read as everyone")
    ] = False,
    mcp_stdio: Annotated[
        bool, typer.Option("--mcp-stdio", help="serve MCP on stdin/stdout instead of HTTP")
    ] = False,
    as_: AsOpt = None,
) -> None:
    """Serve: HTTP (REST /v1, GraphQL, MCP at /mcp, the search page) or MCP over stdio."""
    from knowledge_store.surfaces.serve import serve as run_server

    try:
        run_server(
            state.store_location,
            host=host,
            port=port,
            tokens=tokens,
            anonymous=anonymous,
            mcp_stdio=mcp_stdio,
            identity=as_,
        )
    except KnowledgeStoreError as exc:
        _fail(exc, False)


# -- ACL administration ---------------------------------------------------------------------------
@acl_app.command("grant")
def acl_grant(uid: str, principal: str, as_json: JsonOpt = False) -> None:
    """Let PRINCIPAL read UID (one publish; only that entity's index documents change)."""

    def action() -> Any:
        with _store() as store:
            return {"content_root": store.grant(uid, principal), "acl": list(store.acl_show(uid))}

    _run(as_json, action, lambda r: out.print(safe(f"{uid}: {', '.join(r['acl'])}")))


@acl_app.command("revoke")
def acl_revoke(uid: str, principal: str, as_json: JsonOpt = False) -> None:
    """Stop PRINCIPAL reading UID through its ACL; holds from the next query."""

    def action() -> Any:
        with _store() as store:
            return {"content_root": store.revoke(uid, principal), "acl": list(store.acl_show(uid))}

    _run(as_json, action, lambda r: out.print(safe(f"{uid}: {', '.join(r['acl']) or '(nobody)'}")))


@acl_app.command("show")
def acl_show(uid: str, as_json: JsonOpt = False) -> None:
    """The principals in UID's ACL."""

    def action() -> Any:
        with _store() as store:
            return {"uid": uid, "acl": list(store.acl_show(uid))}

    _run(as_json, action, lambda r: out.print(safe(f"{uid}: {', '.join(r['acl']) or '(nobody)'}")))


@acl_app.command("explain")
def acl_explain(principal: str, uid: str, as_json: JsonOpt = False) -> None:
    """Whether PRINCIPAL can read UID, and through which membership chain (or why not)."""

    def action() -> Any:
        with _store() as store:
            return store.acl_explain(principal, uid)

    def show(e: Any) -> None:
        verdict = "[green]can read[/]" if e.allowed else "[red]cannot read[/]"
        out.print(f"{safe(e.principal)} {verdict} {safe(e.uid)}: {safe(e.reason)}")

    _run(as_json, action, show)


@principals_app.command("add-member")
def principals_add(group: str, member: str, as_json: JsonOpt = False) -> None:
    """Make MEMBER (a user or a group) a member of GROUP; cycles are rejected."""

    def action() -> Any:
        with _store() as store:
            store.add_member(group, member)
            return store.principal_show(member)

    _run(as_json, action, lambda p: out.print(safe(f"{member} is now in {group}")))


@principals_app.command("remove-member")
def principals_remove(group: str, member: str, as_json: JsonOpt = False) -> None:
    """Remove MEMBER from GROUP; visible to the very next query."""

    def action() -> Any:
        with _store() as store:
            store.remove_member(group, member)
            return store.principal_show(member)

    _run(as_json, action, lambda p: out.print(safe(f"{member} is no longer in {group}")))


@principals_app.command("show")
def principals_show(principal: str, as_json: JsonOpt = False) -> None:
    """PRINCIPAL's direct and inherited groups (and a group's members)."""

    def action() -> Any:
        with _store() as store:
            return store.principal_show(principal)

    def show(p: Any) -> None:
        out.print(safe(p.principal))
        out.print(safe(f"  direct groups:    {', '.join(p.direct_groups) or '-'}"))
        out.print(safe(f"  inherited groups: {', '.join(p.inherited_groups) or '-'}"))
        if p.members:
            out.print(safe(f"  members:          {', '.join(p.members)}"))

    _run(as_json, action, show)


@principals_app.command("load")
def principals_load(file: Path, as_json: JsonOpt = False) -> None:
    """Load {"group", "member"} lines; replaces the memberships of the groups the file names."""

    def action() -> Any:
        pairs: list[tuple[str, str]] = []
        try:
            lines = file.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidRequest(f"cannot read {file}: {exc}", file=str(file)) from None
        for line_no, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                obj = loads_strict(line)  # a duplicate key would silently win
                pairs.append((str(obj["group"]), str(obj["member"])))
            except (ValueError, KeyError, TypeError) as exc:
                why = f" ({exc.msg})" if isinstance(exc, JsonProblem) else ""
                raise InvalidRequest(
                    f'{file}:{line_no}: expected {{"group": "group:<id>", "member": "user:<id>"}}'
                    + why,
                    file=str(file),
                    line=line_no,
                ) from None
        with _store() as store:
            return store.load_memberships(pairs)

    _run(
        as_json,
        action,
        lambda r: out.print(f"loaded {r['memberships']} memberships of {r['groups']} groups"),
    )


def main() -> None:
    app()


if __name__ == "__main__":
    main()
