"""The server's inner app in process, as authenticated callers: what the channel would hand it after the handshake
(`scope["user"]`), without the channel. For protocol-level tests of `/sync/*`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import httpx2

from channel.authz import ChannelUser
from server.app import create_inner_app
from server.memory.service import MemoryService


@asynccontextmanager
async def inner_clients(service: MemoryService, *users: ChannelUser) -> AsyncIterator[dict[str, httpx2.AsyncClient]]:
    """One HTTP client per user (by name), each reaching one inner app of `service` as that user."""
    app = create_inner_app(service)

    def transport(user: ChannelUser) -> httpx2.ASGITransport:
        async def as_user(scope: Any, receive: Any, send: Any) -> None:
            await app({**scope, "user": user}, receive, send)

        return httpx2.ASGITransport(as_user)

    async with AsyncExitStack() as stack:
        clients = {}
        for user in users:
            client = httpx2.AsyncClient(transport=transport(user), base_url="http://memory")
            clients[user.name] = await stack.enter_async_context(client)
        yield clients
