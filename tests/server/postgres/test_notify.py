"""Two servers on one PostgreSQL database: a change committed through one wakes the long-polls waiting on the
other at once (`server.postgres.notify`), and a listening connection that drops is made again."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import anyio
import anyio.to_thread
import pytest

from server.index.engine_settings import EngineSettings
from server.memory.caller import CallerContext
from server.memory.service import MemoryService
from server.postgres.backend import PgBackend
from server.postgres.files import PgFileStore
from server.sync.app import ChangeFeed
from tests.postgres_support import cut_all

pytestmark = pytest.mark.anyio

NOW = dt.datetime(2024, 5, 1, 9, 30, tzinfo=dt.UTC)


@pytest.fixture
def servers(postgres_url: str, tmp_path: Path) -> Iterator[Callable[[str], MemoryService]]:
    """Starts a service on the test's database with its own data folder; all are closed at the end."""
    started: list[MemoryService] = []

    def start(name: str) -> MemoryService:
        data = tmp_path / name
        backend = PgBackend(postgres_url, data, None, EngineSettings(), lambda: NOW)
        service = MemoryService(data, None, backend=backend, clock=lambda: NOW)
        started.append(service)
        return service

    yield start
    for service in started:
        service.close()


async def listening_store(service: MemoryService) -> PgFileStore:
    """Index "proj" of `service`, opened (as a long-poll opens it), once it listens for other servers' changes."""
    store = cast(PgFileStore, service.indexes.get("proj").mirror)
    assert await anyio.to_thread.run_sync(store.listening.wait, 5)
    return store


async def write(service: MemoryService, text: str) -> None:
    store = service.indexes.get("proj").mirror
    await anyio.to_thread.run_sync(lambda: store.write("memory/notes.md", text, caller="alice"))


async def test_a_write_through_one_server_wakes_the_long_polls_waiting_on_another(
    servers: Callable[[str], MemoryService],
) -> None:
    one, two = servers("one"), servers("two")
    feed = ChangeFeed()
    two.change_listeners.append(feed.notify)
    await listening_store(two)
    signal = feed.event("proj")
    await write(one, "the deploy runs on Tuesdays\n")
    with anyio.fail_after(5):
        await signal.wait()
    assert [s.path for s in two.indexes.get("proj").mirror.changes_since(0)] == ["memory/notes.md"]


async def test_a_dropped_listening_connection_is_made_again_and_wakes_everyone_once(
    postgres_url: str, servers: Callable[[str], MemoryService]
) -> None:
    one, two = servers("one"), servers("two")
    feed = ChangeFeed()
    two.change_listeners.append(feed.notify)
    await listening_store(two)
    await listening_store(one)
    missed = feed.event("proj")
    assert await anyio.to_thread.run_sync(cut_all, postgres_url) >= 2  # both servers' listening connections
    with anyio.fail_after(5):  # notifications may have been lost meanwhile: the waiters look again
        await missed.wait()
    signal = feed.event("proj")
    await write(one, "written after the cut\n")
    with anyio.fail_after(5):
        await signal.wait()
    assert two.indexes.get("proj").mirror.revision() == 1


async def test_a_write_through_one_server_is_found_by_a_search_on_another(
    servers: Callable[[str], MemoryService],
) -> None:
    one, two = servers("one"), servers("two")
    alice = CallerContext("alice", "SHA256:alice", {"proj": "rw"}, "proj", "rw")
    assert await anyio.to_thread.run_sync(lambda: two.search(alice, "deploy").hits) == []  # opened and scanned
    await listening_store(two)
    await write(one, "the deploy runs on Tuesdays\n")
    await write(one, "the deploy runs on Thursdays\n")  # a second change to the same file

    def found() -> list[str]:
        return [hit.snippet for hit in two.search(alice, "deploy").hits]

    with anyio.fail_after(5):
        while not any("Thursdays" in snippet for snippet in await anyio.to_thread.run_sync(found)):
            await anyio.sleep(0.05)
