"""The memory browser's HTTP server in process, on a real socket: how long a silent connection may hold a thread,
how many may, and what a body that parses to text UTF-8 cannot hold is called."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

import pytest
from anyio.from_thread import start_blocking_portal

from client_proxy.ui.api import BrowserApi
from client_proxy.ui.guard import SECURITY_HEADERS
from client_proxy.ui.http import CONNECTION_TIMEOUT, BrowserServer, unencodable_field

WAIT = 10.0  # the longest any answer here may take; the server's own limits are far below it


@contextmanager
def serving(**limits: Any) -> Iterator[BrowserServer]:
    """A server whose API is never reached: every request here is refused or cut before it."""
    with start_blocking_portal() as portal:
        server = BrowserServer(0, cast(BrowserApi, None), portal, **limits)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield server
        finally:
            server.shutdown()
            server.server_close()
            thread.join(WAIT)


def half_open(server: BrowserServer) -> socket.socket:
    """A connection that sends the start of a request and then nothing."""
    connection = socket.create_connection(("127.0.0.1", server.guard.port), timeout=WAIT)
    connection.sendall(f"GET /api/files HTTP/1.1\r\nHost: 127.0.0.1:{server.guard.port}\r\n".encode())
    return connection


def read_all(connection: socket.socket) -> bytes:
    """Everything until the server closes (a TimeoutError after WAIT if it never does)."""
    answer = b""
    while chunk := connection.recv(65536):
        answer += chunk
    return answer


def test_a_silent_connection_is_closed_by_the_server_when_its_timeout_runs_out():
    with serving() as server:
        assert server.connection_timeout == CONNECTION_TIMEOUT == 30
    with serving(connection_timeout=1.0) as server, half_open(server) as connection:
        started = time.monotonic()
        assert read_all(connection) == b""  # closed, not answered, and long before WAIT
        assert 0.5 < time.monotonic() - started < 5


def test_connections_past_the_cap_are_refused_at_once_and_a_freed_slot_serves_again():
    with serving(max_connections=3) as server:
        held = [half_open(server) for _ in range(3)]
        try:
            with socket.create_connection(("127.0.0.1", server.guard.port), timeout=WAIT) as extra:
                refused = read_all(extra)
            head = refused.split(b"\r\n\r\n")[0].decode()
            assert head.startswith("HTTP/1.1 503 ")
            assert all(f"{name}: {value}" in head for name, value in SECURITY_HEADERS.items())
            held[0].sendall(b"Connection: close\r\n\r\n")  # one request ends (refused: no cookie)
            assert read_all(held[0]).startswith(b"HTTP/1.1 403 ")
            with half_open(server) as next_one:  # its slot is free again
                next_one.sendall(b"\r\n")
                next_one.shutdown(socket.SHUT_WR)
                assert read_all(next_one).startswith(b"HTTP/1.1 403 ")
        finally:
            for connection in held:
                connection.close()


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ({"path": "memory/x.md", "content": "a\ud800b"}, "content"),
        ({"path": "memory/\udc80.md", "hash": "00"}, "path"),
        ({"tags": ["ok", "half \ud83d"]}, "tags[1]"),
        ({"meta": {"note": "\udfff"}}, "meta.note"),
        ({"fine": 1, "\ud800": "x"}, "body"),  # a name that cannot be encoded is not echoed back
        ("\ud800", "body"),
    ],
)
def test_text_utf8_cannot_hold_is_named_by_its_field(document, field):
    assert unencodable_field(document) == field


def test_well_formed_text_and_deep_nesting_pass_the_text_check():
    assert unencodable_field({"path": "memory/x.md", "content": "smile 😀 ünïcode", "n": [1, None, True]}) is None
    deep: list[Any] = []
    for _ in range(100_000):  # deeper than any recursion could walk
        deep = [deep]
    assert unencodable_field(deep) is None
