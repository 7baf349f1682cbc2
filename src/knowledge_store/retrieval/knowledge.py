"""The docs searches (DESIGN §6): ``docs_search``, ``code_sample_search``, ``search_knowledge``.

Fused search with a fixed type filter, shaped for its reader: every type but
code samples; code samples with their code, language and page; cited
passages and one context block for a chat model. Each ranks exactly like
``search`` — it is ``search`` — and reads the entities it returns on the
same reader: one snapshot for the whole answer.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from knowledge_store.errors import InvalidRequest
from knowledge_store.model import Answer, SearchAnswer
from knowledge_store.requests import DocsSearchRequest, KnowledgeRequest

if TYPE_CHECKING:
    from knowledge_store.retrieval.reader import StoreReader

__all__ = [
    "CODE_SAMPLE_TYPE",
    "CodeSample",
    "CodeSamples",
    "Knowledge",
    "KnowledgeSource",
    "PageRef",
    "Passage",
    "code_of",
    "code_sample_search",
    "docs_search",
    "search_knowledge",
]

CODE_SAMPLE_TYPE = "codeSample"
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([^\n`]*)\n(.*?)^[ \t]*\1[ \t]*$", re.M | re.S)


class PageRef(Answer):
    uid: str
    title: str
    href: str | None


class CodeSample(Answer):
    """A code sample: its code and language, the heading it sits under, its page."""

    uid: str
    title: str
    href: str | None
    score: float
    language: str | None
    code: str
    heading: str | None
    page: PageRef | None
    superseded_by: str | None
    ranks: dict[str, int | None]


class CodeSamples(Answer):
    content_root: str
    results: list[CodeSample]


class Passage(Answer):
    chunk_id: int
    heading: tuple[str, ...]
    text: str
    start: int
    end: int
    citation: str


class KnowledgeSource(Answer):
    n: int
    uid: str
    title: str
    type: str
    href: str | None
    score: float
    superseded_by: str | None
    passages: list[Passage]


class Knowledge(Answer):
    """``search_knowledge``: numbered sources with their passages, and one context block."""

    content_root: str
    results: list[KnowledgeSource]
    context: str


def _with_types(request: DocsSearchRequest, **extra: list[str]) -> dict[str, Any]:
    out = request.filters.as_mapping()
    for name, values in extra.items():
        out[name] = list(dict.fromkeys([*out.get(name, []), *values]))
    return out


def docs_search(r: StoreReader, request: DocsSearchRequest) -> SearchAnswer:
    """Fused search over every type but ``codeSample``."""
    filters = _with_types(request, not_type=[CODE_SAMPLE_TYPE])
    return r.search(request.query, k=request.k, filters=filters)


def code_of(body: str, attributes: dict[str, Any]) -> tuple[str, str | None]:
    """The code of a codeSample body (its first fence, else the body) and its language."""
    match = _FENCE.search(body)
    code = match.group(3).rstrip("\n") if match else body
    info = match.group(2).strip().split() if match else []
    language = attributes.get("language") or (info[0] if info else None)
    return code, str(language) if language else None


def code_sample_search(r: StoreReader, request: DocsSearchRequest) -> CodeSamples:
    """Fused search over ``codeSample`` entities, each with its code, language and page."""
    types = request.filters.value.values("type")
    if types and CODE_SAMPLE_TYPE not in types:
        raise InvalidRequest(
            "code_sample_search returns only codeSample entities; drop the type filter"
            " (or use search / docs_search for other types)",
            field="filters.type",
        )
    filters = {**request.filters.as_mapping(), "type": [CODE_SAMPLE_TYPE]}
    # Each sample's code is read from its entity below: no evidence chunks to hydrate.
    answer = r.search(request.query, k=request.k, filters=filters, evidence=0)
    samples: list[CodeSample] = []
    for result in answer.results:
        content = r.content(result.uid)
        entity = content.entity
        code, language = code_of(entity.body, entity.attributes)
        page = next(
            (
                PageRef(uid=e.uid, title=e.title, href=e.href)
                for e in content.edges.out
                if e.label == "partOf" and e.type != CODE_SAMPLE_TYPE
            ),
            None,
        )
        heading = entity.attributes.get("heading")
        samples.append(
            CodeSample(
                uid=result.uid,
                title=result.title,
                href=result.href,
                score=result.score,
                language=language,
                code=code,
                heading=None if heading is None else str(heading),
                page=page,
                superseded_by=result.superseded_by,
                ranks=dict(result.ranks),
            )
        )
    return CodeSamples(content_root=answer.content_root, results=samples)


def citation(title: str, heading: tuple[str, ...] | list[str], href: str | None) -> str:
    """``Title › Section › Subsection (href)``."""
    path = " › ".join([title, *[h for h in heading if h and h != title]])
    return f"{path} ({href})" if href else path


def search_knowledge(r: StoreReader, request: KnowledgeRequest) -> Knowledge:
    """Fused search as numbered sources with cited passages, and the context block."""
    answer = r.search(request.query, k=request.k, filters=request.filters.as_mapping())
    results: list[KnowledgeSource] = []
    blocks: list[str] = []
    for n, result in enumerate(answer.results, start=1):
        passages = []
        for ev in result.evidence:
            cited = citation(result.title, ev.heading, result.href)
            passages.append(
                Passage(
                    chunk_id=ev.chunk_id,
                    heading=ev.heading,
                    text=ev.text,
                    start=ev.start,
                    end=ev.end,
                    citation=cited,
                )
            )
            blocks.append(f"[{n}] {cited}\n{ev.text}")
        if not result.evidence:
            blocks.append(f"[{n}] {citation(result.title, [], result.href)}")
        results.append(
            KnowledgeSource(
                n=n,
                uid=result.uid,
                title=result.title,
                type=result.type,
                href=result.href,
                score=result.score,
                superseded_by=result.superseded_by,
                passages=passages,
            )
        )
    return Knowledge(content_root=answer.content_root, results=results, context="\n\n".join(blocks))
