"""Benchmark: honest callers while the server is abused (issue 20's load-and-abuse figure).

The real `memory-server serve` runs as its own process on 127.0.0.1 (keyword-only search, so the figures are
about the server and not the model). Honest callers, each a device of its own caller, work on two indexes through
the channel: MCP `memory_search`, `memory_write` and `memory_get`, and sync pushes (`POST /sync/push`), with a
short pause between calls as an agent makes them. The same mix runs twice: alone (the baseline), then while an
abuser process holds idle sockets open (reopening those the server sheds), trickles request bodies a byte at a
time, and floods `/v1/handshake` with garbage of the right length from the callers' own address (the worst case:
an address where devices have authenticated keeps getting the cryptography).

Reported: errors of honest callers (goal 0), p50/p99 per operation in both runs, the server's RSS and open file
descriptors over time, the server's CPU in both runs and so the flood's CPU cost per garbage handshake.

    .venv/bin/python bench/bench_abuse.py            # 10 callers, 500 idle sockets, 40 s per run (about 2 min)
    .venv/bin/python bench/bench_abuse.py --full     # 50 callers, 2,000 idle sockets, 120 s per run
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
from common import REPO, percentile, report, save_json, table
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from channel.constants import HANDSHAKE_PATH, HELLO_LEN, INDEX_HEADER, KIND_HELLO, VERSION
from channel.keys import PrivateKey, PublicKey
from channel.transport import ChannelTransport
from server.callers.config import CALLERS_FILE
from server.callers.file import update_callers
from server.cli import serve

INDEXES = ("alpha", "beta")
PAUSE = 0.2  # seconds an honest caller waits between two calls
SAMPLE_EVERY = 5.0


# -- the server -------------------------------------------------------------------------------------------------


def start_server(folder: Path, devices: dict[str, PublicKey]) -> tuple[subprocess.Popen[str], str, PublicKey]:
    keys, data = folder / "keys", folder / "data"
    key = serve.ensure_server_key(keys, out=io.StringIO())
    for number, (name, device) in enumerate(devices.items()):
        grant = {INDEXES[number % 2]: "rw"}
        update_callers(keys / CALLERS_FILE, lambda c, n=name, d=device, g=grant: c.add(n, [d], g))
    env = {
        **os.environ,
        "MEMORY_DATA_DIR": str(data),
        "MEMORY_KEYS_DIR": str(keys),
        "MEMORY_EMBEDDING_PROVIDERS": "none",
        "MEMORY_LOG_LEVEL": "warning",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("MEMORY_HOST", None)
    with (folder / "server.log").open("w") as log:
        process = subprocess.Popen(
            [str(REPO / ".venv" / "bin" / "memory-server"), "serve", "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=env,
        )
    assert process.stdout is not None
    for line in process.stdout:
        if found := re.search(r"listening on (http://127\.0\.0\.1:\d+)", line):
            return process, found.group(1), key.public
    raise RuntimeError("the server did not start: " + (folder / "server.log").read_text())


def sample(pid: int) -> dict[str, float]:
    """RSS (MiB), open descriptors and CPU seconds (user + system) of a process, from /proc."""
    status = Path(f"/proc/{pid}/status").read_text()
    rss = int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024  # type: ignore[union-attr]
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return {"rss_mib": rss, "fds": len(os.listdir(f"/proc/{pid}/fd")), "cpu_s": cpu}


# -- honest callers ---------------------------------------------------------------------------------------------


@asynccontextmanager
async def mcp_client(url: str, server_key: PublicKey, device: PrivateKey, index: str):
    transport = ChannelTransport(url, client_key=device, server_key=server_key)
    http = httpx2.AsyncClient(transport=transport, headers={INDEX_HEADER: index}, timeout=httpx2.Timeout(60.0))
    async with http, Client(streamable_http_client("http://memory/mcp", http_client=http), mode="legacy") as client:
        yield client, http


async def honest(
    number: int,
    client: Any,
    http: httpx2.AsyncClient,
    until: float,
    latencies: dict[str, list[float]],
    errors: list[str],
) -> None:
    rng = random.Random(number)
    path = f"memory/caller-{number}.md"
    base: str | None = None
    step = 0
    while time.monotonic() < until:
        step += 1
        op = ("search", "write", "get", "push")[step % 4]
        started = time.perf_counter()
        try:
            if op == "search":
                result = await client.call_tool("memory_search", {"query": rng.choice(["deploy", "runbook", "cache"])})
            elif op == "write":
                text = f"note {step} of caller {number} about the deploy runbook and the cache"
                result = await client.call_tool("memory_write", {"content": text, "topic": "bench"})
            elif op == "get":
                result = await client.call_tool("memory_get", {"path": path})
            else:
                content = f"# Caller {number}\n\nedit {step}: the cache warms before the deploy\n"
                body = {"changes": [{"path": path, "base": base, "content": content}]}
                response = await http.post("/sync/push", json=body)
                response.raise_for_status()
                base = response.json()["results"][0]["hash"]
                result = None
            if result is not None and result.is_error:
                raise RuntimeError(f"{op}: tool error")
            latencies[op].append(time.perf_counter() - started)
        except Exception as exc:  # an honest caller's failure is the figure this bench exists for
            errors.append(f"{op}: {type(exc).__name__}: {str(exc)[:120]}")
        await anyio.sleep(PAUSE)


async def run_mix(url: str, server_key: PublicKey, devices: list[PrivateKey], seconds: float) -> dict[str, Any]:
    latencies: dict[str, list[float]] = {op: [] for op in ("search", "write", "get", "push")}
    errors: list[str] = []
    async with AsyncExitStack() as stack:
        clients = []
        for number, device in enumerate(devices):
            clients.append(await stack.enter_async_context(mcp_client(url, server_key, device, INDEXES[number % 2])))
        until = time.monotonic() + seconds
        async with anyio.create_task_group() as group:
            for number, (client, http) in enumerate(clients):
                group.start_soon(honest, number, client, http, until, latencies, errors)
    return {"latencies": latencies, "errors": errors}


# -- the abuser (its own process) ---------------------------------------------------------------------------------


async def abuse(url: str, idle: int, slow: int, flood: int, seconds: float) -> dict[str, Any]:
    host, port = url.removeprefix("http://").split(":")
    until = time.monotonic() + seconds
    stats: dict[str, Any] = {"flood_sent": 0, "flood_status": {}, "idle_opened": 0, "slow_opened": 0}

    async def reconnecting(kind: str, use: Any) -> None:
        """Open a connection, `use` it until the server closes it (or the run ends), and open the next one."""
        while time.monotonic() < until:
            try:
                stream = await anyio.connect_tcp(host, int(port))
            except OSError:
                await anyio.sleep(0.05)
                continue
            stats[f"{kind}_opened"] += 1
            with anyio.move_on_after(max(0.0, until - time.monotonic())):
                async with stream:
                    with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                        await use(stream)

    async def stay_silent(stream: Any) -> None:
        await stream.receive()  # until the server sheds or times it out

    async def trickle(stream: Any) -> None:
        await stream.send(f"POST {HANDSHAKE_PATH} HTTP/1.1\r\nhost: x\r\ncontent-length: {HELLO_LEN}\r\n\r\n".encode())
        for _ in range(HELLO_LEN):
            await stream.send(b"x")
            await anyio.sleep(2.0)

    async def garbage() -> None:
        async with httpx2.AsyncClient(timeout=10.0) as client:
            while time.monotonic() < until:
                message = bytes((VERSION, KIND_HELLO)) + os.urandom(HELLO_LEN - 2)
                try:
                    status = (await client.post(url + HANDSHAKE_PATH, content=message)).status_code
                except httpx2.HTTPError as exc:
                    status = type(exc).__name__
                stats["flood_sent"] += 1
                stats["flood_status"][str(status)] = stats["flood_status"].get(str(status), 0) + 1

    async with anyio.create_task_group() as group:
        for _ in range(idle):
            group.start_soon(reconnecting, "idle", stay_silent)
        for _ in range(slow):
            group.start_soon(reconnecting, "slow", trickle)
        for _ in range(flood):
            group.start_soon(garbage)
    return stats


# -- the run ------------------------------------------------------------------------------------------------------


async def measured(pid: int, run: Any, timeline: list[dict[str, float]], label: str, t0: float) -> tuple[Any, dict]:
    before = sample(pid)
    done = anyio.Event()

    async def sampler() -> None:
        while not done.is_set():
            timeline.append({"t": round(time.monotonic() - t0, 1), "phase": label, **sample(pid)})  # type: ignore[dict-item]
            with anyio.move_on_after(SAMPLE_EVERY):
                await done.wait()

    async with anyio.create_task_group() as group:
        group.start_soon(sampler)
        result = await run()
        done.set()
    after = sample(pid)
    return result, {"cpu_s": after["cpu_s"] - before["cpu_s"]}


def summary(mix: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for op, values in mix["latencies"].items():
        out[op] = {"n": len(values), "p50_ms": percentile(values, 50) * 1000, "p99_ms": percentile(values, 99) * 1000}
    return out


async def main(args: argparse.Namespace) -> None:
    devices = [PrivateKey.generate(f"bench-{n}") for n in range(args.callers)]
    with tempfile.TemporaryDirectory() as tmp:
        process, url, server_key = start_server(Path(tmp), {f"caller{n}": d.public for n, d in enumerate(devices)})
        timeline: list[dict[str, float]] = []
        t0 = time.monotonic()
        try:
            base, base_cost = await measured(
                process.pid, lambda: run_mix(url, server_key, devices, args.seconds), timeline, "baseline", t0
            )
            abuse_started = sample(process.pid)
            abuser = await anyio.open_process(
                [
                    sys.executable, __file__, "--abuser", url, "--idle", str(args.idle), "--slow", str(args.slow),
                    "--flood", str(args.flood), "--seconds", str(args.seconds + 10),
                ]
            )  # fmt: skip
            await anyio.sleep(5)  # the abuse is under way before the honest callers start again
            abused, abused_cost = await measured(
                process.pid, lambda: run_mix(url, server_key, devices, args.seconds), timeline, "abused", t0
            )
            out = b""
            assert abuser.stdout is not None
            async for chunk in abuser.stdout:
                out += chunk
            await abuser.wait()
            flood = json.loads(out or b"{}")
            flood["cpu_s"] = sample(process.pid)["cpu_s"] - abuse_started["cpu_s"]  # the abuser's whole life
            log = (Path(tmp) / "server.log").read_text()
        finally:
            process.terminate()
            process.wait(30)
    write_report(args, base, abused, base_cost, abused_cost, flood, timeline, log)


def _per_request(extra_cpu: float, sent: int) -> str:
    """The flood's CPU per request: the server's CPU over the abuse less the honest callers' baseline. When the
    server was saturated, the honest callers got less done under abuse than alone and the difference means nothing."""
    if not sent or extra_cpu <= 0:
        return "n/a (server saturated: see the calls per run)"
    return f"{extra_cpu / sent * 1e6:.0f} us"


def write_report(args, base, abused, base_cost, abused_cost, flood, timeline, log) -> None:
    before, after = summary(base), summary(abused)
    figures = ("n", "p50_ms", "p99_ms")
    rows = [[op, *(before[op][f] for f in figures), *(after[op][f] for f in figures)] for op in before]
    ops = table(
        ["operation", "calls", "p50 ms", "p99 ms", "calls (abused)", "p50 ms (abused)", "p99 ms (abused)"], rows
    )
    # The server's CPU over the abuser's whole life, less what the honest callers cost in the baseline run.
    extra_cpu = flood.get("cpu_s", 0.0) - base_cost["cpu_s"]
    sent = flood.get("flood_sent", 0)
    cost = [
        ["honest errors (baseline / abused)", f"{len(base['errors'])} / {len(abused['errors'])}"],
        ["server CPU s (baseline / abused)", f"{base_cost['cpu_s']:.1f} / {abused_cost['cpu_s']:.1f}"],
        ["garbage handshakes sent", sent],
        ["their answers", ", ".join(f"{k}: {v}" for k, v in sorted(flood.get("flood_status", {}).items()))],
        ["flood CPU per garbage handshake", _per_request(extra_cpu, sent)],
        ["idle sockets opened (shed or timed out, then reopened)", flood.get("idle_opened", 0)],
        ["slow-body connections opened", flood.get("slow_opened", 0)],
        ["'Too many open files' in the server log", log.count("Too many open files")],
    ]
    over_time = table(
        ["t (s)", "phase", "RSS MiB", "open fds", "CPU s"],
        [[s["t"], s["phase"], s["rss_mib"], s["fds"], s["cpu_s"]] for s in timeline],
    )
    body = (
        f"{args.callers} honest callers on two indexes (search, write, get, sync push; {PAUSE:g} s between calls), "
        f"{args.seconds:g} s alone, then {args.seconds:g} s while {args.idle} idle sockets, {args.slow} slow-body "
        f"senders and {args.flood} garbage-handshake loops run from the same address. Keyword-only search.\n\n"
        f"{ops}\n\n{table(['figure', 'value'], cost)}\n\nServer over time:\n\n{over_time}\n\n"
        f"Honest errors, first ones: {abused['errors'][:5] + base['errors'][:5]}\n\n"
        f"    .venv/bin/python bench/bench_abuse.py {' '.join(sys.argv[1:])}"
    )
    name = "abuse_full" if args.full else "abuse"
    report(name, "Honest callers under abuse: idle sockets, slow bodies, a garbage-handshake flood", body)
    save_json(
        name,
        {"baseline": before, "abused": after, "errors": [len(base["errors"]), len(abused["errors"])],
         "cpu": [base_cost, abused_cost], "flood": flood, "timeline": timeline},
    )  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true", help="the issue's figure: 50 callers, 2,000 idle, 120 s")
    parser.add_argument("--abuser", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--callers", type=int, default=None)
    parser.add_argument("--idle", type=int, default=None)
    parser.add_argument("--slow", type=int, default=20)
    parser.add_argument("--flood", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=None)
    options = parser.parse_args()
    options.callers = options.callers or (50 if options.full else 10)
    options.idle = options.idle if options.idle is not None else (2000 if options.full else 500)
    options.seconds = options.seconds or (120.0 if options.full else 40.0)
    if options.abuser:
        stats = asyncio.run(abuse(options.abuser, options.idle, options.slow, options.flood, options.seconds))
        print(json.dumps(stats), flush=True)
    else:
        anyio.run(main, options)
