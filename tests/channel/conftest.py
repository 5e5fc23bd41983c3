"""A real server behind the channel, for any test that needs one (the MCP and sync tests reuse it).

    def test_something(serve):
        server = serve(inner_app, callers)          # uvicorn on 127.0.0.1, a free port, in a thread
        async with server.client(device_key) as client:
            response = await client.get("/anything")

`serve` takes any ASGI app and any `CallerDirectory` (plus `ChannelMiddleware` options such as `clock` or
`handshake_rate`); it wraps the app in the middleware, serves it until the test ends, and returns a
`RunningServer` with the URL, the server's public key (what clients pin) and the middleware.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest
import uvicorn

from channel.asgi import ASGIApp
from channel.authz import CallerDirectory, CallerTable, Identity
from channel.keys import PrivateKey, PublicKey
from channel.middleware import ChannelMiddleware
from channel.ratelimit import Rate
from channel.transport import ChannelTransport
from tests.channel.relay import Handler, Relay

START_TIMEOUT = 10.0
GENEROUS = Rate(burst=10_000, per_second=10_000)  # tests handshake far more often than any laptop


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class RunningServer:
    url: str
    server_key: PublicKey
    private_key: PrivateKey
    middleware: ChannelMiddleware

    def transport(self, client_key: PrivateKey, **options: Any) -> ChannelTransport:
        """A client transport pinned to this server (override `server_key` to pin another)."""
        options.setdefault("server_key", self.server_key)
        return ChannelTransport(self.url, client_key=client_key, **options)

    def client(self, client_key: PrivateKey, **options: Any) -> httpx2.AsyncClient:
        """An httpx2 client whose every request goes through the channel."""
        return httpx2.AsyncClient(transport=self.transport(client_key, **options), base_url="http://memory")


class MutableDirectory:
    """A `CallerDirectory` whose table a test replaces, as the server does when callers.toml changes."""

    def __init__(self, table: CallerTable) -> None:
        self.table = table

    def lookup(self, static_key: bytes) -> Identity | None:
        return self.table.lookup(static_key)


class _ThreadedServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.ready.set()


@contextmanager
def serve_channel(
    app: ASGIApp, callers: CallerDirectory, *, server_key: PrivateKey | None = None, **options: Any
) -> Iterator[RunningServer]:
    """Serve `app` behind the channel on 127.0.0.1 until the block ends."""
    key = server_key or PrivateKey.generate("test server")
    options.setdefault("handshake_rate", GENEROUS)
    middleware = ChannelMiddleware(app, server_key=key, callers=callers, **options)
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets that say so (else 40 ms per request).
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    config = uvicorn.Config(
        middleware, log_config=None, lifespan="auto", http="h11", ws="none", timeout_graceful_shutdown=2
    )
    server = _ThreadedServer(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, name=f"uvicorn:{port}", daemon=True)
    thread.start()
    try:
        if not server.ready.wait(START_TIMEOUT):
            raise RuntimeError("the test server did not start")
        yield RunningServer(f"http://127.0.0.1:{port}", key.public, key, middleware)
    finally:
        server.should_exit = True
        thread.join(START_TIMEOUT)
        listener.close()


@pytest.fixture
def serve() -> Iterator[Callable[..., RunningServer]]:
    """`serve(app, callers, **options)` -> RunningServer, stopped at the end of the test."""
    with ExitStack() as stack:
        yield lambda app, callers, **options: stack.enter_context(serve_channel(app, callers, **options))


@pytest.fixture
async def make_relay() -> AsyncIterator[Callable[..., Relay]]:
    """`make_relay(handler=None)` -> a `Relay` (the hostile network), shut down at the end of the test."""
    made: list[Relay] = []

    def make(handler: Handler | None = None) -> Relay:
        made.append(Relay(handler))
        return made[-1]

    yield make
    for relay in made:
        await relay.shutdown()
