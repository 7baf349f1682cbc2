"""A small docs estate with known edges and ACLs, for the graph, query_graph and docs-tool tests.

Shape (everyone can read what is not marked)::

    lp:azure ─┬─ mod:intro (pos 1) ── unit:intro-1 (1), unit:intro-2 (2), unit:intro-3 (3)
              ├─ mod:storage (pos 2) ── unit:storage-2 (1), unit:storage-1 (2),
              │                         unit:storage-3 (3, group:staff only)
              └─ mod:secret (pos 3, user:alice only) ── unit:secret-1 (everyone)

    page:start ─xref→ page:m1, page:m2, page:m3, page:private (user:alice), page:ghost (missing)
    page:m1, page:m2 ─xref→ page:target;  page:m3 ─xref→ page:other
    page:private ─xref→ page:beyond
    page:blob ─implementedBy→ sample:upload ─partOf→ page:blob;  page:blob ─xref→ page:nobody (empty ACL)
    page:blob ─appliesTo→ product:storage;  page:derived ─derivedFrom→ page:blob
    page:old ─supersededBy→ page:new;  unit:intro-1 ─forRole→ role:admin, ─teachesSkill→ skill:cloud
    page:accounts ─dependsOn→ page:blob
    page:ov1, page:ov2 (everyone) and page:ov-secret (user:alice) are all titled "Overview"

Memberships: user:alice ∈ group:staff; user:bob ∈ group:staff.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from knowledge_store.engines.base import EngineSettings
from knowledge_store.ingest.embedding import Embedder
from knowledge_store.store import KnowledgeStore

EVERYONE = ["everyone"]
ALICE = ["user:alice"]
STAFF = ["group:staff"]


def _rec(
    uid: str,
    type_: str,
    title: str,
    *,
    updated: str = "2024-01-15",
    acl: list[str] | None = None,
    edges: Sequence[tuple[str, str, int | None]] = (),
    href: str | None = None,
    status: str = "published",
) -> dict[str, Any]:
    return {
        "uid": uid,
        "type": type_,
        "title": title,
        "body": f"{title}. A short page about {title.lower()}.",
        "source": "learn",
        "status": status,
        "created_at": "2024-01-01",
        "updated_at": updated,
        "href": href if href is not None else "/docs/" + uid.replace(":", "/"),
        "acl": EVERYONE if acl is None else acl,
        "edges": [{"label": label, "to": to, "position": pos} for label, to, pos in edges],
    }


RECORDS: list[dict[str, Any]] = [
    # the learning path
    _rec("lp:azure", "learningPath", "Azure Fundamentals", updated="2024-05-01"),
    _rec("mod:intro", "module", "Introduction to the cloud", edges=[("partOf", "lp:azure", 1)]),
    _rec("mod:storage", "module", "Storage in Azure", edges=[("partOf", "lp:azure", 2)]),
    _rec("mod:secret", "module", "Secret module", acl=ALICE, edges=[("partOf", "lp:azure", 3)]),
    _rec(
        "unit:intro-1",
        "unit",
        "What is cloud computing",
        edges=[
            ("partOf", "mod:intro", 1),
            ("forRole", "role:admin", None),
            ("teachesSkill", "skill:cloud", None),
        ],
    ),
    _rec("unit:intro-2", "unit", "Cloud service models", edges=[("partOf", "mod:intro", 2)]),
    _rec("unit:intro-3", "unit", "Knowledge check", edges=[("partOf", "mod:intro", 3)]),
    _rec("unit:storage-1", "unit", "Blob storage", edges=[("partOf", "mod:storage", 2)]),
    _rec("unit:storage-2", "unit", "Storage accounts", edges=[("partOf", "mod:storage", 1)]),
    _rec(
        "unit:storage-3",
        "unit",
        "Internal storage notes",
        acl=STAFF,
        edges=[("partOf", "mod:storage", 3)],
    ),
    _rec("unit:secret-1", "unit", "Behind the secret", edges=[("partOf", "mod:secret", 1)]),
    # ranking: two shortest paths to page:target, one to page:other
    _rec(
        "page:start",
        "page",
        "Start here",
        edges=[
            ("xref", "page:m1", None),
            ("xref", "page:m2", None),
            ("xref", "page:m3", None),
            ("xref", "page:private", None),
            ("xref", "page:ghost", None),
        ],
    ),
    _rec(
        "page:m1", "page", "Middle one", updated="2024-01-01", edges=[("xref", "page:target", None)]
    ),
    _rec(
        "page:m2", "page", "Middle two", updated="2024-02-01", edges=[("xref", "page:target", None)]
    ),
    _rec(
        "page:m3",
        "page",
        "Middle three",
        updated="2024-03-01",
        edges=[("xref", "page:other", None)],
    ),
    _rec("page:target", "page", "Target", updated="2023-01-01"),
    _rec("page:other", "page", "Other", updated="2024-06-01"),
    _rec("page:private", "page", "Private notes", acl=ALICE, edges=[("xref", "page:beyond", None)]),
    _rec("page:beyond", "page", "Beyond the private page"),
    # docs with code samples and the other labels
    _rec(
        "page:blob",
        "page",
        "Azure Blob Storage overview",
        href="/docs/storage/blobs",
        edges=[
            ("implementedBy", "sample:upload", None),
            ("xref", "page:nobody", None),
            ("appliesTo", "product:storage", None),
        ],
    ),
    _rec("sample:upload", "codeSample", "Upload a blob", edges=[("partOf", "page:blob", None)]),
    _rec("page:nobody", "page", "Nobody can read this", acl=[]),
    _rec("product:storage", "product", "Azure Storage"),
    _rec("page:derived", "page", "Derived notes", edges=[("derivedFrom", "page:blob", None)]),
    _rec(
        "page:accounts",
        "page",
        "Storage accounts",
        href="/docs/storage/accounts#create",
        edges=[("dependsOn", "page:blob", None)],
    ),
    _rec(
        "page:old",
        "page",
        "Old page",
        status="archived",
        edges=[("supersededBy", "page:new", None)],
    ),
    _rec("page:new", "page", "New page"),
    _rec("role:admin", "role", "Administrator"),
    _rec("skill:cloud", "skill", "Cloud concepts"),
    _rec("page:ov1", "page", "Overview", href="/docs/a/overview"),
    _rec("page:ov2", "page", "Overview", href="/docs/b/overview"),
    _rec("page:ov-secret", "page", "Overview", acl=ALICE, href="/docs/c/overview"),
]

#: Entities ``everyone`` may not read (for the "never returns an unreadable entity" checks).
UNREADABLE_BY_EVERYONE = frozenset(r["uid"] for r in RECORDS if "everyone" not in r["acl"])


#: query_graph's bound for the estate's stores. The default 250 ms is wall-clock time, and a
#: loaded CI machine has paused a 3 ms statement past it; the tests of this estate are about
#: answers, and the bound itself has its own tests (graphquery/test_timeout.py, test_bounds.py).
TIME_LIMIT_S = 30.0


def build(path: Path | str, embedder: Embedder) -> KnowledgeStore:
    """The estate in a new store at ``path`` (through the real ingest)."""
    store = KnowledgeStore.open(
        path, embedder=embedder, engine_settings=EngineSettings(graph_time_limit_s=TIME_LIMIT_S)
    )
    report = store.ingest_records(RECORDS)
    assert not report.rejected, report.rejected
    store.add_member("group:staff", "user:alice")
    store.add_member("group:staff", "user:bob")
    return store
