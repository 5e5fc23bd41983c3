"""Version history across laptops: two real `memory-proxy` processes around one real server (channel, MCP, sync).
An agent's overwrite on one laptop is undone from the other with memory_history and memory_restore, and a file
deleted on one laptop is brought back from the other; each restore reaches both laptops' files through sync."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.embedder import HashingEmbedder
from tests.mcp_support import structured
from tests.sync_support import Laptop, ProductServer, eventually

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("backend")]  # on SQLite and on PostgreSQL

TEAM = "team"
CALLERS = {"alice": {TEAM: "rw"}, "bob": {TEAM: "rw"}}
PATH = "memory/decisions.md"
GOOD = "# Decisions\n\n- Deploys are blue-green behind HAProxy.\n- The staging host is kestrel.\n"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ProductServer]:
    running = ProductServer(tmp_path / "server", HashingEmbedder(), CALLERS)
    yield running
    running.stop()


@pytest.fixture
def laptops(tmp_path: Path, server: ProductServer) -> tuple[Laptop, Laptop]:
    made = Laptop(tmp_path / "alice", server, "alice", TEAM), Laptop(tmp_path / "bob", server, "bob", TEAM)
    server.start()
    return made


async def test_an_agents_overwrite_on_one_laptop_is_undone_from_the_other_and_reaches_both(laptops, server):
    alice, bob = laptops
    async with alice.running() as agent_a, bob.running() as agent_b:
        alice.write(PATH, GOOD)
        await eventually(lambda: bob.read(PATH) == GOOD, "bob's copy of the decisions")
        current = structured(await agent_a.call_tool("memory_get", {"path": PATH}))
        overwrite = {"path": PATH, "mode": "replace", "content": "TODO\n", "expected_hash": current["hash"]}
        structured(await agent_a.call_tool("memory_write", overwrite))
        await eventually(lambda: bob.read(PATH) == "TODO\n", "the overwrite on bob's laptop")

        listed = structured(await agent_b.call_tool("memory_history", {"path": PATH}))
        newest, pushed = listed["versions"][0], listed["versions"][1]
        assert (newest["change"], newest["updated_by"], pushed["change"], pushed["updated_by"]) == (
            "write", "alice", "push", "alice",
        )  # fmt: skip
        old = structured(await agent_b.call_tool("memory_get", {"path": PATH, "version": pushed["version"]}))
        assert old["content"] == GOOD.rstrip("\n") and old["version"] == pushed["version"]
        restored = structured(await agent_b.call_tool("memory_restore", {"path": PATH, "version": pushed["version"]}))

        assert restored["changed"] is True and restored["hash"] == pushed["hash"]
        await eventually(lambda: alice.read(PATH) == bob.read(PATH) == GOOD, "the restored text on both laptops")
        assert server.text(TEAM, PATH) == GOOD
        again = structured(await agent_a.call_tool("memory_history", {"path": PATH, "limit": 1}))["versions"][0]
        assert (again["change"], again["updated_by"], again["version"]) == ("restore", "bob", restored["version"])
        assert not list((alice.project / "memory").glob("*.conflict-*"))


async def test_a_file_deleted_on_one_laptop_is_listed_and_restored_from_the_other(laptops, server):
    alice, bob = laptops
    async with alice.running(), bob.running() as agent_b:
        alice.write(PATH, GOOD)
        await eventually(lambda: bob.read(PATH) == GOOD, "bob's copy of the decisions")
        alice.path(PATH).unlink()  # the user deletes the file on alice's laptop
        await eventually(lambda: bob.read(PATH) is None and server.text(TEAM, PATH) is None, "the deletion")

        gone = structured(await agent_b.call_tool("memory_history", {"deleted": True}))["versions"]
        assert [(v["path"], v["change"], v["updated_by"]) for v in gone] == [(PATH, "delete", "alice")]
        arguments = {"path": PATH, "version": gone[0]["restore_version"]}
        structured(await agent_b.call_tool("memory_restore", arguments))

        await eventually(lambda: alice.read(PATH) == bob.read(PATH) == GOOD, "the file back on both laptops")
        assert structured(await agent_b.call_tool("memory_history", {"deleted": True}))["versions"] == []
