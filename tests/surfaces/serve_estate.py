"""A small estate for the serving tests: a learning path, code samples, a superseded page, ACLs.

Principals: ``user:ann`` is in ``group:sre`` (reads the tickets); ``user:bob``
is in no group (reads what ``everyone`` reads); ``user:root`` holds the admin
token and reads like any user (admin is a scope, not a read bypass).
"""

from __future__ import annotations

from typing import Any

from knowledge_store.store import KnowledgeStore

TOKENS: dict[str, str | tuple[str, bool]] = {
    "tok-ann-0001": "user:ann",
    "tok-bob-0002": "user:bob",
    "tok-root-0003": ("user:root", True),
}
ANN = {"Authorization": "Bearer tok-ann-0001"}
BOB = {"Authorization": "Bearer tok-bob-0002"}
ROOT = {"Authorization": "Bearer tok-root-0003"}
MEMBERSHIPS = [("group:sre", "user:ann")]
#: A browser's CSRF cookie, and the same value in the form it posts (what the page hands out).
CSRF = "csrf-token-of-this-browser-0123456789abcde"
CSRF_COOKIE = {"Cookie": f"ks_csrf={CSRF}"}


def _page(
    uid: str,
    title: str,
    body: str,
    *,
    type_: str = "page",
    parent: str | None = None,
    position: int | None = None,
    acl: list[str] | None = None,
    edges: list[dict[str, Any]] | None = None,
    updated: str = "2024-03-01",
    source: str = "docs",
    status: str = "published",
) -> dict[str, Any]:
    links = list(edges or [])
    if parent is not None:
        links.append({"label": "partOf", "to": parent, "position": position})
    return {
        "uid": uid,
        "type": type_,
        "title": title,
        "body": body,
        "source": source,
        "status": status,
        "created_at": "2024-01-01",
        "updated_at": updated,
        "href": f"https://docs.example.org/{uid.split(':', 1)[-1]}",
        "edges": links,
        "acl": acl if acl is not None else ["everyone"],
    }


def _sample(
    uid: str, page: str, title: str, lead: str, language: str, code: str, n: int
) -> dict[str, Any]:
    record = _page(
        uid,
        title,
        f"{lead}\n\n```{language}\n{code}\n```",
        type_="codeSample",
        parent=page,
        position=n,
    )
    record["attributes"] = {"language": language, "ordinal": n, "heading": title.split(" › ")[0]}
    return record


RECORDS: list[dict[str, Any]] = [
    _page(
        "path:admin",
        "Database Administration Path",
        "# Database Administration Path\n\nA learning path through running a database server:"
        " installation, routine maintenance, monitoring and backups.",
        type_="path",
    ),
    _page(
        "mod:maintenance",
        "Routine Maintenance",
        "# Routine Maintenance\n\nKeeping a server healthy: vacuuming, analyzing, reindexing.",
        type_="module",
        parent="path:admin",
        position=1,
    ),
    _page(
        "mod:monitoring",
        "Monitoring",
        "# Monitoring\n\nWatching activity, statistics and locks on a running server.",
        type_="module",
        parent="path:admin",
        position=2,
    ),
    _page(
        "unit:vacuum",
        "Routine Vacuuming",
        "# Routine Vacuuming\n\nVACUUM reclaims storage occupied by dead tuples left behind by"
        " updates and deletes.\n\n## Autovacuum\n\nThe autovacuum daemon automates VACUUM and"
        " ANALYZE; tune autovacuum_naptime and the scale factors for busy tables.\n\n"
        "## Freezing\n\nVACUUM FREEZE protects against transaction ID wraparound.",
        parent="mod:maintenance",
        position=1,
        edges=[
            {"label": "implementedBy", "to": "unit:vacuum#code-1", "position": 1},
            {"label": "xref", "to": "unit:stats"},
        ],
    ),
    _sample(
        "unit:vacuum#code-1",
        "unit:vacuum",
        "Routine Vacuuming › example 1",
        "Vacuum one table verbosely and refresh its statistics:",
        "sql",
        "VACUUM (VERBOSE, ANALYZE) orders;",
        1,
    ),
    _page(
        "unit:analyze",
        "Updating Planner Statistics",
        "# Updating Planner Statistics\n\nANALYZE collects statistics about the contents of"
        " tables so the query planner can choose good plans.",
        parent="mod:maintenance",
        position=2,
        edges=[{"label": "dependsOn", "to": "unit:vacuum"}],
    ),
    _page(
        "unit:reindex-old",
        "Reindexing (9.x)",
        "# Reindexing (9.x)\n\nREINDEX rebuilds a bloated index; in old releases it locks the"
        " table for writes while it runs.",
        parent="mod:maintenance",
        position=3,
        edges=[{"label": "supersededBy", "to": "unit:reindex"}],
        updated="2019-05-01",
        status="archived",
    ),
    _page(
        "unit:reindex",
        "Reindexing Concurrently",
        "# Reindexing Concurrently\n\nREINDEX CONCURRENTLY rebuilds a bloated index without"
        " locking out writes.",
        parent="mod:maintenance",
        position=4,
        edges=[{"label": "implementedBy", "to": "unit:reindex#code-1", "position": 1}],
    ),
    _sample(
        "unit:reindex#code-1",
        "unit:reindex",
        "Reindexing Concurrently › example 1",
        "Rebuild one index without blocking writes:",
        "sql",
        "REINDEX INDEX CONCURRENTLY orders_pkey;",
        1,
    ),
    _page(
        "unit:stats",
        "Monitoring Database Activity",
        "# Monitoring Database Activity\n\nThe view pg_stat_activity shows one row per server"
        " process with its current query, state and wait event.\n\n## Locks\n\npg_locks lists"
        " the locks held and awaited.",
        parent="mod:monitoring",
        position=1,
        edges=[{"label": "implementedBy", "to": "unit:stats#code-1", "position": 1}],
    ),
    _sample(
        "unit:stats#code-1",
        "unit:stats",
        "Monitoring Database Activity › example 1",
        "List the sessions that are running a query:",
        "sql",
        "SELECT pid, state, query FROM pg_stat_activity WHERE state = 'active';",
        1,
    ),
    _page(
        "unit:logs",
        "Log File Maintenance",
        "# Log File Maintenance\n\nRotate the server log with logrotate or the built-in"
        " logging collector.",
        parent="mod:monitoring",
        position=2,
        edges=[{"label": "implementedBy", "to": "unit:logs#code-1", "position": 1}],
    ),
    _sample(
        "unit:logs#code-1",
        "unit:logs",
        "Log File Maintenance › example 1",
        "A logrotate rule for the server log:",
        "bash",
        "logrotate -f /etc/logrotate.d/postgresql",
        1,
    ),
    _page(
        "doc:backup",
        "Backup and Restore",
        "# Backup and Restore\n\npg_dump writes a consistent snapshot of one database;"
        " pg_basebackup copies a whole cluster for point-in-time recovery.",
        edges=[{"label": "xref", "to": "ticket:1042"}],
    ),
    _page(
        "doc:replication",
        "Streaming Replication",
        "# Streaming Replication\n\nA standby server replays the primary's WAL stream;"
        " replication lag grows during bulk loads.",
        edges=[{"label": "xref", "to": "doc:backup"}],
    ),
    _page(
        "doc:roles",
        "Database Roles",
        "# Database Roles\n\nRoles own objects and hold privileges; GRANT and REVOKE change them.",
    ),
    _page(
        "doc:tuning",
        "Tuning Memory",
        "# Tuning Memory\n\nshared_buffers and work_mem size the memory a server uses.",
    ),
    _page(
        "ticket:1042",
        "Replica lag alert",
        "Error ERR-1042: the standby replica falls behind the primary during bulk loads.",
        type_="ticket",
        acl=["group:sre"],
        source="tickets",
        status="open",
        edges=[{"label": "xref", "to": "doc:replication"}],
    ),
    _page(
        "ticket:1043",
        "Vacuum not keeping up",
        "Autovacuum falls behind on the orders table; dead tuples pile up.",
        type_="ticket",
        acl=["group:sre"],
        source="tickets",
        status="open",
        edges=[{"label": "xref", "to": "unit:vacuum"}],
    ),
    _page(
        "ticket:2001",
        "Payroll export secrets",
        "The payroll export job stores salary figures; restricted to finance.",
        type_="ticket",
        acl=["group:finance"],
        source="tickets",
        status="closed",
    ),
    _page(
        "doc:draft",
        "Unpublished draft",
        "A draft nobody may read yet (empty ACL: default deny).",
        acl=[],
        status="draft",
    ),
]


def build(store: KnowledgeStore) -> KnowledgeStore:
    report = store.ingest_records(RECORDS)
    assert not report.rejected, report.rejected
    for group, member in MEMBERSHIPS:
        store.add_member(group, member)
    return store


# -- in-process and over-a-socket clients ------------------------------------------------------------
def call(app: Any, method: str, url: str, **kwargs: Any) -> Any:
    """One request to ``app`` in-process (``httpx.ASGITransport``); returns the httpx response."""
    import anyio
    import httpx

    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            return await client.request(method, url, **kwargs)

    return anyio.run(go)


class LiveServer:
    """uvicorn on 127.0.0.1, an ephemeral port, in a thread; stops itself on exit (bounded)."""

    def __init__(self, app: Any, *, http: Any = "auto") -> None:
        import socket

        import uvicorn

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            app, log_level="warning", timeout_graceful_shutdown=2, lifespan="on", http=http
        )
        self.server = uvicorn.Server(config)
        self.thread: Any = None

    def __enter__(self) -> LiveServer:
        import threading
        import time

        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        if self.thread is not None:
            self.thread.join(timeout=10)
        self.sock.close()
