"""A real MCP server behind the channel, and real `memory-proxy` processes in front of it, for the forwarder tests.

    server = LiveServer()                     # MCPServer app behind the channel, uvicorn on 127.0.0.1
    server.grant(init_proxy_home(home, server))
    server.start()
    async with Client(proxy_params(home, log), mode="legacy") as client:   # the SDK client, over the proxy's stdio
        await client.call_tool("echo", {"text": "hi"})
    server.stop(); server.start()             # same port, same key: "the server restarted"

The app's tools: `echo`, `count` (reports progress at every step), `hang` (reports once, then waits to be
cancelled, recording that it was), `ask` (asks the client a question: a server-to-client request), `announce`
(sends a notification outside any request: the GET stream), `region` (an `x-mcp-header` argument: a 2026
client must mirror it into `Mcp-Param-Region`) and fillers; `tools/list` pages `PAGE` tools at a time. Every
request the app gets is recorded with its headers, as the proxy sent them inside the tunnel.
"""

from __future__ import annotations

import os
import subprocess
import threading
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import anyio
import uvicorn
from mcp.client.stdio import StdioServerParameters
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import BaseModel, Field

from channel.asgi import ASGIApp, Receive, Scope, Send
from channel.authz import Caller, CallerTable
from channel.keys import PrivateKey, PublicKey
from channel.middleware import ChannelMiddleware
from channel.ratelimit import Rate
from client_proxy.config import ProxyConfig
from tests.conftest import REPO
from tests.ports import free_port
from tests.threaded_uvicorn import run_uvicorn

PROXY = REPO / ".venv" / "bin" / "memory-proxy"
INDEX = "notes"
TIMEZONE = "Europe/Paris"
PAGE = 2  # tools per tools/list page
FILLERS = 2
WAIT = 10.0  # the longest the app or a test waits for the other side
STRANGER = PrivateKey.generate("nobody").public


@dataclass
class AppState:
    """What the app saw, shared across restarts; events cross from the server thread to the test."""

    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)  # (method, headers) of every request
    hanging: threading.Event = field(default_factory=threading.Event)
    cancelled: threading.Event = field(default_factory=threading.Event)


class Name(BaseModel):
    name: str


def build_mcp(state: AppState) -> MCPServer:
    mcp = MCPServer("proxy-test")

    @mcp.tool()
    def echo(text: str) -> str:
        """Say it back."""
        return text

    @mcp.tool()
    async def count(steps: int, ctx: Context) -> int:
        """Count to `steps`, reporting each step as progress."""
        for step in range(1, steps + 1):
            await ctx.report_progress(step, steps, f"step {step}")
        return steps

    @mcp.tool()
    async def hang(ctx: Context) -> str:
        """Report once, then wait until cancelled."""
        await ctx.report_progress(0, 1, "started")
        state.hanging.set()
        try:
            await anyio.sleep(WAIT)
        except anyio.get_cancelled_exc_class():
            state.cancelled.set()
            raise
        return "not cancelled"

    @mcp.tool()
    async def ask(ctx: Context) -> str:
        """Ask the client for a name (a server-to-client request on the call's stream)."""
        answer = await ctx.elicit("Who is asking?", Name)
        return answer.data.name if answer.action == "accept" and answer.data else answer.action

    @mcp.tool()
    async def announce(ctx: Context) -> str:
        """Tell the client the tool list changed: a notification outside any request (the GET stream)."""
        await ctx.session.send_tool_list_changed()
        return "announced"

    @mcp.tool()
    def region(place: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})]) -> str:
        """A tool whose argument a 2026 client mirrors into the `Mcp-Param-Region` header."""
        return place

    for number in range(FILLERS):
        mcp.add_tool(lambda: "filler", name=f"filler_{number}", description="Pads the tool list to several pages.")

    async def paged_tools(ctx: Any, call_next: Any) -> Any:
        """`tools/list` in pages of `PAGE`, the cursor being the offset (MCPServer itself never pages)."""
        result = await call_next(ctx)
        if ctx.method != "tools/list":
            return result
        listing = result if isinstance(result, dict) else result.model_dump(by_alias=True, mode="json")
        tools = listing["tools"]
        start = int((ctx.params or {}).get("cursor") or 0)
        page = {**listing, "tools": tools[start : start + PAGE]}
        if start + PAGE < len(tools):
            page["nextCursor"] = str(start + PAGE)
        return page

    mcp.middleware.append(paged_tools)
    return mcp


def build_app(state: AppState) -> ASGIApp:
    """The MCP endpoint at /mcp as the real server mounts it, with every request's headers recorded."""
    app = build_mcp(state).streamable_http_app(
        streamable_http_path="/mcp",
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )

    async def recorded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = {name.decode(): value.decode() for name, value in scope["headers"]}
            state.requests.append((scope["method"], headers))
        await app(scope, receive, send)

    return recorded


class LiveServer:
    """The app behind the channel on one 127.0.0.1 port, with one server key, that a test can stop and restart."""

    def __init__(self, key: PrivateKey | None = None) -> None:
        self.state = AppState()
        self.key = key or PrivateKey.generate("memory-server")
        self.callers = CallerTable([])
        self.port = free_port()
        self._running = ExitStack()

    def grant(self, device: PublicKey, **grants: str) -> None:
        """Let `device` in, with `grants` (default: read-write on `INDEX`); takes effect at the next start."""
        self.callers = CallerTable([Caller("laptop", (device,), grants or {INDEX: "rw"})])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Serve a fresh app (no MCP session survives a restart) behind a fresh channel middleware."""
        middleware = ChannelMiddleware(
            build_app(self.state),
            server_key=self.key,
            callers=self.callers,
            handshake_rate=Rate(burst=1000, per_second=1000),
        )
        config = uvicorn.Config(
            middleware, log_config=None, lifespan="on", http="h11", ws="none", timeout_graceful_shutdown=1
        )
        self._running.enter_context(run_uvicorn(config, port=self.port))

    def stop(self) -> None:
        self._running.close()

    def requests(self) -> list[tuple[str, dict[str, str]]]:
        """(method, headers) of every request the app got, in order."""
        return list(self.state.requests)


def init_proxy_home(
    home: Path, server: LiveServer | None = None, *, url: str = "", key: PublicKey | None = None
) -> PublicKey:
    """`memory-proxy init` into `home`, pinned to `server` (or to `url` and `key`, else a stranger that is never
    up); returns the device's public key."""
    if server is not None:
        url, key = server.url, server.key.public
    subprocess.run(
        [
            *(PROXY, "init", "--no-templates"),
            *("--server", url or "http://127.0.0.1:9", "--server-key", (key or STRANGER).line()),
        ],
        env={**os.environ, "MEMORY_PROXY_HOME": str(home)},
        check=True,
        capture_output=True,
        timeout=WAIT,
    )
    return ProxyConfig.load(home).device_public


def proxy_params(home: Path, log: Path, *args: str, index: str | None = INDEX) -> StdioServerParameters:
    """How the SDK's stdio client launches the proxy, as Claude Code would."""
    argv = ["run", "--log-file", str(log), *(["--index", index] if index else []), *args]
    env = {"MEMORY_PROXY_HOME": str(home), "TZ": TIMEZONE, "MEMORY_PROXY_LOG_LEVEL": "DEBUG"}
    return StdioServerParameters(command=str(PROXY), args=argv, env=env)


def proxy_process(home: Path, *args: str, stdin: int | None = subprocess.PIPE) -> subprocess.Popen[bytes]:
    """The proxy as a bare child process, for the tests about its lifetime."""
    return subprocess.Popen(
        [PROXY, "run", "--index", INDEX, *args],
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "MEMORY_PROXY_HOME": str(home)},
    )
