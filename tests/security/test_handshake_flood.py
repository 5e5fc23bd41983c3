"""Finding 1: one address's garbage must not lock out its honest devices. Real uvicorn on 127.0.0.1 with the
server's default limits, a garbage flood over real sockets, then honest devices from the same and other addresses."""

from __future__ import annotations

import logging
import os
import time

import anyio
import httpx2
import pytest

from channel.admission import FAILURE_RATE, SUMMARY_EVERY
from channel.constants import HANDSHAKE_PATH, HELLO_LEN, KIND_HELLO, VERSION
from channel.keys import PrivateKey
from channel.ratelimit import Rate
from tests.channel.apps import AppState, caller, inner_app, table
from tests.channel.conftest import MutableDirectory, serve_channel

pytestmark = pytest.mark.anyio

ALICE = PrivateKey.generate("alice@laptop")
BOB = PrivateKey.generate("bob@laptop")
FLOOD = 600  # three times the failure budget's burst; the old per-address bucket refused after 20


def serve_with_default_limits():
    callers = MutableDirectory(table(caller("alice", ALICE, notes="rw"), caller("bob", BOB, notes="rw")))
    return serve_channel(inner_app(AppState()), callers, handshake_rate=Rate(), failure_rate=FAILURE_RATE)


def garbage() -> bytes:
    """Of the right length, version and kind, so it costs the server the cryptography to refuse it."""
    return bytes((VERSION, KIND_HELLO)) + os.urandom(HELLO_LEN - 2)


async def flood(url: str, count: int, *, local_address: str | None = None) -> dict[int, int]:
    statuses: dict[int, int] = {}
    transport = httpx2.AsyncHTTPTransport(local_address=local_address)
    async with httpx2.AsyncClient(transport=transport) as client:
        for _ in range(count):
            status = (await client.post(url + HANDSHAKE_PATH, content=garbage())).status_code
            statuses[status] = statuses.get(status, 0) + 1
    return statuses


async def test_garbage_from_a_devices_address_does_not_lock_that_device_or_its_neighbours_out(caplog):
    with serve_with_default_limits() as server, anyio.fail_after(60):
        async with server.client(ALICE) as client:
            assert (await client.post("/count")).status_code == 200  # alice has worked from 127.0.0.1
        with caplog.at_level(logging.WARNING, logger="channel.server"):
            started = time.monotonic()
            refused = await flood(server.url, FLOOD)
            lasted = time.monotonic() - started
        assert set(refused) <= {403, 429}
        for device in (ALICE, BOB):  # bob never connected before: the address, not the key, is known
            async with server.client(device) as client:
                assert (await client.post("/count")).status_code == 200
    refusals = [r for r in caplog.records if "handshake refused" in r.getMessage()]
    # The log is not flooded with one line per garbage message: one per failure the budget allows (its burst, and
    # what it refilled while the flood lasted, which a loaded machine makes longer), then a summary now and then.
    logged = FAILURE_RATE.burst + FAILURE_RATE.per_second * lasted + lasted / SUMMARY_EVERY + 2
    assert len(refusals) <= logged, (len(refusals), lasted)


async def test_a_flood_from_a_new_address_is_refused_before_the_cryptography_once_the_budget_is_spent():
    with serve_with_default_limits() as server, anyio.fail_after(60):
        started = time.monotonic()
        refused = await flood(server.url, FLOOD, local_address="127.0.0.2")
        # Cheap refusals, the CPU bounded: past the burst, only what the budget refilled during the flood (which
        # a loaded machine makes longer) reaches the cryptography.
        refilled = FAILURE_RATE.per_second * (time.monotonic() - started)
        assert refused.get(429, 0) >= FLOOD - FAILURE_RATE.burst - refilled - 20
        async with server.client(ALICE) as client:  # the flood is over: a new address is served again
            assert (await client.post("/count")).status_code == 200
