"""Benchmark: the cost of the secure channel.

One uvicorn server process serves the same inner app two ways: through the channel (`/v1/tunnel`) and, for
comparison in the same run, as plain HTTP (the middleware's plain paths). This process is the client.

- small requests: p50 latency (one request at a time) and throughput (concurrent requests) of an echo route
- large bodies: upload and download rate through the tunnel, with plain HTTP beside it
- handshakes per second: over HTTP, and the pure cryptography in process

    .venv/bin/python bench/bench_channel.py [--quick]

Targets (ARCHITECTURE / the channel issue): tunnel throughput >= 0.7x plain on small requests, >= 100 MB/s on
large bodies.
"""

from __future__ import annotations

import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import httpx2  # noqa: E402

from channel.asgi import Receive, Scope, Send  # noqa: E402
from channel.authz import Caller, CallerTable  # noqa: E402
from channel.handshake import Welcome, consume_initiation, consume_response, create_initiation, create_response  # noqa: E402
from channel.keys import PrivateKey, parse_private_key  # noqa: E402
from channel.ratelimit import Rate  # noqa: E402
from channel.transport import ChannelTransport  # noqa: E402

QUICK = "--quick" in sys.argv
SMALL_BODY = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"memory_search","query":"idempotent"}}'
LARGE = (8 if QUICK else 24) * 1024 * 1024
PLAIN_PATHS = ("/echo", "/blob", "/sink", "/healthz")


# -- the server process ------------------------------------------------------------------------------------------
async def inner(scope: Scope, receive: Receive, send: Send) -> None:
    """Echo, a large download, a sink for uploads, a health check. Raw ASGI, so the app costs next to nothing."""
    if scope["type"] != "http":
        return
    body = bytearray()
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    if scope["path"] == "/blob":
        size = int(scope["query_string"].decode().partition("=")[2])
        out = bytes(size)
    elif scope["path"] == "/sink":
        out = str(len(body)).encode()
    else:
        out = bytes(body)
    headers = [(b"content-type", b"application/octet-stream"), (b"content-length", str(len(out)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": out})


def serve(port: int) -> None:
    import uvicorn

    from channel.middleware import ChannelMiddleware

    server_key = parse_private_key(os.environ["BENCH_SERVER_KEY"].encode())
    client_key = parse_private_key(os.environ["BENCH_CLIENT_KEY"].encode())
    callers = CallerTable([Caller("bench", (client_key.public,), {"bench": "rw"})])
    app = ChannelMiddleware(
        inner, server_key=server_key, callers=callers, plain_paths=PLAIN_PATHS, handshake_rate=Rate(1e6, 1e6)
    )
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", http="h11", lifespan="off", ws="none")


# -- the client ------------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def wait_ready(url: str) -> None:
    async with httpx2.AsyncClient() as client:
        for _ in range(200):
            try:
                if (await client.get(url + "/healthz")).status_code:
                    return
            except httpx2.TransportError:
                await asyncio.sleep(0.05)
    raise RuntimeError("the benchmark server did not start")


async def latencies(call: Callable[[], Awaitable[object]], count: int) -> list[float]:
    out = []
    for _ in range(count):
        started = time.perf_counter()
        await call()
        out.append(time.perf_counter() - started)
    return out


async def throughput(call: Callable[[], Awaitable[object]], workers: int, each: int) -> float:
    async def worker() -> None:
        for _ in range(each):
            await call()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(workers)))
    return workers * each / (time.perf_counter() - started)


async def rate(call: Callable[[], Awaitable[object]], size: int, rounds: int) -> float:
    times = await latencies(call, rounds)
    return size / statistics.median(times) / 1e6


def handshake_crypto_per_second(server_key: PrivateKey, client_key: PrivateKey, count: int) -> float:
    started = time.perf_counter()
    for n in range(count):
        msg1, initiator = create_initiation(client_key, server_key.public, n, os.urandom)
        _, responder = consume_initiation(server_key, msg1)
        msg2, _ = create_response(responder, Welcome(os.urandom(16), 2, 1), os.urandom)
        consume_response(initiator, msg2)
    return count / (time.perf_counter() - started)


async def run(url: str, server_key: PrivateKey, client_key: PrivateKey) -> list[tuple[str, str, str, str]]:
    lat_rounds, workers, each = (300, 8, 60) if QUICK else (1000, 8, 250)
    plain = httpx2.AsyncClient(base_url=url)
    transport = ChannelTransport(url, client_key=client_key, server_key=server_key.public)
    tunnel = httpx2.AsyncClient(transport=transport, base_url="http://memory")
    try:

        def echo(client: httpx2.AsyncClient) -> Callable[[], Awaitable[object]]:
            async def call() -> None:
                response = await client.post("/echo", content=SMALL_BODY)
                assert response.content == SMALL_BODY

            return call

        await latencies(echo(plain), 50)  # warm both paths up
        await latencies(echo(tunnel), 50)
        p50, tps = {}, {}
        for name, client in (("plain", plain), ("tunnel", tunnel), ("plain", plain), ("tunnel", tunnel)):
            p50.setdefault(name, []).append(statistics.median(await latencies(echo(client), lat_rounds)))
            tps.setdefault(name, []).append(await throughput(echo(client), workers, each))
        p50_plain, p50_tunnel = min(p50["plain"]), min(p50["tunnel"])
        tps_plain, tps_tunnel = max(tps["plain"]), max(tps["tunnel"])

        blob = bytes(LARGE)

        def upload(client: httpx2.AsyncClient) -> Callable[[], Awaitable[object]]:
            async def call() -> None:
                assert (await client.post("/sink", content=blob)).content == str(LARGE).encode()

            return call

        def download(client: httpx2.AsyncClient) -> Callable[[], Awaitable[object]]:
            async def call() -> None:
                assert len((await client.get("/blob", params={"size": LARGE})).content) == LARGE

            return call

        rounds = 3 if QUICK else 5
        up = {name: await rate(upload(c), LARGE, rounds) for name, c in (("plain", plain), ("tunnel", tunnel))}
        down = {name: await rate(download(c), LARGE, rounds) for name, c in (("plain", plain), ("tunnel", tunnel))}

        handshakes = 100 if QUICK else 300
        started = time.perf_counter()
        for _ in range(handshakes):
            await transport.connect()
        over_http = handshakes / (time.perf_counter() - started)
        in_process = handshake_crypto_per_second(server_key, client_key, handshakes)
    finally:
        await plain.aclose()
        await tunnel.aclose()

    return [
        ("small request p50 latency", f"{p50_plain * 1e3:.2f} ms", f"{p50_tunnel * 1e3:.2f} ms", "-"),
        (
            f"small request throughput ({workers} concurrent)",
            f"{tps_plain:.0f} req/s",
            f"{tps_tunnel:.0f} req/s",
            f"{tps_tunnel / tps_plain:.2f}x plain (target >= 0.70x)",
        ),
        (
            f"upload {LARGE >> 20} MiB",
            f"{up['plain']:.0f} MB/s",
            f"{up['tunnel']:.0f} MB/s",
            "target >= 100 MB/s",
        ),
        (
            f"download {LARGE >> 20} MiB",
            f"{down['plain']:.0f} MB/s",
            f"{down['tunnel']:.0f} MB/s",
            "target >= 100 MB/s",
        ),
        ("handshakes over HTTP (sequential)", "-", f"{over_http:.0f} /s", "-"),
        ("handshake cryptography, both sides, in process", "-", f"{in_process:.0f} /s", "-"),
    ]


def table(headers: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]
    lines = [
        "| " + " | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) + " |"
        for row in [headers, *rows]
    ]
    lines.insert(1, "|" + "|".join("-" * (width + 2) for width in widths) + "|")
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--serve":
        serve(int(sys.argv[2]))
        return
    server_key, client_key = PrivateKey.generate(), PrivateKey.generate()
    port = free_port()
    # Throwaway keys for this run, handed to the server process through its environment (never printed).
    env = dict(os.environ, BENCH_SERVER_KEY=server_key.file_text(), BENCH_CLIENT_KEY=client_key.file_text())
    process = subprocess.Popen([sys.executable, __file__, "--serve", str(port)], env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        asyncio.run(wait_ready(url))
        rows = asyncio.run(run(url, server_key, client_key))
    finally:
        process.terminate()
        process.wait(10)
    print(
        f"# Secure channel benchmark ({'quick' if QUICK else 'full'}; {os.cpu_count()} cores; server and client "
        "in separate processes on 127.0.0.1, uvicorn h11)\n"
    )
    print(table(("measure", "plain HTTP", "tunnel", "note"), rows))


if __name__ == "__main__":
    main()
