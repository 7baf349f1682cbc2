"""Helpers of the ``ks graph`` and ``ks query`` commands: parameters in, tables out."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from knowledge_store.errors import InvalidRequest
from knowledge_store.model import GraphHits, QueryAnswer
from knowledge_store.surfaces.terminal import safe

__all__ = ["parse_params", "show_graph", "show_query"]


def parse_params(items: Sequence[str]) -> dict[str, Any]:
    """``NAME=VALUE`` pairs; a VALUE that is valid JSON is taken as JSON, else as a string."""
    params: dict[str, Any] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        name = name.strip().lstrip("$")
        if not sep or not name:
            raise InvalidRequest(
                f"--param {item!r}: write NAME=VALUE (e.g. --param uid=page:intro)",
                field="param",
            )
        if name in params:
            raise InvalidRequest(f"--param {name} is given twice", field="param", parameter=name)
        try:
            params[name] = json.loads(raw)
        except ValueError:
            params[name] = raw
    return params


def _path(steps: Sequence[Any]) -> str:
    """``a -dependsOn-> b <-partOf- c``: each edge drawn the way it points."""
    parts: list[str] = []
    for step in steps:
        if step.label is None:
            parts.append(step.uid)
        elif step.direction == "in":
            parts.append(f" <-{step.label}- {step.uid}")
        else:
            parts.append(f" -{step.label}-> {step.uid}")
    return "".join(parts)


def show_graph(out: Console, answer: GraphHits) -> None:
    table = Table(box=None, pad_edge=False)
    for col in ("#", "hops", "paths", "uid", "title", "type", "path"):
        table.add_column(col, overflow="fold")
    for h in answer.hits:
        table.add_row(
            str(h.rank),
            str(h.hops),
            str(h.paths),
            safe(h.uid),
            safe(h.title),
            safe(h.type),
            safe(_path(h.path)),
        )
    out.print(table)
    capped = " · fan-out capped" if answer.capped else ""
    out.print(f"[dim]content root {answer.content_root[:16]} · {len(answer.hits)} hits{capped}[/]")


def _cell(value: Any) -> str:
    if isinstance(value, dict):
        if "title" in value:
            return f"{value['uid']} ({value['title']})"
        return f"{value.get('src')} -{value.get('label')}-> {value.get('dst')}"
    return "null" if value is None else str(value)


def show_query(out: Console, answer: QueryAnswer) -> None:
    table = Table(box=None, pad_edge=False)
    for col in answer.columns:
        table.add_column(safe(col), overflow="fold")
    for row in answer.rows:
        table.add_row(*(safe(_cell(v)) for v in row))
    out.print(table)
    more = (
        " · truncated: more rows matched (raise LIMIT ≤ 1000 or page with SKIP)"
        if answer.truncated
        else ""
    )
    out.print(f"[dim]content root {answer.content_root[:16]} · {len(answer.rows)} rows{more}[/]")
