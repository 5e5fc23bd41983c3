"""Finding 9: a handshake stamped far from the server's clock is refused, so it cannot lock the device out, and
the device is told its clock is off. Real uvicorn on 127.0.0.1, raw msg1s and the real client transport."""

from __future__ import annotations

import os
import time

import anyio
import httpx2
import pytest

from channel.authz import CallerTable
from channel.constants import CLOCK_WINDOW, HANDSHAKE_PATH
from channel.errors import ClockOff, HandshakeRefused
from channel.handshake import create_initiation
from channel.keys import PrivateKey
from channel.session import SessionTable
from tests.channel.apps import AppState, caller, inner_app, table
from tests.channel.conftest import MutableDirectory, serve_channel

pytestmark = pytest.mark.anyio

DEVICE = PrivateKey.generate("alice@laptop")
YEAR_NS = 365 * 24 * 3600 * 10**9


def directory() -> MutableDirectory:
    callers: CallerTable = table(caller("alice", DEVICE, notes="rw"))
    return MutableDirectory(callers)


async def post_msg1(url: str, server_key, timestamp: int) -> httpx2.Response:
    message = create_initiation(DEVICE, server_key, timestamp, os.urandom)[0]
    async with httpx2.AsyncClient() as client:
        return await client.post(url + HANDSHAKE_PATH, content=message)


async def test_a_handshake_stamped_years_ahead_is_refused_and_does_not_lock_the_device_out():
    with serve_channel(inner_app(AppState()), directory()) as server:
        with anyio.fail_after(10):
            ahead = await post_msg1(server.url, server.server_key, time.time_ns() + YEAR_NS)
            assert ahead.status_code == 403
            assert b"clock is off" in ahead.content
            honest = await post_msg1(server.url, server.server_key, time.time_ns())
            assert honest.status_code == 200  # the old code: 403 "replayed" from now on, for a year


async def test_a_handshake_stamped_just_inside_the_window_is_accepted():
    with serve_channel(inner_app(AppState()), directory()) as server, anyio.fail_after(10):
        near = await post_msg1(server.url, server.server_key, time.time_ns() + int((CLOCK_WINDOW - 30) * 1e9))
        assert near.status_code == 200


async def test_the_device_learns_its_clock_is_off_and_by_how_much():
    with serve_channel(inner_app(AppState()), directory()) as server, anyio.fail_after(10):
        behind = lambda: time.time() - 3600.0  # noqa: E731
        async with server.client(DEVICE, clock=behind) as client:
            with pytest.raises(ClockOff, match=r"clock is 3[56]\d\d s behind the server's. Set the clock right"):
                await client.post("/count")


async def test_a_device_locked_out_by_an_old_far_future_timestamp_gets_back_in(tmp_path):
    from channel.timestamps import FileTimestamps

    stored = FileTimestamps(tmp_path / "timestamps.json")
    stored.commit(DEVICE.public.x25519, time.time_ns() + 10 * YEAR_NS)  # what the old server accepted and kept
    sessions = SessionTable(time.time, timestamps=FileTimestamps(tmp_path / "timestamps.json"))
    with serve_channel(inner_app(AppState()), directory(), sessions=sessions) as server, anyio.fail_after(10):
        first = await post_msg1(server.url, server.server_key, time.time_ns())
        assert first.status_code == 200  # the old server: 403 "replayed" for ten years
        replayed = await post_msg1(server.url, server.server_key, time.time_ns() - 10**9)
        assert replayed.status_code == 403  # and the replay rule holds again from here


@pytest.mark.parametrize("remembered", [True, False])
async def test_a_clock_set_back_does_not_lock_out_a_restarted_device_that_keeps_its_newest_timestamp(
    tmp_path, remembered
):
    # Found by the fault loop (clock two minutes ahead, then set right): the server keeps each key's newest
    # timestamp, so every new process of the device (a restarted proxy, a terminal command) was refused as a replay
    # until real time caught up. A device that keeps its newest accepted timestamp (channel.client_stamps) is not.
    from channel.client_stamps import StampFile

    stamps = StampFile(tmp_path / "handshake-stamp") if remembered else None
    with serve_channel(inner_app(AppState()), directory()) as server, anyio.fail_after(10):
        ahead = lambda: time.time() + 120.0  # noqa: E731
        async with server.client(DEVICE, clock=ahead, stamps=stamps) as fast:
            assert (await fast.post("/count")).status_code == 200
        async with server.client(DEVICE, stamps=stamps) as corrected:  # NTP set the clock right; a new process
            if remembered:
                assert (await corrected.post("/count")).status_code == 200
            else:
                with pytest.raises(HandshakeRefused, match="clock went backwards"):
                    await corrected.post("/count")


def test_a_stray_or_unreadable_stamp_file_is_ignored(tmp_path):
    from channel.client_stamps import StampFile

    path = tmp_path / "handshake-stamp"
    assert StampFile(path).newest() == 0
    path.write_text("not a number")
    assert StampFile(path).newest() == 0
    StampFile(path).accepted(42)
    StampFile(path).accepted(7)  # an older one never replaces a newer one
    assert StampFile(path).newest() == 42
