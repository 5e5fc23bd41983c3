"""Several laptops, one memory: real `memory-proxy` processes with temporary project folders around one real server
(channel, MCP, sync, the real embedding model) on 127.0.0.1. The SDK client drives each proxy over stdio, as Claude
Code does; the tests edit files as the user would and wait, bounded, for the other laptops' files to follow."""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from server.sync.service import SyncService
from tests.mcp_support import structured
from tests.sync_support import TIMEZONE, Laptop, ProductServer, eventually, search_paths
from tests.waits import long_poll_waiting, set_within

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("backend")]  # on SQLite and on PostgreSQL

TEAM, OTHER = "team", "other"
CALLERS = {"alice": {TEAM: "rw"}, "bob": {TEAM: "rw"}, "carol": {OTHER: "rw"}}


@pytest.fixture
def server(tmp_path: Path, local_embedder: object) -> Iterator[ProductServer]:
    running = ProductServer(tmp_path / "server", local_embedder, CALLERS)  # type: ignore[arg-type]
    yield running
    running.stop()


@pytest.fixture
def laptops(tmp_path: Path, server: ProductServer) -> dict[str, Laptop]:
    made = {name: Laptop(tmp_path / name, server, name, next(iter(grants))) for name, grants in CALLERS.items()}
    server.start()
    return made


def today() -> str:
    return dt.datetime.now(ZoneInfo(TIMEZONE)).date().isoformat()


async def test_an_edit_on_one_laptop_reaches_the_others_file_and_searches_but_not_another_index(laptops):
    alice, bob, carol = laptops["alice"], laptops["bob"], laptops["carol"]
    async with AsyncExitStack() as stack:
        clients = {name: await stack.enter_async_context(laptop.running()) for name, laptop in laptops.items()}
        alice.write("memory/decisions.md", "# Decisions\n\nWe deploy with blue-green switches behind HAProxy.\n")
        await eventually(lambda: bob.read("memory/decisions.md") == alice.read("memory/decisions.md"), "bob's copy")
        assert "memory/decisions.md" in await search_paths(clients["bob"], "how do we deploy blue-green")
        assert await search_paths(clients["carol"], "how do we deploy blue-green") == []
        alice.write("MEMORY.md", "# Project memory\n\n- The staging host is called kestrel.\n")
        await eventually(lambda: bob.read("MEMORY.md") == alice.read("MEMORY.md"), "bob's MEMORY.md")
    assert carol.files() == {}


async def test_both_laptops_appending_to_todays_log_at_once_keep_both_entries(laptops):
    alice, bob = laptops["alice"], laptops["bob"]
    log = f"memory/{today()}.md"
    start = f"# {today()}\n\n## 09:00 — stand-up\nPlanned the sync work.\n"
    async with alice.running(), bob.running():
        alice.write(log, start)
        await eventually(lambda: bob.read(log) == start, "bob's copy of the log")
        alice.write(log, start + "\n## 10:00 — alice\nalice fixed the watcher.\n")
        bob.write(log, start + "\n## 10:01 — bob\nbob measured freshness.\n")
        await eventually(
            lambda: (
                alice.read(log) == bob.read(log)
                and "alice fixed" in (bob.read(log) or "")
                and "bob measured" in (alice.read(log) or "")
            ),
            "both entries on both laptops",
        )
    merged = alice.read(log) or ""
    assert merged.startswith(start) and merged.count(f"# {today()}\n") == 1
    assert not list((alice.project / "memory").glob("*.conflict-*"))


async def test_conflicting_replaces_end_with_a_conflict_copy_holding_the_other_text(laptops, server):
    alice, bob = laptops["alice"], laptops["bob"]
    path = "memory/database.md"
    async with alice.running(), bob.running():
        alice.write(path, "We use SQLite.\n")
        await eventually(lambda: bob.read(path) == "We use SQLite.\n", "bob's copy")
    bob.write(path, "We use DuckDB.\n")  # bob's proxy is not running: this edit waits for the next start
    async with alice.running():
        alice.write(path, "We use Postgres.\n")
        await eventually(lambda: server.text(TEAM, path) == "We use Postgres.\n", "alice's edit on the server")
        async with bob.running():
            copies = lambda laptop: sorted((laptop.project / "memory").glob("database.conflict-bob-*.md"))  # noqa: E731
            await eventually(lambda: len(copies(alice)) == 1 and len(copies(bob)) == 1, "the conflict copy everywhere")
            await eventually(lambda: bob.read(path) == "We use Postgres.\n", "bob's file back to the server's")
            assert copies(bob)[0].read_text() == copies(alice)[0].read_text() == "We use DuckDB.\n"
            assert alice.read(path) == "We use Postgres.\n"


async def test_a_section_replaced_on_one_laptop_and_an_append_to_another_section_merge_without_a_conflict_copy(
    laptops, server
):
    alice, bob = laptops["alice"], laptops["bob"]
    path = "MEMORY.md"
    start = "# Project memory\n\n## Deploy\nBlue-green behind HAProxy.\n\n## Decisions\n- SQLite with WAL.\n"
    async with alice.running(), bob.running():
        alice.write(path, start)
        await eventually(lambda: bob.read(path) == start, "bob's copy")
    # Bob's proxy is stopped: his editor's append under Decisions reaches the server after alice's replace.
    bob.write(path, start + "- uv for tooling.\n")
    async with alice.running() as client:
        deploy = structured(await client.call_tool("memory_get", {"path": path, "heading": "Deploy"}))
        replace = {"path": path, "heading": "Deploy", "mode": "replace", "content": "Rolling deploys."}
        structured(await client.call_tool("memory_write", {**replace, "expected_hash": deploy["section_hash"]}))
        first = start.replace("Blue-green behind HAProxy.", "Rolling deploys.") + "- uv for tooling.\n"
        async with bob.running():
            await eventually(lambda: alice.read(path) == bob.read(path) == first, "both edits on both laptops")
        # The other way round: bob's editor rewrites Deploy (offline) while alice's agent appends under Decisions.
        bob.write(path, first.replace("Rolling deploys.", "Canary, then rolling."))
        structured(await client.call_tool("memory_write", {"path": path, "heading": "Decisions", "content": "- ruff."}))
        second = first.replace("Rolling deploys.", "Canary, then rolling.") + "- ruff.\n"
        async with bob.running():
            await eventually(lambda: alice.read(path) == bob.read(path) == second, "both edits again on both laptops")
    assert server.text(TEAM, path) == second
    assert (bob.read_log() or "").count("pushed MEMORY.md: merged") == 2  # both were three-way merges
    for laptop in (alice, bob):
        assert not [p.name for p in laptop.project.rglob("*conflict*")]


async def test_a_delete_on_one_laptop_removes_the_file_on_the_other(laptops):
    alice, bob = laptops["alice"], laptops["bob"]
    async with alice.running(), bob.running():
        alice.write("memory/scratch.md", "temporary\n")
        await eventually(lambda: bob.read("memory/scratch.md") == "temporary\n", "bob's copy")
        alice.path("memory/scratch.md").unlink()
        await eventually(lambda: bob.read("memory/scratch.md") is None, "bob's copy gone")
        alice.write("memory/old-name.md", "renamed note\n")
        await eventually(lambda: bob.read("memory/old-name.md") == "renamed note\n", "bob's copy")
        alice.path("memory/old-name.md").rename(alice.path("memory/new-name.md"))
        await eventually(
            lambda: bob.read("memory/old-name.md") is None and bob.read("memory/new-name.md") == "renamed note\n",
            "the rename on bob's laptop",
        )


async def test_offline_edits_reach_the_other_laptop_after_reconnecting_and_after_a_restart(laptops, server):
    alice, bob = laptops["alice"], laptops["bob"]
    async with bob.running():
        async with alice.running():
            server.stop()
            alice.write("memory/offline.md", "written while the server was down\n")
            server.start()
            await eventually(lambda: bob.read("memory/offline.md") is not None, "bob's copy after the reconnect")
            server.stop()
            alice.write("memory/offline.md", "edited offline, then alice's proxy restarted\n")
            alice.write("memory/second.md", "also offline\n")
        assert bob.read("memory/second.md") is None
        with alice.bare():  # started while the server is still down
            server.start()
            await eventually(
                lambda: (
                    bob.read("memory/second.md") == "also offline\n"
                    and bob.read("memory/offline.md") == "edited offline, then alice's proxy restarted\n"
                ),
                "alice's offline edits on bob's laptop",
            )


async def test_the_agents_memory_write_through_one_laptop_lands_in_both_laptops_files(laptops):
    alice, bob = laptops["alice"], laptops["bob"]
    async with alice.running() as client, bob.running():
        result = await client.call_tool("memory_write", {"content": "Prefer small commits.", "topic": "habits"})
        written = structured(result)
        assert written["path"] == f"memory/{today()}.md"
        await eventually(lambda: "Prefer small commits." in (alice.read(written["path"]) or ""), "alice's file")
        await eventually(lambda: bob.read(written["path"]) == alice.read(written["path"]), "bob's file")
        status = structured(await client.call_tool("memory_status", {}))
        assert {entry["caller"] for entry in status["sync"]} >= {"alice", "bob"}


async def test_a_burst_of_500_file_writes_is_synced_completely_in_few_requests(laptops, server, monkeypatch):
    alice, bob = laptops["alice"], laptops["bob"]
    pushes: list[int] = []
    real_push = SyncService.push

    def counted(self, caller, changes):  # type: ignore[no-untyped-def]
        pushes.append(len(changes))
        return real_push(self, caller, changes)

    monkeypatch.setattr(SyncService, "push", counted)
    expected = {f"memory/burst/note-{n:03}.md": f"Burst note {n}: the {n}th fact.\n" for n in range(500)}
    async with alice.running(), bob.running():
        for relpath, text in expected.items():
            alice.write(relpath, text)
        await eventually(lambda: bob.files() == expected, "all 500 files on bob's laptop", within=120)
    assert sum(pushes) >= 500
    assert len(pushes) <= 40, f"{len(pushes)} push requests for 500 files"
    log = alice.log.read_text("utf-8")  # written at DEBUG: the sync's own lines, not one per inotify event
    assert "sync: pushed" in log and "watchdog" not in log


async def test_a_server_stopping_with_laptops_waiting_answers_them_and_stops_quietly(laptops, server, caplog):
    alice = laptops["alice"]
    with long_poll_waiting() as waiting:
        async with alice.running() as client:  # an MCP session with its GET stream open, and the sync's long-poll
            await client.call_tool("memory_status", {})
            await eventually(lambda: "sync: started" in (alice.read_log() or ""), "alice's proxy syncing")
            await set_within(waiting, "alice's long-poll")  # it is now waiting on the server
            with caplog.at_level(logging.INFO, logger="uvicorn.error"):
                started = time.monotonic()
                server.stop()
                stopped = time.monotonic() - started
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], [r.getMessage() for r in caplog.records]
    assert stopped < 1.0  # not the graceful period's end: the long-poll answered and the stream ended at once
