"""Tags and categories end to end: the SDK's client on a real `memory-proxy` process, in front of the real server
(channel, MCP, sync) on 127.0.0.1. Writes carry labels into the markdown, searches and lists filter by them, and
a front matter edited on the laptop re-tags the file once it has synced."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.fakes.embedder import HashingEmbedder
from tests.mcp_support import structured
from tests.sync_support import SETTLE, Laptop, ProductServer, eventually

pytestmark = pytest.mark.anyio

TEAM = "team"


@pytest.fixture
def laptop(tmp_path: Path) -> Iterator[Laptop]:
    server = ProductServer(tmp_path / "server", HashingEmbedder(), {"alice": {TEAM: "rw"}})
    made = Laptop(tmp_path / "alice", server, "alice", TEAM)
    server.start()
    yield made
    server.stop()


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    return structured(await client.call_tool(tool, arguments))


async def tagged_hits(client: Client, query: str, **filters: Any) -> list[dict[str, Any]]:
    return list((await call(client, "memory_search", query=query, **filters))["hits"])


async def test_labels_are_written_filtered_and_carried_through_the_proxy_and_follow_a_laptop_edit(laptop):
    async with laptop.running() as client:
        await call(client, "memory_write", content="Billing uses PostgreSQL.", path="memory/db.md",
                   tags=["Database", "postgres"], category="decision")  # fmt: skip
        entry = await call(client, "memory_write", content="Billing jobs run nightly.", topic="cron",
                           tags=["jobs"], category="fact")  # fmt: skip
        await call(client, "memory_write", content="Billing is a team.", path="memory/misc.md")

        by_tag = (await call(client, "memory_search", query="billing", tags=["postgres", "nope"]))["hits"]
        assert [(h["path"], h["tags"], h["category"]) for h in by_tag] == [
            ("memory/db.md", ["database", "postgres"], "decision")
        ]
        by_category = (await call(client, "memory_search", query="billing", category="fact"))["hits"]
        assert [(h["path"], h["heading"].endswith(" — cron"), h["tags"]) for h in by_category] == [
            (entry["path"], True, ["jobs"])
        ]
        listed = await call(client, "memory_list", tags=["jobs", "database"])
        assert [(f["path"], f["tags"], f["categories"]) for f in listed["files"]] == sorted(
            [("memory/db.md", ["database", "postgres"], ["decision"]), (entry["path"], ["jobs"], ["fact"])]
        )
        assert [f["path"] for f in (await call(client, "memory_list", category="decision"))["files"]] == [
            "memory/db.md"
        ]
        refused = await client.call_tool("memory_search", {"query": "billing", "tags": ["two words"]})
        assert refused.is_error and "tags: 'two words' is not a tag" in str(refused.content)

        # The files on the laptop are the truth: the labels are in them, and an edit there re-tags the file.
        await eventually(lambda: (laptop.read("memory/db.md") or "").startswith("---\ntags: [database, postgres]"),
                         "the front matter on the laptop")  # fmt: skip
        assert "## " in (laptop.read(entry["path"]) or "") and "[tags: jobs] [category: fact]" in (
            laptop.read(entry["path"]) or ""
        )
        laptop.write("memory/db.md", (laptop.read("memory/db.md") or "").replace("postgres]", "postgres, money]"))
        hits = await tagged_hits(client, "billing", tags=["money"])
        with anyio.fail_after(SETTLE):
            while [h["path"] for h in hits] != ["memory/db.md"]:
                await anyio.sleep(0.1)
                hits = await tagged_hits(client, "billing", tags=["money"])
        assert hits[0]["tags"] == ["database", "postgres", "money"] and hits[0]["start_line"] == 5
        assert "tags:" not in hits[0]["snippet"]  # front matter is not text
