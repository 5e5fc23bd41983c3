"""The operator's commands against a running server: `memory-server callers add|grant|revoke` edit callers.toml,
and the channel in front of a real uvicorn follows the file (grants, a revoked key and its live sessions)."""

from __future__ import annotations

import pytest

from channel.errors import HandshakeRefused
from channel.keys import PrivateKey
from server.callers.file import CallersFile
from server.cli.main import main
from tests.channel.apps import AppState, inner_app

pytestmark = pytest.mark.anyio

DEVICE = PrivateKey.generate("alice@laptop")


def admin(keys, *args: str) -> None:
    assert main(["--keys-dir", str(keys), *args]) == 0


async def test_callers_toml_edits_reach_a_running_server(serve, tmp_path, capsys):
    keys = tmp_path / "keys"
    admin(keys, "keys", "init")
    state = AppState()
    callers = CallersFile(keys / "callers.toml", check_every=0.0)
    server = serve(inner_app(state), callers)

    with pytest.raises(HandshakeRefused):  # nobody is a caller yet
        async with server.client(DEVICE) as client:
            await client.post("/count")

    admin(keys, "callers", "add", "alice-laptop", "--key", DEVICE.public.line(), "--grant", "notes=r")
    async with server.client(DEVICE) as client, server.client(DEVICE) as second:
        seen = (await client.get("/echo", headers={"x-memory-index": "notes"})).json()["user"]
        assert (seen["name"], seen["access"], seen["can_write"]) == ("alice-laptop", "r", False)
        assert seen["fingerprint"] == DEVICE.public.fingerprint
        assert (await client.get("/echo", headers={"x-memory-index": "other"})).status_code == 403

        admin(keys, "callers", "grant", "alice-laptop", "notes=rw", "other=r")
        seen = (await client.get("/echo", headers={"x-memory-index": "notes"})).json()["user"]
        assert seen["can_write"] is True
        assert (await client.get("/echo", headers={"x-memory-index": "other"})).status_code == 200

        assert (await second.post("/count")).status_code == 200
        admin(keys, "callers", "revoke", "alice-laptop")
        for live in (client, second):  # both sessions of the revoked key die at once
            with pytest.raises(HandshakeRefused):
                await live.post("/count")
    assert state.count == 1 and len(server.middleware.sessions) == 0

    # A broken hand edit keeps the last good table (the key stays revoked) and says why.
    (keys / "callers.toml").write_text("[callers.alice-laptop]\nkeys = 'not a list'\n")
    async with server.client(DEVICE) as client:
        with pytest.raises(HandshakeRefused):
            await client.post("/count")
    assert callers.error is not None and "callers.toml" in callers.error
    assert state.count == 1
