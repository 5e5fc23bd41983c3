"""The client transport against servers that misbehave: one that never answers, one behind a proxy that compresses."""

from __future__ import annotations

import gzip
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import anyio
import anyio.abc
import httpx2
import pytest
import uvicorn

import channel.transport
from channel.asgi import Receive, Scope, Send, read_body
from channel.constants import HANDSHAKE_PATH, TUNNEL_PATH
from channel.errors import ProtocolError
from channel.keys import PrivateKey
from tests.channel.apps import WAIT, AppState, caller, inner_app, table
from tests.channel.conftest import MutableDirectory, RunningServer
from tests.threaded_uvicorn import run_uvicorn

pytestmark = pytest.mark.anyio

DEVICE = PrivateKey.generate("alice@laptop")
BOMB = gzip.compress(bytes(100 * 1024 * 1024), 9)  # about 100 KB on the wire, 100 MiB decoded


class Silent:
    """A real TCP server that accepts connections and never answers, counting them (one per handshake here)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.connections = 0
        self.connected = anyio.Event()

    async def hold(self, stream: anyio.abc.SocketStream) -> None:
        self.connections += 1
        self.connected.set()
        async with stream:
            await anyio.sleep_forever()


@asynccontextmanager
async def silent_server() -> AsyncIterator[Silent]:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    silent = Silent(f"http://127.0.0.1:{listener.extra(anyio.abc.SocketAttribute.local_port)}")
    async with listener, anyio.create_task_group() as group:
        group.start_soon(listener.serve, silent.hold)
        yield silent
        group.cancel_scope.cancel()


def silent_client(silent: Silent) -> httpx2.AsyncClient:
    transport = channel.transport.ChannelTransport(
        silent.url, client_key=DEVICE, server_key=PrivateKey.generate().public
    )
    return httpx2.AsyncClient(transport=transport, base_url="http://memory", timeout=WAIT * 10)


async def test_requests_waiting_on_a_handshake_that_fails_get_its_error_without_handshaking_again(monkeypatch):
    # Each waiting request handshook in turn after the first failed: 8 requests took 8 handshake timeouts.
    monkeypatch.setattr(channel.transport, "HANDSHAKE_TIMEOUT", 0.3)
    errors: list[BaseException] = []

    async def request(client: httpx2.AsyncClient) -> None:
        try:
            await client.get("/echo")
        except httpx2.ReadTimeout as error:
            errors.append(error)

    async with silent_server() as silent, silent_client(silent) as client:
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as group:
                for _ in range(8):
                    group.start_soon(request, client)
        assert len(errors) == 8 and silent.connections == 1
        with anyio.fail_after(WAIT), pytest.raises(httpx2.ReadTimeout):
            await client.get("/echo")  # a request after the failure tries again: no latch
        assert silent.connections == 2


async def test_a_request_cancelled_during_its_handshake_leaves_the_waiting_requests_to_handshake(monkeypatch):
    monkeypatch.setattr(channel.transport, "HANDSHAKE_TIMEOUT", 0.3)
    first = anyio.CancelScope()
    errors: list[BaseException] = []

    async def cancelled(client: httpx2.AsyncClient) -> None:
        with first:
            await client.get("/echo")

    async def waiting(client: httpx2.AsyncClient) -> None:
        try:
            await client.get("/echo")
        except httpx2.ReadTimeout as error:
            errors.append(error)

    async with silent_server() as silent, silent_client(silent) as client:
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as group:
                group.start_soon(cancelled, client)
                await silent.connected.wait()
                group.start_soon(waiting, client)
                await anyio.wait_all_tasks_blocked()  # queued behind the first request's handshake
                first.cancel()
        assert first.cancelled_caught and len(errors) == 1
        assert silent.connections == 2  # the cancellation was not handed on: the waiting request handshook itself


@contextmanager
def compressing_proxy(real: RunningServer, compressed_path: str) -> Iterator[str]:
    """A real HTTP server in front of `real`, as a proxy that compresses: it answers `compressed_path` with a gzip
    bomb, whose body it holds back until the block ends, and forwards everything else."""
    release = threading.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(scope, receive, 1 << 20)
        if scope["path"] == compressed_path:
            headers = [(b"content-encoding", b"gzip"), (b"content-length", str(len(BOMB)).encode())]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await anyio.to_thread.run_sync(release.wait, WAIT)
            await send({"type": "http.response.body", "body": BOMB})
            return
        forwarded = [(name, value) for name, value in scope["headers"] if name not in (b"host", b"content-length")]
        async with httpx2.AsyncClient() as upstream:
            answer = await upstream.post(real.url + scope["path"], headers=forwarded, content=body)
        await send({"type": "http.response.start", "status": answer.status_code, "headers": answer.headers.raw})
        await send({"type": "http.response.body", "body": answer.content})

    config = uvicorn.Config(app, log_config=None, lifespan="off", http="h11", ws="none", timeout_graceful_shutdown=2)
    with run_uvicorn(config) as (url, _server):
        try:
            yield url
        finally:
            release.set()  # before the server stops: it waits for its answers to finish


@pytest.fixture
def real(serve) -> RunningServer:
    return serve(inner_app(AppState()), MutableDirectory(table(caller("alice", DEVICE, notes="rw"))))


async def test_outer_requests_ask_for_no_content_coding(real, make_relay):
    relay = make_relay()
    async with real.client(DEVICE, transport=relay) as client:
        assert (await client.get("/echo")).status_code == 200
    assert relay.paths() == [HANDSHAKE_PATH, TUNNEL_PATH]
    assert all((b"accept-encoding", b"identity") in outer.headers for outer in relay.seen)


@pytest.mark.parametrize("compressed_path", [HANDSHAKE_PATH, TUNNEL_PATH])
async def test_a_compressed_outer_answer_is_refused_before_its_body_is_read(real, compressed_path):
    # The body came raw (never decoded), but the refusal was an opaque HandshakeError or FrameError, after
    # reading it; a proxy that compresses got no clear word.
    with compressing_proxy(real, compressed_path) as url:
        transport = channel.transport.ChannelTransport(url, client_key=DEVICE, server_key=real.server_key)
        async with httpx2.AsyncClient(transport=transport, base_url="http://memory") as client:
            with anyio.fail_after(WAIT), pytest.raises(ProtocolError, match="Content-Encoding") as refused:
                await client.get("/echo")  # the body is held back: reading it would wait out the bound
    assert "gzip" not in str(refused.value) and "\\x1f\\x8b" not in repr(refused.value)


class Dripping:
    """A real TCP server that answers a handshake with a 200 whose body comes one byte at a time, for ever."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.dripped = 0

    async def drip(self, stream: anyio.abc.SocketStream) -> None:
        async with stream:
            await stream.receive()
            await stream.send(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/x-memory-channel\r\ncontent-length: 4096\r\n\r\n"
            )
            while True:
                await stream.send(b"\0")
                self.dripped += 1
                await anyio.sleep(0.05)


async def test_a_handshake_answer_dripped_a_byte_at_a_time_ends_at_the_handshake_timeout(monkeypatch):
    # Each read had its own timeout, so 4 KB dripped a byte every 29 s held the handshake for 33 hours.
    monkeypatch.setattr(channel.transport, "HANDSHAKE_TIMEOUT", 0.5)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    dripping = Dripping(f"http://127.0.0.1:{listener.extra(anyio.abc.SocketAttribute.local_port)}")
    async with listener, anyio.create_task_group() as group:
        group.start_soon(listener.serve, dripping.drip)
        transport = channel.transport.ChannelTransport(
            dripping.url, client_key=DEVICE, server_key=PrivateKey.generate().public
        )
        async with httpx2.AsyncClient(transport=transport, base_url="http://memory", timeout=WAIT * 10) as client:
            with anyio.fail_after(WAIT), pytest.raises(httpx2.ReadTimeout, match="did not finish"):
                await client.get("/echo")
        group.cancel_scope.cancel()
    assert 0 < dripping.dripped < 4096
