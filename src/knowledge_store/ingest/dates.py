"""Dates from where the content lives: git history, file times, HTTP headers, the page itself.

A folder inside a git work tree dates each committed, unmodified file by its
history: ``created_at`` from its first commit, ``updated_at`` from its last
(committer dates; one ``git log`` for the whole folder, plus one ``git
status``). A file git does not know, or that differs from its last commit, is
dated by its modification time — as is every file outside a git work tree.
Renames are not followed: a renamed file's history starts at the rename.

A web page is dated by what it declares (``article:modified_time``,
JSON-LD ``dateModified``, ``<time itemprop=dateModified>`` …), else by the
HTTP ``Last-Modified`` header (see :func:`declared_dates`, :func:`http_date`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

from selectolax.lexbor import LexborHTMLParser

from knowledge_store.model import normalize_timestamp

__all__ = ["Dates", "declared_dates", "file_dates", "folder_dates", "http_date", "timestamp"]

_GIT_TIMEOUT_S = 120
_MODIFIED_META = ("article:modified_time", "og:updated_time", "last-modified", "dcterms.modified")
_PUBLISHED_META = ("article:published_time", "dcterms.created", "dcterms.date")


@dataclass(frozen=True)
class Dates:
    """``created_at`` / ``updated_at`` as ``YYYY-MM-DDTHH:MM:SSZ``, each possibly unknown."""

    created_at: str | None = None
    updated_at: str | None = None

    def fill(self, record: dict[str, Any]) -> None:
        """Set the record's dates that it does not give itself."""
        if record.get("created_at") is None and self.created_at is not None:
            record["created_at"] = self.created_at
        if record.get("updated_at") is None and self.updated_at is not None:
            record["updated_at"] = self.updated_at

    def or_else(self, other: Dates) -> Dates:
        return Dates(self.created_at or other.created_at, self.updated_at or other.updated_at)


def timestamp(value: object) -> str | None:
    """``value`` normalised to ``YYYY-MM-DDTHH:MM:SSZ``, or None when it is not an ISO 8601 date."""
    if not isinstance(value, str):
        return None
    try:
        return normalize_timestamp(value)
    except (ValueError, OverflowError):
        return None


def file_dates(path: Path) -> Dates:
    """Both dates from the file's modification time (creation time is not kept by most file systems)."""
    moment = datetime.fromtimestamp(path.stat().st_mtime, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return Dates(moment, moment)


def _git(folder: Path, *args: str) -> bytes | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(folder), *args],
            capture_output=True,
            timeout=_GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _history(folder: Path) -> dict[str, Dates]:
    """Path under ``folder`` → first and last commit dates, from one ``git log``."""
    out = _git(
        folder, "log", "-z", "--relative", "--name-only", "--pretty=tformat:%x01%cI", "--", "."
    )
    dates: dict[str, Dates] = {}
    if not out:
        return dates
    for commit in os.fsdecode(out).split("\x01")[1:]:
        when, _, names = commit.partition("\x00")
        moment = timestamp(when)
        for name in names.lstrip("\n").split("\x00"):
            if name and moment is not None:
                seen = dates.get(name)
                if seen is None or seen.created_at is None or seen.updated_at is None:
                    dates[name] = Dates(moment, moment)
                else:  # min and max: commit dates need not follow the log's order
                    dates[name] = Dates(min(seen.created_at, moment), max(seen.updated_at, moment))
    return dates


def _dirty(folder: Path, prefix: str) -> set[str]:
    """Paths under ``folder`` that differ from their last commit, or that git does not track."""
    out = _git(folder, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--", ".")
    dirty: set[str] = set()
    if out is None:
        return dirty
    fields = iter(os.fsdecode(out).split("\x00"))
    for entry in fields:
        if len(entry) < 4:
            continue
        code, name = entry[:2], entry[3:]
        if "R" in code or "C" in code:
            next(fields, None)  # the path it was renamed or copied from
        if name.startswith(prefix):
            dirty.add(name[len(prefix) :])
    return dirty


def folder_dates(root: Path, files: Iterable[Path]) -> dict[Path, Dates]:
    """The dates of each of ``files`` (under ``root``): git history where it holds, else mtime."""
    files = list(files)
    history: dict[str, Dates] = {}
    dirty: set[str] = set()
    prefix = _git(root, "rev-parse", "--show-prefix") if shutil.which("git") else None
    if prefix is not None:
        history = _history(root)
        dirty = _dirty(root, os.fsdecode(prefix).strip())
    dates: dict[Path, Dates] = {}
    for file in files:
        try:
            name = file.relative_to(root).as_posix()
        except ValueError:
            name = None
        known = history.get(name) if name is not None and name not in dirty else None
        dates[file] = known if known is not None else file_dates(file)
    return dates


def http_date(value: str | None) -> str | None:
    """An HTTP date (``Last-Modified``) as ``YYYY-MM-DDTHH:MM:SSZ``, or None if it can't be read."""
    if not value:
        return None
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _json_ld(tree: LexborHTMLParser) -> Iterator[dict[str, Any]]:
    for script in tree.css('script[type="application/ld+json"]'):
        try:
            data = json.loads(script.text(deep=True))
        except ValueError:
            continue
        stack = [data]
        while stack:
            item = stack.pop()
            if isinstance(item, list):
                stack.extend(reversed(item))
            elif isinstance(item, dict):
                yield item
                stack.extend(reversed(item.get("@graph") or []))


def _meta(tree: LexborHTMLParser, names: tuple[str, ...]) -> str | None:
    for node in tree.css("meta[content]"):
        key = (node.attributes.get("property") or node.attributes.get("name") or "").lower()
        if key in names:
            value = timestamp(node.attributes.get("content"))
            if value is not None:
                return value
    return None


def _itemprop(tree: LexborHTMLParser, name: str) -> str | None:
    for node in tree.css(f'[itemprop="{name}"]'):
        value = timestamp(node.attributes.get("datetime") or node.attributes.get("content"))
        if value is not None:
            return value
    return None


def _ld(items: list[dict[str, Any]], key: str) -> str | None:
    for item in items:
        value = timestamp(item.get(key))
        if value is not None:
            return value
    return None


def declared_dates(tree: LexborHTMLParser) -> Dates:
    """The dates an HTML page declares about itself.

    ``updated_at``: ``<meta property=article:modified_time>`` (or ``og:updated_time``,
    ``last-modified``, ``dcterms.modified``), JSON-LD ``dateModified``,
    ``[itemprop=dateModified]``; else, when the page holds exactly one
    ``<time datetime>``, that one. ``created_at``: ``article:published_time``
    (or ``dcterms.created``), JSON-LD ``datePublished``, ``[itemprop=datePublished]``.
    Values that are not ISO 8601 dates are ignored.
    """
    items = list(_json_ld(tree))
    updated = (
        _meta(tree, _MODIFIED_META) or _ld(items, "dateModified") or _itemprop(tree, "dateModified")
    )
    created = (
        _meta(tree, _PUBLISHED_META)
        or _ld(items, "datePublished")
        or _itemprop(tree, "datePublished")
    )
    if updated is None:
        times = tree.css("time[datetime]")
        if len(times) == 1:
            updated = timestamp(times[0].attributes.get("datetime"))
    return Dates(created, updated)
