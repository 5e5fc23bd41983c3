"""Two `memory-server serve` processes on one PostgreSQL database, as replicas behind a round-robin load balancer:
one handshake serves both, and `memory-server callers revoke` (with the same database URL) shuts the key out of
both within a second."""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path

import anyio
import anyio.to_thread
import httpx2
import pytest

from channel.errors import HandshakeRefused, TunnelRefused
from channel.keys import PrivateKey, read_private_key
from channel.transport import ChannelTransport
from server.cli.main import main
from tests.channel.relay import Relay
from tests.server.postgres.test_replicas import REVOCATION_BOUND, RoundRobin
from tests.server.test_serve import WAIT, running, until_listening

pytestmark = pytest.mark.anyio

DEVICE = PrivateKey.generate("alice@laptop")


async def test_two_servers_on_one_database_share_sessions_and_a_revocation(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
):
    keys = tmp_path / "keys"
    monkeypatch.setenv("MEMORY_DATABASE_URL", postgres_url)
    assert main(["--keys-dir", str(keys), "keys", "init"]) == 0
    assert main(["--keys-dir", str(keys), "callers", "add", "alice", "--key", DEVICE.public.line()]) == 0
    server_key = read_private_key(keys / "server.key").public
    with ExitStack() as stack:
        urls = []
        for name in ("a", "b"):
            env = {"MEMORY_DATA_DIR": str(tmp_path / name), "MEMORY_DATABASE_URL": postgres_url}
            _process, lines, seen = stack.enter_context(running(tmp_path, env=env))
            urls.append(until_listening(lines, seen))
        balancer = RoundRobin(urls)
        relay = Relay(balancer)
        transport = ChannelTransport(urls[0], client_key=DEVICE, server_key=server_key, transport=relay)
        try:
            async with httpx2.AsyncClient(transport=transport, base_url="http://memory") as client:
                answers = [(await client.get("/healthz")).json() for _ in range(4)]  # a, b, a, b
                assert answers == [{"status": "ok"}] * 4
                assert [outer.path for outer in relay.seen].count("/v1/handshake") == 1
                revoke = ["--keys-dir", str(keys), "callers", "revoke", "alice"]
                assert await anyio.to_thread.run_sync(main, revoke) == 0
                revoked_at, refusals = time.monotonic(), 0
                with anyio.fail_after(WAIT):  # a busy machine makes each request slow, not the revocation
                    while refusals < 2:  # each refusal: a 401 from one server, then a 403 from the other
                        started = time.monotonic()
                        try:
                            await client.get("/healthz")
                        except HandshakeRefused:
                            refusals += 1
                        except TunnelRefused as refused:  # a session one server opened before it heard, the other
                            assert refused.status == 401  # ended: refused as well, and not run
                        else:
                            assert started - revoked_at < REVOCATION_BOUND, "served a second after the revoke"
        finally:
            await relay.shutdown()
