"""The product end to end: `create_app` (channel, healthz, MCP) under uvicorn on 127.0.0.1, with a real keys
directory and callers.toml, reached by the SDK's streamable-HTTP client through the real `ChannelTransport`."""

from __future__ import annotations

import io
import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp.shared.exceptions import MCPError

from channel.constants import INDEX_HEADER
from channel.keys import PrivateKey
from server.app import create_app
from server.callers.config import CALLERS_FILE
from server.callers.file import CallersFile, update_callers
from server.cli import serve
from server.index.embeddings.base import Embedder
from server.index.embeddings.remote import HttpOptions, OpenAIEmbedder
from server.index.tokens import WordPieceTokenizer
from server.memory.service import MemoryService
from tests.channel.conftest import RunningServer
from tests.fakes.embedder import HashingEmbedder
from tests.fakes.provider_api import FakeProviderAPI
from tests.fakes.provider_api import serve as serve_provider
from tests.mcp_support import (
    MODES,
    WAIT,
    GatedEmbedder,
    SyncSpy,
    connect_channel,
    error,
    plant,
    serve_asgi,
    structured,
    text,
)
from tests.threaded_uvicorn import ThreadedUvicorn

pytestmark = pytest.mark.anyio

GRANTS = {
    "alice": {"alice-notes": "rw", "team": "r"},
    "bob": {"bob-notes": "rw"},
    "reader": {"alice-notes": "r"},
}
JSON_AND_SSE = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


@dataclass
class Deployment:
    server: RunningServer
    uvicorn: ThreadedUvicorn
    data_dir: Path
    service: MemoryService
    devices: dict[str, PrivateKey]

    def mcp(self, device: str, index: str | None, *, mode: str = "legacy", timezone: str | None = None) -> Any:
        return connect_channel(self.server, self.devices[device], index, mode=mode, timezone=timezone)

    def http(self, device: str) -> httpx2.AsyncClient:
        return self.server.client(self.devices[device])


@contextmanager
def deploy(tmp_path: Path, embedder: Embedder | None = None) -> Iterator[Deployment]:
    """What `memory-server serve` puts together, minus the command line: keys, callers.toml, service, app."""
    keys_dir, data_dir = tmp_path / "keys", tmp_path / "data"
    server_key = serve.ensure_server_key(keys_dir, out=io.StringIO())
    serve.prepare_data_dir(data_dir)
    devices = {name: PrivateKey.generate(f"{name}-laptop") for name in GRANTS}
    for name, grants in GRANTS.items():
        update_callers(keys_dir / CALLERS_FILE, lambda c, n=name, g=grants: c.add(n, [devices[n].public], g))
    service = MemoryService(data_dir, embedder or HashingEmbedder())
    app = create_app(service, server_key=server_key, callers=CallersFile(keys_dir / CALLERS_FILE), data_dir=data_dir)
    with serve_asgi(app) as (url, server):
        yield Deployment(RunningServer(url, server_key.public, server_key, app), server, data_dir, service, devices)


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    with deploy(tmp_path) as running:
        yield running


# plain HTTP -----------------------------------------------------------------------------------------------


async def test_healthz_answers_without_authentication_and_says_nothing_else(deployment):
    async with httpx2.AsyncClient(base_url=deployment.server.url) as plain:
        health = await plain.get("/healthz")
        mcp = await plain.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=JSON_AND_SSE)
        other = await plain.get("/healthz/../mcp")
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    assert "server" not in health.headers and "memory" not in health.text
    assert mcp.status_code == 404 and other.status_code == 404


# every tool, both protocol generations ----------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_every_tool_resource_and_prompt_works_through_the_channel(deployment, mode):
    async with deployment.mcp("alice", "alice-notes", mode=mode, timezone="Europe/Paris") as client:
        assert len((await client.list_tools()).tools) == 9
        started = time.monotonic()
        written = structured(await client.call_tool("memory_write", {"content": "Deploys go out on Tuesdays"}))
        found = structured(await client.call_tool("memory_search", {"query": "deploys tuesdays"}))
        searchable_after = time.monotonic() - started
        got = structured(await client.call_tool("memory_get", {"path": written["path"], "start_line": 1}))
        listed = structured(await client.call_tool("memory_list", {}))
        status = structured(await client.call_tool("memory_status", {}))
        progress: list[tuple[float, float | None]] = []

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            progress.append((done, total))

        synced = structured(await client.call_tool("memory_sync", {"force": True}, progress_callback=on_progress))
        resources = await client.list_resources()
        read = await client.read_resource(resources.resources[0].uri)
        prompt = await client.get_prompt("recall", {"question": "when do we deploy?"})
        bad = error(await client.call_tool("memory_get", {"path": "../../etc/passwd"}))
        deleted = structured(await client.call_tool("memory_delete", {"path": written["path"]}))
        gone = structured(await client.call_tool("memory_search", {"query": "deploys tuesdays"}))
        history = structured(await client.call_tool("memory_history", {"deleted": True}))["versions"]
        undo = {"path": written["path"], "version": history[0]["restore_version"]}
        restored = structured(await client.call_tool("memory_restore", undo))
        back = structured(await client.call_tool("memory_get", {"path": written["path"]}))
    assert written["indexed"] is True and searchable_after < 1.0
    assert found["hits"][0]["citation"].startswith(written["path"] + "#L")
    assert "Deploys go out on Tuesdays" in got["content"] and got["hash"] == written["hash"]
    assert [f["path"] for f in listed["files"]] == [written["path"]]
    assert (status["caller"], status["index"]) == ("alice", "alice-notes")
    assert synced["files_seen"] == 1 and progress == [(1, 1)]  # notifications stream through the tunnel
    assert "Deploys go out on Tuesdays" in read.contents[0].text
    assert "when do we deploy?" in prompt.messages[0].content.text
    assert "'..'" in bad
    assert deleted["deleted"] is True and gone["hits"] == []
    assert restored["hash"] == written["hash"] and back["hash"] == written["hash"]


async def test_a_retried_write_and_a_stale_replace_through_the_channel(deployment):
    note = {"content": "rotate the signing key in March", "idempotency_key": "retry-1"}
    async with deployment.mcp("alice", "alice-notes") as client:
        first = structured(await client.call_tool("memory_write", note))
        second = structured(await client.call_tool("memory_write", note))
        stale = await client.call_tool(
            "memory_write", {"path": first["path"], "mode": "replace", "content": "x", "expected_hash": "0" * 64}
        )
        kept = structured(await client.call_tool("memory_get", {"path": first["path"]}))
    assert second["replayed"] is True and kept["content"].count("rotate the signing key") == 1
    assert first["hash"] in error(stale) and kept["hash"] == first["hash"]


# sessions and isolation -----------------------------------------------------------------------------------


async def test_an_mcp_session_opened_by_one_caller_is_refused_to_every_other(deployment):
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    async with deployment.http("alice") as alice:
        opened = await alice.post("/mcp", json=initialize, headers={**JSON_AND_SSE, INDEX_HEADER: "alice-notes"})
        session = opened.headers["mcp-session-id"]
        in_session = {**JSON_AND_SSE, "mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
        await alice.post(
            "/mcp",
            json={"jsonrpc": "2.0", "method": "notifications/initialized"},
            headers={**in_session, INDEX_HEADER: "alice-notes"},
        )
        own = await alice.post("/mcp", json=listing, headers={**in_session, INDEX_HEADER: "alice-notes"})
        other_index = await alice.post("/mcp", json=listing, headers={**in_session, INDEX_HEADER: "team"})
    async with deployment.http("bob") as bob:
        stolen = await bob.post("/mcp", json=listing, headers={**in_session, INDEX_HEADER: "bob-notes"})
        stolen_delete = await bob.delete("/mcp", headers={**in_session, INDEX_HEADER: "bob-notes"})
    async with deployment.http("alice") as alice:
        still_alive = await alice.post("/mcp", json=listing, headers={**in_session, INDEX_HEADER: "alice-notes"})
    assert opened.status_code == 200 and own.status_code == 200 and "memory_search" in own.text
    assert other_index.status_code == 404  # the session belongs to (caller, key, index), not to the caller alone
    assert stolen.status_code == 404 and stolen_delete.status_code == 404
    assert "memory_search" not in stolen.text
    assert still_alive.status_code == 200  # bob's attempts did not end alice's session


async def test_callers_with_different_indexes_cannot_see_or_touch_each_others_files(deployment):
    async with deployment.mcp("bob", "bob-notes") as client:
        await client.call_tool("memory_write", {"path": "MEMORY.md", "content": "bob secret pelican"})
    bob_file = deployment.data_dir / "indexes" / "bob-notes" / "files" / "MEMORY.md"
    async with deployment.mcp("alice", "alice-notes") as client:
        results = [
            await client.call_tool("memory_get", {"path": "../../bob-notes/files/MEMORY.md"}),
            await client.call_tool("memory_get", {"path": str(bob_file)}),
            await client.call_tool("memory_get", {"path": "%2e%2e/%2e%2e/bob-notes/files/MEMORY.md"}),
            await client.call_tool("memory_delete", {"path": "../../bob-notes/files/MEMORY.md"}),
            await client.call_tool("memory_write", {"path": "../../bob-notes/files/MEMORY.md", "content": "x"}),
            await client.call_tool("memory_search", {"query": "bob secret pelican", "scope": "all"}),
            await client.call_tool("memory_list", {"prefix": "../"}),
        ]
        for uri in ("memory://bob-notes/MEMORY.md", "memory://alice-notes/%2E%2E/%2E%2E/bob-notes/files/MEMORY.md"):
            with pytest.raises(MCPError):
                await client.read_resource(uri)
    for result in results:
        assert "pelican" not in text(result)
    # The index comes from the channel's header, checked against the grant: naming bob's index is refused.
    async with deployment.http("alice") as alice:
        refused = await alice.post("/mcp", json={}, headers={**JSON_AND_SSE, INDEX_HEADER: "bob-notes"})
    assert refused.status_code == 403 and "pelican" not in refused.text
    assert bob_file.read_text("utf-8") == "bob secret pelican\n"


async def test_a_caller_with_read_access_only_cannot_write_or_delete(deployment):
    async with deployment.mcp("alice", "alice-notes") as client:
        await client.call_tool("memory_write", {"path": "MEMORY.md", "content": "kept"})
    async with deployment.mcp("reader", "alice-notes") as client:
        assert structured(await client.call_tool("memory_get", {"path": "MEMORY.md"}))["content"] == "kept"
        write = error(await client.call_tool("memory_write", {"content": "not allowed"}))
        delete = error(await client.call_tool("memory_delete", {"path": "MEMORY.md"}))
    assert "only read" in write and "only read" in delete


# long work, cancellation, shutdown ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_cancelling_a_long_sync_through_the_channel_reaches_the_server(tmp_path, mode):
    embedder = GatedEmbedder()
    with deploy(tmp_path, embedder) as deployment:
        spy = SyncSpy(deployment.service)
        for n in range(6):
            plant(deployment.data_dir, "alice-notes", f"memory/slow-{n}.md", f"# Slow {n}\n\ntext {n}\n")
        try:
            async with deployment.mcp("alice", "alice-notes", mode=mode) as client:
                await client.call_tool("memory_status", {})
                embedder.gate.clear()
                with anyio.fail_after(WAIT):
                    async with anyio.create_task_group() as watcher:
                        watcher.start_soon(spy.release_when_cancelled, embedder.gate)
                        async with anyio.create_task_group() as group:
                            group.start_soon(client.call_tool, "memory_sync", {})
                            await anyio.to_thread.run_sync(embedder.entered.wait, WAIT)
                            group.cancel_scope.cancel()
                    outcome = await spy.outcome()
        finally:
            embedder.gate.set()
    assert outcome.cancelled is True and outcome.files_indexed == 1


async def test_a_slow_sync_does_not_stall_other_callers_searches(tmp_path):
    embedder = GatedEmbedder()
    with deploy(tmp_path, embedder) as deployment:
        for n in range(40):  # more than a search indexes on the spot
            plant(deployment.data_dir, "alice-notes", f"memory/held-{n}.md", f"held {n}\n")
        try:
            async with deployment.mcp("bob", "bob-notes") as bob, deployment.mcp("reader", "alice-notes") as reader:
                await bob.call_tool("memory_write", {"content": "bob keeps answering"})
                async with deployment.mcp("alice", "alice-notes") as alice, anyio.create_task_group() as group:
                    await alice.call_tool("memory_status", {})
                    embedder.gate.clear()
                    group.start_soon(alice.call_tool, "memory_sync", {})
                    await anyio.to_thread.run_sync(embedder.entered.wait, WAIT)
                    with anyio.fail_after(WAIT):
                        other_index = structured(await bob.call_tool("memory_search", {"query": "keeps answering"}))
                        same_index = structured(await reader.call_tool("memory_search", {"query": "held"}))
                        async with httpx2.AsyncClient(base_url=deployment.server.url) as plain:
                            health = await plain.get("/healthz")
                    embedder.gate.set()
        finally:
            embedder.gate.set()
    assert other_index["hits"] and same_index["pending_files"] > 0 and health.status_code == 200


async def test_shutting_down_finishes_the_write_in_flight(tmp_path):
    embedder = GatedEmbedder()
    with deploy(tmp_path, embedder) as deployment:
        async with deployment.mcp("alice", "alice-notes", mode="auto") as client:
            await client.call_tool("memory_status", {})
            embedder.gate.clear()
            with anyio.fail_after(WAIT):
                async with anyio.create_task_group() as group:
                    results: list[Any] = []

                    async def write() -> None:
                        results.append(await client.call_tool("memory_write", {"path": "MEMORY.md", "content": "last"}))

                    group.start_soon(write)
                    await anyio.to_thread.run_sync(embedder.entered.wait, WAIT)
                    deployment.uvicorn.should_exit = True  # SIGTERM does the same
                    await anyio.to_thread.run_sync(deployment.uvicorn.shutting_down.wait, WAIT)
                    embedder.gate.set()
    assert structured(results[0])["indexed"] is True
    reopened = MemoryService(tmp_path / "data", HashingEmbedder())
    try:
        alice = reopened_caller()
        assert reopened.get(alice, "MEMORY.md").content == "last"
        assert reopened.search(alice, "last").hits
    finally:
        reopened.close()


def reopened_caller() -> Any:
    from server.memory.service import CallerContext

    return CallerContext("alice", "SHA256:x", GRANTS["alice"], "alice-notes", "rw")


# secrets --------------------------------------------------------------------------------------------------


async def test_a_provider_api_key_never_reaches_results_resources_errors_or_logs(tmp_path, caplog):
    canary = "sk-canary-7d1e0c5b9a334f1f"
    api = FakeProviderAPI(api_key=canary)
    with serve_provider(api):
        embedder = OpenAIEmbedder(
            api_key=canary,
            model="text-embedding-3-small",
            dimensions=api.dimensions,
            base_url=api.url,
            tokenizer=WordPieceTokenizer.default(),
            max_tokens=8000,
            options=HttpOptions(timeout=2.0, max_retries=0, backoff=0.0, batch_size=64),
            sleep=lambda _s: None,
        )
        caplog.set_level(logging.DEBUG)
        seen: list[str] = []
        with deploy(tmp_path, embedder) as deployment:
            async with deployment.mcp("alice", "alice-notes") as client:
                seen.append(text(await client.call_tool("memory_write", {"content": "works with the key"})))
                # The provider fails and echoes the key back, as real APIs do for a wrong key.
                echo = json.dumps({"error": {"message": f"rate limited for key {canary}"}}).encode()
                api.fail(status=429, times=50, body=echo)
                seen.append(text(await client.call_tool("memory_write", {"content": "provider is failing now"})))
                seen.append(text(await client.call_tool("memory_search", {"query": "provider failing"})))
                seen.append(text(await client.call_tool("memory_sync", {"force": True})))
                seen.append(text(await client.call_tool("memory_status", {})))
                for resource in (await client.list_resources()).resources:
                    seen.append(str((await client.read_resource(resource.uri)).contents))
    assert api.requests, "the provider was really used"
    assert all(canary not in answer for answer in seen)
    assert canary not in caplog.text
