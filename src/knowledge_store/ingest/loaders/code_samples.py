"""Fenced code blocks of a page → ``codeSample`` entities linked to it (DESIGN §1).

``page --implementedBy--> sample`` and ``sample --partOf--> page``, both with
the sample's ordinal as position. The page body keeps its code blocks. A
sample's title names the heading it sits under and its language: ``Installing ›
On Linux (bash)``; a second sample under the same heading and language is
``(bash, sample 2)``.
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections import Counter
from typing import Any

from knowledge_store.engines.sql.sources import DERIVED_MARK
from knowledge_store.errors import InvalidRecord, Rejection
from knowledge_store.ingest.chunking import heading_paths, scan_blocks
from knowledge_store.ingest.records import record_to_entity
from knowledge_store.model import ACL_FROM, Edge, Entity

__all__ = ["CODE_SAMPLE_TYPE", "code_sample_records", "sample_title", "with_code_samples"]

CODE_SAMPLE_TYPE = "codeSample"


def _fence_text(body: str, start: int, end: int) -> str:
    """The fence from the start of its first line, dedented (a fence inside a list item)."""
    line_start = body.rfind("\n", 0, start) + 1
    return textwrap.dedent(body[line_start:end])


def sample_title(page_title: str, heading: str | None, language: str | None, nth: int) -> str:
    """``Page › Heading (language)``; ``nth`` > 1 for a repeat of the same heading and language."""
    where = heading if heading and heading != page_title else None
    shown = [language] if language else []
    if nth > 1:
        shown.append(f"sample {nth}")
    label = f" ({', '.join(shown)})" if shown else ""
    if where is None:
        return f"{page_title} › {language or 'code'} sample" + (f" {nth}" if nth > 1 else "")
    return f"{page_title} › {where}{label}"


def code_sample_records(page: Entity) -> list[dict[str, Any]]:
    """One canonical record per non-empty fenced code block of ``page.body``, in order."""
    records: list[dict[str, Any]] = []
    seen: Counter[tuple[str | None, str | None]] = Counter()
    previous = None
    for block, path in heading_paths(scan_blocks(page.body)):
        if block.kind == "fence":
            fence = _fence_text(page.body, block.start, block.end)
            if any(line.strip() for line in fence.split("\n")[1:-1]):
                ordinal = len(records) + 1
                lead = ""
                if previous is not None and previous.kind == "paragraph":
                    lead = page.body[previous.start : previous.end] + "\n\n"
                language = block.text.split()[0] if block.text.split() else None
                heading = path[-1] if path else None
                seen[heading, language] += 1
                records.append(
                    {
                        "uid": f"{page.uid}{DERIVED_MARK}{ordinal}",
                        "type": CODE_SAMPLE_TYPE,
                        "title": sample_title(
                            page.title, heading, language, seen[heading, language]
                        ),
                        "body": lead + fence,
                        "source": page.source,
                        "status": page.status,
                        "language": language,
                        "created_at": page.created_at,
                        "updated_at": page.updated_at,
                        "href": page.href,
                        "attributes": {
                            "language": language,
                            "ordinal": ordinal,
                            "heading": heading,
                            ACL_FROM: page.uid,  # shares the page's ACL, grants included
                        },
                        "edges": [{"label": "partOf", "to": page.uid, "position": ordinal}],
                        "acl": list(page.acl),
                    }
                )
        previous = block
    return records


def with_code_samples(
    page: Entity, *, file: str, line: int | None
) -> tuple[Entity, list[Entity], list[Rejection]]:
    """``page`` with its ``implementedBy`` edges added, its samples, and any sample rejected."""
    samples: list[Entity] = []
    rejections: list[Rejection] = []
    for record in code_sample_records(page):
        try:
            samples.append(
                record_to_entity(record, file=file, line=line, default_acl=None, source=None)
            )
        except InvalidRecord as exc:
            rejections.append(exc.rejection)
    if not samples:
        return page, samples, rejections
    present = {(edge.label, edge.dst) for edge in page.edges}
    links = tuple(
        Edge(page.uid, "implementedBy", sample.uid, sample.attributes["ordinal"])
        for sample in samples
        if ("implementedBy", sample.uid) not in present
    )
    return dataclasses.replace(page, edges=page.edges + links), samples, rejections
