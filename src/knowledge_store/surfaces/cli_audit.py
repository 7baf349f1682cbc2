"""The CLI's audit output: ``audit list``, ``show``, ``verify``, ``settings``, and ``audit export``.

Every value that came from data goes through :func:`~.terminal.safe`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from knowledge_store.model.audit import (
    AuditList,
    AuditRecord,
    AuditReplay,
    AuditSettings,
    AuditVerification,
    GcReport,
)
from knowledge_store.surfaces.terminal import json_text, safe

__all__ = ["SHOW_AUDIT", "write_lines"]

#: How many uids a listed record shows.
UIDS_SHOWN = 5


def _names(record: AuditRecord) -> str:
    if record.changed is not None:
        uids = record.changed.get("uids") or []
        more = len(uids) - UIDS_SHOWN + int(record.changed.get("more") or 0)
        shown = ", ".join(str(u) for u in uids[:UIDS_SHOWN])
        return f"changed {shown}" + (f" … +{more}" if more > 0 else "") if uids else "changed"
    shown = ", ".join(n.uid for n in record.returned[:UIDS_SHOWN])
    more = len(record.returned) - UIDS_SHOWN
    return shown + (f" … +{more}" if more > 0 else "")


def show_list(out: Console, answer: AuditList, request: Any) -> None:
    table = Table(box=None, pad_edge=False)
    for col in ("seq", "at (UTC)", "surface", "operation", "as", "by", "outcome", "root", "named"):
        table.add_column(col, overflow="fold")
    for r in answer.records:
        outcome = r.outcome if r.error is None else f"[red]{safe(r.error.get('code'))}[/]"
        table.add_row(
            str(r.seq),
            r.at[:19].replace("T", " "),
            safe(r.surface),
            safe(r.operation),
            safe(r.identity or ""),
            safe(r.subject or ""),
            outcome,
            (r.content_root or "")[:12],
            safe(_names(r)),
        )
    out.print(table)
    if answer.truncated:
        out.print(f"[dim]more records match: raise --k (showing {len(answer.records)})[/]")
    elif not answer.records:
        out.print("no record matches")


def show_record(out: Console, answer: AuditRecord, request: Any) -> None:
    out.print(safe(json_text(answer.to_dict(), indent=2)))


def show_verify(out: Console, answer: AuditVerification, request: Any) -> None:
    for problem in answer.problems:
        where = f" at {problem.seq}" if problem.seq is not None else ""
        out.print(f"[red]{problem.kind}[/]{where}: {safe(problem.message)}")
    head = f"{answer.head.seq}:{answer.head.digest}" if answer.head else "(empty)"
    base = f" from {answer.first.seq + 1} (earlier ones removed by gc)" if answer.first else ""
    line = f"{answer.records:,} records{base} · {answer.checkpoints} checkpoint(s) · head {head}"
    if answer.ok:
        out.print(f"[green]ok[/]: {line}")
        if answer.head:
            out.print(f"[dim]keep the head; later: ks audit verify --head {head}[/]")
    else:
        out.print(f"[red]tampered[/]: {line}")


def show_settings(out: Console, answer: AuditSettings, request: Any) -> None:
    on = {True: "on", False: "off"}
    out.print(
        f"audit {on[answer.enabled]} · query text {answer.query_text} · python API"
        f" {on[answer.python]} · retain {answer.retain_days}d · fsync {on[answer.fsync]}"
    )


def show_replay(out: Console, answer: AuditReplay, request: Any) -> None:
    head = f"record {answer.seq}: {answer.operation} as {answer.identity} at {answer.at}"
    out.print(safe(f"{head} · publish {answer.publish} · root {(answer.content_root or '')[:12]}"))
    if answer.principals_match is not None:
        state = "match" if answer.principals_match else "[red]do not match[/]"
        out.print(f"principals then (memberships at {safe(answer.memberships_at)}): {state}")
    for a in answer.access:
        if a.readable:
            out.print(f"  [green]readable[/] {safe(a.uid)} through {safe(a.through)}")
        else:
            why = "not in the root" if not a.present else "not readable then"
            out.print(f"  [red]{why}[/] {safe(a.uid)}")
    if answer.note:
        out.print(safe(answer.note))
    for label, compared in (("then", answer.then), ("now", answer.now)):
        if compared is None:
            continue
        same = " (the same answer, byte for byte)" if compared.same_answer else ""
        verdict = (
            "identical" + same if compared.identical else f"{len(compared.differences)} differences"
        )
        out.print(f"{label}: {verdict}")
        for d in compared.differences:
            mark = "" if d.explained else "[red]unexplained[/] "
            out.print(f"  {mark}{safe(d.uid)}: rank {d.before} → {d.after}")
            for cause in d.causes:
                out.print(f"    {safe(cause)}")
    out.print("[green]explained[/]" if answer.explained else "[red]not explained[/]")


def show_gc(out: Console, answer: GcReport, request: Any) -> None:
    verb = "would remove" if answer.dry_run else "removed"
    parts = ", ".join(f"{n:,} {kind}" for kind, n in answer.history.items())
    out.print(
        f"{verb} {answer.records:,} audit records and history rows ({parts}) older than"
        f" {answer.before} (retain {answer.retain_days}d); content can be rebuilt from publish"
        f" {answer.history_from}"
    )


SHOW_AUDIT: dict[str, Callable[[Console, Any, Any], None]] = {
    "audit_list": show_list,
    "audit_show": show_record,
    "audit_verify": show_verify,
    "audit_settings": show_settings,
    "audit_replay": show_replay,
    "gc": show_gc,
}


def write_lines(lines: Any) -> int:
    """Write ``lines`` on stdout, one a line; how many."""
    count = 0
    write = sys.stdout.write
    for line in lines:
        write(line + "\n")
        count += 1
    sys.stdout.flush()
    return count
