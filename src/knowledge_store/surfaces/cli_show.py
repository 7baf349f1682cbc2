"""Readable CLI output for ``search --explain``, ``sql``, ``aggregate`` and ``eval --compare``.

Every value that came from data goes through :func:`~.terminal.safe`.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from knowledge_store.model import AggregateAnswer, SearchAnswer, SqlHits
from knowledge_store.surfaces.terminal import safe

__all__ = ["show_aggregate", "show_comparison", "show_search_explain", "show_sql"]


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


_MEASURE_LABELS = {"ndcg@10": "nDCG@10", "recall@100": "Recall@100", "mrr@10": "MRR@10"}


def _delta_cell(row: dict[str, float]) -> str:
    return f"{row['delta']:+.4f} [{row['low']:+.4f}, {row['high']:+.4f}]"


def show_comparison(out: Console, result: dict[str, Any]) -> None:
    """``ks eval --compare A B``: each measure, each query type, the queries that moved most."""
    a, b = safe(result["a"]), safe(result["b"])
    table = Table(title=f"{result['queries']} queries · A = {a} · B = {b}")
    for col in ("measure", "A", "B", "B − A [95% paired bootstrap]"):
        table.add_column(col)
    for name, row in result["measures"].items():
        table.add_row(
            _MEASURE_LABELS.get(name, name), f"{row['a']:.4f}", f"{row['b']:.4f}", _delta_cell(row)
        )
    out.print(table)
    if result["by_type"]:
        types = Table(title=f"nDCG@10 per query type ({safe(result['group_by'])})")
        for col in ("type", "queries", "A", "B", "B − A [95%]"):
            types.add_column(col)
        for group, row in result["by_type"].items():
            ndcg = row["ndcg@10"]
            types.add_row(
                safe(group),
                str(row["queries"]),
                f"{ndcg['a']:.4f}",
                f"{ndcg['b']:.4f}",
                _delta_cell(ndcg),
            )
        out.print(types)
    if result["moved"]:
        moved = Table(title="moved most (nDCG@10)", box=None, pad_edge=False)
        for col in ("B − A", "A", "B", "qid", "query"):
            moved.add_column(col, overflow="fold")
        for row in result["moved"]:
            moved.add_row(
                f"{row['delta']:+.3f}",
                f"{row['a']:.3f}",
                f"{row['b']:.3f}",
                safe(row["qid"]),
                safe(row["text"]),
            )
        out.print(moved)
    else:
        out.print("[dim]no query moved[/]")
