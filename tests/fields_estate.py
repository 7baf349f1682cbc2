"""A small estate for the sql / aggregate / planner / tools tests, built through the real store.

Known edges (partOf, xref, implementedBy, supersededBy), ACLs (everyone,
group:sre, group:finance, an empty ACL), dates (around a New Year, so that ISO
weeks and calendar years differ), a record with no dates, supersededBy edges
to a visible, an invisible and a missing successor.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from knowledge_store.ingest.embedding import Embedder
from knowledge_store.store import KnowledgeStore


def _rec(
    uid: str,
    type_: str,
    title: str,
    body: str,
    *,
    source: str = "docs",
    status: str = "published",
    created: str | None = None,
    updated: str | None = None,
    acl: list[str] | None = None,
    edges: Sequence[tuple[str, str]] = (),
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "uid": uid,
        "type": type_,
        "title": title,
        "body": body,
        "source": source,
        "status": status,
        "created_at": created,
        "updated_at": updated,
        "edges": [{"label": label, "to": to} for label, to in edges],
    }
    if acl is not None:
        record["acl"] = acl
    return record


RECORDS: list[dict[str, Any]] = [
    _rec(
        "doc:admin",
        "chapter",
        "Server Administration",
        "# Server Administration\n\nHow to run, tune and maintain a database server.",
        created="2022-12-30",
        updated="2023-01-02",
    ),
    _rec(
        "doc:backup-old",
        "page",
        "Backup with pg_dump (legacy)",
        "# Backup with pg_dump (legacy)\n\nThe legacy backup procedure: run pg_dump nightly"
        " from cron and copy the dump file to tape.",
        status="archived",
        created="2023-01-01",
        updated="2023-02-01",
        edges=[("partOf", "doc:admin"), ("supersededBy", "doc:backup-new")],
    ),
    _rec(
        "doc:backup-new",
        "page",
        "Backup and Restore",
        "# Backup and Restore\n\nTake a logical backup with pg_dump in the custom format and"
        " restore it with pg_restore; use continuous archiving for point-in-time recovery.",
        created="2024-03-04",
        updated="2024-04-01",
        edges=[("partOf", "doc:admin"), ("implementedBy", "code:backup-1")],
    ),
    _rec(
        "code:backup-1",
        "codeSample",
        "pg_dump example",
        "```sh\npg_dump -Fc mydb > db.dump\npg_restore -d mydb db.dump\n```",
        created="2024-03-04",
        updated="2024-03-04",
        edges=[("partOf", "doc:backup-new")],
    ),
    _rec(
        "doc:vacuum",
        "page",
        "Routine Vacuuming",
        "# Routine Vacuuming\n\nVACUUM reclaims storage occupied by dead tuples. The"
        " autovacuum daemon automates VACUUM and ANALYZE.",
        created="2024-01-10",
        updated="2024-03-01",
        edges=[("partOf", "doc:admin"), ("xref", "doc:monitoring")],
    ),
    _rec(
        "doc:monitoring",
        "page",
        "Monitoring Database Activity",
        "# Monitoring Database Activity\n\nThe view pg_stat_activity shows one row per server"
        " process, with its current query and state.",
        created="2024-02-01",
        updated="2024-02-15",
        edges=[("partOf", "doc:admin")],
    ),
    _rec(
        "doc:replication-old",
        "page",
        "Log Shipping Replication",
        "# Log Shipping Replication\n\nShip WAL files from the primary to a warm standby"
        " server with archive_command and restore_command.",
        status="archived",
        created="2023-06-01",
        updated="2023-06-02",
        edges=[("partOf", "doc:admin"), ("supersededBy", "doc:replication-sre")],
    ),
    _rec(
        "doc:replication-sre",
        "page",
        "Streaming Replication Runbook",
        "# Streaming Replication Runbook\n\nThe SRE runbook for streaming replication: set"
        " primary_conninfo on the standby and watch replication lag.",
        source="wiki",
        created="2024-05-06",
        updated="2024-05-20",
        acl=["group:sre"],
        edges=[("partOf", "doc:admin")],
    ),
    _rec(
        "doc:orphan",
        "page",
        "Tablespaces",
        "# Tablespaces\n\nA tablespace lets you place database objects on another disk.",
        created="2023-11-20",
        updated="2023-12-31",
        edges=[("supersededBy", "doc:does-not-exist")],
    ),
    _rec(
        "doc:indexes",
        "page",
        "Index Types",
        "# Index Types\n\nPostgreSQL provides B-tree, Hash, GiST, SP-GiST, GIN and BRIN indexes.",
        source="wiki",
        status="draft",
        created="2024-01-01",
        updated="2024-01-07",
    ),
    _rec(
        "doc:wal",
        "page",
        "Write-Ahead Logging",
        "# Write-Ahead Logging\n\nWAL ensures data integrity: changes are logged before the"
        " data files are written.",
        created="2023-12-31",
        updated="2024-01-01",
        edges=[("xref", "doc:replication-old")],
    ),
    _rec(
        "doc:glossary",
        "page",
        "Glossary",
        "# Glossary\n\nTerms used in this manual: tuple, relation, tablespace, WAL.",
        source="wiki",
        status="draft",
    ),
    _rec(
        "ticket:1",
        "ticket",
        "Replica lag alert",
        "Error ERR-1042: the standby replica falls behind the primary during bulk loads.",
        source="tickets",
        status="open",
        created="2024-05-03",
        updated="2024-05-04",
        acl=["group:sre"],
        edges=[("xref", "doc:replication-sre")],
    ),
    _rec(
        "ticket:2",
        "ticket",
        "Disk full on primary",
        "The primary ran out of disk: old WAL segments were not recycled.",
        source="tickets",
        status="closed",
        created="2024-04-29",
        updated="2024-05-10",
        acl=["group:sre"],
    ),
    _rec(
        "ticket:3",
        "ticket",
        "Payroll export secrets",
        "The payroll export job stores salary figures; restricted to finance.",
        source="finance",
        status="open",
        created="2024-06-01",
        updated="2024-06-02",
        acl=["group:finance"],
    ),
    _rec(
        "ticket:4",
        "ticket",
        "Docs typo in vacuum page",
        "A typo in the Routine Vacuuming page: 'autovaccum'.",
        source="tickets",
        status="open",
        created="2024-01-08",
        updated="2024-01-09",
        edges=[("xref", "doc:vacuum")],
    ),
    _rec(
        "doc:hidden",
        "page",
        "Unpublished draft",
        "Nobody may read this draft: its ACL is empty.",
        status="draft",
        created="2024-02-02",
        updated="2024-02-03",
        acl=[],
    ),
]

#: principal → the principals it holds (mirrors the memberships the fixture adds).
HELD: dict[str, set[str]] = {
    "everyone": {"everyone"},
    "user:sam": {"everyone", "user:sam", "group:sre"},
    "user:fay": {"everyone", "user:fay", "group:finance"},
}


def visible_records(principal: str) -> list[dict[str, Any]]:
    held = HELD[principal]
    return [r for r in RECORDS if set(r.get("acl", ["everyone"])) & held]


@pytest.fixture(scope="session")
def fields_store(engine: Any, embedder: Embedder) -> Iterator[KnowledgeStore]:
    """The fields estate, once per engine (``engine``: tests.conftest.EngineUnderTest)."""
    with engine.open(embedder, "fields") as store:
        store.ingest_records(RECORDS, acl=["everyone"])
        store.add_member("group:sre", "user:sam")
        store.add_member("group:finance", "user:fay")
        yield store
