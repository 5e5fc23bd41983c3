"""Benchmark: what `memory-proxy` (the stdio forwarder) adds to an MCP call.

A server process serves the forwarder tests' MCP app (`tests.proxy_support`) behind the channel. This process
is the client, the SDK's, connected two ways to the same server:

- direct: the SDK's streamable-HTTP client over an `httpx2.AsyncClient` on the channel transport (no proxy);
- proxy: the SDK's stdio client driving a real `memory-proxy` process, as Claude Code does.

Measured for both protocol generations: the p50/p95 of an `echo` tool call, one at a time; calls per second with
20 in flight; and the proxy's start (spawn to a finished `initialize`), which Claude Code waits for. The direct
client does its channel cryptography in this process, beside the SDK; through the proxy that work moves to the
proxy's process, so on two cores the proxy can even come out ahead.

    .venv/bin/python bench/bench_forwarder.py [--quick]
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import anyio
import httpx2
from common import REPO, percentile, report, save_json, table
from mcp import Client
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from channel.constants import INDEX_HEADER
from channel.keys import PrivateKey, PublicKey, read_private_key, write_private_key
from channel.transport import ChannelTransport
from client_proxy.config import ProxyConfig, render_config, write_config
from tests.proxy_support import INDEX, LiveServer, init_proxy_home, proxy_params

QUICK = "--quick" in sys.argv
CALLS = 100 if QUICK else 500
STARTS = 3 if QUICK else 10
WORKERS, EACH = 20, (10 if QUICK else 25)
MODES = ("legacy", "2026-07-28")


def serve(key_file: str, device_line: str) -> None:
    """The server process: the app behind the channel until stdin closes; prints its URL first."""
    server = LiveServer(read_private_key(Path(key_file)))
    server.grant(PublicKey.parse(device_line))
    server.start()
    print(server.url, flush=True)
    sys.stdin.read()
    server.stop()


async def latencies(call: Callable[[], Awaitable[object]], count: int) -> list[float]:
    for _ in range(10):
        await call()  # warm up: channel session, MCP session, listings
    times = []
    for _ in range(count):
        started = time.perf_counter()
        await call()
        times.append((time.perf_counter() - started) * 1000)
    return times


async def throughput(call: Callable[[], Awaitable[object]]) -> float:
    async def worker() -> None:
        for _ in range(EACH):
            await call()

    started = time.perf_counter()
    async with anyio.create_task_group() as workers:
        for _ in range(WORKERS):
            workers.start_soon(worker)
    return WORKERS * EACH / (time.perf_counter() - started)


def direct(url: str, device: PrivateKey, server: PublicKey, mode: str) -> AbstractAsyncContextManager[Client]:
    transport = ChannelTransport(url, client_key=device, server_key=server)
    http = httpx2.AsyncClient(
        transport=transport, headers={INDEX_HEADER: INDEX}, timeout=httpx2.Timeout(30.0, read=300.0)
    )
    return Client(streamable_http_client("http://memory/mcp", http_client=http), mode=mode)


def proxied(home: Path, log: Path, mode: str, errlog: Any) -> AbstractAsyncContextManager[Client]:
    params = proxy_params(home, log)
    params.env = {**(params.env or {}), "MEMORY_PROXY_LOG_LEVEL": "WARNING"}
    return Client(stdio_client(params, errlog=errlog), mode=mode)


async def measure(url: str, device: PrivateKey, server: PublicKey, home: Path) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with open(home / "stderr", "w") as errlog:
        for mode in MODES:
            for path, connect in (
                ("direct", lambda m=mode: direct(url, device, server, m)),
                ("proxy", lambda m=mode: proxied(home, home / "proxy.log", m, errlog)),
            ):
                async with connect() as client:

                    async def echo(client: Client = client) -> None:
                        await client.call_tool("echo", {"text": "ping"})

                    times = await latencies(echo, CALLS)
                    rate = await throughput(echo)
                results[f"{path} {mode}"] = {
                    "p50_ms": percentile(times, 50),
                    "p95_ms": percentile(times, 95),
                    "calls_per_s": rate,
                }
        starts = []
        for _ in range(STARTS):
            started = time.perf_counter()
            async with proxied(home, home / "proxy.log", "legacy", errlog):
                starts.append((time.perf_counter() - started) * 1000)
        results["proxy start"] = {"p50_ms": percentile(starts, 50), "max_ms": max(starts)}
    return results


def main() -> None:
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2], sys.argv[3])
        return
    with tempfile.TemporaryDirectory() as temp:
        home, key_file = Path(temp) / "home", Path(temp) / "server.key"
        server_key = PrivateKey.generate("memory-server")
        write_private_key(key_file, server_key)
        device_public = init_proxy_home(home)
        device = read_private_key(home / "device.key")
        argv = [sys.executable, __file__, "--serve", str(key_file), device_public.line()]
        with subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=REPO, text=True
        ) as server:
            assert server.stdin is not None and server.stdout is not None
            url = server.stdout.readline().strip()
            write_config(home, render_config(url, server_key.public, ProxyConfig.load(home).device_name))
            results = anyio.run(measure, url, device, server_key.public, home)
            server.stdin.close()
    rows = []
    for mode in MODES:
        for path in ("direct", "proxy"):
            row = results[f"{path} {mode}"]
            rows.append((f"{path}, {mode}", row["p50_ms"], row["p95_ms"], row["calls_per_s"]))
    added = {mode: results[f"proxy {mode}"]["p50_ms"] - results[f"direct {mode}"]["p50_ms"] for mode in MODES}
    worst = max(added.values())
    start = results["proxy start"]
    body = (
        f"`echo` tool calls against the forwarder tests' MCP app behind the channel (server in its own process), "
        f"{CALLS} one at a time and {WORKERS} callers x {EACH} at once. The proxy adds at most **{worst:.1f} ms** "
        "at p50 (the direct client does its channel cryptography in the benchmark's own process).\n\n"
        + table(("path", "p50 ms", "p95 ms", f"calls/s ({WORKERS} in flight)"), rows)
        + f"\n\nProxy start (spawn to a finished `initialize`, {STARTS} runs): p50 {start['p50_ms']:.0f} ms, "
        f"max {start['max_ms']:.0f} ms."
    )
    save_json("forwarder", {"calls": CALLS, "results": results, "added_p50_ms": added})
    report("forwarder", "The stdio forwarder's cost per MCP call", body)


if __name__ == "__main__":
    main()
