"""The forwarder's small parts, in process: the time zone, JSON-RPC routing, error wording, stdin lines, settings."""

from __future__ import annotations

import io
import os
import threading

import httpx2
import pytest

from channel.errors import (
    ChannelError,
    FrameError,
    HandshakeError,
    HandshakeRefused,
    KeyFileError,
    ServerKeyMismatch,
    TunnelRefused,
)
from channel.keys import PrivateKey, write_private_key
from client_proxy.config import ProxyConfig, render_config, write_config
from client_proxy.errors import ConfigError
from client_proxy.forward import stdio
from client_proxy.forward.jsonrpc import INVALID_REQUEST, PARSE_ERROR, NotJsonRpcError, error_line, parse, with_id
from client_proxy.forward.local_zone import local_timezone
from client_proxy.forward.upstream import describe
from client_proxy.settings import RunSettings

URL = "https://memory.lan"


# -- time zone -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tz", "expected"),
    [
        ("Europe/Paris", "Europe/Paris"),
        (":America/New_York", "America/New_York"),
        (":/usr/share/zoneinfo/Asia/Tokyo", "Asia/Tokyo"),
        ("/usr/share/zoneinfo/posix/Europe/Berlin", "Europe/Berlin"),
        ("UTC", "UTC"),
    ],
)
def test_the_zone_comes_from_tz_when_it_names_one(tz, expected, tmp_path):
    assert local_timezone({"TZ": tz}, tmp_path / "no-localtime") == expected


@pytest.mark.parametrize("tz", ["CET-1CEST", "Nowhere/Special", "../../etc/passwd", ""])
def test_a_tz_that_names_no_known_zone_falls_back_to_the_localtime_link(tz, tmp_path):
    link = tmp_path / "localtime"
    link.symlink_to("/usr/share/zoneinfo/Australia/Sydney")
    assert local_timezone({"TZ": tz}, link) == "Australia/Sydney"


def test_a_macos_style_link_and_a_copied_zone_file_are_understood(tmp_path):
    link = tmp_path / "localtime"
    link.symlink_to("/var/db/timezone/tz/2024a.1.0/zoneinfo/Europe/Lisbon")
    assert local_timezone({}, link) == "Europe/Lisbon"
    copy = tmp_path / "copied"
    copy.write_bytes(b"TZif")
    assert local_timezone({}, copy) == "UTC"


# -- JSON-RPC --------------------------------------------------------------------------------------------------------


def test_messages_are_told_apart_and_kept_byte_for_byte():
    raw = b'{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "x"}}'
    request = parse(raw)
    assert request.is_request and request.id == 7 and request.method == "tools/call" and request.line() == raw
    assert parse(b'{"jsonrpc":"2.0","method":"notifications/initialized"}').is_notification
    response = parse(b'{"jsonrpc":"2.0","id":"7","result":{}}')
    assert response.is_response and response.answers("7") and not response.answers(7)
    assert parse(b'{"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"m"}}').is_response


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b"not json", PARSE_ERROR),
        (b"[1, 2]", INVALID_REQUEST),
        (b'{"id": 1, "method": "x"}', INVALID_REQUEST),
        (b'{"jsonrpc": "2.0", "id": 1}', INVALID_REQUEST),
        (b'{"jsonrpc": "2.0", "id": 1.5, "method": "x"}', INVALID_REQUEST),
        (b'{"jsonrpc": "2.0", "id": true, "method": "x"}', INVALID_REQUEST),
    ],
)
def test_what_is_not_one_json_rpc_message_is_refused_with_its_code(raw, code):
    with pytest.raises(NotJsonRpcError) as caught:
        parse(raw)
    assert caught.value.code == code


def test_a_message_spanning_lines_is_written_as_one_and_errors_and_copies_are_well_formed():
    spread = parse(b'{\n "jsonrpc": "2.0",\n "id": 1,\n "result": {"text": "a\\nb"}\n}')
    assert b"\n" not in spread.line() and parse(spread.line()).data == spread.data
    assert parse(error_line(3, -32000, "down")).data == {
        "jsonrpc": "2.0",
        "id": 3,
        "error": {"code": -32000, "message": "down"},
    }
    copy = with_id(parse(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"a":1}}'), "mine")
    assert copy.id == "mine" and copy.params == {"a": 1} and parse(copy.raw).data == copy.data


# -- error wording ---------------------------------------------------------------------------------------------------

device = PrivateKey.generate("laptop").public.fingerprint
FAILURES = [
    (httpx2.ConnectError("All connection attempts failed"), "cannot reach the memory server at https://memory.lan"),
    (httpx2.ConnectTimeout("timed out"), "connecting timed out"),
    (httpx2.ReadTimeout("timed out"), "did not answer in time (ReadTimeout)"),
    (httpx2.PoolTimeout("timed out"), "did not answer in time (PoolTimeout)"),
    (httpx2.ReadError("reset"), "the connection to the memory server at https://memory.lan failed (ReadError)"),
    (httpx2.RemoteProtocolError("bad"), "failed (RemoteProtocolError)"),
    (httpx2.SSEError("event too large"), "sent an unreadable event stream: event too large"),
    (httpx2.UnsupportedProtocol("ftp"), "failed (UnsupportedProtocol)"),
    (FrameError(), "was cut off or failed authentication"),
    (HandshakeError(), "the channel handshake with the memory server at https://memory.lan failed"),
    (HandshakeRefused(403, device), f"this device key ({device}) is not authorized"),
    (HandshakeRefused(429, device), "too many handshakes"),
    (ServerKeyMismatch("SHA256:pinned", "SHA256:other"), "does not match the pinned key"),
    (TunnelRefused(413), "refused the tunnelled request (HTTP 413)"),
    (KeyFileError("device.key is unreadable"), "device.key is unreadable"),
    (ChannelError("cannot tunnel a request body over 33554432 bytes"), "over 33554432 bytes"),
]


@pytest.mark.parametrize(("error", "expected"), FAILURES, ids=[type(error).__name__ for error, _ in FAILURES])
def test_every_transport_and_channel_failure_is_told_in_words_naming_the_problem(error, expected):
    assert expected in describe(error, URL)


def test_every_kind_of_failure_the_transport_raises_is_covered_above():
    covered = {type(error) for error, _ in FAILURES}
    transport_errors = {httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.ReadTimeout, httpx2.WriteTimeout}
    transport_errors |= {httpx2.PoolTimeout, httpx2.ReadError, httpx2.WriteError, httpx2.RemoteProtocolError}
    for kind in transport_errors - covered:
        assert "memory server at https://memory.lan" in describe(kind("x"), URL)


def test_a_refused_connection_is_named_by_the_operating_systems_reason():
    error = httpx2.ConnectError("All connection attempts failed")
    error.__cause__ = OSError("All connection attempts failed")
    error.__cause__.__context__ = ConnectionRefusedError(111, "Connect call failed")
    assert (
        describe(error, URL)
        == "cannot reach the memory server at https://memory.lan: connection refused; is it running?"
    )


# -- stdin lines -----------------------------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("read_size", [3, 64 * 1024])
async def test_stdin_lines_arrive_whole_and_end_with_the_input_and_an_oversized_one_is_dropped(monkeypatch, read_size):
    monkeypatch.setattr(stdio, "MAX_LINE", 16)
    monkeypatch.setattr(stdio, "READ_SIZE", read_size)
    read_end, write_end = os.pipe()
    lines = []
    async with stdio.stdin_lines(read_end) as stream:
        writer = threading.Thread(
            target=_write_and_close,
            args=(write_end, b'{"a":1}\r\n\n  \n' + b"x" * 40 + b"\n" + b"y" * 17 + b'\n{"b":2}\n{}'),
        )
        writer.start()
        async for line in stream:
            lines.append(line)
        writer.join()
    os.close(read_end)
    assert lines == [b'{"a":1}', None, None, b'{"b":2}', b"{}"]


def _write_and_close(fd: int, data: bytes) -> None:
    with os.fdopen(fd, "wb") as sink:
        sink.write(data)


@pytest.mark.anyio
async def test_a_client_that_stopped_reading_is_reported_as_gone():
    closed = io.BytesIO()
    closed.close()
    with pytest.raises(stdio.StdoutClosedError):
        await stdio.StdoutWriter(closed).write(b"{}")


# -- settings --------------------------------------------------------------------------------------------------------


def config_with(home, index=None) -> ProxyConfig:
    home.mkdir(mode=0o700)
    write_private_key(home / "device.key", PrivateKey.generate("laptop"))
    write_config(home, render_config(URL, PrivateKey.generate("server").public, "laptop", index))
    return ProxyConfig.load(home)


def test_the_index_is_the_flag_else_the_environment_else_proxy_toml(tmp_path):
    config = config_with(tmp_path / "home", index="from-file")
    env = {"MEMORY_PROXY_HOME": str(tmp_path / "home")}
    assert RunSettings.from_env(env, index="flag", project=None, log_file=None).index_for(config) == "flag"
    with_env = {**env, "MEMORY_INDEX": "from-env"}
    assert RunSettings.from_env(with_env, index=None, project=None, log_file=None).index_for(config) == "from-env"
    assert RunSettings.from_env(env, index=None, project=None, log_file=None).index_for(config) == "from-file"


def test_no_index_anywhere_or_an_invalid_one_is_a_configuration_error_saying_how_to_fix_it(tmp_path):
    config = config_with(tmp_path / "home")
    settings = RunSettings.from_env({}, index=None, project=None, log_file=None)
    with pytest.raises(ConfigError, match="pass `memory-proxy run --index NAME`, set MEMORY_INDEX, or add"):
        settings.index_for(config)
    with pytest.raises(ConfigError, match="invalid index name"):
        RunSettings.from_env({}, index="../up", project=None, log_file=None).index_for(config)
