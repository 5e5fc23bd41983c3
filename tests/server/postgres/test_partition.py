"""A database cut off by the network mid-connection (packets dropped, no reset): a statement fails within the
TCP user timeout instead of waiting through the kernel's retransmissions (measured: past 45 s without it), the
channel's store then refuses at once until the database answers again, and connections are made again once the
network is back. The partition is real: iptables drops the packets of a TCP
relay's port in front of the test's PostgreSQL (root and a working iptables are needed, as on the CI machines)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import pytest

from channel.errors import StoreUnavailable
from channel.keys import PrivateKey
from server.errors import EngineError
from server.postgres.channel_schema import STATEMENT_TIMEOUT_MS
from server.postgres.connection import CONNECT_OPTIONS, PgConnection
from server.postgres.outage import OUTAGE_MAX_SECONDS
from server.postgres.sessions import PgSessionStore
from tests.faults.relay import Relay
from tests.postgres_support import Partition, iptables_usable

USER_TIMEOUT_MS = 2_000  # the product's 15 s, shortened for the test

pytestmark = pytest.mark.skipif(not iptables_usable(), reason="needs root and a working iptables")


@pytest.fixture
def over_tcp(postgres_url: str) -> Iterator[tuple[str, Partition]]:
    """The test database reached over TCP through a relay, and the partition of that relay's port."""
    parts = urlsplit(postgres_url)
    folder = parse_qs(parts.query)["host"][0]
    relay = Relay(upstream_socket=f"{folder}/.s.PGSQL.5432")
    partition = Partition(relay.port)
    try:
        yield f"postgresql://{parts.username or 'postgres'}@127.0.0.1:{relay.port}{parts.path}", partition
    finally:
        partition.heal()
        relay.close()


def test_a_statement_behind_a_partition_fails_within_the_user_timeout_and_the_next_reconnects(over_tcp, monkeypatch):
    url, partition = over_tcp
    monkeypatch.setitem(CONNECT_OPTIONS, "tcp_user_timeout", USER_TIMEOUT_MS)
    db = PgConnection(url)
    try:
        assert db.execute("SELECT 1").fetchall() == [(1,)]
        partition.cut()
        started = time.monotonic()
        with pytest.raises(EngineError):
            db.execute("SELECT 2")
        assert time.monotonic() - started < USER_TIMEOUT_MS / 1000 + 5
        partition.heal()
        assert db.execute("SELECT 3").fetchall() == [(3,)]  # a new connection, the network back
    finally:
        db.close()


def test_the_channel_store_refuses_at_once_while_its_database_is_cut_off_then_serves_again(over_tcp, monkeypatch):
    # Its calls run on the server's event loop: each one waiting for a connection that cannot come would stall
    # every request of the replica (up to the connect timeout each). The first, which finds the loss, waits the
    # channel's own user timeout (STATEMENT_TIMEOUT_MS), not the 15 s of every other connection.
    url, partition = over_tcp
    monkeypatch.setitem(CONNECT_OPTIONS, "connect_timeout", 2)
    now = [time.time()]
    store = PgSessionStore(url, PrivateKey.generate("server"), lambda: now[0])
    key = bytes(32)
    try:
        assert store.timestamp_is_fresh(key, 1)
        partition.cut()
        started = time.monotonic()
        with pytest.raises(StoreUnavailable):  # this one waits out the user timeout: how the loss is found ...
            store.timestamp_is_fresh(key, 1)
        assert time.monotonic() - started < STATEMENT_TIMEOUT_MS / 1000 + 1.5  # ... but no connection attempt after
        started = time.monotonic()
        for _ in range(10):
            with pytest.raises(StoreUnavailable):
                store.timestamp_is_fresh(key, 1)
        assert time.monotonic() - started < 1.0, "refused at once, not each after a connection attempt"
        partition.heal()
        now[0] += OUTAGE_MAX_SECONDS  # the backoff passed: the next call connects again
        assert store.timestamp_is_fresh(key, 1)
        assert store.timestamp_is_fresh(key, 2)
    finally:
        store.close()
