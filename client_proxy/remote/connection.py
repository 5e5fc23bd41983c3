"""The sealed channel to the server, opened from this laptop's proxy configuration, and the calls made over it.

`connect(settings)` reads proxy.toml and the device key, builds the channel's httpx2 client exactly as
`memory-proxy run` does (`channel_client`), and yields a `Remote`: the memory tools by name (their structured
results, as an agent gets them) and a sync push (what a saved edit travels through).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Any, Final

import httpx2

from channel.client_stamps import STAMP_FILE, StampFile
from channel.constants import INDEX_HEADER
from channel.errors import ChannelError
from channel.keys import PrivateKey, read_private_key
from channel.transport import ChannelTransport
from client_proxy.config import ProxyConfig
from client_proxy.forward.local_zone import TIMEZONE_HEADER
from client_proxy.remote.mcp_session import McpSession, RemoteCallError
from client_proxy.settings import RunSettings
from client_proxy.sync.api import EXPECTED_FAILURES, PushChange, PushResult, SyncApi, describe_failure

INNER_BASE: Final = "http://memory"  # inside the tunnel only the path counts
TIMEOUT: Final = httpx2.Timeout(30.0, read=300.0)  # the SDK's: a tool may stream for minutes


def channel_transport(config: ProxyConfig, key: PrivateKey) -> ChannelTransport:
    """The channel to the configured server, its handshake timestamps kept above the newest this device had
    accepted (`channel.client_stamps`: a clock set back must not lock the laptop out)."""
    stamps = StampFile(config.home / STAMP_FILE)
    return ChannelTransport(config.server_url, client_key=key, server_key=config.server_key, stamps=stamps)


def channel_client(config: ProxyConfig, key: PrivateKey, index: str, timezone: str) -> httpx2.AsyncClient:
    """An httpx2 client whose every request travels sealed to the server, naming the index and the time zone."""
    transport = channel_transport(config, key)
    headers = {INDEX_HEADER: index, TIMEZONE_HEADER: timezone}
    return httpx2.AsyncClient(transport=transport, base_url=INNER_BASE, headers=headers, timeout=TIMEOUT)


@dataclass(frozen=True)
class Target:
    """Where the calls go, for the user to see: never a key."""

    server_url: str
    index: str
    device: str


class Remote:
    """The memory tools and the sync push, over one channel client."""

    def __init__(self, client: httpx2.AsyncClient, target: Target) -> None:
        self.target = target
        self._session = McpSession(client, target.server_url)
        self._sync = SyncApi(client)

    async def tool(self, name: str, **arguments: Any) -> dict[str, Any]:
        """Call `memory_<name>` with `arguments` (None values left out): its structured result."""
        return await self._session.call_tool(f"memory_{name}", arguments)

    async def push(self, path: str, base: str | None, content: str) -> PushResult:
        """Send one edited file as a laptop's sync does: the server applies, merges or keeps a conflict copy."""
        try:
            _, results = await self._sync.push([PushChange(path=path, base=base, content=content)])
        except EXPECTED_FAILURES as exc:
            raise RemoteCallError(describe_failure(exc, self.target.server_url)) from None
        return results[0]

    async def close(self) -> None:
        await self._session.close()


@asynccontextmanager
async def connect(settings: RunSettings) -> AsyncIterator[Remote]:
    """A `Remote` for this laptop's configuration; `ProxyError` or `ChannelError` when it is not set up."""
    config = ProxyConfig.load(settings.home)
    index = settings.index_for(config)
    key = read_private_key(config.device_key_path)
    target = Target(config.server_url, index, config.device_name)
    async with channel_client(config, key, index, settings.timezone) as client:
        remote = Remote(client, target)
        try:
            yield remote
        finally:
            with suppress(httpx2.HTTPError, ChannelError):
                await remote.close()
