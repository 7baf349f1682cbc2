"""Stores and folders for the sync tests: a store of either engine that can be opened again
(another ``KnowledgeStore`` on the same location, as another process would), and a folder of
Markdown pages with code samples and links between them."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from knowledge_store.store import KnowledgeStore
from tests import postgres_support
from tests.conftest import HASH_SPEC

_names = itertools.count(1)


def location(kind: str, tmp_path: Path, pg_database: str) -> str:
    """A new store location of engine ``kind``."""
    if kind == "embedded":
        return str(tmp_path / f"store{next(_names)}")
    return postgres_support.store_url(pg_database, f"sync{next(_names)}")


def open_at(where: str) -> KnowledgeStore:
    return KnowledgeStore.open(where, embedder=HASH_SPEC)


def write_pages(folder: Path, names: list[str], *, words: str = "beavers build dams") -> None:
    """One Markdown page per name, each with a code sample and a link to the next page."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, after in zip(names, names[1:] + names[:1], strict=True):
        (folder / f"{name}.md").write_text(
            f"# Page {name}\n\n{words} in {name}. See [the next]({after}.md).\n\n"
            f"```python\nprint('{name}')\n```\n",
            encoding="utf-8",
        )


@pytest.fixture
def where(engine_kind: str, tmp_path: Path, pg_database: str) -> str:
    return location(engine_kind, tmp_path, pg_database)


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    write_pages(folder, ["a", "b", "c", "d"])
    return folder


def by_source(store: KnowledgeStore, identity: str | None = None) -> list[tuple[object, int]]:
    """``count`` by ``source`` as (source, count) pairs."""
    rows = store.aggregate("count", "source", identity=identity).rows
    return [(row.key, int(row.value)) for row in rows]
