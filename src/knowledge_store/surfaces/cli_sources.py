"""The CLI's ingest output, ``ingest --watch`` and the ``sources`` table (readable and ``--json``).

Every value that came from data goes through :func:`~.terminal.safe`.
"""

from __future__ import annotations

import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, NoReturn

from rich.console import Console
from rich.table import Table

from knowledge_store.errors import (
    BatchRejected,
    InvalidRequest,
    KnowledgeStoreError,
    Rejection,
    StoreError,
)
from knowledge_store.ingest.records import NO_ACL
from knowledge_store.model import IngestReport, SourcesAnswer
from knowledge_store.surfaces.terminal import json_text, safe

__all__ = ["show_ingest", "show_sources", "uids_line", "watch", "web_options", "without_acl"]


def web_options(
    max_pages: int | None, max_depth: int | None, delay: float | None, uid_prefix: str
) -> Any:
    """The crawl options the flags give (None: the defaults)."""
    if max_pages is None and max_depth is None and delay is None and not uid_prefix:
        return None
    from dataclasses import replace

    from knowledge_store.ingest.crawl import CrawlLimits
    from knowledge_store.ingest.loaders.web import WebOptions

    limits = CrawlLimits()
    if max_pages is not None:
        limits = replace(limits, max_pages=max_pages)
    if max_depth is not None:
        limits = replace(limits, max_depth=max_depth)
    if delay is not None:
        limits = replace(limits, delay_s=delay)
    return WebOptions(limits=limits, uid_prefix=uid_prefix)


_UNSUPPORTED = re.compile(r"unsupported type \(([^)]*)\)")


def without_acl(exc: BatchRejected) -> BatchRejected:
    """A batch refused only because its records have no ACL and ``--acl`` was not given (a web
    site's or a folder's pages never carry one): the error names the flag first."""
    if not all(r.field == "acl" and r.message == NO_ACL for r in exc.rejections):
        return exc
    count = len(exc.rejections)
    records = f"{count} record{'s' if count != 1 else ''}"
    out = type(exc).__new__(type(exc))  # the same error, details and rejections; new words
    out.__dict__.update(exc.__dict__)
    out.message = (
        f"{records} ({_first(exc.rejections)}) {'have' if count != 1 else 'has'} no acl, and"
        " the batch has no default acl: nothing becomes public silently, so nothing was published."
        " Say who may read them with --acl: --acl everyone for anyone, or --acl group:NAME /"
        " --acl user:NAME (repeatable)"
    )
    out.args = (out.message,)
    return out


def _first(rejections: Sequence[Rejection]) -> str:
    first = rejections[0]
    where = first.file + (f":{first.line}" if first.line is not None else "")
    return (
        where
        + (f" record {first.uid!r}" if first.uid else "")
        + (", …" if len(rejections) > 1 else "")
    )


def summary(report: IngestReport) -> str:
    """One line: what a publish did."""
    skipped = f" · skipped {len(report.skipped)}" if report.skipped else ""
    return (
        f"added {report.added} · updated {report.updated} · unchanged {report.unchanged}"
        f" · deleted {report.deleted} · rejected {len(report.rejected)}{skipped}"
    )


def show_ingest(out: Console, err: Console, report: IngestReport) -> None:
    out.print(summary(report))
    show_rejected(err, report.rejected)
    unsupported: Counter[str] = Counter()
    for s in report.skipped:
        kind = _UNSUPPORTED.match(s.reason)
        if kind is not None:  # one line for all of them: a docs folder's images …
            unsupported[kind.group(1)] += 1
            continue
        err.print(f"[yellow]skipped[/] {safe(s.path)}: {safe(s.reason)}")
    if unsupported:
        kinds = ", ".join(f"{safe(kind)} {n}" for kind, n in unsupported.most_common())
        err.print(
            f"[yellow]skipped[/] {sum(unsupported.values())} file(s) of types no loader reads"
            f" ({kinds}); --json lists them"
        )
    if report.deleted_uids:
        out.print(f"[dim]{uids_line(report.deleted, report.deleted_uids)}[/]")
    out.print(f"[dim]content root {report.content_root}[/]")


def show_rejected(err: Console, rejected: Sequence[Rejection]) -> None:
    """One line per bad record: file, line, uid, field and what was expected."""
    for r in rejected:
        err.print(f"[yellow]rejected[/] {safe(r.describe())}")


def uids_line(deleted: int, uids: Sequence[str]) -> str:
    """``deleted a, b, … and N more`` (ten uids at most)."""
    shown = ", ".join(safe(uid) for uid in uids[:10])
    more = deleted - min(len(uids), 10)
    return f"deleted {shown}{f' … and {more} more' if more > 0 else ''}"


def watch(
    open_store: Callable[[], AbstractContextManager[Any]],
    paths: Sequence[str],
    *,
    format: str | None,
    source: str | None,
    acl: Sequence[str] | None,
    sync: bool,
    allow_mass_delete: bool,
    uid_prefix: str | None,
    allow_move: bool,
    as_json: bool,
    fail: Callable[[KnowledgeStoreError, bool], NoReturn],
) -> None:
    """``ks ingest PATH --source NAME --sync --watch``: sync now, then on every burst of changes.

    One line per sync on stdout (``--json``: the ingest object); a failed sync is one
    line on stderr (``--json``: the error object on stdout) and the watch goes on.
    Ctrl-C ends it with exit status 0.
    """
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    out = Console(highlight=False, soft_wrap=True)

    def on_sync(_changed: list[Path], report: IngestReport) -> None:
        if as_json:
            sys.stdout.write(json_text(report.to_dict()) + "\n")
            sys.stdout.flush()
            return
        at = time.strftime("%H:%M:%S")
        out.print(
            f"{at} synced {safe(source or '')} · {summary(report)}"
            f" · root {report.content_root[:12]}"
        )
        for r in report.rejected:
            err.print(f"[yellow]rejected[/] {safe(r.describe())}")

    def on_error(_changed: list[Path], exc: Exception) -> None:
        error = exc if isinstance(exc, KnowledgeStoreError) else StoreError(str(exc))
        if as_json:
            sys.stdout.write(json_text(error.to_dict()) + "\n")
            sys.stdout.flush()
        else:
            err.print(f"[bold red]error[/] ({error.code}): {safe(error.message)}; still watching")

    try:
        if not sync or not source:
            raise InvalidRequest(
                "--watch keeps one source in sync: give --source NAME and --sync",
                field="watch",
            )
        with open_store() as store:
            store.watch(
                paths,
                source=source,
                format=format,
                acl=acl,
                allow_mass_delete=allow_mass_delete,
                uid_prefix=uid_prefix,
                allow_move=allow_move,
                on_sync=on_sync,
                on_error=on_error,
            )
    except KnowledgeStoreError as exc:
        fail(exc, as_json)


def show_sources(out: Console, answer: SourcesAnswer) -> None:
    table = Table(box=None, pad_edge=False)
    for column in ("source", "entities", "chunks", "last sync", "+", "~", "-", "loader", "from"):
        table.add_column(column, overflow="fold")
    for row in answer.sources:
        last = row.last_sync
        table.add_row(
            safe(row.source),
            str(row.entities),
            str(row.chunks),
            "" if last is None else safe(f"{last.at} ({last.mode})"),
            "" if last is None else str(last.added),
            "" if last is None else str(last.updated),
            "" if last is None else str(last.deleted),
            safe(row.loader or ""),
            safe(", ".join(row.locations)),
        )
    out.print(table)
    out.print(f"[dim]content root {answer.content_root}[/]")
