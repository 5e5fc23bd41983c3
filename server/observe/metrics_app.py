"""Where the metrics are counted and served. Never unauthenticated on the public port:

- inside the channel, the inner app's `/metrics` (`metrics_endpoint`) answers authenticated callers only; its index
  gauges cover just the indexes the caller holds a grant on, so one laptop's owner does not learn another's;
- `MetricsListener`, started by `serve` when `MEMORY_METRICS_PORT` is set, is a plain HTTP listener for a
  Prometheus scraper on the same host (or in the container's network namespace). It binds a loopback address
  only and shows every index. It runs in a thread of its own, apart from the server's event loop and sockets.

`RequestMetrics` (the inner app's middleware) and `ChannelMetrics` (around the channel) do the counting.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import socket
import socketserver
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from channel.asgi import ASGIApp, Message, Receive, Scope, Send
from channel.authz import ChannelUser
from server.errors import InvalidArgumentError
from server.index.embeddings.chain import as_chain
from server.indexes.storage import SqliteBackend
from server.memory.service import SERVER_VERSION, MemoryService
from server.observe.metrics import (
    CONTENT_TYPE,
    IndexSizes,
    Metrics,
    index_collector,
    info_collector,
    read_index_sizes,
)

log = logging.getLogger(__name__)

METRICS_PATH = "/metrics"
LISTENER_TIMEOUT = 10.0  # seconds a scraper's connection may stay silent
POLL_SECONDS = 0.2  # how soon the listener notices it is asked to stop


def service_metrics(service: MemoryService) -> Metrics:
    """Metrics for a server of `service`: its indexes' sizes, its version and embedding model."""
    metrics = Metrics()
    # The first provider that answered at start (one whose start-up probe failed is on trial, not in use).
    working = [state for state in as_chain(service.embedder).states() if state.state == "ok"]
    provider, model = (working[0].provider, working[0].model) if working else ("none", "none")
    metrics.collectors.append(info_collector(SERVER_VERSION, provider, model))
    metrics.collectors.append(index_collector(index_sizes(service)))
    return metrics


def index_sizes(service: MemoryService) -> IndexSizes:
    """Where the service's indexes are counted from: the SQLite files under the data folder, or the PostgreSQL
    database (never SQLite files a PostgreSQL server may have left in its data folder, migrated or not)."""
    backend = service.indexes.backend
    if isinstance(backend, SqliteBackend):
        return functools.partial(read_index_sizes, backend.data_dir)
    from server.postgres.backend import PgBackend  # psycopg is imported only by a server that uses it

    if isinstance(backend, PgBackend):
        from server.observe.pg_sizes import read_pg_index_sizes

        return functools.partial(read_pg_index_sizes, backend.url)
    return lambda visible: []  # another backend (a test's): its indexes are not counted


class _AnswerObserver:
    """ASGI middleware that reports each HTTP request's scope, answer status (500 when the app failed before
    answering) and seconds taken to `observe`."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    def observe(self, scope: Scope, status: int, seconds: float) -> None:
        raise NotImplementedError

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, counted)
        finally:
            self.observe(scope, status, time.perf_counter() - started)


class RequestMetrics(_AnswerObserver):
    """Counts each request of the inner app by route, method and status class, and how long its answer took."""

    def observe(self, scope: Scope, status: int, seconds: float) -> None:
        self.metrics.observe_request(scope["path"], scope["method"], status, seconds)


class ChannelMetrics(_AnswerObserver):
    """Counts each request at the channel (handshakes, tunnel frames, health checks) by path and status."""

    def observe(self, scope: Scope, status: int, seconds: float) -> None:
        self.metrics.observe_channel(scope["path"], status)


def metrics_endpoint(metrics: Metrics) -> Callable[[Request], Any]:
    """The inner `/metrics`: the channel's authenticated caller sees the server-wide counters and its own
    indexes' gauges. Anything else (no caller: not through the channel) is told there is nothing here."""

    async def endpoint(request: Request) -> Response:
        user = request.scope.get("user")
        if not isinstance(user, ChannelUser) or not user.is_authenticated:
            return PlainTextResponse("not found\n", status_code=404)
        granted = frozenset(user.grants)
        text = await anyio.to_thread.run_sync(metrics.render, granted.__contains__)
        return Response(text, media_type=CONTENT_TYPE, headers={"cache-control": "no-store"})

    return endpoint


class MetricsListener:
    """`GET /metrics` over plain HTTP on a loopback address, served from a thread of its own."""

    def __init__(self, metrics: Metrics, host: str, port: int) -> None:
        family, address = _loopback_address(host, port)
        try:
            self._server = _Server(family, address, metrics)
        except OSError as exc:
            raise InvalidArgumentError(f"cannot listen for metrics on {host}:{port}: {exc.strerror}") from None
        self._thread = threading.Thread(target=self._serve, name="metrics-listener", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        self._thread.start()

    def _serve(self) -> None:
        self._server.serve_forever(poll_interval=POLL_SECONDS)

    def close(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, family: socket.AddressFamily, address: tuple[str, int], metrics: Metrics) -> None:
        self.address_family = family
        self.metrics = metrics
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        socketserver.TCPServer.server_bind(self)  # not HTTPServer's, which looks the address up in DNS
        self.server_name, self.server_port = str(self.server_address[0]), int(self.server_address[1])


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = LISTENER_TIMEOUT
    server_version = "memory-metrics"
    sys_version = ""

    def do_GET(self) -> None:  # the name http.server looks for
        if self.path.split("?", 1)[0] != METRICS_PATH:
            self._answer(404, b"not found\n", "text/plain; charset=utf-8")
            return
        try:
            body = self.server.metrics.render(lambda _index: True).encode("utf-8")
        except Exception as exc:
            log.warning("metrics listener failed: %s", type(exc).__name__)
            self._answer(500, b"internal error\n", "text/plain; charset=utf-8")
            return
        self._answer(200, body, CONTENT_TYPE)

    def _answer(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.send_header("cache-control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # http.server's signature
        pass  # a scrape every few seconds is not worth a log line


def _loopback_address(host: str, port: int) -> tuple[socket.AddressFamily, tuple[str, int]]:
    """The address to bind, refusing any name that does not resolve to a loopback address."""
    try:
        family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise InvalidArgumentError(f"cannot resolve the metrics host {host}: {exc.strerror}") from None
    if not ipaddress.ip_address(address[0]).is_loopback:
        raise InvalidArgumentError(
            f"the metrics listener binds loopback addresses only: {host} is {address[0]}; it has no authentication"
        )
    return family, (str(address[0]), int(address[1]))
