"""Benchmark: `memory_search` through MCP over the encrypted tunnel, against the engine called directly.

One server process runs the product app (`server.app.create_app`: channel, MCP endpoint, memory service) under
uvicorn on 127.0.0.1; this process is the client, speaking MCP with the SDK's streamable-HTTP client through
`ChannelTransport`, exactly as `memory-proxy` will.

- latency: p50/p95 of one search at a time on a ~10k-chunk index (SciFact abstracts as memory files), for the
  engine (`MemoryIndex.search`), the service (`MemoryService.search`: grants, mirror state) and the MCP tool
  through the tunnel in both protocol generations; target: MCP adds < 15 ms at p50 over the engine
- throughput: 20 callers (each its own device key, channel session and MCP session) searching at once
- write-to-searchable: `memory_write` then a `memory_search` that finds the new text, on the 10k index and,
  with the real model, on the demo project

The 10k index embeds with a 384-dimension hashing embedder (tests/fakes/embedder.py) so that building it takes
seconds, not the ~7 minutes the model would; every compared path runs the same embedder, so the differences are
what the service, MCP and the tunnel add. The local model's query embedding (~14 ms, bench_search_latency)
would add the same to every row.

    .venv/bin/python bench/bench_mcp.py [--quick]
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, redirect_stdout
from pathlib import Path
from typing import Any

from common import CACHE, REPO, SCIFACT, median, percentile, report, save_json, table

QUICK = "--quick" in sys.argv
ABSTRACTS = 3_700  # about 10,000 chunks
PER_FILE = 4
SEARCHES = 100 if QUICK else 300
CALLERS = 20
PER_CALLER = 20 if QUICK else 50
WRITES = 20 if QUICK else 50
INDEX = "bench"
EXAMPLE = REPO / "examples" / "demo-project"


# -- the server process ------------------------------------------------------------------------------------------
def serve_main(data_dir: Path, keys_dir: Path, embedder_name: str) -> None:
    import uvicorn

    from channel.keys import read_private_key
    from channel.ratelimit import Rate
    from server.app import create_app
    from server.callers.file import CallersFile
    from server.cli import serve
    from server.memory.service import MemoryService

    service = MemoryService(data_dir, make_embedder(embedder_name))
    app = create_app(
        service,
        server_key=read_private_key(keys_dir / "server.key"),
        callers=CallersFile(keys_dir / "callers.toml"),
        data_dir=data_dir,
        handshake_rate=Rate(burst=1_000, per_second=1_000),  # every benchmark caller handshakes at once
    )
    listener = serve.bind("127.0.0.1", 0)
    print(f"PORT {listener.getsockname()[1]}", flush=True)
    uvicorn.Server(serve.uvicorn_config(app)).run(sockets=[listener])


def make_embedder(name: str) -> Any:
    if name == "local":
        from server.index.embeddings.local import LocalEmbedder

        embedder = LocalEmbedder()
        embedder.warm_up()
        return embedder
    from tests.fakes.embedder import HashingEmbedder

    return HashingEmbedder(dimensions=384)


class Server:
    """The server process, started on a data directory whose keys and callers were prepared beforehand."""

    def __init__(self, data_dir: Path, keys_dir: Path, embedder: str) -> None:
        command = [sys.executable, __file__, "--serve", str(data_dir), str(keys_dir), embedder]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=REPO / "bench")
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith("PORT "):
            raise RuntimeError(f"the server did not start: {line!r}")
        self.url = f"http://127.0.0.1:{int(line.split()[1])}"

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(30)


# -- setup ---------------------------------------------------------------------------------------------------------
def prepare_keys(keys_dir: Path, callers: int) -> tuple[Any, list[Any]]:
    """The server key, and one device key per caller, each granted the benchmark index."""
    from channel.keys import PrivateKey
    from server.callers.file import update_callers
    from server.cli import serve

    with redirect_stdout(io.StringIO()):  # the first-run key banner
        server_key = serve.ensure_server_key(keys_dir, out=io.StringIO())
    devices = [PrivateKey.generate(f"laptop-{n}") for n in range(callers)]

    def add_all(config: Any) -> Any:
        for n, device in enumerate(devices):
            config = config.add(f"caller-{n}", [device.public], {INDEX: "rw"})
        return config

    update_callers(keys_dir / "callers.toml", add_all)
    return server_key, devices


def build_10k(data_dir: Path) -> int:
    """SciFact abstracts as memory files (four to a file, one section each), indexed through the service."""
    from server.memory.service import CallerContext, MemoryService

    service = MemoryService(data_dir, make_embedder("hashing"))
    caller = CallerContext("builder", "SHA256:builder", {INDEX: "rw"}, INDEX, "rw")
    try:
        if service.status(caller).chunks.get("memory", 0) == 0:
            files = data_dir / "indexes" / INDEX / "files" / "memory" / "topics"
            files.mkdir(parents=True, exist_ok=True)
            with (SCIFACT / "corpus.jsonl").open() as handle:
                docs = [json.loads(line) for _, line in zip(range(ABSTRACTS), handle, strict=False)]
            for start in range(0, len(docs), PER_FILE):
                sections = [f"## {d['title'][:120]}\n\n{d['text']}\n" for d in docs[start : start + PER_FILE]]
                (files / f"{start // PER_FILE:05}.md").write_text(f"# Topics {start}\n\n" + "\n".join(sections))
            started = time.perf_counter()
            report_ = service.sync(caller)
            print(f"built the index: {report_.files_indexed} files in {time.perf_counter() - started:.0f} s")
        return service.status(caller).chunks["memory"]
    finally:
        service.close()


def queries() -> list[str]:
    with (SCIFACT / "queries.jsonl").open() as handle:
        return [json.loads(line)["text"] for line in handle][:SEARCHES]


# -- measuring -----------------------------------------------------------------------------------------------------
def direct(data_dir: Path, texts: list[str]) -> dict[str, list[float]]:
    """The engine and the service, called in this process on the same data directory."""
    from server.index.engine import MemoryIndex
    from server.index.search import build_options
    from server.memory.service import CallerContext, MemoryService

    embedder = make_embedder("hashing")
    index = MemoryIndex.open(data_dir, INDEX, embedder)
    options = build_options(limit=8)
    engine = timed(lambda q: index.search(q, options), texts)
    index.close()
    service = MemoryService(data_dir, embedder)
    caller = CallerContext("bench", "SHA256:bench", {INDEX: "r"}, INDEX, "r")
    through_service = timed(lambda q: service.search(caller, q), texts)
    service.close()
    return {"engine": engine, "service": through_service}


def timed(call: Any, texts: list[str]) -> list[float]:
    for text in texts[:20]:
        call(text)
    out = []
    for text in texts:
        started = time.perf_counter()
        call(text)
        out.append((time.perf_counter() - started) * 1000)
    return out


@asynccontextmanager
async def mcp_client(url: str, server_key: Any, device: Any, mode: str) -> AsyncIterator[Any]:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from channel.constants import INDEX_HEADER
    from channel.transport import ChannelTransport

    transport = ChannelTransport(url, client_key=device, server_key=server_key.public)
    http = httpx2.AsyncClient(transport=transport, headers={INDEX_HEADER: INDEX}, timeout=httpx2.Timeout(60.0))
    async with http, Client(streamable_http_client("http://memory/mcp", http_client=http), mode=mode) as client:
        yield client


async def search(client: Any, text: str) -> Any:
    result = await client.call_tool("memory_search", {"query": text})
    if result.is_error:
        raise RuntimeError(str(result.content))
    return result.structured_content


async def mcp_latency(url: str, server_key: Any, device: Any, texts: list[str], mode: str) -> list[float]:
    async with mcp_client(url, server_key, device, mode) as client:
        for text in texts[:20]:
            await search(client, text)
        out = []
        for text in texts:
            started = time.perf_counter()
            await search(client, text)
            out.append((time.perf_counter() - started) * 1000)
        return out


async def concurrent(url: str, server_key: Any, devices: list[Any], texts: list[str]) -> dict[str, Any]:
    """Every caller connected first, then all searching at once; errors counted, not raised."""
    latencies: list[float] = []
    errors = 0
    start = asyncio.Event()

    async def caller(n: int, device: Any, ready: asyncio.Event) -> None:
        nonlocal errors
        async with mcp_client(url, server_key, device, "legacy") as client:
            await search(client, texts[n])
            ready.set()
            await start.wait()
            for i in range(PER_CALLER):
                text = texts[(n * PER_CALLER + i) % len(texts)]
                began = time.perf_counter()
                try:
                    await search(client, text)
                except Exception:
                    errors += 1
                    continue
                latencies.append((time.perf_counter() - began) * 1000)

    readies = [asyncio.Event() for _ in devices]
    tasks = [asyncio.create_task(caller(n, d, r)) for n, (d, r) in enumerate(zip(devices, readies, strict=True))]
    await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 120)
    began = time.perf_counter()
    start.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    wall = time.perf_counter() - began
    errors += sum(1 for r in results if isinstance(r, BaseException))
    return {"latencies": latencies, "errors": errors, "seconds": wall, "requests": len(latencies)}


async def write_to_searchable(url: str, server_key: Any, device: Any, count: int) -> dict[str, list[float]]:
    """`memory_write` of a note with a unique word, then a `memory_search` for it that must find it."""
    write_ms, searchable_ms = [], []
    async with mcp_client(url, server_key, device, "legacy") as client:
        for n in range(count + 3):
            word = f"zebrafinch{os.getpid()}x{n}"
            began = time.perf_counter()
            written = await client.call_tool("memory_write", {"content": f"Note {n}: the {word} migrates at dawn."})
            wrote = time.perf_counter()
            found = await search(client, f"{word} migrates")
            done = time.perf_counter()
            if written.is_error or not written.structured_content["indexed"]:
                raise RuntimeError("write failed")
            if not found["hits"] or word not in found["hits"][0]["snippet"]:
                raise RuntimeError(f"{word} not searchable right after the write")
            if n >= 3:  # the first writes open the daily log and warm up
                write_ms.append((wrote - began) * 1000)
                searchable_ms.append((done - began) * 1000)
    return {"write": write_ms, "searchable": searchable_ms}


def seed_demo(data_dir: Path) -> None:
    files = data_dir / "indexes" / INDEX / "files"
    shutil.copytree(EXAMPLE, files, ignore=shutil.ignore_patterns(".*"), dirs_exist_ok=True)


# -- the run -------------------------------------------------------------------------------------------------------
async def run() -> None:
    base = CACHE / "mcp-10k-v1"
    chunks = build_10k(base / "data")
    print(f"index: {chunks} chunks")
    texts = queries()
    levels = direct(base / "data", texts)
    work = Path(tempfile.mkdtemp(prefix="bench-mcp-"))
    try:
        shutil.copytree(base / "data", work / "data")  # the writes below must not grow the cached index
        server_key, devices = prepare_keys(work / "keys", CALLERS)
        server = Server(work / "data", work / "keys", "hashing")
        try:
            for mode in ("legacy", "auto"):
                levels[f"mcp {mode}"] = await mcp_latency(server.url, server_key, devices[0], texts, mode)
            crowd = await concurrent(server.url, server_key, devices, texts)
            writes_10k = await write_to_searchable(server.url, server_key, devices[0], WRITES)
        finally:
            server.stop()
        demo = work / "demo"
        seed_demo(demo)
        server = Server(demo, work / "keys", "local")
        try:
            writes_model = await write_to_searchable(server.url, server_key, devices[0], WRITES)
        finally:
            server.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summarise(chunks, levels, crowd, writes_10k, writes_model)


def summarise(
    chunks: int,
    levels: dict[str, list[float]],
    crowd: dict[str, Any],
    writes_10k: dict[str, list[float]],
    writes_model: dict[str, list[float]],
) -> None:
    engine_p50 = median(levels["engine"])
    names = {
        "engine": "engine (MemoryIndex.search)",
        "service": "service (MemoryService.search)",
        "mcp legacy": "MCP tool over the tunnel, initialize session",
        "mcp auto": "MCP tool over the tunnel, 2026-07-28 per request",
    }
    rows = [
        [names[k], median(v), percentile(v, 95), median(v) - engine_p50, percentile(v, 99)] for k, v in levels.items()
    ]
    lat = crowd["latencies"]
    throughput = crowd["requests"] / crowd["seconds"]
    added = median(levels["mcp legacy"]) - engine_p50
    body = (
        f"`memory_search` on a {chunks:,}-chunk index ({len(levels['engine'])} SciFact queries, limit 8, hashing "
        "embedder: see the script), one call at a time, client and server in separate processes on this machine. "
        f"Target: MCP over the tunnel adds < 15 ms at p50 over the engine: **{added:.1f} ms**"
        f" ({'met' if added < 15 else 'missed'}).\n\n"
        + table(["path", "p50 ms", "p95 ms", "added at p50 ms", "p99 ms"], rows)
        + f"\n\n{CALLERS} callers at once (each its own device key, channel session and MCP session), "
        f"{PER_CALLER} searches each, all clients in one process:\n\n"
        + table(
            ["requests", "errors", "searches/s", "p50 ms", "p95 ms", "p99 ms"],
            [[crowd["requests"], crowd["errors"], throughput, median(lat), percentile(lat, 95), percentile(lat, 99)]],
        )
        + "\n\nWrite to searchable: `memory_write` (indexed before it returns), then a `memory_search` that finds "
        "the new text:\n\n"
        + table(
            ["index", "write p50 ms", "write p95 ms", "write+search p50 ms", "write+search p95 ms"],
            [
                [
                    f"{chunks:,} chunks, hashing embedder",
                    *spread(writes_10k["write"]),
                    *spread(writes_10k["searchable"]),
                ],
                ["demo project, all-MiniLM-L6-v2", *spread(writes_model["write"]), *spread(writes_model["searchable"])],
            ],
        )
    )
    report("mcp", "memory_search through MCP over the tunnel", body)
    save_json(
        "mcp",
        {
            "chunks": chunks,
            "latency_ms": {k: {"p50": median(v), "p95": percentile(v, 95)} for k, v in levels.items()},
            "added_p50_ms": added,
            "concurrent": {
                "callers": CALLERS,
                "requests": crowd["requests"],
                "errors": crowd["errors"],
                "per_second": throughput,
                "p50": median(lat),
                "p95": percentile(lat, 95),
                "p99": percentile(lat, 99),
            },
            "write_to_searchable_ms": {
                "hashing_10k": {
                    "p50": median(writes_10k["searchable"]),
                    "p95": percentile(writes_10k["searchable"], 95),
                },
                "model_demo": {
                    "p50": median(writes_model["searchable"]),
                    "p95": percentile(writes_model["searchable"], 95),
                },
            },
        },
    )


def spread(values: list[float]) -> tuple[float, float]:
    return median(values), percentile(values, 95)


if __name__ == "__main__":
    if "--serve" in sys.argv:
        at = sys.argv.index("--serve")
        serve_main(Path(sys.argv[at + 1]), Path(sys.argv[at + 2]), sys.argv[at + 3])
    else:
        asyncio.run(run())
