"""File sync inside a real `memory-proxy run` process, one laptop against the product's server (channel, MCP, sync)
under uvicorn: it starts with the forwarder (or without any MCP traffic), stops with it, can be turned off, and
`memory-proxy status` reports it. Several laptops at once are tests/e2e/test_sync_e2e.py's."""

from __future__ import annotations

import io
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from client_proxy.config import render_config, write_config
from server.app import create_app
from server.callers.config import CALLERS_FILE
from server.callers.file import CallersFile, update_callers
from server.cli import serve
from server.memory.service import MemoryService
from tests.fakes.embedder import HashingEmbedder
from tests.mcp_support import serve_asgi, structured
from tests.proxy_support import PROXY, init_proxy_home

pytestmark = pytest.mark.anyio

INDEX = "alice-notes"
WAIT = 20.0


@dataclass
class Laptop:
    home: Path
    state: Path
    project: Path
    data: Path  # the server's data folder, to look at its mirror
    log: Path

    def env(self, **extra: str) -> dict[str, str]:
        return {
            "MEMORY_PROXY_HOME": str(self.home),
            "MEMORY_PROXY_STATE_HOME": str(self.state),
            "MEMORY_PROXY_LOG_LEVEL": "DEBUG",
            "PATH": os.environ.get("PATH", ""),
            **extra,
        }

    def params(self, *args: str, **env: str) -> StdioServerParameters:
        argv = ["run", "--index", INDEX, "--log-file", str(self.log), *args]
        return StdioServerParameters(command=str(PROXY), args=argv, env=self.env(**env), cwd=str(self.project))

    def on_server(self, path: str) -> str | None:
        try:
            return (self.data / "indexes" / INDEX / "files" / path).read_text("utf-8")
        except FileNotFoundError:
            return None

    def local(self, path: str) -> str | None:
        try:
            return (self.project / path).read_text("utf-8")
        except FileNotFoundError:
            return None

    def status(self) -> dict[str, object]:
        done = subprocess.run(
            [PROXY, "status", "--index", INDEX, "--project", str(self.project), "--json"],
            env=self.env(),
            capture_output=True,
            check=True,
            timeout=WAIT,
        )
        return dict(json.loads(done.stdout))


@pytest.fixture
def laptop(tmp_path) -> Iterator[Laptop]:
    """The product's server with one laptop granted `INDEX`; its project folder holds a MEMORY.md already."""
    keys_dir, data_dir, home = tmp_path / "keys", tmp_path / "data", tmp_path / "home"
    server_key = serve.ensure_server_key(keys_dir, out=io.StringIO())
    serve.prepare_data_dir(data_dir)
    device = init_proxy_home(home)
    update_callers(keys_dir / CALLERS_FILE, lambda callers: callers.add("alice", [device], {INDEX: "rw"}))
    service = MemoryService(data_dir, HashingEmbedder())
    app = create_app(service, server_key=server_key, callers=CallersFile(keys_dir / CALLERS_FILE), data_dir=data_dir)
    project = tmp_path / "project"
    project.mkdir()
    (project / "MEMORY.md").write_text("# Project memory\n")
    with serve_asgi(app) as (url, _):
        write_config(home, render_config(url, server_key.public, "alice"))
        yield Laptop(home, tmp_path / "state", project, data_dir, tmp_path / "proxy.log")


async def until(check: Callable[[], bool], what: str) -> None:
    with anyio.fail_after(WAIT):
        while not check():
            await anyio.sleep(0.02)


async def test_run_syncs_the_folder_both_ways_beside_the_forwarding_and_status_reports_it(laptop):
    async with Client(laptop.params(), mode="legacy") as client:
        await until(lambda: laptop.on_server("MEMORY.md") == "# Project memory\n", "MEMORY.md on the server")
        (laptop.project / "memory").mkdir()
        (laptop.project / "memory" / "decisions.md").write_text("We deploy on Tuesdays.\n")
        await until(lambda: laptop.on_server("memory/decisions.md") is not None, "the new file on the server")
        got = structured(await client.call_tool("memory_get", {"path": "memory/decisions.md"}))
        assert "We deploy on Tuesdays." in got["content"]

        written = structured(await client.call_tool("memory_write", {"content": "Staging is called kestrel"}))
        await until(lambda: "kestrel" in (laptop.local(written["path"]) or ""), "the MCP write in the folder")

    report = laptop.status()
    assert report["sync"]["enabled"] is True
    assert report["pending"]["count"] == 0
    assert report["files"] == 3
    assert report["last_pull"]["at"] is not None and report["last_push"]["at"] is not None
    log = laptop.log.read_text()
    assert "kestrel" not in log and "Tuesdays" not in log  # paths and counts in the log, never memory text


async def test_sync_starts_without_any_mcp_traffic_and_stdin_eof_stops_it_cleanly(laptop):
    with subprocess.Popen(
        [PROXY, "run", "--index", INDEX],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=laptop.env(),
        cwd=laptop.project,
    ) as proxy:
        await until(lambda: laptop.on_server("MEMORY.md") is not None, "MEMORY.md on the server")
        assert proxy.stdin is not None
        proxy.stdin.close()
        started = time.monotonic()
        assert proxy.wait(timeout=WAIT) == 0
        assert time.monotonic() - started < 5
        stderr = proxy.stderr.read().decode() if proxy.stderr else ""
    assert "file sync on (the folder holds memory files)" in stderr
    report = laptop.status()  # the push was recorded and the state flushed on the way out
    assert report["pending"]["count"] == 0 and report["last_push"]["at"] is not None


async def test_no_sync_and_the_environment_switch_leave_the_folder_alone(laptop):
    for params in (laptop.params("--no-sync"), laptop.params(MEMORY_PROXY_SYNC="0")):
        async with Client(params, mode="legacy") as client:
            structured(await client.call_tool("memory_write", {"content": "only on the server"}))
    assert laptop.on_server("MEMORY.md") is None
    assert not (laptop.project / "memory").exists()
    assert not laptop.state.exists()
    log = laptop.log.read_text()
    assert "file sync off (--no-sync)" in log and "file sync off (MEMORY_PROXY_SYNC=0)" in log


async def test_a_folder_without_memory_files_is_not_filled_unless_named(laptop, tmp_path):
    bare = tmp_path / "somewhere"
    bare.mkdir()
    params = laptop.params()
    params.cwd = str(bare)
    async with Client(params, mode="legacy") as client:
        structured(await client.call_tool("memory_write", {"content": "stays on the server"}))
    assert list(bare.iterdir()) == []
    assert "holds no MEMORY.md, memory.md or memory/" in laptop.log.read_text()

    async with Client(laptop.params("--project", str(bare)), mode="legacy"):
        await until(lambda: (bare / "memory").is_dir() and any((bare / "memory").iterdir()), "the pulled daily log")
