"""The ``ks`` command line (DESIGN §6). Thin: every command calls one library method.

The commands of the operation table (:data:`~.operations.OPERATIONS`) are
generated: positional arguments, options, bounds and help come from the
request model and the table's CLI spelling (:mod:`.cli_options`), the human
output from :data:`~.cli_show.SHOW`. ``ingest`` (files and folders), ``rebuild``,
``eval`` and ``serve`` are written here.

Errors become CLI errors only here: with ``--json`` the one error shape is
printed on stdout — usage errors too (an unknown option, a missing argument);
otherwise a sentence on stderr. Field names in the store's messages are
respelled as the flags and placeholders the caller typed (``--created-from``,
``TEXT``). Exit status 2 for the caller's input, 1 for anything else.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from knowledge_store.errors import BatchRejected, InvalidRequest, KnowledgeStoreError, StoreError
from knowledge_store.model import FUSION_MODES, Filters, Identity
from knowledge_store.store.audit import operating_system_user
from knowledge_store.surfaces import environment
from knowledge_store.surfaces.auth import Caller
from knowledge_store.surfaces.cli_options import (
    FILTER_PREFIX,
    filters_of,
    parameters,
    request_values,
    spelling,
    with_filters,
)
from knowledge_store.surfaces.cli_show import SHOW
from knowledge_store.surfaces.operations import OPERATIONS, Cli, Operation, perform
from knowledge_store.surfaces.spelling import respell
from knowledge_store.surfaces.terminal import json_text, safe

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

JSON_FLAG = "--json"
#: Who runs ``ks``, as the audit log names the subject of a CLI command.
_SUBJECT = operating_system_user()


class _Plain:
    """Help that reads: a flag shows no ``<bool>`` placeholder, an argument its metavar only."""

    def get_params(self, ctx: Any) -> list[Any]:
        params: list[Any] = super().get_params(ctx)  # type: ignore[misc]
        for param in params:
            if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
                param.metavar = ""
            if isinstance(param, TyperArgument) and param.metavar is not None:
                param.display_type_rich = lambda ctx: None  # type: ignore[method-assign]
        return params


class _Command(_Plain, TyperCommand):
    pass


class _Group(_Plain, TyperGroup):
    """``ks``: with ``--json`` anywhere, a usage error is the one error shape on stdout too."""

    def main(self, args: Any = None, *rest: Any, **kwargs: Any) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        if JSON_FLAG not in argv:
            return super().main(argv, *rest, **kwargs)
        kwargs["standalone_mode"] = False
        try:
            code = super().main(argv, *rest, **kwargs)
        except typer.Exit as exc:
            code = exc.exit_code
        except (typer.Abort, KeyboardInterrupt):
            sys.stderr.write("Aborted!\n")
            code = 1
        except typer.TyperException as exc:  # a usage error: the one shape, exit 2
            param = getattr(exc, "param", None)
            field = None
            if isinstance(param, TyperArgument):
                field = param.metavar or param.name
            elif param is not None:
                field = max(getattr(param, "opts", None) or [""], key=len) or None
            ctx = getattr(exc, "ctx", None)
            error = InvalidRequest(
                exc.format_message(),
                field=field,
                usage=ctx.get_usage() if ctx is not None else None,
            )
            sys.stdout.write(json_text(error.to_dict()) + "\n")
            code = error.exit_status
        sys.exit(code if isinstance(code, int) else 0)


def _typer(help_text: str) -> typer.Typer:
    return typer.Typer(
        cls=_Group,
        help=help_text,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )


app = _typer("knowledge-store: ingest an estate; search it by words, meaning, graph and fields.")
acl_app = _typer("Entity ACLs: grant, revoke, show, explain.")
principals_app = _typer("Principals and group memberships.")
audit_app = _typer("The audit log: who read or changed what, as whom, when; verify, export.")
schema_app = _typer("JSON Schemas of what the store takes.")
facets_app = _typer("Facets declared on this store from the entities' attributes.")
app.add_typer(acl_app, name="acl")
app.add_typer(principals_app, name="principals")
app.add_typer(audit_app, name="audit")
app.add_typer(schema_app, name="schema")
app.add_typer(facets_app, name="facets")
_GROUPS = {"acl": acl_app, "principals": principals_app, "audit": audit_app, "facets": facets_app}

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)  # a path is never cut in two


class _State:
    store_location: str | None = None


state = _State()


def _version(shown: bool) -> None:
    if shown:
        from knowledge_store import __version__

        out.print(f"ks {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            metavar="STORE",
            help="a directory (embedded) · pg:DIR · postgresql://… (default: $KS_STORE, else ./.ks)",
            show_default=False,
            envvar="KS_STORE",
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="print the version and exit", callback=_version, is_eager=True
        ),
    ] = False,
) -> None:
    state.store_location = store


# -- running a command ---------------------------------------------------------------------------
AsOpt = Annotated[
    str | None,
    typer.Option(
        "--as",
        metavar="P",
        help="identity to read as (default: $KS_AS, else everyone)",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option(JSON_FLAG, help="print one JSON object on stdout")]


def _identity(given: str | None) -> Identity:
    """The identity of ``--as`` (else ``$KS_AS``, else everyone); a bad one names its origin."""
    try:
        return environment.identity(given)
    except InvalidRequest as exc:
        origin = "--as" if given else "$KS_AS"
        raise InvalidRequest(
            f"{origin}: {exc.message}", **{**exc.details, "field": origin}
        ) from exc


@contextmanager
def _store(*, create: bool = False) -> Iterator[Any]:
    """The store of ``--store``. Only a writing command passes ``create``: a read on a
    path that holds no store is ``not_found`` and leaves nothing there."""
    # $KS_STORE comes in through --store
    store = environment.open_store(state.store_location, create=create)
    try:
        yield store
    finally:
        store.close()


def _run(
    as_json: bool,
    action: Callable[[], Any],
    show: Callable[[Any], None],
    names: Mapping[str, str] | None = None,
) -> None:
    """Run ``action``; print its result as JSON or with ``show``; map errors to exit codes.

    ``names``: request field paths → their spelling on this command (see :mod:`.spelling`).
    """
    try:
        result = action()
    except KnowledgeStoreError as exc:
        _fail(respell(exc, names or {}), as_json)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # a bug or an environment failure: still one error shape
        _fail(StoreError(f"{type(exc).__name__}: {exc}"), as_json)
    if as_json:
        payload = result.to_dict() if hasattr(result, "to_dict") else result
        sys.stdout.write(json_text(payload) + "\n")
    else:
        show(result)
        for note in getattr(getattr(result, "answer", result), "warnings", ()):
            err.print(f"[yellow]note[/] {safe(note)}")
        following = getattr(getattr(result, "answer", result), "next", None)
        if following:  # a paged read: the same command with this cursor reads the next page
            out.print(f"next page: --cursor {safe(following)}")
    # an answer that is a verdict (``check``: damage found) sets the exit status itself
    status = getattr(getattr(result, "answer", result), "exit_status", 0)
    if status:
        raise typer.Exit(status)


class _Noted:
    """Where a command written here leaves its answer for the audit record."""

    answer: Any = None


@contextmanager
def _recorded(store: Any, operation: str, given: Mapping[str, Any]) -> Iterator[_Noted]:
    """Record a command written here (not one of the table's) as the table's are recorded:
    one record, appended before its answer is printed."""
    noted = _Noted()
    with store.auditor.recording(
        "cli",
        operation,
        subject=_SUBJECT,
        identity=_identity(None).principal,
        admin=True,
        request={k: v for k, v in given.items() if v not in (None, False, [], ())},
    ) as recording:
        yield noted
        if recording is not None:
            recording.answer = noted.answer


def _fail(exc: KnowledgeStoreError, as_json: bool) -> NoReturn:
    if as_json:
        sys.stdout.write(json_text(exc.to_dict()) + "\n")
    else:
        err.print(f"[bold red]error[/] ({exc.code}): {safe(exc.message)}", markup=True)
        if isinstance(exc, BatchRejected) and len(exc.rejections) > 1:
            # every bad record, as --skip-invalid lists them (the sentence names the first)
            from knowledge_store.surfaces.cli_sources import show_rejected

            show_rejected(err, exc.rejections)
    raise typer.Exit(exc.exit_status)


# -- the commands of the table ------------------------------------------------------------------
def _command(op: Operation, cli: Cli) -> Callable[..., None]:
    reads = not op.admin and op.name != "stats"  # stats: the store's figures, no identity

    def command(**given: Any) -> None:
        as_json = bool(given.pop("as_json", False))
        as_ = given.pop("as_", None)
        names = spelling(op, cli)

        def action() -> _Answer:
            # a bad --as is the caller's input: the one error shape, not a traceback
            caller = Caller(_identity(as_), admin=True, subject=_SUBJECT)  # the operator's CLI
            # parsed before the store opens: arguments that don't parse touch no store
            request = op.request.parse(request_values(op, cli, given))
            with _store(create=cli.creates_store) as store:
                return _Answer(perform(op, store, caller, request, surface="cli"), request)

        _run(as_json, action, lambda a: SHOW[op.name](out, a.answer, a.request), names)

    params = parameters(op, cli)
    kw = inspect.Parameter.KEYWORD_ONLY
    if reads:
        params.append(inspect.Parameter("as_", kw, default=None, annotation=AsOpt))
    params.append(inspect.Parameter("as_json", kw, default=False, annotation=JsonOpt))
    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__name__ = op.name
    return command


class _Answer:
    """An answer with the request that asked for it (the human output reads both)."""

    def __init__(self, answer: Any, request: Any) -> None:
        self.answer = answer
        self.request = request

    def to_dict(self) -> dict[str, Any]:
        return dict(self.answer.to_dict())


def _register() -> None:
    for op in OPERATIONS:
        if op.cli is None:
            continue
        group, _, name = op.cli.command.rpartition(" ")
        target = _GROUPS[group] if group else app
        target.command(name, help=op.summary + ".", cls=_Command)(_command(op, op.cli))


_register()


# -- the commands written here -----------------------------------------------------------------
@app.command(cls=_Command)
def ingest(
    paths: Annotated[
        list[str],
        typer.Argument(
            metavar="PATH…", help="files, folders or web site URLs (http:// https://) to ingest"
        ),
    ],
    format: Annotated[
        str | None,
        typer.Option(
            "--format",
            metavar="jsonl|learn|markdown|html|web",
            help="the records' format (default: by extension)",
        ),
    ] = None,
    source: Annotated[
        str | None, typer.Option("--source", metavar="NAME", help="source name for the records")
    ] = None,
    acl: Annotated[
        list[str] | None,
        typer.Option(
            "--acl",
            metavar="PRINCIPAL",
            help="default ACL principal for records without one (repeatable)",
        ),
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
    allow_move: Annotated[
        bool,
        typer.Option(
            "--allow-move",
            help="let the batch take over uids another source holds (moved to this source)",
        ),
    ] = False,
    watch: Annotated[
        bool,
        typer.Option("--watch", help="sync again on every burst of file changes (with --sync)"),
    ] = False,
    max_pages: Annotated[
        int | None,
        typer.Option("--max-pages", metavar="N", help="web: pages to crawl at most (1000)"),
    ] = None,
    max_depth: Annotated[
        int | None,
        typer.Option("--max-depth", metavar="N", help="web: links from the start page (10)"),
    ] = None,
    delay: Annotated[
        float | None,
        typer.Option("--delay", metavar="SECONDS", help="web: seconds between requests (0.5)"),
    ] = None,
    uid_prefix: Annotated[
        str | None,
        typer.Option(
            "--uid-prefix",
            metavar="TEXT",
            help="put before the uid of every page of a folder or site (default for a folder"
            " under a new --source: 'NAME:'; a known source keeps its own)",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Ingest files, folders or web sites as one atomic batch (a failed batch publishes nothing)."""
    from knowledge_store.surfaces import cli_sources

    if watch:
        cli_sources.watch(
            lambda: _store(create=True),  # a writing command: it makes the store
            paths,
            format=format,
            source=source,
            acl=acl,
            sync=sync,
            allow_mass_delete=allow_mass_delete,
            uid_prefix=uid_prefix,
            allow_move=allow_move,
            as_json=as_json,
            fail=_fail,
        )
        return

    def action() -> Any:
        web = cli_sources.web_options(max_pages, max_depth, delay, uid_prefix or "")
        given = {
            "paths": paths,
            "format": format,
            "source": source,
            "acl": acl,
            "skip_invalid": skip_invalid,
            "sync": sync,
            "allow_mass_delete": allow_mass_delete,
            "allow_move": allow_move,
            "uid_prefix": uid_prefix,
        }
        with _store(create=True) as store, _recorded(store, "ingest", given) as recording:
            try:
                recording.answer = store.ingest(
                    paths,
                    format=format,
                    source=source,
                    acl=acl,
                    skip_invalid=skip_invalid,
                    progress=not as_json and sys.stderr.isatty(),
                    sync=sync,
                    allow_mass_delete=allow_mass_delete,
                    web=web,
                    uid_prefix=uid_prefix,
                    allow_move=allow_move,
                )
            except BatchRejected as exc:
                raise cli_sources.without_acl(exc) from None
        return recording.answer

    names = {
        "acl": "--acl",
        "skip_invalid": "--skip-invalid",
        "format": "--format",
        "source": "--source",
        "max_pages": "--max-pages",
        "max_depth": "--max-depth",
        "delay_s": "--delay",
        "uid_prefix": "--uid-prefix",
    }
    _run(as_json, action, lambda report: cli_sources.show_ingest(out, err, report), names)


@app.command(cls=_Command)
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
            metavar="SPEC",
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
        operation = "reembed" if reembed else "rebuild"
        with _store() as store, _recorded(store, operation, {"embedder": embedder}) as recording:
            if reembed:
                store.reembed(embedder or environment.embedder_spec(), progress=progress)
            else:
                store.rebuild(progress=progress)
            recording.answer = store.stats()
        return recording.answer

    def show(s: Any) -> None:
        if reembed:
            out.print(f"re-embedded: {s.chunks} chunks · model {s.model}")
        else:
            out.print(f"rebuilt: {s.chunks} chunks · {s.segments} segments")

    _run(as_json, action, show)


def _eval(
    queries: Annotated[
        Path, typer.Option("--queries", metavar="F", help="JSON Lines of {qid, text}")
    ],
    qrels: Annotated[
        Path, typer.Option("--qrels", metavar="F", help="TSV: query-id, corpus-id, score")
    ],
    mode: Annotated[
        str | None,
        typer.Option(
            "--mode", metavar="|".join(FUSION_MODES), help="fusion mode (default adaptive)"
        ),
    ] = None,
    weights: Annotated[
        str | None, typer.Option("--weights", metavar="LIST=W,…", help="fusion weights")
    ] = None,
    compare: Annotated[
        tuple[str, str] | None,
        typer.Option(
            "--compare",
            metavar="A B",
            help="compare two configurations (MODE, MODE:LIST=W,…, lexical or vector), paired",
        ),
    ] = None,
    group_by: Annotated[
        str | None,
        typer.Option(
            "--group-by", metavar="FIELD", help="with --compare: the query field that is its type"
        ),
    ] = None,
    as_: AsOpt = None,
    as_json: JsonOpt = False,
    **filter_values: Any,
) -> None:
    """nDCG@10, Recall@100 and MRR@10 of lexical, vector and fused search on a query set.

    With --compare A B: both configurations over the same lists, B − A per query with
    paired bootstrap 95 % intervals, the queries that moved most, and each query type.
    """
    from knowledge_store.retrieval import evaluation
    from knowledge_store.retrieval.fusion import parse_weights

    def action() -> Any:
        if compare is None and group_by is not None:
            raise InvalidRequest("--group-by needs --compare A B", field="group_by")
        if compare is not None and (mode or weights):
            raise InvalidRequest(
                "--compare A B takes each side's mode and weights in A and B "
                "(e.g. --compare rrf convex:vector=0.7,lexical=0.3), not --mode/--weights",
                field="compare",
            )
        filters = Filters.build(**filters_of(filter_values))
        progress = not as_json and sys.stderr.isatty()
        given = {
            "queries": str(queries),
            "qrels": str(qrels),
            "mode": mode,
            "weights": weights,
            "compare": list(compare) if compare else None,
            "group_by": group_by,
            "identity": _identity(as_).principal,
            "filters": filters_of(filter_values),
        }
        with _store() as store, _recorded(store, "eval", given) as recording:
            if compare is not None:
                recording.answer = evaluation.compare(
                    store,
                    queries,
                    qrels,
                    *compare,
                    filters=filters,
                    identity=_identity(as_),
                    group_by=group_by,
                    progress=progress,
                )
            else:
                recording.answer = evaluation.evaluate(
                    store,
                    queries,
                    qrels,
                    filters=filters,
                    identity=_identity(as_),
                    mode=mode,
                    weights=parse_weights(weights) if weights else None,
                    progress=progress,
                )
        return recording.answer

    def show(result: dict[str, Any]) -> None:
        from knowledge_store.surfaces.cli_show import show_comparison, show_evaluation

        (show_evaluation if compare is None else show_comparison)(out, result)

    names = {
        f"filters.{n}": "--" + n.replace("_", "-")
        for n in (key.removeprefix(FILTER_PREFIX) for key in filter_values)
    }
    flags = {"weights": "--weights", "mode": "--mode", "compare": "--compare"}
    _run(as_json, action, show, {**names, **flags, "group_by": "--group-by"})


app.command("eval", cls=_Command)(with_filters(_eval))


@app.command(cls=_Command)
def serve(
    host: Annotated[
        str, typer.Option("--host", metavar="H", help="interface to listen on")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", metavar="P", help="TCP port")] = 8000,
    tokens: Annotated[
        Path | None,
        typer.Option("--tokens", metavar="FILE", help="token file: tokens → identities (+ admin)"),
    ] = None,
    anonymous: Annotated[
        bool, typer.Option("--anonymous", help="callers without a token read as everyone")
    ] = False,
    mcp_stdio: Annotated[
        bool, typer.Option("--mcp-stdio", help="serve MCP on stdin/stdout instead of HTTP")
    ] = False,
    as_: AsOpt = None,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            metavar="N",
            help="HTTP worker processes (default 1; one per core for throughput, e.g."
            " --workers $(nproc)); with more than one, MCP keeps no sessions",
        ),
    ] = None,
    oidc: Annotated[
        str | None,
        typer.Option(
            "--oidc",
            metavar="ISSUER",
            help="accept OAuth access tokens (JWTs) of this OIDC issuer, beside --tokens",
        ),
    ] = None,
    oidc_audience: Annotated[
        str | None,
        typer.Option(
            "--oidc-audience",
            metavar="URL",
            help="this server's resource URL, which tokens must name in aud (default: its URL)",
        ),
    ] = None,
    oidc_claims: Annotated[
        Path | None,
        typer.Option(
            "--oidc-claims",
            metavar="FILE",
            help="claims → identity and scopes, a JSON object (docs/security.md)",
        ),
    ] = None,
    oidc_page_client: Annotated[
        str | None,
        typer.Option(
            "--oidc-page-client",
            metavar="ID",
            help="the search page's client id at the issuer: sign-in with the IdP (PKCE)",
        ),
    ] = None,
    scim: Annotated[
        Path | None,
        typer.Option(
            "--scim",
            metavar="FILE",
            help="serve SCIM 2.0 at /scim/v2, keeping the directory in this SQLite file",
        ),
    ] = None,
    create: Annotated[
        bool,
        typer.Option(
            "--create",
            help="serve an empty store when --store holds none (to fill it over HTTP or MCP);"
            " without it, a path with no store is an error",
        ),
    ] = False,
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
            workers=workers,
            oidc=oidc,
            oidc_audience=oidc_audience,
            oidc_claims=oidc_claims,
            oidc_page_client=oidc_page_client,
            scim=scim,
            create=create,
        )
    except KnowledgeStoreError as exc:
        _fail(exc, False)


@audit_app.command("export", cls=_Command)
def audit_export(
    since: Annotated[
        str | None,
        typer.Option("--since", metavar="T", help="from this moment: an ISO date or time, or 7d"),
    ] = None,
    until: Annotated[
        str | None, typer.Option("--until", metavar="T", help="before this moment")
    ] = None,
    as_: Annotated[
        str | None,
        typer.Option("--as", metavar="P", help="the records of reads acting as this identity"),
    ] = None,
    uid: Annotated[
        str | None,
        typer.Option("--uid", metavar="U", help="the records that named this entity"),
    ] = None,
    operation: Annotated[
        str | None, typer.Option("--operation", metavar="OP", help="the records of one operation")
    ] = None,
    format: Annotated[
        str,
        typer.Option(
            "--format",
            metavar="jsonl|otlp",
            help="jsonl: each record with its digest; otlp: OpenTelemetry spans (OTLP/JSON)",
        ),
    ] = "jsonl",
) -> None:
    """Write the audit records of a range as JSON Lines, oldest first (for a SIEM)."""
    from knowledge_store.requests import AuditExportRequest
    from knowledge_store.surfaces.cli_audit import write_lines

    fields = {"since": since, "until": until, "identity": as_, "uid": uid, "operation": operation}
    names = {"since": "--since", "until": "--until", "identity": "--as", "uid": "--uid"}
    try:
        request = AuditExportRequest.parse(
            {k: v for k, v in fields.items() if v is not None}, format=format
        )
        with _store() as store:
            caller = Caller(_identity(None), admin=True, subject=_SUBJECT)
            with store.auditor.recording(
                "cli",
                "audit_export",
                subject=caller.subject,
                identity=caller.principal,
                admin=True,
                request=request,
            ):
                lines = store.audit_export(request)
            write_lines(lines)
    except KnowledgeStoreError as exc:
        _fail(respell(exc, {**names, "format": "--format", "operation": "--operation"}), False)


# -- export, backup, restore -------------------------------------------------------------------
OutputOpt = Annotated[
    Path | None,
    typer.Option(
        "--output",
        "-o",
        metavar="FILE",
        help="write to FILE (whole or not at all) instead of stdout",
        show_default=False,
    ),
]


@contextmanager
def _written(output: Path | None) -> Iterator[Any]:
    """stdout, or ``output`` written whole or not at all (a temporary file renamed at the end)."""
    if output is None:
        yield sys.stdout
        sys.stdout.flush()
        return
    partial = output.with_name(f".{output.name}.partial-{os.getpid()}")
    try:
        with partial.open("w", encoding="utf-8") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        partial.replace(output)
    finally:
        partial.unlink(missing_ok=True)


def _to_stdout_needs_output(as_json: bool, output: Path | None) -> None:
    if as_json and output is None:
        raise InvalidRequest(
            "--json prints the report on stdout, where the records go without --output;"
            " give --output FILE with --json",
            field="--json",
        )


def _export(output: OutputOpt = None, as_json: JsonOpt = False, **filter_values: Any) -> None:
    """Write the store's records — the ingest format, one JSON object a line, with ACLs, edges,
    attributes and dates — to stdout (or --output FILE), read on one snapshot.

    `ks ingest` of the file into an empty store of any engine gives the same entities, the
    same content digest and the same answers. FILTERS narrow it; a code sample comes with
    its page and a page with its samples. The report (entities, content digest) goes to
    stderr, or with --output and --json to stdout."""

    def action() -> Any:
        _to_stdout_needs_output(as_json, output)
        filters = Filters.build(**filters_of(filter_values))
        with _store() as store, _written(output) as handle:
            return store.export(handle, filters=filters)

    def show(report: Any) -> None:
        derived = f" ({report.derived} with their parents or samples)" if report.derived else ""
        err.print(
            f"exported {report.entities} entities{derived} at {report.content_root[:12]}"
            f" · content digest {report.digest}"
        )

    names = {
        f"filters.{n}": "--" + n.replace("_", "-")
        for n in (key.removeprefix(FILTER_PREFIX) for key in filter_values)
    }
    _run(as_json, action, show, names)


app.command("export", cls=_Command)(with_filters(_export))


@principals_app.command("export", cls=_Command)
def principals_export(output: OutputOpt = None, as_json: JsonOpt = False) -> None:
    """Write every group membership as a {"group", "member"} line (what `ks principals load` reads)."""

    def action() -> Any:
        _to_stdout_needs_output(as_json, output)
        with _store() as store, _written(output) as handle:
            return {"memberships": store.export_principals(handle)}

    _run(as_json, action, lambda r: err.print(f"exported {r['memberships']} memberships"))


@app.command(cls=_Command)
def backup(
    destination: Annotated[
        Path, typer.Argument(metavar="DEST", help="a new directory for the backup")
    ],
    as_json: JsonOpt = False,
) -> None:
    """Back the store up, online, to the new directory DEST: one publish, a manifest with checksums (embedded: SQLite's backup API and the derived indexes; PostgreSQL: pg_dump)."""

    def action() -> Any:
        with _store() as store:
            return store.backup(destination)

    def show(report: Any) -> None:
        out.print(
            f"backed up publish {report.publish} ({report.content_root[:12]}): {report.entities}"
            f" entities, {report.chunks} chunks, {len(report.files)} files,"
            f" {report.bytes / 1e6:.1f} MB in {report.seconds:.1f} s → {report.location}"
        )

    _run(as_json, action, show, {"destination": "DEST"})


@app.command(cls=_Command)
def restore(
    source: Annotated[Path, typer.Argument(metavar="SRC", help="a backup directory (ks backup)")],
    target: Annotated[
        str | None,
        typer.Option(
            "--store",
            metavar="NEW",
            help="the new store to make (a new directory, pg:DIR, postgresql://…?schema=NAME)",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Verify the backup SRC (every file's checksum) and make it a new store at --store NEW, at the backup's publish and content root."""

    def action() -> Any:
        from knowledge_store.store import KnowledgeStore

        location = target or state.store_location
        if not location:
            raise InvalidRequest(
                "restore needs --store NEW: where to make the store", field="--store"
            )
        return KnowledgeStore.restore(source, location)

    def show(report: Any) -> None:
        out.print(
            f"restored publish {report.publish} ({report.content_root[:12]}) of {source} →"
            f" {report.store}: {report.entities} entities, {report.chunks} chunks,"
            f" {report.verified_files} files verified, {report.seconds:.1f} s"
        )
        for line in report.caught_up:
            out.print(f"  {line}")

    _run(as_json, action, show, {"source": "SRC"})


@schema_app.command("record", cls=_Command)
def schema_record(
    acl_default: Annotated[
        bool,
        typer.Option(
            "--acl-default",
            help="the schema for an ingest that gives --acl (a record may leave acl out)",
        ),
    ] = False,
) -> None:
    """The JSON Schema (draft 2020-12) of one ingest record, one JSON Lines line (docs/records.md)."""
    from knowledge_store.ingest.record_schema import record_json_schema

    sys.stdout.write(json_text(record_json_schema(acl_default=acl_default), indent=2) + "\n")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
