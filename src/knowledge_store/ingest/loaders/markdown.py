"""Markdown files: YAML front matter → fields, the rest → body.

Front matter keys ``uid, type, title, status, source, created_at`` (or
``date``), ``updated_at, href, acl, edges`` become the record's fields, an
``attributes`` mapping is merged into attributes, anything else is an
attribute. Defaults: uid = path under the root without extension, title = the
first ``#`` heading else the file name, type ``page``.
"""

from __future__ import annotations

import re
from datetime import date, datetime
from pathlib import Path
from typing import Any

import frontmatter
import yaml
from frontmatter.default_handlers import YAMLHandler

from knowledge_store.errors import Rejection
from knowledge_store.ingest.chunking import scan_blocks
from knowledge_store.ingest.loaders.base import decode_utf8
from knowledge_store.ingest.loaders.pages import Page, default_uid

__all__ = ["DEFAULT_TYPE", "markdown_links", "read_markdown_page"]

DEFAULT_TYPE = "page"
_FIELDS = (
    "uid",
    "type",
    "title",
    "status",
    "source",
    "created_at",
    "updated_at",
    "href",
    "acl",
    "edges",
)
_INLINE_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)")
_REFERENCE_LINK = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?([^\s>]+)", re.MULTILINE)


class _UniqueKeys(yaml.SafeLoader):  # type: ignore[misc]  # yaml has no stubs here
    """YAML's safe loader, refusing a key given twice in one mapping (the last would win:
    a second ``acl:`` could make a private page public, as a duplicate JSON key did)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} appears twice", key_node.start_mark
                )
            seen.add(key)
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


class _FrontMatter(YAMLHandler):
    def load(self, fm: str, **kwargs: object) -> Any:
        return yaml.load(fm, Loader=_UniqueKeys)  # a SafeLoader


def _plain(value: Any) -> Any:
    """YAML values as JSON values: dates as ISO strings, keys as strings."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def markdown_links(body: str) -> list[str]:
    """Link targets written in ``body`` outside fenced code, in order."""
    fences = [(b.start, b.end) for b in scan_blocks(body) if b.kind == "fence"]
    links: list[str] = []
    for pattern in (_INLINE_LINK, _REFERENCE_LINK):
        for match in pattern.finditer(body):
            if not any(start <= match.start() < end for start, end in fences):
                links.append(match.group(1))
    return links


def _first_h1(body: str) -> str | None:
    for block in scan_blocks(body):
        if block.kind == "heading" and block.level == 1 and block.text:
            return block.text
    return None


def read_markdown_page(data: bytes, path: Path, root: Path, file: str) -> Page | Rejection:
    """One Markdown file (its bytes, read from ``path``) as a :class:`Page`, or a rejection."""
    uid = default_uid(path, root)
    text = decode_utf8(data, file=file)
    if isinstance(text, Rejection):
        return Rejection(text.file, None, uid, None, text.message)
    try:
        post = frontmatter.loads(text, handler=_FrontMatter())
    except yaml.YAMLError as exc:
        return Rejection(
            file,
            None,
            uid,
            "front matter",
            f"the front matter is not valid YAML: {' '.join(str(exc).split())}",
        )
    meta = _plain(dict(post.metadata))
    body = post.content
    if not body.strip():
        return Rejection(
            file,
            None,
            meta["uid"] if isinstance(meta.get("uid"), str) else uid,
            "body",
            "the file holds no text (after its front matter)",
        )
    record: dict[str, Any] = {key: meta.pop(key) for key in _FIELDS if key in meta}
    if "created_at" not in record and "date" in meta:
        record["created_at"] = meta.pop("date")
    extra = meta.pop("attributes", None)
    attributes = (
        dict(extra) if isinstance(extra, dict) else ({} if extra is None else {"attributes": extra})
    )
    attributes.update(meta)
    record.setdefault("uid", uid)
    record.setdefault("type", DEFAULT_TYPE)
    record.setdefault("title", _first_h1(body) or path.stem)
    record.setdefault("href", path.relative_to(root).as_posix())  # as an HTML page's
    record["body"] = body
    record["attributes"] = attributes
    return Page(file, path, root, record, markdown_links(body))
