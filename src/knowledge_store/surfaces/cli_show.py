"""Readable CLI output of every command of the table (rich tables and lines), and of ``eval --compare``.

:data:`SHOW` maps an operation's name to how its answer reads on a terminal
(``--json`` prints the answer's JSON instead). Every value that came from data
goes through :func:`~.terminal.safe`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from knowledge_store.model import AggregateAnswer, ChunkHits, DeleteReport, SearchAnswer, SqlHits
from knowledge_store.surfaces.cli_audit import SHOW_AUDIT
from knowledge_store.surfaces.cli_graph import show_graph, show_query
from knowledge_store.surfaces.cli_sources import show_sources, uids_line
from knowledge_store.surfaces.shapes import NOTHING_MATCHES
from knowledge_store.surfaces.terminal import safe, strip_controls

__all__ = [
    "SHOW",
    "show_aggregate",
    "show_comparison",
    "show_evaluation",
    "show_search_explain",
    "show_sql",
]

#: How an answer reads: ``(console, answer, request)``.
Show = Callable[[Console, Any, Any], None]


def _snippet(text: str, width: int = 160) -> str:
    """One line of at most ``width`` characters, safe for rich."""
    flat = " ".join(strip_controls(text).split())
    return escape(flat if len(flat) <= width else flat[: width - 1] + "…")


def _vector_line(out: Console, answer: Any) -> None:
    if answer.vector is not None:
        v = answer.vector
        out.print(f"[dim]vector: {v.strategy}, scanned {v.scanned}, exhaustive {v.exhaustive}[/]")


def show_chunk_hits(out: Console, answer: ChunkHits, request: Any) -> None:
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
    _vector_line(out, answer)
    if request.explain and answer.explain:
        out.print_json(data=answer.explain)
    out.print(f"[dim]content root {answer.content_root[:16]} · {len(answer.hits)} hits[/]")


def show_search(out: Console, answer: SearchAnswer, request: Any) -> None:
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
    if not answer.results:  # as the search page says it: an empty answer is not silence
        out.print(NOTHING_MATCHES)
    _vector_line(out, answer)
    if request.explain and answer.explain:
        show_search_explain(out, answer)
    out.print(
        f"[dim]mode {answer.mode} · content root {answer.content_root[:16]}"
        f" · {len(answer.results)} results[/]"
    )


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


def show_sql(out: Console, answer: SqlHits, request: Any = None) -> None:
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


def show_aggregate(out: Console, answer: AggregateAnswer, request: Any = None) -> None:
    table = Table(box=None, pad_edge=False)
    table.add_column(answer.dimension or "total")
    table.add_column(answer.metric, justify="right")
    for key, value in answer.pairs():
        if key is None:  # no date (a trend), or the one total row
            shown = "(null)" if answer.dimension else ""
        else:  # "": the entities without a status, source or language (filter: --status '')
            shown = safe(key) if key != "" else "(none)"
        table.add_row(shown, str(value))
    out.print(table)
    out.print(f"[dim]content root {answer.content_root[:16]} · {len(answer.rows)} rows[/]")


def show_stats(out: Console, answer: Any, request: Any) -> None:
    d = answer.to_dict()
    common = ("content_root", "entities", "chunks", "segments", "model", "dimension", "is_empty")
    # then the engine's own keys: how far the derived indexes are (embedded), the server …
    width = max(len(key) for key in d)
    for key in (*common, "edges", *(k for k in d if k not in common and k != "edges")):
        value = d[key]
        shown = (
            ", ".join(f"{k}={v}" for k, v in value.items()) if isinstance(value, dict) else value
        )
        out.print(f"{key:>{width}}  {safe(shown)}")


def show_check(out: Console, answer: Any, request: Any) -> None:
    checked = ", ".join(f"{n:,} {what.replace('_', ' ')}" for what, n in answer.checked.items())
    out.print(safe(f"checked {checked} · root {answer.content_root[:16]}"))
    for finding in answer.damage:
        state = " [green](repaired)[/]" if finding.repaired else ""
        out.print(
            f"[red]damaged[/] {finding.kind}: {finding.count}{state} — {safe(finding.message)}"
        )
        if finding.uids:
            more = len(finding.uids) - 10
            shown = ", ".join(finding.uids[:10]) + (f" … and {more} more" if more > 0 else "")
            out.print(f"  [dim]uids: {safe(shown)}[/]")
        for line in finding.details:
            out.print(f"  {safe(line)}")
        if not finding.repaired:
            out.print(f"  repair: {safe(finding.repair)}")
    for note in answer.notes:
        out.print(f"[yellow]note[/] {safe(note)}")
    if answer.ok:
        out.print("[green]ok[/]: no damage found")


def _acl_line(out: Console, answer: Any, request: Any) -> None:
    out.print(safe(f"{answer.uid}: {', '.join(answer.acl) or '(nobody)'}"))


def _acl_shown(out: Console, answer: Any, request: Any) -> None:
    parent = answer.inherited_from
    origin = "its own" if parent is None else f"inherited from {parent}"
    out.print(safe(f"{answer.uid}: {', '.join(answer.acl) or '(nobody)'}  ({origin})"))


def _explanation(out: Console, e: Any, request: Any) -> None:
    verdict = "[green]can read[/]" if e.allowed else "[red]cannot read[/]"
    out.print(f"{safe(e.principal)} {verdict} {safe(e.uid)}: {safe(e.reason)}")


def _principal(out: Console, p: Any, request: Any) -> None:
    out.print(safe(p.principal))
    out.print(safe(f"  direct groups:    {', '.join(p.direct_groups) or '-'}"))
    out.print(safe(f"  inherited groups: {', '.join(p.inherited_groups) or '-'}"))
    if p.members:
        out.print(safe(f"  members:          {', '.join(p.members)}"))


def show_deleted(out: Console, answer: DeleteReport, request: Any) -> None:
    out.print(safe(f"deleted {answer.deleted} · root {answer.content_root}"))
    if answer.deleted_uids:
        out.print(f"[dim]{uids_line(answer.deleted, answer.deleted_uids)}[/]")


def show_facets(out: Console, answer: Any, request: Any) -> None:
    """``facets list|add|remove``: each declared facet, its filters and dimensions, its counts."""
    if not answer.facets:
        out.print("no facet is declared (ks facets add NAME keyword|date|number)")
    for f in answer.facets:
        out.print(
            safe(
                f"{f.name} ({f.kind}{'' if f.attribute == f.name else ', attributes.' + f.attribute}):"
                f" {f.entities} entities, {f.values} values · filters"
                f" {', '.join(f.filters)} · by {', '.join(f.dimensions)}"
            )
        )


def _line(text: Callable[[Any, Any], str]) -> Show:
    return lambda out, answer, request: out.print(safe(text(answer, request)))


SHOW: Mapping[str, Show] = {
    "search": show_search,
    "lexical": show_chunk_hits,
    "fuzzy": show_chunk_hits,
    "vector": show_chunk_hits,
    "graph": lambda out, answer, request: show_graph(out, answer),
    "sql": show_sql,
    "aggregate": show_aggregate,
    "query_graph": lambda out, answer, request: show_query(out, answer),
    "stats": show_stats,
    "check": show_check,
    "delete": show_deleted,
    "sources": lambda out, answer, request: show_sources(out, answer),
    "acl_grant": _acl_line,
    "acl_revoke": _acl_line,
    "acl_show": _acl_shown,
    "acl_explain": _explanation,
    "principals_add_member": _line(lambda r, q: f"{q.member} is now in {q.group}"),
    "principals_remove_member": _line(lambda r, q: f"{q.member} is no longer in {q.group}"),
    "principals_show": _principal,
    "principals_load": _line(
        lambda r, q: f"loaded {r.memberships} memberships of {r.groups} groups"
    ),
    **SHOW_AUDIT,
    "facets_list": show_facets,
    "facets_add": show_facets,
    "facets_remove": show_facets,
}


_MEASURE_LABELS = {"ndcg@10": "nDCG@10", "recall@100": "Recall@100", "mrr@10": "MRR@10"}


def _delta_cell(row: dict[str, float]) -> str:
    return f"{row['delta']:+.4f} [{row['low']:+.4f}, {row['high']:+.4f}]"


def show_evaluation(out: Console, result: dict[str, Any]) -> None:
    """``ks eval``: each list's nDCG@10, Recall@100 and MRR@10."""
    table = Table(title=f"{result['queries']} queries")
    for col in ("list", "nDCG@10", "Recall@100", "MRR@10"):
        table.add_column(col)
    for name in ("lexical", "vector", "fused"):
        m = result[name]
        table.add_row(name, f"{m['ndcg@10']:.4f}", f"{m['recall@100']:.4f}", f"{m['mrr@10']:.4f}")
    out.print(table)


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
