"""MCP on replicas: two real servers sharing channel sessions (one session table, as PostgreSQL shares it between
replicas), every outer request sent to the other one in turn, as a round-robin balancer does. Stateless MCP
(what `serve` runs with a shared database) answers every call wherever it lands; stateful MCP, which keeps its
session in one process, cannot, which is why replicas run stateless."""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from channel.constants import INDEX_HEADER
from channel.keys import PrivateKey
from channel.session import SessionTable
from server.app import create_inner_app
from server.memory.service import MemoryService
from tests.channel.apps import caller, table
from tests.channel.conftest import RunningServer, serve_channel
from tests.channel.relay import Answer, Forward, Outer, Relay
from tests.fakes.embedder import HashingEmbedder
from tests.mcp_support import structured

pytestmark = pytest.mark.anyio

SERVER = PrivateKey.generate("memory-server")
DEVICE = PrivateKey.generate("alice@laptop")


@pytest.fixture
def replicas(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[list[RunningServer]]:
    """Two servers, each with its own service, sharing the server key and one channel session table."""
    sessions = SessionTable(time.time)
    callers = table(caller("alice", DEVICE, proj="rw"))
    with ExitStack() as stack:
        servers = []
        for number in range(2):
            service = MemoryService(tmp_path / f"replica-{number}", HashingEmbedder())
            stack.callback(service.close)
            app = create_inner_app(service, stateless_mcp=request.param)
            servers.append(stack.enter_context(serve_channel(app, callers, server_key=SERVER, sessions=sessions)))
        yield servers


@asynccontextmanager
async def round_robin_client(servers: list[RunningServer]) -> AsyncIterator[Client]:
    """The SDK client over the channel, each outer request sent to the next server in turn."""
    turn = itertools.cycle(servers)

    async def to_next(outer: Outer, forward: Forward) -> Answer:
        return await forward(Outer(httpx2.URL(next(turn).url + outer.path), outer.headers, outer.content))

    relay = Relay(to_next)
    transport = servers[0].transport(DEVICE, transport=relay)
    http = httpx2.AsyncClient(transport=transport, headers={INDEX_HEADER: "proj"}, timeout=httpx2.Timeout(30.0))
    try:
        async with http, Client(streamable_http_client("http://memory/mcp", http_client=http), mode="legacy") as client:
            yield client
    finally:
        await relay.shutdown()


@pytest.mark.parametrize("replicas", [True], indirect=True, ids=["stateless"])
async def test_stateless_mcp_answers_every_call_whichever_replica_it_lands_on(replicas: list[RunningServer]) -> None:
    async with round_robin_client(replicas) as client:
        for number in range(4):
            written = await client.call_tool(
                "memory_write", {"content": f"note {number}\n", "path": f"memory/n{number}.md"}
            )
            assert structured(written)["path"] == f"memory/n{number}.md"
            assert structured(await client.call_tool("memory_status", {}))["caller"] == "alice"


@pytest.mark.parametrize("replicas", [False], indirect=True, ids=["stateful"])
async def test_stateful_mcp_loses_its_session_on_the_other_replica(replicas: list[RunningServer]) -> None:
    with pytest.raises(BaseException) as failed:  # the SDK raises a group around its own error
        async with round_robin_client(replicas) as client:
            for _ in range(4):
                await client.call_tool("memory_status", {})
    assert "session" in repr(failed.value).lower()
