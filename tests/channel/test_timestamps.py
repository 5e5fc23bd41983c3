"""Handshake timestamps kept across restarts: a msg1 recorded before a restart cannot open a session after it."""

from __future__ import annotations

import logging
import os
import stat
import time

import httpx2
import pytest

from channel.constants import HANDSHAKE_PATH
from channel.handshake import create_initiation
from channel.keys import PrivateKey
from channel.session import SessionTable
from channel.timestamps import FileTimestamps
from tests.channel.apps import AppState, caller, inner_app, table
from tests.channel.conftest import serve_channel

DEVICE = PrivateKey.generate("alice@laptop")
KEY_A, KEY_B = bytes(range(32)), bytes(range(1, 33))


def test_timestamps_survive_a_new_store_on_the_same_file(tmp_path):
    path = tmp_path / "handshakes.json"
    first = FileTimestamps(path)
    assert first.latest(KEY_A) == -1
    first.commit(KEY_A, 10)
    first.commit(KEY_B, 7)
    first.commit(KEY_A, 12)
    again = FileTimestamps(path)
    assert (again.latest(KEY_A), again.latest(KEY_B)) == (12, 7)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["handshakes.json"]  # no temporary file left behind


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b"[]",
        b'{"zz": 1}',
        b'{"' + b"00" * 32 + b'": -1}',
        b'{"' + b"00" * 31 + b'": 1}',
        b'{"' + b"00" * 32 + b'": true}',
        b"x" * 5_000_000,
    ],
    ids=["not-json", "not-object", "bad-hex", "negative", "short-key", "bool", "huge"],
)
def test_a_damaged_file_starts_empty_and_says_so(tmp_path, content, caplog):
    path = tmp_path / "handshakes.json"
    path.write_bytes(content)
    with caplog.at_level(logging.ERROR):
        store = FileTimestamps(path)
    assert store.latest(bytes(32)) == -1
    assert "damaged" in caplog.text


def test_a_failed_save_keeps_the_handshake_and_logs(tmp_path, caplog):
    store = FileTimestamps(tmp_path / "missing-dir" / "handshakes.json")
    with caplog.at_level(logging.ERROR):
        store.commit(KEY_A, 5)
    assert store.latest(KEY_A) == 5 and "cannot save" in caplog.text


def test_a_msg1_recorded_before_a_restart_is_refused_after_it(tmp_path):
    path = tmp_path / "handshakes.json"
    server_key = PrivateKey.generate("server")
    directory = table(caller("alice", DEVICE, notes="rw"))

    def start():
        return serve_channel(
            inner_app(AppState()),
            directory,
            server_key=server_key,
            sessions=SessionTable(time.time, timestamps=FileTimestamps(path)),
        )

    recorded = create_initiation(DEVICE, server_key.public, time.time_ns(), os.urandom)[0]
    with start() as server:
        assert httpx2.post(server.url + HANDSHAKE_PATH, content=recorded).status_code == 200
    with start() as server:  # the same key and data after a restart
        replayed = httpx2.post(server.url + HANDSHAKE_PATH, content=recorded)
        fresh = create_initiation(DEVICE, server_key.public, time.time_ns(), os.urandom)[0]
        assert (replayed.status_code, replayed.content) == (403, b"handshake failed\n")
        assert httpx2.post(server.url + HANDSHAKE_PATH, content=fresh).status_code == 200
