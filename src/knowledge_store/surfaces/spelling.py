"""Each surface spells a request's fields its own way; the store's errors are respelled to match.

The store names a field by its dotted, surface-neutral path (``k``,
``filters.created_from``) in ``details.field`` and in its sentence. A surface
maps those names to what its caller typed — REST and MCP: the JSON field path
itself; GraphQL: the argument (``filters.createdFrom``); the CLI: the flag or
the placeholder (``--created-from``, ``TEXT``) — and :func:`respell` rewrites
the error so that it names them that way. The rules of the error (its code,
its bounds, its sentence) never change; only the names do.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from knowledge_store.errors import KnowledgeStoreError

__all__ = ["camel", "graphql_path", "respell"]


def camel(name: str) -> str:
    """``created_from`` → ``createdFrom`` (GraphQL's spelling of a field)."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def graphql_path(path: str) -> str:
    """``filters.created_from`` → ``filters.createdFrom``."""
    return ".".join(camel(part) for part in path.split("."))


def _pattern(names: list[str]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    # a whole name: not part of a longer identifier or path (``filters`` in ``filters.type``)
    return re.compile(rf"(?<![\w.-])(?:{alternatives})(?![\w-])(?!\.\w)")


def respell(exc: KnowledgeStoreError, spelling: Mapping[str, str]) -> KnowledgeStoreError:
    """``exc`` with the field names of ``spelling`` (path → surface name) in the surface's words.

    The field the error is about (``details.field``) is respelled wherever its
    path appears in the message; other paths only where they can't be an
    ordinary word (they hold ``_`` or ``.``: ``filters.created_to``,
    ``skip_invalid``).
    """
    field = exc.details.get("field")
    names = [
        path
        for path, spelled in spelling.items()
        if spelled != path and (path == field or "_" in path or "." in path)
    ]
    if not names:
        return exc
    pattern = _pattern(names)
    out = type(exc).__new__(type(exc))  # no __init__: some errors build their message there
    out.__dict__.update(exc.__dict__)
    out.message = pattern.sub(lambda m: spelling[m.group(0)], exc.message)
    out.args = (out.message,)
    out.details = dict(exc.details)
    if isinstance(field, str) and field in spelling:
        out.details["field"] = spelling[field]
    return out
