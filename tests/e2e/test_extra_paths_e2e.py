"""Extra memory folders (`extra_paths`): set on the server, announced to laptops in every changes answer, and then
indexed and synced both ways like `memory/`, under the same path rules. Real `memory-proxy` processes around one
real server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from server.settings import Settings
from syncproto.paths import set_extra_folders
from tests.fakes.embedder import HashingEmbedder
from tests.sync_support import Laptop, ProductServer, eventually, search_paths

pytestmark = pytest.mark.anyio

TEAM = "team"
CALLERS = {"alice": {TEAM: "rw"}, "bob": {TEAM: "rw"}}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ProductServer]:
    settings = Settings.from_env({"MEMORY_EXTRA_PATHS": "notes"})
    set_extra_folders(settings.extra_paths)  # what `memory-server` does at start (the server runs in this process)
    running = ProductServer(tmp_path / "server", HashingEmbedder(), CALLERS, settings.engine)  # type: ignore[arg-type]
    try:
        yield running
    finally:
        running.stop()
        set_extra_folders(())


async def test_an_extra_folder_is_synced_both_ways_and_searched_like_memory(tmp_path, server):
    alice, bob = (Laptop(tmp_path / name, server, name, TEAM) for name in CALLERS)
    server.start()
    async with alice.running(), bob.running() as bob_client:
        alice.write("notes/design/cache.md", "# Cache\n\nThe cache evicts the least recently used zeppelin first.\n")
        alice.write("drafts/secret.md", "# Draft\n\nNot a memory folder: stays on this laptop.\n")
        await eventually(lambda: bob.read("notes/design/cache.md") == alice.read("notes/design/cache.md"), "bob's copy")
        assert "notes/design/cache.md" in await search_paths(bob_client, "zeppelin cache eviction")

        await bob_client.call_tool("memory_write", {"content": "The hangar opens at nine.", "path": "notes/hangar.md"})
        await eventually(lambda: "hangar opens at nine" in (alice.read("notes/hangar.md") or ""), "alice's copy")
    assert server.text(TEAM, "drafts/secret.md") is None and bob.read("drafts/secret.md") is None
    assert "memory folders are memory/, notes/" in (alice.read_log() or "")  # learned from the server's answer
