"""Secrets planted everywhere (keys, session keys, bodies, headers, a provider key in an exception) never reach
any log record or the process output, on the happy path and on every error path."""

from __future__ import annotations

import base64
import logging
import os
import time

import anyio
import pytest

import channel.inner
from channel.constants import INDEX_HEADER, SESSION_HEADER, TUNNEL_PATH
from channel.errors import ChannelError
from channel.handshake import create_initiation
from channel.keys import PrivateKey
from tests.channel.apps import WAIT, AppState, caller, inner_app, table
from tests.channel.conftest import MutableDirectory
from tests.channel.relay import Outer

pytestmark = pytest.mark.anyio


def forms(secret: bytes) -> list[str]:
    """The ways a byte string could show up in text."""
    return [
        secret.hex(),
        base64.b64encode(secret).decode().rstrip("="),
        base64.urlsafe_b64encode(secret).decode().rstrip("="),
        repr(secret)[2:-1],
    ]


async def test_no_secret_appears_in_any_log_output_even_on_error_paths(serve, make_relay, caplog, capfd, monkeypatch):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setattr(channel.inner, "REVOCATION_POLL", 0.02)
    canary = os.urandom(6).hex()
    device = PrivateKey.generate("alice")
    server_key = PrivateKey.generate("server")
    state = AppState(provider_key=f"sk-live-PROVIDER-{canary}")
    body = f"memory text BODY-{canary}"
    header = f"Bearer HEADER-{canary}"
    directory = MutableDirectory(table(caller("alice", device, notes="rw")))
    server = serve(inner_app(state), directory, server_key=server_key)
    relay = make_relay()

    async with server.client(device, transport=relay) as client:
        await client.post("/echo", content=body, headers={INDEX_HEADER: "notes", "authorization": header})
        await client.get("/echo", params={"token": f"QUERY-{canary}"})
        await client.get("/boom")  # the inner app fails with the provider key in its exception text
        await client.post("/upload", content=body, headers={INDEX_HEADER: "private"})  # not granted
        session = client._transport._session  # the live session's secrets, to look for them below
        frames = [outer.content for outer in relay.seen if outer.path == TUNNEL_PATH]
        await relay.forward(relay.seen[-1])  # a replayed frame
        flipped = bytearray(frames[0])
        flipped[-1] ^= 1
        await relay.forward(relay.seen[-1].to(TUNNEL_PATH, content=bytes(flipped)))
        await relay.forward(relay.seen[-1].to(TUNNEL_PATH, headers=[(SESSION_HEADER.encode(), b"A" * 22)]))
        message = create_initiation(device, server_key.public, time.time_ns(), os.urandom)[0]
        await relay.forward(Outer(relay.seen[0].url, [], message[:-1] + bytes((message[-1] ^ 1,))))  # bad msg1
        await relay.forward(Outer(relay.seen[0].url, [], relay.seen[0].content))  # replayed msg1
        async with client.stream("GET", "/hold") as response:
            chunks = response.aiter_bytes()
            await chunks.__anext__()
            directory.table = table()  # revoked while streaming
            with anyio.fail_after(WAIT), pytest.raises(ChannelError):
                async for _ in chunks:
                    pass
    async with server.client(PrivateKey.generate("mallory")) as stranger:
        with pytest.raises(ChannelError):
            await stranger.get("/echo")

    assert session is not None
    secrets = [body, header, state.provider_key, device.file_text().split()[1]]
    secrets += [server_key.file_text().split()[1], session.header]
    for raw in (session.id, session.send_key, session.receive_key, device.x25519, server_key.x25519):
        secrets += forms(raw)
    for frame in [*frames, message]:
        secrets += forms(frame[14:30])  # any 16 bytes of ciphertext
    records = caplog.records
    text = "\n".join(
        f"{record.getMessage()}\n{logging.Formatter().formatException(record.exc_info) if record.exc_info else ''}"
        for record in records
    )
    output = capfd.readouterr()
    everything = "\n".join((text, output.out, output.err))
    for marker in ("handshake ok", "tunnel refused", "handshake refused", "revoked", "error=RuntimeError"):
        assert marker in text  # every path above was really taken, and logged
    assert device.public.fingerprint in text and "caller=alice" in text  # what the log is for is there
    assert [secret for secret in secrets if secret in everything] == []
    # The server logs the inner path without its query; (httpx2 itself logs the client's URLs on the laptop.)
    assert not any(f"QUERY-{canary}" in r.getMessage() for r in records if r.name.startswith(("channel", "uvicorn")))
