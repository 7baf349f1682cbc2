"""The docs searches (DESIGN §6): ``docs_search``, ``code_sample_search``, ``search_knowledge``.

Fused search with a fixed type filter, shaped for its reader: every type but
code samples; code samples with their code, language and page; cited
passages and one context block for a chat model. Each ranks exactly like
``search`` — it is ``search`` — and reads the entities it returns on the
same reader: one snapshot for the whole answer.

``search_knowledge`` never spends two slots of a model's context on one passage: a
code sample's text is also its page's, and both may rank. A passage whose text (white
space aside) is the same as, inside, or around a better-ranked one already given is
folded into that one — listed in its source's ``folded``, named in its context block —
and a result left with no passage of its own is folded whole (it gets no number).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import Field

from knowledge_store.errors import InvalidRequest
from knowledge_store.model import Answer, Result, SearchAnswer
from knowledge_store.requests import DocsSearchRequest, KnowledgeRequest

if TYPE_CHECKING:
    from knowledge_store.retrieval.reader import StoreReader

__all__ = [
    "CODE_SAMPLE_TYPE",
    "CodeSample",
    "CodeSamples",
    "FoldedPassage",
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


class FoldedPassage(Answer):
    """A lower-ranked result's passage that one of this source's passages already holds (the
    same text, or text inside or around it): not repeated. ``into``: that passage's chunk."""

    uid: str
    title: str
    type: str
    chunk_id: int
    into: int


class KnowledgeSource(Answer):
    n: int
    uid: str
    title: str
    type: str
    href: str | None
    score: float
    superseded_by: str | None
    passages: list[Passage]
    folded: list[FoldedPassage] = Field(default_factory=list)


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


def _words(text: str) -> str:
    """``text`` with its white space collapsed: what two passages are compared by."""
    return " ".join(text.split())


@dataclass
class _Source:
    """A result as it is being shaped: its passages, and those folded into them."""

    result: Result
    passages: list[Passage] = field(default_factory=list)
    folded: list[FoldedPassage] = field(default_factory=list)


def _repeated(given: list[tuple[str, _Source, int]], words: str) -> tuple[_Source, int] | None:
    """The better-ranked passage (its source, its chunk id) that a passage of ``words``
    repeats: the same words, or inside or around them."""
    for other, source, chunk_id in given:
        if words in other or other in words:
            return source, chunk_id
    return None


def search_knowledge(r: StoreReader, request: KnowledgeRequest) -> Knowledge:
    """Fused search as numbered sources with cited passages, and the context block; a passage
    that repeats a better-ranked one is folded into it (see the module docstring)."""
    answer = r.search(request.query, k=request.k, filters=request.filters.as_mapping())
    sources: list[_Source] = []
    given: list[tuple[str, _Source, int]] = []  # (words, source, chunk id), best first
    for result in answer.results:
        source = _Source(result)
        for ev in result.evidence:
            words = _words(ev.text)
            held = _repeated(given, words)
            if held is not None:
                holder, chunk_id = held
                holder.folded.append(
                    FoldedPassage(
                        uid=result.uid,
                        title=result.title,
                        type=result.type,
                        chunk_id=ev.chunk_id,
                        into=chunk_id,
                    )
                )
                continue
            cited = citation(result.title, ev.heading, result.href)
            source.passages.append(
                Passage(
                    chunk_id=ev.chunk_id,
                    heading=ev.heading,
                    text=ev.text,
                    start=ev.start,
                    end=ev.end,
                    citation=cited,
                )
            )
            given.append((words, source, ev.chunk_id))
        if source.passages or not result.evidence:
            sources.append(source)
    results = [
        KnowledgeSource(
            n=n,
            uid=s.result.uid,
            title=s.result.title,
            type=s.result.type,
            href=s.result.href,
            score=s.result.score,
            superseded_by=s.result.superseded_by,
            passages=s.passages,
            folded=s.folded,
        )
        for n, s in enumerate(sources, start=1)
    ]
    return Knowledge(content_root=answer.content_root, results=results, context=_context(results))


def _context(results: list[KnowledgeSource]) -> str:
    """Every passage as ``[n] citation`` + its text (and the uids of what was folded into
    it), one block each; a source with no passage is its ``[n] citation`` line."""
    blocks: list[str] = []
    for source in results:
        for passage in source.passages:
            also = dict.fromkeys(f.uid for f in source.folded if f.into == passage.chunk_id)
            note = f"\n(the same passage: {', '.join(also)})" if also else ""
            blocks.append(f"[{source.n}] {passage.citation}\n{passage.text}{note}")
        if not source.passages:
            blocks.append(f"[{source.n}] {citation(source.title, [], source.href)}")
    return "\n\n".join(blocks)
