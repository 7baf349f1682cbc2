"""Readable CLI output for ``search --explain``, ``sql`` and ``aggregate`` (rich tables).

Every value that came from data goes through :func:`~.terminal.safe`.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from knowledge_store.model import AggregateAnswer, SearchAnswer, SqlHits
from knowledge_store.surfaces.terminal import safe

__all__ = ["show_aggregate", "show_search_explain", "show_sql"]


def show_search_explain(out: Console, answer: SearchAnswer) -> None:
    """The lists side by side (rank by rank), then the timings per stage."""
    explain: dict[str, Any] = answer.explain or {}
    lists: dict[str, list[str] | None] = explain.get("lists", {})
    names = [name for name in lists if lists[name] is not None]
    weights = explain.get("weights", {})
    fused = explain.get("fused", [])
    depth = max([len(fused), *(len(v or []) for v in lists.values())], default=0)
    table = Table(title="lists side by side", box=None, pad_edge=False)
    table.add_column("#", justify="right")
    for name in names:
        table.add_column(f"{name} (w={weights.get(name, 1.0):g})", overflow="fold")
    table.add_column("fused", overflow="fold", style="bold")
    for i in range(depth):
        row = [str(i + 1)]
        for name in names:
            items = lists[name] or []
            row.append(safe(items[i]) if i < len(items) else "")
        row.append(safe(fused[i]) if i < len(fused) else "")
        table.add_row(*row)
    out.print(table)
    adaptive = explain.get("adaptive")
    if adaptive:
        out.print(f"[dim]adaptive weights for this query: {'; '.join(adaptive.get('why', []))}[/]")
    skipped = [name for name in lists if lists[name] is None]
    if skipped:
        out.print(f"[dim]not run for this request: {', '.join(skipped)}[/]")
    seeds = explain.get("seeds", [])
    if seeds:
        out.print(f"[dim]expand stage seeded with {len(seeds)}: {safe(', '.join(seeds))}[/]")
    ms = explain.get("ms", {})
    if ms:
        out.print(
            "[dim]ms: " + " · ".join(f"{stage} {value:.1f}" for stage, value in ms.items()) + "[/]"
        )


def show_sql(out: Console, answer: SqlHits) -> None:
    table = Table(box=None, pad_edge=False)
    for col in ("#", "uid", "title", "type", "source", "status", "created_at", "updated_at"):
        table.add_column(col, overflow="fold")
    for h in answer.hits:
        table.add_row(
            str(h.rank),
            *(
                safe(value or "")
                for value in (
                    h.uid,
                    h.title,
                    h.type,
                    h.source,
                    h.status,
                    h.created_at,
                    h.updated_at,
                )
            ),
        )
    out.print(table)
    out.print(f"[dim]content root {answer.content_root[:16]} · {len(answer.hits)} hits[/]")


def show_aggregate(out: Console, answer: AggregateAnswer) -> None:
    table = Table(box=None, pad_edge=False)
    table.add_column(answer.dimension or "total")
    table.add_column(answer.metric, justify="right")
    for key, value in answer.rows:
        shown = "(null)" if key is None and answer.dimension else safe(key or "")
        table.add_row(shown, str(value))
    out.print(table)
    out.print(f"[dim]content root {answer.content_root[:16]} · {len(answer.rows)} rows[/]")
