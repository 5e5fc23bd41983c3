"""Benchmark: what sharing channel sessions through PostgreSQL costs per request.

The same inner app (bench_channel's echo) behind the channel, served by uvicorn in separate processes:

- one server, sessions in its memory (the SQLite deployment's channel);
- one server, sessions in PostgreSQL (`server.postgres.sessions`, MEMORY_DATABASE_URL set);
- two servers on one database, every request sent to the other one in turn (a round-robin load balancer).

For each: small-request latency (p50, p90; one at a time), throughput (8 concurrent), and handshake latency.

    .venv/bin/python bench/bench_shared_sessions.py [--quick]   # a throwaway PostgreSQL unless
                                                                # MEMORY_DATABASE_URL names one
"""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx2
from bench_channel import SMALL_BODY, free_port, inner, latencies, throughput, wait_ready
from common import percentile, postgres_url, report, save_json, table

from channel.authz import Caller, CallerTable
from channel.keys import PrivateKey, parse_private_key
from channel.ratelimit import Rate
from channel.transport import ChannelTransport

QUICK = "--quick" in sys.argv
REQUESTS = 300 if QUICK else 1500
HANDSHAKES = 40 if QUICK else 150


def serve(port: int, shared: bool) -> None:
    """A server process: the echo app behind the channel, its sessions in memory or in PostgreSQL."""
    import uvicorn

    from channel.middleware import ChannelMiddleware
    from server.postgres.sessions import PgSessionStore

    server_key = parse_private_key(os.environ["BENCH_SERVER_KEY"].encode())
    client_key = parse_private_key(os.environ["BENCH_CLIENT_KEY"].encode())
    callers = CallerTable([Caller("bench", (client_key.public,), {"bench": "rw"})])
    sessions = PgSessionStore(os.environ["BENCH_DATABASE_URL"], server_key, time.time) if shared else None
    unlimited = Rate(1e6, 1e6)
    app = ChannelMiddleware(
        inner,
        server_key=server_key,
        callers=callers,
        handshake_rate=unlimited,
        failure_rate=unlimited,
        sessions=sessions,
    )
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", http="h11", lifespan="off", ws="none")


class RoundRobin(httpx2.AsyncBaseTransport):
    """Each outer request to the next server in turn, as a load balancer would send it."""

    def __init__(self, ports: list[int]) -> None:
        self._ports = itertools.cycle(ports)
        self._inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        request.url = request.url.copy_with(port=next(self._ports))
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


@contextmanager
def servers(count: int, shared: bool, env: dict[str, str]) -> Iterator[list[int]]:
    ports = [free_port() for _ in range(count)]
    mode = "shared" if shared else "memory"
    processes = [subprocess.Popen([sys.executable, __file__, "--serve", str(port), mode], env=env) for port in ports]
    try:
        for port in ports:
            asyncio.run(wait_ready(f"http://127.0.0.1:{port}"))
        yield ports
    finally:
        for process in processes:
            process.terminate()
            process.wait(10)


ROUND = 50  # requests per configuration before the next one's turn: load from elsewhere falls on all alike


async def measure(
    setups: dict[str, list[int]], server_key: PrivateKey, client_key: PrivateKey
) -> dict[str, dict[str, float]]:
    """Every configuration in turn, round after round, so a machine busy with other work slows all of them alike."""

    def client(ports: list[int]) -> httpx2.AsyncClient:
        transport = ChannelTransport(
            f"http://127.0.0.1:{ports[0]}",
            client_key=client_key,
            server_key=server_key.public,
            transport=RoundRobin(ports),
        )
        return httpx2.AsyncClient(transport=transport, base_url="http://memory")

    clients = {name: client(ports) for name, ports in setups.items()}
    times: dict[str, list[float]] = {name: [] for name in setups}
    handshakes: dict[str, list[float]] = {name: [] for name in setups}
    rates: dict[str, list[float]] = {name: [] for name in setups}
    try:
        for session in clients.values():  # warm up: the handshake, connections, the replicas' caches
            await latencies(lambda session=session: echo(session), ROUND)
        for _ in range(REQUESTS // ROUND):
            for name, session in clients.items():
                times[name] += await latencies(lambda session=session: echo(session), ROUND)
                rates[name].append(await throughput(lambda session=session: echo(session), 8, ROUND // 8))
        for _ in range(HANDSHAKES // 10):
            for name, ports in setups.items():
                handshakes[name] += await latencies(lambda ports=ports: handshake(client(ports)), 10)
    finally:
        for session in clients.values():
            await session.aclose()
    return {
        name: {
            "p50_ms": percentile(times[name], 50) * 1000,
            "p90_ms": percentile(times[name], 90) * 1000,
            "requests_per_s": percentile(rates[name], 50),
            "handshake_p50_ms": percentile(handshakes[name], 50) * 1000,
        }
        for name in setups
    }


async def echo(session: httpx2.AsyncClient) -> None:
    response = await session.post("/echo", content=SMALL_BODY)
    assert response.content == SMALL_BODY


async def handshake(fresh: httpx2.AsyncClient) -> None:
    async with fresh:
        await fresh.post("/echo", content=b"x")


def store_costs(url: str, server_key: PrivateKey, client_key: PrivateKey) -> dict[str, float]:
    """What the shared store itself adds, in this process: a request's commit, a cached and an uncached lookup."""
    from channel.session import Session
    from server.postgres.sessions import PgSessionStore

    now = time.time()
    store, other = PgSessionStore(url, server_key, time.time), PgSessionStore(url, server_key, time.time)
    try:
        session = Session(
            os.urandom(16), "bench", client_key.public.x25519, os.urandom(32), os.urandom(32), now, now + 3600, now
        )
        assert store.open(session, time.time_ns())
        commits, lookups = [], []
        for counter in range(REQUESTS):
            started = time.perf_counter()
            assert store.commit_request(session, counter, os.urandom(16)) is None
            commits.append(time.perf_counter() - started)
            other._cache.clear()
            started = time.perf_counter()
            assert other.get(session.id) is not None
            lookups.append(time.perf_counter() - started)
        return {"commit_p50_ms": percentile(commits, 50) * 1000, "uncached_get_p50_ms": percentile(lookups, 50) * 1000}
    finally:
        store.close()
        other.close()


def main() -> None:
    if len(sys.argv) > 3 and sys.argv[1] == "--serve":
        serve(int(sys.argv[2]), sys.argv[3] == "shared")
        return
    server_key, client_key = PrivateKey.generate(), PrivateKey.generate()
    results: dict[str, dict[str, float]] = {}
    with postgres_url() as url:
        # Throwaway keys for this run, handed to the server processes through their environment (never printed).
        env = dict(
            os.environ,
            BENCH_SERVER_KEY=server_key.file_text(),
            BENCH_CLIENT_KEY=client_key.file_text(),
            BENCH_DATABASE_URL=url,
        )
        with servers(1, False, env) as memory, servers(1, True, env) as one, servers(2, True, env) as two:
            setups = {
                "one server, sessions in memory": memory,
                "one server, sessions in PostgreSQL": one,
                "two servers round robin, PostgreSQL": two,
            }
            results.update(asyncio.run(measure(setups, server_key, client_key)))
        store = store_costs(url, server_key, client_key)
    rows = [[name, r["p50_ms"], r["p90_ms"], r["requests_per_s"], r["handshake_p50_ms"]] for name, r in results.items()]
    body = (
        f"{REQUESTS} small requests one at a time and in bursts of 8 at once, {HANDSHAKES} handshakes, the three "
        f"configurations taking turns every {ROUND} requests; client and servers in separate processes on "
        "127.0.0.1, PostgreSQL on a Unix socket on the same machine.\n\n"
        + table(("sessions", "request p50 ms", "p90 ms", "requests/s (8 at once)", "handshake p50 ms"), rows)
    )
    body += (
        f"\n\nThe store alone, in process: a request's commit (one statement: liveness, counter, request id) "
        f"p50 {store['commit_p50_ms']:.3f} ms; a session not yet cached (a lookup and opening its sealed keys) "
        f"p50 {store['uncached_get_p50_ms']:.3f} ms."
    )
    results["store"] = store
    report("shared_sessions", "Channel sessions shared through PostgreSQL: the cost per request", body)
    save_json("shared_sessions", results)


if __name__ == "__main__":
    main()
