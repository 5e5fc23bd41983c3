"""The forwarder end to end: the SDK's client drives a real `memory-proxy` process over stdio, and the proxy
forwards to a real MCP server behind the channel on 127.0.0.1 (see `tests.proxy_support`); and, in process, the
forwarder against a server that never answers, and lines too large to forward."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.session import ClientSession
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

from channel import transport
from channel.keys import PrivateKey, read_private_key, write_private_key
from client_proxy.config import DEVICE_KEY_FILE, ProxyConfig, render_config, write_config
from client_proxy.forward import stdio
from client_proxy.forward.forwarder import Forwarder
from client_proxy.forward.id_scan import request_id_in
from client_proxy.forward.upstream import Upstream
from client_proxy.remote.connection import channel_client
from tests.proxy_support import (
    FILLERS,
    INDEX,
    PROXY,
    TIMEZONE,
    WAIT,
    LiveServer,
    init_proxy_home,
    proxy_params,
)

pytestmark = pytest.mark.anyio

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
TOOLS = {"echo", "count", "hang", "ask", "announce", "region"} | {f"filler_{n}" for n in range(FILLERS)}


@pytest.fixture
def home(tmp_path):
    return tmp_path / "home"


@pytest.fixture
def server(home):
    server = LiveServer()
    server.grant(init_proxy_home(home, server))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def connect(home, tmp_path):
    """`connect(mode, **client_options)`: the SDK client over a fresh proxy process, whose stderr is kept."""

    @asynccontextmanager
    async def connect(mode: str, *args: str, index: str | None = INDEX, **options):
        stray: list[Exception] = []

        async def on_message(message):
            if isinstance(message, Exception):  # a line on stdout that is not a JSON-RPC message
                stray.append(message)
            elif "message_handler" in options:
                await options["message_handler"](message)

        params = proxy_params(home, tmp_path / "proxy.log", *args, index=index)
        with open(tmp_path / "stderr", "a") as errlog:
            transport = stdio_client(params, errlog=errlog)
            async with Client(transport, mode=mode, **{**options, "message_handler": on_message}) as client:
                yield client
        assert stray == []

    return connect


async def all_tools(client: Client) -> list[str]:
    names, cursor = [], None
    while True:
        page = await client.list_tools(cursor=cursor)
        names += [tool.name for tool in page.tools]
        if (cursor := page.next_cursor) is None:
            return names


async def unknown_method(client: Client) -> MCPError:
    with pytest.raises(MCPError) as caught:
        await client.session.send_request(types.Request(method="no/such/method", params=None), types.EmptyResult)
    return caught.value


def posts(server: LiveServer) -> list[dict[str, str]]:
    return [headers for method, headers in server.requests() if method == "POST"]


async def test_a_legacy_client_pages_the_tools_calls_them_and_sees_progress_through_the_proxy(server, connect):
    progress = []

    async def on_progress(done, total, message):
        progress.append((done, total, message))

    async with connect("legacy") as client:
        assert client.protocol_version == LEGACY
        assert sorted(await all_tools(client)) == sorted(TOOLS)
        assert (await client.call_tool("echo", {"text": "héllo\nworld"})).content[0].text == "héllo\nworld"
        assert (await client.call_tool("count", {"steps": 3}, progress_callback=on_progress)).structured_content == {
            "result": 3
        }
        assert (await unknown_method(client)).error.code == types.METHOD_NOT_FOUND

    assert progress == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]
    requests = server.requests()
    assert {method for method, _ in requests} == {"POST", "GET", "DELETE"}  # the GET stream; the session ended
    initialize, *later = [headers for _, headers in requests]
    assert "mcp-protocol-version" not in initialize and "mcp-session-id" not in initialize
    session = later[0]["mcp-session-id"]
    for headers in later:
        assert headers["mcp-protocol-version"] == LEGACY and headers["mcp-session-id"] == session
        assert "mcp-method" not in headers
    for _, headers in requests:
        assert headers["x-memory-index"] == INDEX and headers["x-memory-timezone"] == TIMEZONE
        assert headers["accept"] == "application/json, text/event-stream"


async def test_a_2026_client_discovers_pages_calls_and_sees_progress_with_every_header_stamped(server, connect):
    progress = []

    async def on_progress(done, total, message):
        progress.append(done)

    async with connect("auto") as client:
        assert client.protocol_version == MODERN
        assert sorted(await all_tools(client)) == sorted(TOOLS)
        assert (await client.call_tool("echo", {"text": "hi"})).content[0].text == "hi"
        # The server refuses a call whose Mcp-Param-Region header is missing or differs from the argument.
        assert (await client.call_tool("region", {"place": "Île-de-France"})).content[0].text == "Île-de-France"
        assert (await client.call_tool("count", {"steps": 2}, progress_callback=on_progress)).content
        assert (await unknown_method(client)).error.code == types.METHOD_NOT_FOUND

    assert progress == [1, 2]
    sent = posts(server)
    assert all("mcp-session-id" not in headers for headers in sent)
    assert all(headers["mcp-protocol-version"] == MODERN for headers in sent)
    methods = [headers["mcp-method"] for headers in sent]
    assert methods[0] == "server/discover" and "tools/list" in methods and "no/such/method" in methods
    calls = [headers for headers in sent if headers["mcp-method"] == "tools/call"]
    assert [headers["mcp-name"] for headers in calls] == ["echo", "region", "count"]
    assert calls[1]["mcp-param-region"] == "=?base64?w45sZS1kZS1GcmFuY2U=?="  # not ASCII: base64-wrapped
    assert "mcp-param-region" not in calls[0]


async def test_a_client_that_probes_discover_then_initializes_gets_a_legacy_session(server, home, tmp_path):
    params = proxy_params(home, tmp_path / "proxy.log")
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        discovered = await session.send_discover(MODERN)
        assert MODERN in discovered["supportedVersions"]
        assert (await session.initialize()).protocol_version == LEGACY
        assert (await session.call_tool("echo", {"text": "after the probe"})).content[0].text == "after the probe"

    probe, initialize, *later = posts(server)
    assert probe["mcp-protocol-version"] == MODERN and probe["mcp-method"] == "server/discover"
    assert "mcp-protocol-version" not in initialize  # the probe's version does not leak onto the handshake
    assert all(headers["mcp-protocol-version"] == LEGACY and "mcp-method" not in headers for headers in later)


@pytest.mark.parametrize("mode", ["legacy", MODERN])
async def test_cancelling_a_call_stops_the_tool_on_the_server_and_the_connection_goes_on(server, connect, mode):
    async with connect(mode) as client:
        async with anyio.create_task_group() as calls:
            calls.start_soon(client.call_tool, "hang", {})
            assert await anyio.to_thread.run_sync(server.state.hanging.wait, WAIT)
            calls.cancel_scope.cancel()
        assert await anyio.to_thread.run_sync(server.state.cancelled.wait, WAIT)
        assert (await client.call_tool("echo", {"text": "still here"})).content[0].text == "still here"


async def test_server_requests_and_notifications_reach_the_client_and_its_answers_reach_the_server(server, connect):
    announced = anyio.Event()

    async def on_message(message):
        if isinstance(message, types.ToolListChangedNotification):
            announced.set()

    async def on_elicit(context, params):
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    async with connect("legacy", message_handler=on_message, elicitation_callback=on_elicit) as client:
        assert (await client.call_tool("ask", {})).content[0].text == "Ada"
        # The notification travels on the session's GET stream, which the proxy opens just after initializing:
        # announce again until it has been delivered once.
        with anyio.fail_after(WAIT):
            while not announced.is_set():
                await client.call_tool("announce", {})
                with anyio.move_on_after(0.2):
                    await announced.wait()


@pytest.mark.parametrize("mode", ["legacy", MODERN])
async def test_while_the_server_is_down_requests_fail_naming_it_and_the_proxy_recovers_when_it_returns(
    server, connect, tmp_path, mode
):
    async with connect(mode) as client:
        assert (await client.call_tool("echo", {"text": "before"})).content[0].text == "before"
        server.stop()
        for _ in range(2):
            with pytest.raises(MCPError) as caught:
                await client.call_tool("echo", {"text": "while down"})
            assert caught.value.error.code == -32000
            assert f"cannot reach the memory server at {server.url}: connection refused" in caught.value.error.message
        server.start()  # a new process: the channel session and the MCP session are gone
        assert (await client.call_tool("echo", {"text": "after"})).content[0].text == "after"
        assert (await client.call_tool("echo", {"text": "again"})).content[0].text == "again"

    if mode == "legacy":
        assert "opening a new one" in (tmp_path / "proxy.log").read_text()
        sessions = [headers.get("mcp-session-id") for headers in posts(server)]
        assert len(set(sessions) - {None}) == 2


async def test_a_device_without_a_grant_for_the_index_is_told_so(server, connect):
    with pytest.raises(ExceptionGroup) as caught:  # raised by the client's initialize, inside its task groups
        async with connect("legacy", index="someone-elses"):
            pass
    assert caught.group_contains(MCPError, match=r"HTTP 403: index not granted to this caller", depth=None)


async def test_without_an_index_every_request_is_answered_with_how_to_choose_one(home, connect):
    init_proxy_home(home)
    with pytest.raises(ExceptionGroup) as caught:
        async with connect("legacy", index=None):
            pass
    assert caught.group_contains(MCPError, match=r"no memory index chosen: pass `memory-proxy run --index", depth=None)


def test_closing_stdin_ends_the_proxy_promptly_and_ends_its_mcp_session(server, home):
    initialize = types.JSONRPCRequest(
        jsonrpc="2.0",
        id=1,
        method="initialize",
        params={"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    )
    with subprocess.Popen(
        [PROXY, "run", "--index", INDEX],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "MEMORY_PROXY_HOME": str(home)},
    ) as proxy:
        proxy.stdin.write(initialize.model_dump_json().encode() + b"\n")
        proxy.stdin.flush()
        assert b'"protocolVersion"' in proxy.stdout.readline()
        proxy.stdin.close()
        assert proxy.wait(timeout=5) == 0
    assert [method for method, _ in server.requests()][-1] == "DELETE"


def test_the_proxy_exits_when_its_parent_is_gone_even_with_stdin_open(server, home):
    wire_in, keep_open = os.pipe()
    # The shell starts the proxy reading the test's pipe (a background job's stdin would be /dev/null), prints its
    # pid, then becomes a `sleep` that the test kills like a crashed parent.
    parent = subprocess.Popen(
        ["sh", "-c", f'exec 3<&0; "{PROXY}" run --index {INDEX} <&3 & echo $!; exec sleep {WAIT} <&-'],
        stdin=wire_in,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "MEMORY_PROXY_HOME": str(home)},
    )
    os.close(wire_in)
    try:
        pid = int(parent.stdout.readline())
        exited = os.pidfd_open(pid)
        for line in parent.stderr:  # until the proxy is up and watching its parent
            if b"forwarding to" in line:
                break
        else:
            raise AssertionError("the proxy did not start")
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        assert select.select([exited], [], [], 5)[0] == [exited]  # stdin is still open: only the watch ends it
        os.close(exited)
        assert b"the parent process is gone: shutting down" in parent.stderr.read()
    finally:
        os.close(keep_open)
        parent.stdout.close()
        parent.stderr.close()


# -- in process: a silent server, oversized lines ----------------------------------------------------------------------

LEGACY_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


@pytest.fixture
def silent_server():
    """A server address that takes TCP connections (the kernel completes them) and never says a word."""
    with socket.create_server(("127.0.0.1", 0), backlog=64) as listener:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


def configured_home(home: Path, server_url: str) -> ProxyConfig:
    home.mkdir(mode=0o700)
    write_private_key(home / DEVICE_KEY_FILE, PrivateKey.generate("laptop"))
    write_config(home, render_config(server_url, PrivateKey.generate("server").public, "laptop", INDEX))
    return ProxyConfig.load(home)


@asynccontextmanager
async def forwarding(config: ProxyConfig, lines):
    """A `Forwarder` in this process, reading `lines`, over the channel client `memory-proxy run` builds; yields the
    stream of what it writes to the client, each line parsed."""
    sink, written = anyio.create_memory_object_stream[dict](64)

    async def write(line: bytes) -> None:
        await sink.send(json.loads(line))

    key = read_private_key(config.device_key_path)
    with sink, written:
        async with channel_client(config, key, INDEX, TIMEZONE) as client, anyio.create_task_group() as tasks:
            tasks.start_soon(Forwarder(Upstream(client), write, config.server_url).run, lines)
            yield written
            tasks.cancel_scope.cancel()


def line(message: dict) -> bytes:
    return json.dumps(message).encode()


async def test_a_server_that_takes_connections_but_never_answers_fails_each_request_within_the_handshake_timeout(
    silent_server, home, monkeypatch
):
    # The handshake waited the 300 s read timeout meant for tool streams: about five minutes per message.
    monkeypatch.setattr(transport, "HANDSHAKE_TIMEOUT", 0.5)
    config = configured_home(home, silent_server)
    send, lines = anyio.create_memory_object_stream[bytes](8)
    with send, lines:
        async with forwarding(config, lines) as written:
            await send.send(line(LEGACY_INITIALIZE))
            await send.send(line({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 0}}))
            await send.send(line({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
            with anyio.fail_after(WAIT):
                answers = [await written.receive(), await written.receive()]
    assert [answer["id"] for answer in answers] == [0, 1]
    for answer in answers:
        assert answer["error"]["code"] == -32000
        assert (
            answer["error"]["message"] == f"the memory server at {silent_server} did not answer in time (ReadTimeout)"
        )


async def test_a_notification_waiting_on_a_silent_server_does_not_stop_the_next_lines_being_read(silent_server, home):
    # A notification was POSTed before the next line was read: nothing else was read until it timed out.
    config = configured_home(home, silent_server)
    send, lines = anyio.create_memory_object_stream[bytes](8)
    with send, lines:
        async with forwarding(config, lines) as written:
            await send.send(line({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}}))
            await send.send(b"not json")
            with anyio.fail_after(WAIT / 2):  # well before the handshake's own timeout
                answer = await written.receive()
    assert answer == {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}}


async def test_a_request_line_over_the_size_limit_is_answered_under_its_own_id(home, monkeypatch):
    # It was answered with id null, which no client can match to its call: the call waited forever.
    monkeypatch.setattr(stdio, "MAX_LINE", 200)
    config = configured_home(home, "http://127.0.0.1:9")  # never reached: the line is answered by the proxy
    request = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "echo", "arguments": {}}}
    request["params"]["arguments"]["text"] = "x" * 1000
    response = {"jsonrpc": "2.0", "id": 8, "result": {"text": "y" * 1000}}  # the id names the server's request
    read_end, write_end = os.pipe()
    os.write(write_end, line(request) + b"\n" + line(response) + b"\n")
    os.close(write_end)
    try:
        async with stdio.stdin_lines(read_end) as lines, forwarding(config, lines) as written:
            with anyio.fail_after(WAIT):
                answers = [await written.receive(), await written.receive()]
    finally:
        os.close(read_end)
    too_large = {"code": -32600, "message": "message too large"}
    assert answers == [
        {"jsonrpc": "2.0", "id": 7, "error": too_large},
        {"jsonrpc": "2.0", "id": None, "error": too_large},
    ]


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"na', 7),
        (b'{ "method" : "tools/call" , "id" : "a\\"b\\u00e9" , "params": {', 'a"b\u00e9'),
        (b'{"params":{"id":1,"x":[{"}":"]"}]},"jsonrpc":"2.0","method":"x","\\u0069d":-12,"more":"abc', -12),
        (b'{"jsonrpc":"2.0","id":7,"params":{"text":"xxx', None),  # no method read: maybe a response
        (b'{"jsonrpc":"2.0","method":"x","id":12', None),  # the number may go on
        (b'{"jsonrpc":"2.0","method":"x","id":"ab', None),
        (b'{"jsonrpc":"2.0","method":"x","id":true,', None),
        (b'{"jsonrpc":"2.0","method":"x","id":1.5,', None),
        (b'{"jsonrpc":"2.0","method":"x","id":{"a":1},', None),
        (b'{"jsonrpc":"2.0","method":"x","id":1 2,', None),  # not JSON
        (b'["jsonrpc","2.0","method","x","id",1,', None),
        (b'{"method":"x","id":5,"params":"\xc3\xa9\xc3', 5),  # a character cut at the end
        (b'{"method":"x","id":5,"p":"\xff","q', None),  # not UTF-8
    ],
)
def test_the_id_of_an_oversized_request_is_read_from_its_first_bytes_only_when_they_show_it_whole(head, expected):
    assert request_id_in(head) == expected
