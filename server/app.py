"""The server's ASGI app: the channel outermost; inside it `/healthz` (plain), the MCP endpoint at `/mcp`, file
sync at `/sync/changes` and `/sync/push` (`server.sync.app`) and `/metrics` (`server.observe.metrics_app`).

    app = create_app(service, server_key=key, callers=CallersFile(keys_dir / "callers.toml"))
    uvicorn.run(app, ...)

The MCP endpoint is the SDK's streamable HTTP transport, stateful: `initialize` opens a session whose id only its
own caller may use (see `server.mcp.caller`), answers stream as SSE through the tunnel, and clients of the
`server/discover` generation are served per request. The lifespan runs the SDK's session manager and, when the
server stops, closes the memory service after the calls in flight have finished.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
from mcp.server import MCPServer
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from channel.authz import CallerDirectory
from channel.keys import PrivateKey
from channel.middleware import ChannelMiddleware
from channel.ratelimit import Rate
from channel.session import SessionTable
from channel.store import SessionStore
from channel.timestamps import FileTimestamps
from server.mcp.caller import CallerBoundEndpoint
from server.mcp.streams import EndableStreams
from server.mcp.tools import build_mcp_server
from server.memory.service import MemoryService
from server.observe.metrics import Metrics
from server.observe.metrics_app import METRICS_PATH, RequestMetrics, metrics_endpoint, service_metrics
from server.sync.app import sync_routes

log = logging.getLogger(__name__)

MCP_PATH = "/mcp"
HEALTH_PATH = "/healthz"
TIMESTAMPS_FILE = "handshake-timestamps.json"
MAX_MCP_BODY = 8 * 1024 * 1024  # one JSON-RPC message: a memory file (2 MiB by default) JSON-escaped, with room
SESSION_IDLE_TIMEOUT = 30 * 60.0


async def healthz(request: Request) -> JSONResponse:
    """Up and serving: nothing else, and no authentication."""
    return JSONResponse({"status": "ok"}, headers={"cache-control": "no-store"})


def create_inner_app(
    service: MemoryService,
    mcp: MCPServer | None = None,
    metrics: Metrics | None = None,
    *,
    stateless_mcp: bool = False,
) -> Starlette:
    """`/healthz`, `/mcp`, `/sync/*` and `/metrics`, as the channel's inner app (the requests it lets through carry
    `scope["user"]`); every request is counted in `metrics`. `stateless_mcp`: every MCP request stands alone, with
    no MCP session held in this process, so replicas behind a round-robin balancer can each answer any of them (no
    tool needs a session: each call carries its caller, and its progress streams back on its own answer)."""
    mcp = mcp if mcp is not None else build_mcp_server(service)
    metrics = metrics if metrics is not None else service_metrics(service)
    # Host/Origin checks protect browsers from DNS rebinding of a local server; here every request to /mcp has
    # already been authenticated by the channel, and its Host is whatever the proxy wrote inside the tunnel.
    mcp.streamable_http_app(
        streamable_http_path=MCP_PATH,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        max_request_body_size=MAX_MCP_BODY,
        session_idle_timeout=None if stateless_mcp else SESSION_IDLE_TIMEOUT,
        stateless_http=stateless_mcp,
    )
    manager = mcp.session_manager
    endpoint = EndableStreams(CallerBoundEndpoint(StreamableHTTPASGIApp(manager)))
    service.stopping_listeners.append(endpoint.end_all)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            async with manager.run():
                yield
        finally:
            # Tool calls run their service work in threads that are never abandoned, so by now every write in
            # flight has finished; close waits for anything still holding the service.
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(service.close)
            log.info("memory service closed")

    routes = [
        Route(HEALTH_PATH, healthz, methods=["GET"]),
        Route(MCP_PATH, endpoint, methods=["GET", "POST", "DELETE"]),
        *sync_routes(service),
        Route(METRICS_PATH, metrics_endpoint(metrics), methods=["GET"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan, middleware=[Middleware(RequestMetrics, metrics=metrics)])


def create_app(
    service: MemoryService,
    *,
    server_key: PrivateKey,
    callers: CallerDirectory,
    data_dir: Path | None = None,
    mcp: MCPServer | None = None,
    handshake_rate: Rate | None = None,
    metrics: Metrics | None = None,
    sessions: SessionStore | None = None,
    stateless_mcp: bool = False,
) -> ChannelMiddleware:
    """The whole server: `create_inner_app` behind the channel, `/healthz` its only plain path.

    With `data_dir`, handshake timestamps are kept there, so a recorded handshake stays dead after a restart.
    `handshake_rate` overrides the channel's per-device-key handshake limit (benchmarks open many at once).
    `sessions`: a store the replicas share (`server.postgres.sessions`) instead of this process's memory; replicas
    also want `stateless_mcp` (`create_inner_app`).
    """
    if sessions is None and data_dir is not None:
        sessions = SessionTable(time.time, timestamps=FileTimestamps(data_dir / TIMESTAMPS_FILE))
    return ChannelMiddleware(
        create_inner_app(service, mcp, metrics, stateless_mcp=stateless_mcp),
        server_key=server_key,
        callers=callers,
        plain_paths=(HEALTH_PATH,),
        sessions=sessions,
        handshake_rate=handshake_rate,
    )
