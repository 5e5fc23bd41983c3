"""Benchmark: file sync between laptops through the real server (all-MiniLM-L6-v2, channel, MCP, sync).

Two laptops (`memory-proxy` processes with their own project folders, driven over stdio by the SDK client) share
one index on a server running in this process under uvicorn on 127.0.0.1 (`tests.sync_support`).

1. Freshness: laptop A appends a line with a unique word to today's log, 50 times; for each save, the time until
   B's `memory_search` returns a hit whose snippet holds the word, and until B's file equals A's.
   Targets: p50 under 2 s, p95 under 5 s.
2. Initial sync of 1,000 files (SciFact abstracts as memory notes): a laptop that has them all joins an empty
   index (pushed, merged and indexed: until every file is searchable on the server), then a fresh laptop with an
   empty project joins (until it has all 1,000 files). Beside it, the plain baseline of the same run: the model
   embedding the same files' chunks directly (`model.encode`, the chunks the index makes of them).
3. Forwarder overhead: `memory_status` round trips through the proxy against the same call from the SDK client
   speaking to the server over the channel directly (no proxy), p50/p95 of 100 calls each.

    .venv/bin/python bench/bench_sync.py [--quick]
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from common import SCIFACT, percentile, report, save_json, table

from server.index.chunker import chunk_markdown
from server.index.embeddings.local import ENCODE_BATCH, LocalEmbedder
from tests.mcp_support import connect_channel, structured
from tests.sync_support import Laptop, ProductServer, eventually

QUICK = "--quick" in sys.argv
EDITS = 10 if QUICK else 50
FILES = 200 if QUICK else 1000
CALLS = 30 if QUICK else 100
INDEX = "bench"
CALLERS = {"alice": {INDEX: "rw"}, "bob": {INDEX: "rw"}, "dave": {INDEX: "rw"}}


def notes(count: int) -> dict[str, str]:
    out = {}
    with open(SCIFACT / "corpus.jsonl", encoding="utf-8") as corpus:
        for number, line in enumerate(corpus):
            if number >= count:
                break
            doc = json.loads(line)
            out[f"memory/papers/{doc['_id']}.md"] = f"# {doc['title']}\n\n{doc['text']}\n"
    return out


async def freshness(alice: Laptop, bob: Laptop, bob_client: Any) -> list[tuple[float, float]]:
    log = "memory/2026-11-23.md"
    text = "# 2026-11-23\n"
    alice.write(log, text)
    await eventually(lambda: bob.read(log) == text, "the log on bob's laptop")
    timings = []
    for number in range(EDITS):
        word = f"freshword{number:03d}x"
        text += f"\n## 10:{number % 60:02d} — edit {number}\nThe marker {word} was saved on laptop A.\n"
        timings.append(await one_edit(alice, bob, bob_client, log, text, word))
    return timings


async def one_edit(alice: Laptop, bob: Laptop, bob_client: Any, log: str, text: str, word: str) -> tuple[float, float]:
    """Save `text` on A; seconds until B's search finds `word`, and until B's file equals `text`."""
    saved = time.monotonic()
    alice.write(log, text)
    found: dict[str, float] = {}

    async def file_matches() -> None:
        await eventually(lambda: bob.read(log) == text, "bob's file")
        found["file"] = time.monotonic() - saved

    async def searchable() -> None:
        while True:
            hits = structured(await bob_client.call_tool("memory_search", {"query": word, "max_results": 3}))
            if any(word in hit["snippet"] for hit in hits["hits"]):
                found["search"] = time.monotonic() - saved
                return

    with anyio.fail_after(60):
        async with anyio.create_task_group() as group:
            group.start_soon(file_matches)
            group.start_soon(searchable)
    return found["search"], found["file"]


async def initial_sync(server: ProductServer, alice: Laptop, dave: Laptop) -> dict[str, float]:
    corpus = notes(FILES)
    for relpath, text in corpus.items():
        alice.write(relpath, text)
    assert server.memory.service is not None
    started = time.monotonic()
    async with alice.running():
        await eventually(lambda: _indexed(server) >= len(corpus), "every file indexed", within=1800)
    push_seconds = time.monotonic() - started
    started = time.monotonic()
    async with dave.running():
        await eventually(lambda: len(dave.files()) >= len(corpus), "every file on dave's laptop", within=600)
    pull_seconds = time.monotonic() - started
    embedder = server.embedder
    assert isinstance(embedder, LocalEmbedder)
    chunks = list(
        dict.fromkeys(c.embed_text for text in corpus.values() for c in chunk_markdown(text, embedder.tokenizer))
    )
    started = time.monotonic()
    embedder._load().encode(chunks, batch_size=ENCODE_BATCH, normalize_embeddings=True, convert_to_numpy=True)
    encode_seconds = time.monotonic() - started
    return {
        "files": len(corpus),
        "chunks": len(chunks),
        "push": push_seconds,
        "pull": pull_seconds,
        "encode": encode_seconds,
    }


def _indexed(server: ProductServer) -> int:
    assert server.memory.service is not None
    index_db = server.data_dir / "indexes" / INDEX / "index.sqlite3"
    if not index_db.exists():
        return 0
    import apsw

    db = apsw.Connection(str(index_db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return int(db.execute("SELECT count(*) FROM files").fetchall()[0][0])  # type: ignore[arg-type]
    finally:
        db.close()


async def overhead(server: ProductServer, laptop: Laptop, client: Any) -> dict[str, list[float]]:
    from channel.keys import read_private_key
    from tests.channel.conftest import RunningServer

    key = read_private_key(laptop.home / "device.key")
    running = RunningServer(server.url, server.key.public, server.key, None)  # type: ignore[arg-type]
    out: dict[str, list[float]] = {"proxy": [], "direct": []}
    async with connect_channel(running, key, INDEX) as direct:
        for _ in range(3):  # warm both paths
            await client.call_tool("memory_status", {})
            await direct.call_tool("memory_status", {})
        for _ in range(CALLS):
            for name, session in (("proxy", client), ("direct", direct)):
                started = time.perf_counter()
                await session.call_tool("memory_status", {})
                out[name].append(time.perf_counter() - started)
    return out


async def run() -> None:
    embedder = LocalEmbedder()
    embedder.warm_up()
    with tempfile.TemporaryDirectory(prefix="bench-sync-") as folder:
        root = Path(folder)
        server = ProductServer(root / "server", embedder, CALLERS)
        alice, bob, dave = (Laptop(root / name, server, name, INDEX) for name in ("alice", "bob", "dave"))
        server.start()
        try:
            initial = await initial_sync(server, alice, dave)
            async with alice.running(), bob.running() as bob_client:
                fresh = await freshness(alice, bob, bob_client)
                calls = await overhead(server, bob, bob_client)
        finally:
            server.stop()
    search = [s for s, _ in fresh]
    files = [f for _, f in fresh]
    rows = [
        ["searchable through B", percentile(search, 50), percentile(search, 95), max(search)],
        ["B's file matches", percentile(files, 50), percentile(files, 95), max(files)],
    ]
    body = f"## Freshness: a save on laptop A until … ({EDITS} edits, seconds)\n\n"
    body += table(["until", "p50", "p95", "max"], rows)
    body += f"\n\n## Initial sync of {initial['files']} files (seconds)\n\n"
    body += table(
        ["step", "seconds", "files/s"],
        [
            ["laptop with the files joins an empty index (push + index)", initial["push"], FILES / initial["push"]],
            ["fresh laptop joins (pull)", initial["pull"], FILES / initial["pull"]],
            [f"baseline: model.encode of the {initial['chunks']} chunks", initial["encode"], FILES / initial["encode"]],
        ],
    )
    body += f"\n\nPush + index against the plain encode: {initial['encode'] / initial['push']:.2f}× its speed.\n"
    body += f"\n## memory_status round trip ({CALLS} calls, ms)\n\n"
    body += table(
        ["path", "p50", "p95"],
        [[name, percentile(v, 50) * 1000, percentile(v, 95) * 1000] for name, v in calls.items()],
    )
    added = (percentile(calls["proxy"], 50) - percentile(calls["direct"], 50)) * 1000
    body += f"\n\nThe proxy adds {added:.2f} ms at p50.\n"
    report("sync", "File sync: freshness, initial sync, forwarder overhead", body)
    save_json("sync", {"freshness": fresh, "initial": initial, "calls": calls, "quick": QUICK})


if __name__ == "__main__":
    anyio.run(run)
