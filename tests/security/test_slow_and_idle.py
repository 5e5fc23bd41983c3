"""Finding 2 and a smaller one: idle sockets, request heads and bodies that never finish, and one caller's many
concurrent requests must not exhaust the server. Real sockets against real uvicorn: the product's `memory-server
serve` as a process where file descriptors matter, the product's uvicorn configuration in a thread otherwise."""

from __future__ import annotations

import os
import re
import resource
import socket
import subprocess
import threading
from contextlib import ExitStack, contextmanager
from pathlib import Path

import anyio
import httpx2
import pytest

from channel import constants
from channel.caller_load import CallerLimits
from channel.constants import HANDSHAKE_PATH
from channel.keys import PrivateKey
from channel.middleware import ChannelMiddleware
from server.cli import serve
from tests.channel.apps import AppState, caller, inner_app, table
from tests.channel.conftest import GENEROUS, MutableDirectory, RunningServer
from tests.threaded_uvicorn import run_uvicorn

REPO = Path(__file__).resolve().parents[2]
ALICE = PrivateKey.generate("alice@laptop")
WAIT = 20.0


@contextmanager
def product_uvicorn(state: AppState, **limits):
    """The channel in front of the test app, run with the product's uvicorn configuration and these limits."""
    key = PrivateKey.generate("test server")
    callers = MutableDirectory(table(caller("alice", ALICE, notes="rw")))
    caller_limits = limits.pop("caller_limits", None)
    middleware = ChannelMiddleware(
        inner_app(state),
        server_key=key,
        callers=callers,
        handshake_rate=GENEROUS,
        failure_rate=GENEROUS,
        caller_limits=caller_limits,
    )
    with run_uvicorn(serve.uvicorn_config(middleware, graceful=1, **limits)) as (url, _server):
        yield RunningServer(url, key.public, key, middleware)


def closed_by_server(sock: socket.socket, within: float) -> bool:
    """Whether the server closes `sock` within `within` seconds (a bounded blocking read, not a sleep)."""
    sock.settimeout(within)
    try:
        while chunk := sock.recv(4096):
            if b"HTTP/1.1 408" in chunk or b"HTTP/1.1 503" in chunk:
                continue
        return True
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_a_request_head_that_never_completes_is_cut_off():
    with product_uvicorn(AppState(), header_timeout=1.0) as server:
        host, port = server.url.removeprefix("http://").split(":")
        silent = socket.create_connection((host, int(port)))
        trickle = socket.create_connection((host, int(port)))
        trickle.sendall(b"POST /v1/handshake HTTP/1.1\r\nhost: memory\r\n")  # and never the blank line
        with silent, trickle:
            assert closed_by_server(silent, WAIT)  # the old server held both forever
            assert closed_by_server(trickle, WAIT)


def test_a_slow_body_is_answered_408_and_closed(monkeypatch):
    monkeypatch.setattr(constants, "BODY_IDLE_TIMEOUT", 0.5)
    with product_uvicorn(AppState()) as server:
        host, port = server.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(
                f"POST {HANDSHAKE_PATH} HTTP/1.1\r\nhost: memory\r\ncontent-length: 106\r\n\r\n".encode() + b"x" * 10
            )
            sock.settimeout(WAIT)
            answer = b""
            while chunk := sock.recv(4096):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 408 ") and b"request body too slow" in answer


def test_idle_sockets_beyond_the_connection_cap_are_shed_oldest_first_and_honest_requests_served():
    with product_uvicorn(AppState(), max_connections=40) as server, ExitStack() as stack:
        host, port = server.url.removeprefix("http://").split(":")
        idle = [stack.enter_context(socket.create_connection((host, int(port)))) for _ in range(100)]
        response = httpx2.get(server.url + "/healthz-is-not-here", timeout=WAIT)
        assert response.status_code == 404  # answered: the channel's own 404, not a refused connection
        assert closed_by_server(idle[0], WAIT)  # the oldest idle socket made room
        assert not closed_by_server(idle[-1], 0.2)  # the newest ones are still open, within the cap


@pytest.mark.anyio
async def test_a_caller_over_its_in_flight_cap_gets_429_and_the_client_waits_it_out():
    state = AppState()
    with product_uvicorn(state, caller_limits=CallerLimits(max_requests=1)) as server:
        async with server.client(ALICE) as client, anyio.create_task_group() as group:
            first_done = anyio.Event()

            async def hold() -> None:
                assert (await client.get("/stall")).content == b"late"
                first_done.set()

            group.start_soon(hold)
            with anyio.fail_after(WAIT):
                while server.middleware._load._requests.get("alice", 0) < 1:
                    await anyio.sleep(0.01)
                raw = await raw_tunnel_status(server, client)
                assert raw == (429, "1")
                threading.Timer(0.3, state.release.set).start()
                assert (await client.post("/count")).status_code == 200  # retried after Retry-After, then ran
                await first_done.wait()
    assert state.count == 1


async def raw_tunnel_status(server: RunningServer, client: httpx2.AsyncClient) -> tuple[int, str | None]:
    """A second request of alice's, sent raw in her live session: the server's answer before any body is read."""
    transport = client._transport
    session = transport._session
    async with httpx2.AsyncClient() as raw:
        answer = await raw.post(
            server.url + constants.TUNNEL_PATH,
            headers={constants.SESSION_HEADER: session.header},
            content=b"\x00" * 64,
        )
    return answer.status_code, answer.headers.get("retry-after")


def memory_server(tmp_path: Path, files: int) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "MEMORY_EMBEDDING_PROVIDERS": "none",
        "MEMORY_DATA_DIR": str(tmp_path / "data"),
        "MEMORY_KEYS_DIR": str(tmp_path / "keys"),
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("MEMORY_HOST", None)

    def limit_files() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))

    with (tmp_path / "stderr.log").open("w") as errors:
        return subprocess.Popen(
            [str(REPO / ".venv" / "bin" / "memory-server"), "serve", "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            env=env,
            preexec_fn=limit_files,
        )


def test_a_server_that_may_not_open_enough_files_refuses_to_start(tmp_path):
    process = memory_server(tmp_path, 300)
    try:
        assert process.wait(WAIT * 3) != 0
    finally:
        if process.poll() is None:
            process.kill()
        assert process.stdout is not None
        process.stdout.close()
    assert "raise the limit" in (tmp_path / "stderr.log").read_text()


def test_two_thousand_idle_sockets_do_not_exhaust_the_servers_files(tmp_path):
    process = memory_server(tmp_path, 1400)  # enough for the cap (1024) and its reserve, not for 2,000 sockets
    try:
        assert process.stdout is not None
        url = None
        for line in process.stdout:
            if found := re.search(r"listening on (http://127\.0\.0\.1:\d+)", line):
                url = found.group(1)
                break
        assert url is not None, (tmp_path / "stderr.log").read_text()
        host, port = url.removeprefix("http://").split(":")
        with ExitStack() as stack:
            for _ in range(2000):
                sock = stack.enter_context(socket.socket())
                sock.settimeout(WAIT)
                sock.connect((host, int(port)))
            response = httpx2.get(url + "/healthz", timeout=WAIT)
            assert response.status_code == 200
    finally:
        process.kill()
        process.wait(WAIT)
        assert process.stdout is not None
        process.stdout.close()
    assert "Too many open files" not in (tmp_path / "stderr.log").read_text()
