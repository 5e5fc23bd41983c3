"""Helpers for the MCP tests: callers injected the way the channel does, clients in process and over the
channel, an embedder a test can hold still, and files planted in an index's mirror behind the service's back."""

from __future__ import annotations

import dataclasses
import io
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server import MCPServer, ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp_types import CallToolResult
from starlette.requests import Request

from channel.authz import Access, ChannelUser
from channel.constants import INDEX_HEADER
from channel.keys import PrivateKey
from server.cli import serve
from server.index.embeddings.base import InputKind, Vectors
from server.mcp.tools import TIMEZONE_HEADER, build_mcp_server
from server.memory.results import SyncOutput
from server.memory.service import MemoryService
from server.observe import logs
from tests.channel.conftest import RunningServer
from tests.fakes.embedder import HashingEmbedder
from tests.threaded_uvicorn import ThreadedUvicorn, run_uvicorn

MODES = ("legacy", "auto")  # the initialize-based generation, and server/discover (falls back to initialize)
WAIT = 10.0  # the bound on every wait in these tests


def channel_user(name: str, grants: dict[str, Access], index: str | None) -> ChannelUser:
    """What the channel puts at `scope["user"]` for a request naming `index`."""
    return ChannelUser(name, f"SHA256:{name}-key", grants, index, grants.get(index) if index else None)


def as_request_from(user: ChannelUser, headers: Sequence[tuple[str, str]] = ()) -> Any:
    """MCP server middleware giving every message the HTTP request the channel would have let through."""
    raw = [(name.encode(), value.encode()) for name, value in headers]

    async def middleware(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        scope = {"type": "http", "method": "POST", "path": "/mcp", "query_string": b"", "headers": raw, "user": user}
        return await call_next(dataclasses.replace(ctx, request=Request(scope)))

    return middleware


@asynccontextmanager
async def connect(
    service: MemoryService, user: ChannelUser, *, mode: str = "legacy", timezone: str | None = None
) -> AsyncIterator[Client]:
    """An SDK client talking in process to a fresh MCP server over `service`, as `user`."""
    mcp: MCPServer = build_mcp_server(service)
    # Outermost, as the HTTP transport attaches the request before any middleware runs.
    mcp.middleware.insert(0, as_request_from(user, [(TIMEZONE_HEADER, timezone)] if timezone else []))
    async with Client(mcp, mode=mode) as client:
        yield client


@asynccontextmanager
async def connect_channel(
    server: RunningServer, key: PrivateKey, index: str | None, *, mode: str = "legacy", timezone: str | None = None
) -> AsyncIterator[Client]:
    """An SDK client reaching `/mcp` over real HTTP through the channel, as the device holding `key`."""
    headers = {INDEX_HEADER: index} if index else {}
    if timezone:
        headers[TIMEZONE_HEADER] = timezone
    http = httpx2.AsyncClient(transport=server.transport(key), headers=headers, timeout=httpx2.Timeout(30.0))
    async with http, Client(streamable_http_client("http://memory/mcp", http_client=http), mode=mode) as client:
        yield client


def structured(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, text(result)
    assert result.structured_content is not None
    return result.structured_content


def text(result: CallToolResult) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


def error(result: CallToolResult) -> str:
    assert result.is_error, result.structured_content
    return text(result)


@contextmanager
def server_log(level: str) -> Iterator[io.StringIO]:
    """The server's log as `memory-server` configures it at `level` (text lines), in the stream yielded: the root
    logger without pytest's capture handlers, as a fresh process has it; restored afterwards."""
    root = logging.getLogger()
    handlers, root_level = root.handlers[:], root.level
    noisy = {name: logging.getLogger(name).level for name in logs.NOISY}
    stream = io.StringIO()
    root.handlers = []
    try:
        logs.configure(level, "text", stream)
        yield stream
    finally:
        root.handlers, root.level = handlers, root_level
        for name, old in noisy.items():
            logging.getLogger(name).setLevel(old)


def plant(data_dir: Path, index: str, path: str, content: str) -> Path:
    """Write a file straight into an index's mirror, as an edit on the server's disk would."""
    target = data_dir / "indexes" / index / "files" / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content, "utf-8")
    return target


@contextmanager
def serve_asgi(app: Any, *, graceful: int = 5) -> Iterator[tuple[str, ThreadedUvicorn]]:
    """Serve a whole ASGI app (the product's, channel included) on 127.0.0.1, as `serve` configures uvicorn."""
    with run_uvicorn(serve.uvicorn_config(app, graceful=graceful)) as running:
        yield running


class GatedEmbedder(HashingEmbedder):
    """Embeds documents only while the gate is open; `entered` is set whenever an embed call waits at it.
    Queries always pass, so searches run while indexing is held."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    def embed(self, texts: Sequence[str], *, kind: InputKind = "document") -> Vectors:
        if kind == "document" and not self.gate.is_set():
            self.entered.set()
            if not self.gate.wait(WAIT):
                raise TimeoutError("the test never opened the gate")
        return super().embed(texts, kind=kind)


class SyncSpy:
    """Wraps `service.sync` to see what the MCP layer hands it: the `cancelled` check, and the outcome."""

    def __init__(self, service: MemoryService) -> None:
        self._real = service.sync
        self._cancelled: list[Callable[[], bool]] = []
        self._called = threading.Event()
        self._finished = threading.Event()
        self._outcomes: list[SyncOutput] = []
        service.sync = self._sync  # type: ignore[method-assign]

    def _sync(self, caller: Any, **kwargs: Any) -> SyncOutput:
        self._cancelled.append(kwargs["cancelled"])
        self._called.set()
        try:
            outcome = self._real(caller, **kwargs)
            self._outcomes.append(outcome)
            return outcome
        finally:
            self._finished.set()

    async def release_when_cancelled(self, gate: threading.Event) -> None:
        """Once the first sync's `cancelled()` turns true (it is a `threading.Event.is_set`), open `gate`."""
        assert await anyio.to_thread.run_sync(self._called.wait, WAIT), "memory_sync never reached the service"
        stop = getattr(self._cancelled[0], "__self__", None)
        assert isinstance(stop, threading.Event), "cancelled is expected to be Event.is_set"
        seen = await anyio.to_thread.run_sync(stop.wait, WAIT)
        gate.set()
        assert seen, "the cancellation never reached the service"

    async def outcome(self) -> SyncOutput:
        assert await anyio.to_thread.run_sync(self._finished.wait, WAIT), "the sync never finished"
        return self._outcomes[0]
