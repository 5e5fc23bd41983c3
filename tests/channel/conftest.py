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

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest
import uvicorn

from channel.asgi import ASGIApp
from channel.authz import CallerDirectory, CallerTable, Identity
from channel.caller_load import CallerLimits
from channel.keys import PrivateKey, PublicKey
from channel.middleware import ChannelMiddleware
from channel.ratelimit import Rate
from channel.transport import ChannelTransport
from tests.channel.relay import Handler, Relay
from tests.threaded_uvicorn import run_uvicorn

# X25519 public keys that are all zero or of low order: a DH with them gives a predictable result.
LOW_ORDER = [
    "0000000000000000000000000000000000000000000000000000000000000000",
    "0100000000000000000000000000000000000000000000000000000000000000",
    "e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800",
    "5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157",
    "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
]
GENEROUS = Rate(burst=10_000, per_second=10_000)  # tests handshake far more often than any laptop
UNLIMITED = CallerLimits(max_requests=10_000, max_bytes=2**40, rate=GENEROUS)  # replay tests send 64 copies at once


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


@contextmanager
def serve_channel(
    app: ASGIApp, callers: CallerDirectory, *, server_key: PrivateKey | None = None, port: int = 0, **options: Any
) -> Iterator[RunningServer]:
    """Serve `app` behind the channel on 127.0.0.1 (`port` 0: a free one) until the block ends."""
    key = server_key or PrivateKey.generate("test server")
    options.setdefault("handshake_rate", GENEROUS)
    options.setdefault("failure_rate", GENEROUS)
    options.setdefault("caller_limits", UNLIMITED)
    middleware = ChannelMiddleware(app, server_key=key, callers=callers, **options)
    config = uvicorn.Config(
        middleware, log_config=None, lifespan="auto", http="h11", ws="none", timeout_graceful_shutdown=2
    )
    with run_uvicorn(config, port=port) as (url, _server):
        yield RunningServer(url, key.public, key, middleware)


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
