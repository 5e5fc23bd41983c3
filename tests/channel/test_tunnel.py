"""The channel end to end, real uvicorn on 127.0.0.1 and the real client transport: what works."""

from __future__ import annotations

import hashlib
import logging
import socket
import threading
import time

import anyio
import httpx2
import pytest

import channel.inner
import channel.transport
from channel.constants import (
    HANDSHAKE_PATH,
    INDEX_HEADER,
    MAX_BODY,
    MAX_REQUEST_FRAME,
    REHANDSHAKE_MARGIN,
    SESSION_HEADER,
    SESSION_IDLE,
    SESSION_LIFETIME,
    TUNNEL_PATH,
)
from channel.errors import ChannelError, FrameError, HandshakeRefused, ServerKeyMismatch
from channel.keys import PrivateKey
from tests.channel.apps import WAIT, AppState, caller, inner_app, table
from tests.channel.conftest import MutableDirectory, serve_channel

pytestmark = pytest.mark.anyio

DEVICE = PrivateKey.generate("alice@laptop")


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def state() -> AppState:
    return AppState()


@pytest.fixture
def directory() -> MutableDirectory:
    return MutableDirectory(table(caller("alice", DEVICE, notes="rw", shared="r")))


@pytest.fixture
def server(serve, state, directory):
    return serve(inner_app(state), directory)


async def test_a_request_reaches_the_inner_app_with_its_method_path_query_headers_and_body(server):
    async with server.client(DEVICE) as client:
        response = await client.put("/echo?q=a%20b&x=1", content=b"payload", headers={"x-custom": "yes"})
    assert response.status_code == 200
    echo = response.json()
    assert echo["method"] == "PUT" and echo["path"] == "/echo" and echo["query"] == "q=a%20b&x=1"
    assert echo["headers"]["x-custom"] == "yes" and echo["headers"]["content-length"] == "7"
    assert echo["body"] == "payload"
    assert response.headers["content-type"] == "application/json"


async def test_the_inner_app_finds_the_caller_in_request_user(server):
    async with server.client(DEVICE) as client:
        plain = (await client.get("/echo")).json()["user"]
        notes = (await client.get("/echo", headers={INDEX_HEADER: "notes"})).json()["user"]
        shared = (await client.get("/echo", headers={INDEX_HEADER: "shared"})).json()["user"]
    grants = {"notes": "rw", "shared": "r"}
    assert plain == {
        "name": "alice",
        "fingerprint": DEVICE.public.fingerprint,
        "grants": grants,
        "index": None,
        "access": None,
        "can_write": False,
    }
    assert notes["index"] == "notes" and notes["access"] == "rw" and notes["can_write"]
    assert shared["index"] == "shared" and shared["access"] == "r" and not shared["can_write"]


@pytest.mark.parametrize(
    "headers",
    [
        [(INDEX_HEADER, "private")],
        [(INDEX_HEADER, "../notes")],
        [(INDEX_HEADER, "Notes")],
        [(INDEX_HEADER, "")],
        [(INDEX_HEADER, "notes"), (INDEX_HEADER, "private")],
    ],
)
async def test_an_index_without_a_grant_is_refused_before_the_inner_app_runs(server, state, headers):
    async with server.client(DEVICE) as client:
        response = await client.post("/count", headers=headers)
    assert response.status_code == 403 and response.json() == {"error": "index not granted to this caller"}
    assert state.count == 0


async def test_server_sent_events_arrive_while_the_inner_app_is_still_producing_them(server, state):
    async with server.client(DEVICE) as client, client.stream("GET", "/events") as response:
        assert response.headers["content-type"] == "text/event-stream"
        chunks = response.aiter_bytes()
        with anyio.fail_after(WAIT):
            assert await chunks.__anext__() == b"data: first\n\n"
        assert not state.release.is_set()  # the inner app is still waiting for us: the event came live
        state.release.set()
        assert b"".join([chunk async for chunk in chunks]) == b"data: second\n\n"


async def test_closing_a_stream_reaches_the_inner_app_as_http_disconnect(server, state):
    async with server.client(DEVICE) as client:
        async with client.stream("GET", "/hold") as response:
            with anyio.fail_after(WAIT):
                assert await response.aiter_bytes().__anext__() == b"data: open\n\n"
        assert await anyio.to_thread.run_sync(state.disconnected.wait, WAIT)


async def test_large_bodies_cross_intact_in_both_directions(server):
    upload = bytes(range(256)) * (5 * 4096 + 3)
    async with server.client(DEVICE) as client:
        sent = await client.post("/upload", content=upload)
        received = await client.get("/download", params={"size": 3 * 1024 * 1024 + 5})
    assert sent.json() == {"size": len(upload), "sha256": hashlib.sha256(upload).hexdigest()}
    assert len(received.content) == 3 * 1024 * 1024 + 5
    assert received.content[:512] == bytes(range(256)) * 2


async def test_a_body_over_the_limit_is_refused_locally_before_anything_is_sent(make_relay, server):
    relay = make_relay()
    async with server.client(DEVICE, transport=relay) as client:
        with pytest.raises(ChannelError, match="over"):
            await client.post("/upload", content=bytes(MAX_BODY + 1))
    assert TUNNEL_PATH not in relay.paths()


async def test_a_frame_over_the_size_limit_is_refused_before_it_is_read_whole(make_relay, server):
    relay = make_relay()
    async with server.client(DEVICE, transport=relay) as client:
        await client.get("/echo")
        session = dict(relay.seen[-1].headers)[SESSION_HEADER.encode()].decode()

        async def too_much():
            for _ in range(MAX_REQUEST_FRAME // (1 << 20) + 2):
                yield bytes(1 << 20)

        async with httpx2.AsyncClient() as raw:
            response = await raw.post(server.url + TUNNEL_PATH, headers={SESSION_HEADER: session}, content=too_much())
    assert response.status_code == 400 and response.content == b"bad frame\n"


async def test_an_inner_failure_reaches_the_client_as_the_inner_apps_own_500(server, state):
    async with server.client(DEVICE) as client:
        response = await client.get("/boom")  # Starlette answers 500 itself, then re-raises to the middleware
        assert response.status_code == 500 and state.provider_key not in response.text
        assert (await client.get("/echo")).status_code == 200  # and the session goes on


async def test_an_inner_app_that_fails_before_answering_gets_the_channels_generic_500(serve, directory):
    async def crashing(scope, receive, send):
        if scope["type"] == "http":
            raise RuntimeError("secret detail")

    server = serve(crashing, directory)
    async with server.client(DEVICE) as client:
        response = await client.get("/anything")
    assert response.status_code == 500 and response.json() == {"error": "internal"}


async def test_an_inner_app_failing_after_its_caller_was_revoked_is_cut_off_and_nothing_escapes(directory, caplog):
    caplog.set_level(logging.INFO)
    started, revoked = threading.Event(), threading.Event()

    async def fails_once_revoked(scope, receive, send):
        if scope["type"] == "http":
            started.set()
            await anyio.to_thread.run_sync(revoked.wait, WAIT)
            raise RuntimeError("memory text SECRET-0000")

    async def revoke() -> None:
        assert await anyio.to_thread.run_sync(started.wait, WAIT)
        directory.table = table()
        revoked.set()

    with serve_channel(fails_once_revoked, directory) as server:  # stopped (its request done) before the checks
        async with server.client(DEVICE) as client, anyio.create_task_group() as group:
            group.start_soon(revoke)
            with anyio.fail_after(WAIT), pytest.raises(FrameError):  # the channel's 500 may not be sealed: cut off
                await client.get("/anything")
    logged = "\n".join(
        record.getMessage() + (logging.Formatter().formatException(record.exc_info) if record.exc_info else "")
        for record in caplog.records
    )
    assert "error=RuntimeError" in logged  # the middleware logged the failure, by class only
    assert "SECRET-0000" not in logged and "Exception in ASGI application" not in logged


async def test_only_the_channel_paths_answer_outside_the_tunnel(server):
    async with httpx2.AsyncClient(base_url=server.url) as raw:
        assert (await raw.get("/echo")).status_code == 404
        assert (await raw.get(TUNNEL_PATH)).status_code == 404
        assert (await raw.get(HANDSHAKE_PATH)).status_code == 404
        assert (await raw.post(TUNNEL_PATH, content=b"x")).content == b"session unknown or expired\n"


async def test_concurrent_requests_share_one_handshake(make_relay, server, state):
    relay = make_relay()
    async with server.client(DEVICE, transport=relay) as client:
        results = []

        async def one() -> None:
            results.append((await client.post("/count")).status_code)

        async with anyio.create_task_group() as group:
            for _ in range(40):
                group.start_soon(one)
    assert results == [200] * 40 and state.count == 40
    assert relay.paths().count(HANDSHAKE_PATH) == 1


async def test_the_client_handshakes_again_shortly_before_its_session_expires(make_relay, serve, state, directory):
    clock, relay = Clock(), make_relay()
    server = serve(inner_app(state), directory, clock_window=4 * SESSION_LIFETIME)  # only the client's clock runs
    async with server.client(DEVICE, transport=relay, clock=clock) as client:
        await client.post("/count")
        clock.now += SESSION_LIFETIME - REHANDSHAKE_MARGIN + 1
        await client.post("/count")
        clock.now += SESSION_IDLE - REHANDSHAKE_MARGIN + 1
        await client.post("/count")
    assert relay.paths() == [HANDSHAKE_PATH, TUNNEL_PATH] * 3  # renewed ahead of time: never a refused request
    assert state.count == 3


@pytest.mark.parametrize("elapsed", [SESSION_LIFETIME + 1, SESSION_IDLE + 1])
async def test_a_session_the_server_expired_is_renewed_and_the_mutating_call_runs_once(
    make_relay, serve, state, directory, elapsed
):
    clock, relay = Clock(), make_relay()
    server = serve(inner_app(state), directory, clock=clock, clock_window=2 * SESSION_LIFETIME)
    async with server.client(DEVICE, transport=relay) as client:
        assert (await client.post("/count")).json() == {"count": 1}
        clock.now += elapsed  # the server's clock only: the client still believes in its session
        assert (await client.post("/count")).json() == {"count": 2}
    assert relay.paths() == [HANDSHAKE_PATH, TUNNEL_PATH, TUNNEL_PATH, HANDSHAKE_PATH, TUNNEL_PATH]
    assert state.count == 2


async def test_a_revoked_callers_stream_stops_at_its_next_event(server, state, directory):
    async with server.client(DEVICE) as client, client.stream("GET", "/events") as response:
        chunks = response.aiter_bytes()
        with anyio.fail_after(WAIT):
            assert await chunks.__anext__() == b"data: first\n\n"
        directory.table = table()
        state.release.set()  # the inner app sends its next event: the channel refuses to seal it
        with anyio.fail_after(WAIT), pytest.raises(FrameError):
            async for chunk in chunks:
                assert chunk != b"data: second\n\n"
    assert len(server.middleware.sessions) == 0


async def test_a_revoked_caller_loses_its_open_stream_and_its_sessions(server, state, directory, monkeypatch):
    monkeypatch.setattr(channel.inner, "REVOCATION_POLL", 0.02)
    async with server.client(DEVICE) as client, client.stream("GET", "/hold") as response:
        chunks = response.aiter_bytes()
        with anyio.fail_after(WAIT):
            assert await chunks.__anext__() == b"data: open\n\n"
        directory.table = table()
        with anyio.fail_after(WAIT), pytest.raises(FrameError):
            async for _ in chunks:
                pass
    assert await anyio.to_thread.run_sync(state.disconnected.wait, WAIT)  # to the app, the revoked client left


@pytest.mark.parametrize("grants", [{}, {"notes": "r"}], ids=["grant-removed", "grant-lowered"])
async def test_a_stream_opened_under_a_grant_the_operator_changed_stops_at_its_next_event(
    server, state, directory, grants
):
    async with server.client(DEVICE) as client:
        async with client.stream("GET", "/events", headers={INDEX_HEADER: "notes"}) as response:
            chunks = response.aiter_bytes()
            with anyio.fail_after(WAIT):
                assert await chunks.__anext__() == b"data: first\n\n"
            directory.table = table(caller("alice", DEVICE, **grants, shared="r"))
            state.release.set()  # the inner app sends its next event: the channel refuses to seal it
            with anyio.fail_after(WAIT), pytest.raises(FrameError):
                async for chunk in chunks:
                    assert chunk != b"data: second\n\n"
        assert (await client.get("/echo", headers={INDEX_HEADER: "shared"})).status_code == 200  # key still good
    assert len(server.middleware.sessions) == 1


async def test_a_stream_on_another_index_outlives_a_change_to_a_grant_it_does_not_use(server, state, directory):
    async with (
        server.client(DEVICE) as client,
        client.stream("GET", "/events", headers={INDEX_HEADER: "shared"}) as response,
    ):
        chunks = response.aiter_bytes()
        with anyio.fail_after(WAIT):
            assert await chunks.__anext__() == b"data: first\n\n"
        directory.table = table(caller("alice", DEVICE, shared="r"))
        state.release.set()
        with anyio.fail_after(WAIT):
            assert b"".join([chunk async for chunk in chunks]) == b"data: second\n\n"


async def test_a_held_stream_ends_within_the_poll_once_its_grant_is_removed(server, state, directory, monkeypatch):
    monkeypatch.setattr(channel.inner, "REVOCATION_POLL", 0.02)
    async with (
        server.client(DEVICE) as client,
        client.stream("GET", "/hold", headers={INDEX_HEADER: "notes"}) as response,
    ):
        chunks = response.aiter_bytes()
        with anyio.fail_after(WAIT):
            assert await chunks.__anext__() == b"data: open\n\n"
        directory.table = table(caller("alice", DEVICE, shared="r"))
        with anyio.fail_after(WAIT), pytest.raises(FrameError):
            async for _ in chunks:
                pass
    assert await anyio.to_thread.run_sync(state.disconnected.wait, WAIT)


async def test_connect_checks_the_pinned_key_and_authorization_before_any_request(server, make_relay):
    relay = make_relay()
    transport = server.transport(DEVICE, transport=relay)
    await transport.connect()
    async with httpx2.AsyncClient(transport=transport, base_url="http://memory") as client:
        assert (await client.get("/echo")).status_code == 200
    assert relay.paths() == [HANDSHAKE_PATH, TUNNEL_PATH]
    async with server.transport(DEVICE, server_key=PrivateKey.generate().public) as wrong:
        with pytest.raises(ServerKeyMismatch):
            await wrong.connect()
    async with server.transport(PrivateKey.generate()) as stranger:
        with pytest.raises(HandshakeRefused):
            await stranger.connect()


async def test_the_callers_timeout_applies_through_the_tunnel(server, state):
    transport = server.transport(DEVICE)
    async with httpx2.AsyncClient(transport=transport, base_url="http://memory", timeout=0.3) as client:
        await client.get("/echo")
        with pytest.raises(httpx2.ReadTimeout):
            await client.get("/stall")
    state.release.set()


async def test_two_transports_of_one_device_key_handshaking_at_once_both_get_a_session(server, make_relay):
    second_done = anyio.Event()
    held_once: list[bool] = []

    async def hold_first_handshake(outer, forward):
        if outer.path == HANDSHAKE_PATH and not held_once:
            held_once.append(True)
            with anyio.fail_after(WAIT):
                await second_done.wait()  # the later msg1 arrives first: this one now looks replayed
        return await forward(outer)

    relay = make_relay(hold_first_handshake)
    first = server.client(DEVICE, transport=relay)
    second = server.client(DEVICE)
    results: list[int] = []

    async def use(client, then=None) -> None:
        results.append((await client.get("/echo")).status_code)
        if then is not None:
            then.set()

    async with first, second, anyio.create_task_group() as group:
        group.start_soon(use, first)
        await anyio.wait_all_tasks_blocked()
        group.start_soon(use, second, second_done)
    assert results == [200, 200]
    assert relay.paths() == [HANDSHAKE_PATH, HANDSHAKE_PATH, TUNNEL_PATH]  # refused once, then a fresh msg1


async def test_a_handshake_with_a_server_that_never_answers_gives_up_after_the_handshake_timeout(monkeypatch):
    # It waited as long as the caller let its requests wait (the proxy: 300 s, for tool streams), and without a
    # caller's timeout (`connect`) for ever.
    monkeypatch.setattr(channel.transport, "HANDSHAKE_TIMEOUT", 0.3)
    with socket.create_server(("127.0.0.1", 0)) as silent:  # takes connections, never answers
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        transport = channel.transport.ChannelTransport(url, client_key=DEVICE, server_key=PrivateKey.generate().public)
        async with httpx2.AsyncClient(transport=transport, base_url="http://memory", timeout=WAIT * 10) as client:
            with anyio.fail_after(WAIT), pytest.raises(httpx2.ReadTimeout):
                await transport.connect()
            with anyio.fail_after(WAIT), pytest.raises(httpx2.ReadTimeout):
                await client.get("/echo")
