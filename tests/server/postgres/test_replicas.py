"""Two real servers (uvicorn, the channel middleware) on one PostgreSQL database, as replicas behind a load
balancer: a session made on one serves requests on the other, a request accepted by one is refused by the other,
and a key revoked through either is refused by both within a second."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import ExitStack, asynccontextmanager
from pathlib import Path

import anyio
import anyio.to_thread
import httpx2
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from channel.authz import CallerDirectory
from channel.constants import HANDSHAKE_PATH, TUNNEL_PATH
from channel.errors import HandshakeRefused, TunnelRefused
from channel.handshake import create_initiation
from channel.keys import PrivateKey
from server.postgres.callers import SharedCallers, update_shared_callers
from server.postgres.sessions import PgSessionStore
from tests.channel.apps import AppState, caller, inner_app, table
from tests.channel.conftest import MutableDirectory, RunningServer, serve_channel
from tests.channel.relay import Answer, Forward, Outer, Relay

pytestmark = pytest.mark.anyio

SERVER = PrivateKey.generate("memory-server")
DEVICE = PrivateKey.generate("alice@laptop")
REVOCATION_BOUND = 1.0  # seconds: a revoked key is refused by every replica within this


class RoundRobin:
    """A load balancer for a `Relay`: each outer request to the next of `urls` in turn, or as `route` says."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls
        self.route: Iterator[int] = itertools.cycle(range(len(urls)))

    async def __call__(self, outer: Outer, forward: Forward) -> Answer:
        target = self.urls[next(self.route)]
        return await forward(Outer(httpx2.URL(target + outer.path), outer.headers, outer.content))


class Replicas:
    """Servers sharing one database, the server key and the inner app's state; `relay` routes each outer request
    to the replica a test names (`route`), round robin by default, as a load balancer does."""

    def __init__(self, stack: ExitStack, url: str, directories: list[CallerDirectory], state: AppState) -> None:
        self.state = state
        self.servers: list[RunningServer] = []
        for directory in directories:
            store = PgSessionStore(url, SERVER, time.time)
            stack.callback(store.close)
            running = serve_channel(inner_app(state), directory, server_key=SERVER, sessions=store)
            self.servers.append(stack.enter_context(running))
        self.balancer = RoundRobin([server.url for server in self.servers])
        self.relay = Relay(self.balancer)

    @property
    def route(self) -> Iterator[int]:
        return self.balancer.route

    @route.setter
    def route(self, order: Iterator[int]) -> None:
        self.balancer.route = order

    def only(self, index: int) -> None:
        self.route = itertools.repeat(index)

    @asynccontextmanager
    async def client(self, key: PrivateKey = DEVICE) -> AsyncIterator[httpx2.AsyncClient]:
        async with self.servers[0].client(key, transport=self.relay) as client:
            yield client

    async def resend(self, outer: Outer, index: int) -> Answer:
        return await self.relay.forward(
            Outer(httpx2.URL(self.servers[index].url + outer.path), outer.headers, outer.content)
        )


@pytest.fixture
async def shared(postgres_url: str) -> AsyncIterator[Replicas]:
    directory = MutableDirectory(table(caller("alice", DEVICE, notes="rw")))
    with ExitStack() as stack:
        replicas = Replicas(stack, postgres_url, [directory, directory], AppState())
        yield replicas
        await replicas.relay.shutdown()


async def test_a_session_made_on_one_replica_serves_requests_on_the_other(shared: Replicas):
    shared.only(0)
    async with shared.client() as client:
        assert (await client.post("/count")).json() == {"count": 1}  # handshake and first request on A
        shared.route = itertools.cycle((1, 0))
        counts = [(await client.post("/count")).json()["count"] for _ in range(6)]
        big = await client.get("/download", params={"size": 3 * 1024 * 1024})  # several frames, from B
    assert counts == [2, 3, 4, 5, 6, 7] and len(big.content) == 3 * 1024 * 1024
    handshakes = [outer for outer in shared.relay.seen if outer.path != TUNNEL_PATH]
    assert len(handshakes) == 1  # one session served both replicas


async def test_a_request_accepted_on_one_replica_is_refused_on_the_other(shared: Replicas):
    shared.only(0)
    async with shared.client() as client:
        assert (await client.post("/count")).json() == {"count": 1}
    accepted = shared.relay.seen[-1]
    replayed = await shared.resend(accepted, 1)
    assert (replayed.status, replayed.body) == (400, b"bad frame\n") and shared.state.count == 1
    again = await shared.resend(accepted, 0)
    assert again.status == 400 and shared.state.count == 1


async def test_a_handshake_accepted_on_one_replica_is_refused_when_replayed_to_the_other(shared: Replicas):
    hello = create_initiation(DEVICE, SERVER.public, time.time_ns(), os.urandom)[0]
    first = await shared.relay.forward(Outer(httpx2.URL(shared.servers[0].url + HANDSHAKE_PATH), [], hello))
    replayed = await shared.relay.forward(Outer(httpx2.URL(shared.servers[1].url + HANDSHAKE_PATH), [], hello))
    assert first.status == 200 and (replayed.status, replayed.body) == (403, b"handshake failed\n")


async def test_a_key_revoked_on_one_replica_is_refused_by_both_within_a_second(postgres_url: str, tmp_path: Path):
    path = tmp_path / "callers.toml"  # none yet: the shared table starts empty
    grant = lambda config: config.add("alice", [DEVICE.public], {"notes": "rw"})  # noqa: E731
    await anyio.to_thread.run_sync(update_shared_callers, postgres_url, path, grant)
    directories = [SharedCallers(postgres_url, path), SharedCallers(postgres_url, path)]
    with ExitStack() as stack:
        for directory in directories:
            stack.callback(directory.close)
        replicas = Replicas(stack, postgres_url, list(directories), AppState())
        try:
            async with replicas.client() as client:
                for _ in range(2):  # a request on each replica
                    assert (await client.post("/count")).status_code == 200
                assert all(d.lookup(DEVICE.public.x25519) is not None for d in directories)
                assert [len(server.middleware.sessions) for server in replicas.servers] == [1, 1]  # one, shared
                revoke = lambda config: config.revoke("alice", None)  # noqa: E731
                await anyio.to_thread.run_sync(update_shared_callers, postgres_url, path, revoke)
                assert all(len(server.middleware.sessions) == 0 for server in replicas.servers)  # ended at once
                with anyio.fail_after(REVOCATION_BOUND):
                    while any(d.lookup(DEVICE.public.x25519) is not None for d in directories):
                        await anyio.sleep(0.01)
                for _ in range(2):  # refused on each replica: its session answers 401, the handshake 403
                    with pytest.raises(HandshakeRefused):
                        await client.post("/count")
            assert replicas.state.count == 2
            assert all(len(server.middleware.sessions) == 0 for server in replicas.servers)
        finally:
            await replicas.relay.shutdown()


async def test_a_database_out_of_reach_gets_a_503_and_the_server_carries_on_once_it_is_back(
    shared: Replicas, reachable: Callable[[bool], None]
):
    async with shared.client() as client:
        assert (await client.post("/count")).status_code == 200
        await anyio.to_thread.run_sync(reachable, False)
        try:
            with pytest.raises(TunnelRefused) as refused:
                await client.post("/count")
        finally:
            await anyio.to_thread.run_sync(reachable, True)
        assert refused.value.status == 503
        assert (await client.post("/count")).json() == {"count": 2}


async def test_a_database_lost_while_a_request_runs_still_gets_its_answer_and_the_session_serves_on(
    postgres_url: str, reachable: Callable[[bool], None]
):
    # The answer's nonces are leased with the request's commit, before the app runs: before, the first frame
    # leased them, the lease failed, and every later answer of the session on this replica was cut too.
    ran: list[str] = []

    async def restarting(request: Request) -> JSONResponse:
        ran.append(request.url.path)
        await anyio.to_thread.run_sync(reachable, False)
        return JSONResponse({"ran": len(ran)})

    async def count(request: Request) -> JSONResponse:
        ran.append(request.url.path)
        return JSONResponse({"ran": len(ran)})

    app = Starlette(
        routes=[Route("/restarting", restarting, methods=["POST"]), Route("/count", count, methods=["POST"])]
    )
    now = [time.time()]  # the store's clock stands still: no recheck of the cached session falls in the outage
    store = PgSessionStore(postgres_url, SERVER, lambda: now[0])
    directory = MutableDirectory(table(caller("alice", DEVICE, notes="rw")))
    try:
        with serve_channel(app, directory, server_key=SERVER, sessions=store) as running:
            async with running.client(DEVICE) as client:
                assert (await client.post("/restarting")).json() == {"ran": 1}
                await anyio.to_thread.run_sync(reachable, True)
                assert [(await client.post("/count")).json()["ran"] for _ in range(2)] == [2, 3]
    finally:
        store.close()
