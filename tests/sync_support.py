"""Several laptops around one real memory server, for the file-sync end-to-end tests and the sync benchmark.

    server = ProductServer(tmp_path / "server", embedder, {"alice": {"team": "rw"}, "bob": {"team": "rw"}})
    alice = Laptop(tmp_path / "alice", server, "alice", "team")
    server.start()
    async with alice.running() as client:      # a real `memory-proxy` process, the SDK client on its stdio
        alice.write("memory/notes.md", "...")  # the user edits a file; the proxy syncs it
    server.stop(); server.start()              # same port, same keys, same data: the server restarted

The server is what `memory-server serve` runs (`create_app`: channel, MCP, sync) under uvicorn on 127.0.0.1. Each
laptop has its own config home (device key, pinned server key), state folder and project folder.
"""

from __future__ import annotations

import io
import os
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import ExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from channel.authz import Access
from client_proxy.config import render_config, write_config
from server.app import create_app
from server.callers.config import CALLERS_FILE
from server.callers.file import CallersFile, update_callers
from server.cli import serve
from server.index.embeddings.base import Embedder
from server.index.engine_settings import EngineSettings
from server.index.errors import InvalidArgumentError
from server.memory.service import MemoryService
from tests.mcp_support import structured
from tests.ports import free_port
from tests.proxy_support import PROXY, init_proxy_home
from tests.threaded_uvicorn import run_uvicorn

TIMEZONE = "Europe/Paris"
SETTLE = 30.0  # the longest a test waits for files to sync (seconds)


class ProductServer:
    """The product's server on one fixed 127.0.0.1 port, restartable with its keys, callers and data."""

    def __init__(
        self,
        folder: Path,
        embedder: Embedder | None,
        callers: Mapping[str, Mapping[str, Access]] | None = None,
        settings: EngineSettings | None = None,
    ) -> None:
        self.keys_dir, self.data_dir = folder / "keys", folder / "data"
        self.key = serve.ensure_server_key(self.keys_dir, out=io.StringIO())
        serve.prepare_data_dir(self.data_dir)
        self.embedder = embedder
        self.grants = dict(callers or {})
        self.settings = settings
        self.service: MemoryService | None = None
        self.port = free_port()
        self._running = ExitStack()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def admit(self, name: str, device: Any) -> None:
        """Add `device` (a public key) as caller `name` with its grants, as `memory-server callers add` does."""
        grants = dict(self.grants[name])
        update_callers(self.keys_dir / CALLERS_FILE, lambda callers: callers.add(name, [device], grants))

    def text(self, index: str, relpath: str) -> str | None:
        """The server's copy of a file (its file store, on either backend), or None."""
        if self.service is None:  # stopped: the SQLite mirror's folder
            try:
                return (self.data_dir / "indexes" / index / "files" / relpath).read_text("utf-8")
            except FileNotFoundError:
                return None
        try:
            found = self.service.indexes.get(index).mirror.read(relpath)
        except InvalidArgumentError:  # a path the store refuses to hold (outside memory/ and the extra folders)
            return None
        return found.text if found is not None else None

    def start(self) -> None:
        service = MemoryService(self.data_dir, self.embedder, self.settings)
        callers = CallersFile(self.keys_dir / CALLERS_FILE)
        app = create_app(service, server_key=self.key, callers=callers, data_dir=self.data_dir)
        config = serve.uvicorn_config(app, graceful=1)
        self._running.enter_context(run_uvicorn(config, port=self.port, on_stopping=service.stopping))
        self.service = service

    def stop(self) -> None:
        self._running.close()
        self.service = None


class Laptop:
    """One laptop: a device key granted on the server, a project folder, and `memory-proxy` when running."""

    def __init__(
        self,
        folder: Path,
        server: ProductServer,
        name: str,
        index: str,
        *,
        extra_args: tuple[str, ...] = (),
        proxy: Path = PROXY,
    ) -> None:
        self.home, self.state, self.project = folder / "home", folder / "state", folder / "project"
        self.claude_home = folder / "claude"  # CLAUDE_CONFIG_DIR: where this laptop's Claude Code keeps sessions
        self.project.mkdir(parents=True)
        self.log = folder / "proxy.log"
        self.name, self.index, self.extra_args = name, index, extra_args
        self.proxy = proxy  # the memory-proxy executable: this checkout's, or one installed elsewhere
        device = init_proxy_home(self.home, url=server.url, key=server.key.public)
        write_config(self.home, render_config(server.url, server.key.public, name, index))
        server.admit(name, device)

    def params(self) -> StdioServerParameters:
        env = {
            "MEMORY_PROXY_HOME": str(self.home),
            "MEMORY_PROXY_STATE_HOME": str(self.state),
            "MEMORY_PROXY_LOG_LEVEL": "DEBUG",
            "TZ": TIMEZONE,
            "PATH": os.environ.get("PATH", ""),
            "CLAUDE_CONFIG_DIR": str(self.claude_home),
        }
        args = ["run", "--project", str(self.project), "--log-file", str(self.log), *self.extra_args]
        return StdioServerParameters(command=str(self.proxy), args=args, env=env, cwd=str(self.project))

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Client]:
        """`memory-proxy run` launched as Claude Code launches it, with the SDK client on its stdio."""
        async with Client(self.params(), mode="legacy") as client:
            yield client

    @contextmanager
    def bare(self) -> Iterator[subprocess.Popen[bytes]]:
        """`memory-proxy run` with no MCP client yet (stdin held open): it syncs, and it can start while the
        server is down, which an MCP client's `initialize` could not."""
        params = self.params()
        process = subprocess.Popen(
            [params.command, *params.args],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=params.env,
            cwd=params.cwd,
        )
        try:
            yield process
        finally:
            assert process.stdin is not None
            process.stdin.close()  # end of input: the proxy exits cleanly
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    # the user's files ------------------------------------------------------------------------------------

    def path(self, relpath: str) -> Path:
        return self.project / relpath

    def write(self, relpath: str, text: str) -> None:
        """Save a file as an editor would (in place, not atomically: the watcher must cope)."""
        target = self.path(relpath)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, "utf-8")

    def read_log(self) -> str | None:
        """The proxy's log file so far (None before the proxy wrote it)."""
        try:
            return self.log.read_text("utf-8")
        except FileNotFoundError:
            return None

    def read(self, relpath: str) -> str | None:
        try:
            return self.path(relpath).read_text("utf-8")
        except FileNotFoundError:
            return None

    def files(self) -> dict[str, str]:
        """Every memory file of the project (relative path → text)."""
        found = {}
        for candidate in [self.project / "MEMORY.md", *sorted((self.project / "memory").rglob("*.md"))]:
            if candidate.is_file():
                found[candidate.relative_to(self.project).as_posix()] = candidate.read_text("utf-8")
        return found


async def eventually(check: Callable[[], bool], what: str, *, within: float = SETTLE) -> float:
    """Wait until `check()` holds (looking every 20 ms), at most `within` seconds; how long it took."""
    started = time.monotonic()
    try:
        with anyio.fail_after(within):
            while not check():
                await anyio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"still waiting after {within:g} s for {what}") from None
    return time.monotonic() - started


async def search_paths(client: Client, query: str, **arguments: Any) -> list[str]:
    result = await client.call_tool("memory_search", {"query": query, **arguments})
    return [hit["path"] for hit in structured(result)["hits"]]
