"""MCP over stdio through the SDK's own client: ``ks serve --mcp-stdio --as …`` as a subprocess.

The server starts on an empty store (no tools listed); this test process then
publishes into the same store directory — another writer — and the server
notices it, sends ``notifications/tools/list_changed`` and lists the tools.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters, types

from knowledge_store.ingest.embedding import Embedder, spec_of
from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.tools import KNOWLEDGE_TOOLS
from tests.surfaces.serve_estate import build

KS = str(Path(sys.executable).with_name("ks"))


def test_stdio_lists_nothing_when_empty_then_flips_and_serves_as_its_identity(
    tmp_path: Path, embedder: Embedder
) -> None:
    where = tmp_path / "store"
    KnowledgeStore.open(where, embedder=embedder).close()
    params = StdioServerParameters(
        command=KS,
        args=["--store", str(where), "serve", "--mcp-stdio", "--as", "user:ann"],
        # the store is empty (it records no model yet): the server embeds with the writer's
        env={**os.environ, "KS_EMBEDDER": spec_of(embedder), "HF_HUB_OFFLINE": "1"},
    )
    changed = anyio.Event()
    seen: list[Any] = []

    async def on_message(message: Any) -> None:
        seen.append(message)
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    async def session() -> None:
        with anyio.fail_after(60):
            async with Client(params, mode="legacy", message_handler=on_message) as client:
                assert client.server_capabilities.tools is not None
                assert client.server_capabilities.tools.list_changed is True
                assert (await client.list_tools()).tools == []
                hidden = await client.call_tool("search", {"query": "vacuum"})
                assert hidden.is_error and "no content yet" in hidden.content[0].text

                with KnowledgeStore.open(where, embedder=embedder) as writer:
                    await anyio.to_thread.run_sync(build, writer)
                with anyio.fail_after(15):
                    await changed.wait()
                names = [t.name for t in (await client.list_tools()).tools]
                assert names == list(KNOWLEDGE_TOOLS)

                chat = await client.call_tool("search_knowledge", {"query": "replica lag alert"})
                assert not chat.is_error
                uids = [r["uid"] for r in chat.structured_content["results"]]
                assert "ticket:1042" in uids  # ann is in group:sre: runs as --as

                code = await client.call_tool(
                    "code_sample_search", {"query": "sessions running a query", "k": 2}
                )
                top = code.structured_content["results"][0]
                assert top["language"] == "sql" and top["page"]["uid"] == "unit:stats"
                assert "pg_stat_activity" in top["code"]

                secret = await client.call_tool("fetch_content", {"uid": "ticket:2001"})
                missing = await client.call_tool("fetch_content", {"uid": "ticket:9999"})
                assert secret.is_error and missing.is_error
                assert secret.content[0].text == missing.content[0].text.replace("9999", "2001")

                deep = await client.call_tool("graph", {"starts": ["unit:vacuum"], "depth": 9})
                assert deep.is_error and "1–3" in deep.content[0].text
                literal = await client.call_tool(
                    "query_graph", {"query": "MATCH (n {uid: 'unit:vacuum'}) RETURN n"}
                )
                assert literal.is_error and "parameters" in literal.content[0].text
                unknown = await client.call_tool("nope", {})
                assert unknown.is_error and "unknown tool" in unknown.content[0].text
                admin = await client.call_tool("ingest_records", {"records": [{}]})
                assert admin.is_error and "admin scope" in admin.content[0].text
                assert admin.structured_content is not None
                assert admin.structured_content["error"]["code"] == "forbidden"

    anyio.run(session)
