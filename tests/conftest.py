"""Shared fixtures: the real embedding model (loaded once), fresh stores, a small estate."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from knowledge_store.ingest.embedding import Embedder, open_embedder
from knowledge_store.store import KnowledgeStore

ESTATE: list[dict[str, Any]] = [
    {
        "uid": "guide:vacuum",
        "type": "page",
        "title": "Routine Vacuuming",
        "body": "# Routine Vacuuming\n\nVACUUM reclaims storage occupied by dead tuples.\n\n"
        "## Autovacuum\n\nThe autovacuum daemon automates VACUUM and ANALYZE.\n\n"
        "```sql\nVACUUM (VERBOSE, ANALYZE) orders;\n```\n",
        "source": "docs",
        "status": "published",
        "created_at": "2024-01-10",
        "updated_at": "2024-03-01",
        "acl": ["everyone"],
        "edges": [{"label": "partOf", "to": "guide:admin", "position": 2}],
    },
    {
        "uid": "guide:admin",
        "type": "chapter",
        "title": "Server Administration",
        "body": "# Server Administration\n\nHow to run, tune and maintain a database server.",
        "source": "docs",
        "status": "published",
        "created_at": "2024-01-01",
        "updated_at": "2024-01-02",
        "acl": ["everyone"],
    },
    {
        "uid": "guide:monitoring",
        "type": "page",
        "title": "Monitoring Database Activity",
        "body": "# Monitoring Database Activity\n\nThe view pg_stat_activity shows one row per"
        " server process, with its current query and state.",
        "source": "docs",
        "status": "published",
        "created_at": "2024-02-01",
        "updated_at": "2024-02-15",
        "acl": ["everyone"],
        "edges": [
            {"label": "partOf", "to": "guide:admin", "position": 1},
            {"label": "xref", "to": "guide:vacuum"},
        ],
    },
    {
        "uid": "ticket:1042",
        "type": "ticket",
        "title": "Replica lag alert",
        "body": "Error ERR-1042: the standby replica falls behind the primary during bulk loads.",
        "source": "tickets",
        "status": "open",
        "created_at": "2024-05-03",
        "updated_at": "2024-05-04",
        "acl": ["group:sre"],
        "edges": [{"label": "xref", "to": "guide:monitoring"}],
    },
    {
        "uid": "ticket:2001",
        "type": "ticket",
        "title": "Payroll export secrets",
        "body": "The payroll export job stores salary figures; restricted to finance.",
        "source": "tickets",
        "status": "closed",
        "created_at": "2024-06-01",
        "updated_at": "2024-06-02",
        "acl": ["group:finance"],
    },
]


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    return open_embedder()


@pytest.fixture
def store(tmp_path: Path, embedder: Embedder) -> Iterator[KnowledgeStore]:
    with KnowledgeStore.open(tmp_path / "store", embedder=embedder) as s:
        yield s


@pytest.fixture
def estate_store(store: KnowledgeStore) -> KnowledgeStore:
    store.ingest_records(ESTATE)
    store.add_member("group:sre", "user:sam")
    return store
