"""Who may connect, shared by replicas through PostgreSQL (`server.postgres.callers`): imported once from
callers.toml, edited by the `memory-server callers` commands, heard by every replica at once."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import anyio.to_thread
import httpx2
import psycopg
import pytest

from channel.constants import HANDSHAKE_PATH
from channel.errors import StoreUnavailable
from channel.handshake import create_initiation
from channel.keys import PrivateKey
from server.callers.config import CallersConfig
from server.callers.file import write_callers
from server.cli.main import main
from server.cli.serve import channel_state
from server.errors import InvalidArgumentError
from server.postgres.callers import CHECK_EVERY, RELOAD_WAIT, STALE_AFTER, SharedCallers, update_shared_callers
from server.postgres.channel_schema import CALLERS_CHANNEL
from server.postgres.outage import OUTAGE_MAX_SECONDS
from server.postgres.sessions import PgSessionStore
from server.settings import Settings
from tests.channel.apps import AppState, inner_app
from tests.channel.conftest import serve_channel

DEVICE = PrivateKey.generate("alice@laptop")
ALICE = DEVICE.public
BOB = PrivateKey.generate("bob@laptop").public
HEARD_WITHIN = 1.0  # seconds


def granted(name: str, key=ALICE) -> Callable[[CallersConfig], CallersConfig]:
    return lambda config: config.add(name, [key], {"notes": "rw"})


@pytest.fixture
def callers_file(tmp_path: Path) -> Path:
    keys = tmp_path / "keys"
    keys.mkdir(mode=0o700)
    return keys / "callers.toml"


def test_callers_toml_is_imported_on_the_first_start_only_then_the_database_is_the_list(postgres_url, callers_file):
    write_callers(callers_file, granted("alice")(CallersConfig()))
    first = SharedCallers(postgres_url, callers_file)
    try:
        assert first.lookup(ALICE.x25519) is not None
        write_callers(callers_file, granted("bob", BOB)(CallersConfig()))  # the file no longer counts
        second = SharedCallers(postgres_url, callers_file)
        try:
            assert second.lookup(ALICE.x25519) is not None and second.lookup(BOB.x25519) is None
        finally:
            second.close()
    finally:
        first.close()


@pytest.mark.anyio
async def test_a_revocation_reaches_a_replica_by_its_notice_without_waiting_for_the_poll(postgres_url, callers_file):
    await anyio.to_thread.run_sync(update_shared_callers, postgres_url, callers_file, granted("alice"))
    replica = SharedCallers(postgres_url, callers_file, check_every=3600)  # the poll would wait an hour
    try:
        assert replica.lookup(ALICE.x25519) is not None
        assert await anyio.to_thread.run_sync(replica.listening.wait, 10.0)
        revoke = lambda config: config.revoke("alice", None)  # noqa: E731
        await anyio.to_thread.run_sync(update_shared_callers, postgres_url, callers_file, revoke)
        with anyio.fail_after(HEARD_WITHIN):
            while replica.lookup(ALICE.x25519) is not None:
                await anyio.sleep(0.01)
    finally:
        replica.close()


def test_a_damaged_list_in_the_database_keeps_the_last_good_one(postgres_url, callers_file, caplog):
    update_shared_callers(postgres_url, callers_file, granted("alice"))
    replica = SharedCallers(postgres_url, callers_file)
    try:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute("UPDATE channel.callers SET document = 'not [toml', version = version + 1")
            conn.execute("SELECT pg_notify(%s, '')", (CALLERS_CHANNEL,))
        assert not replica.reload()
        assert replica.lookup(ALICE.x25519) is not None and replica.error is not None
    finally:
        replica.close()


def test_the_callers_commands_edit_the_shared_list_when_a_database_is_set(
    postgres_url, callers_file, monkeypatch, capsys
):
    monkeypatch.setenv("MEMORY_DATABASE_URL", postgres_url)
    keys = ["--keys-dir", str(callers_file.parent)]
    assert main([*keys, "callers", "add", "alice", "--key", ALICE.line(), "--grant", "notes=rw"]) == 0
    assert "in the database" in capsys.readouterr().out
    assert not callers_file.exists()
    assert main([*keys, "callers", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [entry["name"] for entry in listed] == ["alice"]
    assert main([*keys, "callers", "revoke", "alice"]) == 0
    with psycopg.connect(postgres_url) as conn:
        row = conn.execute("SELECT version, document FROM channel.callers").fetchone()
    assert row is not None and row[0] == 3 and "revoked_keys" in row[1] and ALICE.line().split()[1] in row[1]


def test_callers_import_replaces_the_shared_list_but_never_brings_back_a_revoked_key(
    postgres_url, callers_file, monkeypatch, capsys
):
    monkeypatch.setenv("MEMORY_DATABASE_URL", postgres_url)
    keys = ["--keys-dir", str(callers_file.parent)]
    update_shared_callers(postgres_url, callers_file, granted("alice"))
    update_shared_callers(postgres_url, callers_file, lambda config: config.revoke("alice", None))
    write_callers(callers_file, granted("bob", BOB)(CallersConfig()))
    assert main([*keys, "callers", "import"]) == 0
    replica = SharedCallers(postgres_url, callers_file)
    try:
        assert replica.lookup(BOB.x25519) is not None and replica.lookup(ALICE.x25519) is None
    finally:
        replica.close()
    write_callers(callers_file, granted("alice")(CallersConfig()))  # alice's revoked key, active again
    capsys.readouterr()
    assert main([*keys, "callers", "import"]) == 2
    assert "revoked" in capsys.readouterr().err
    monkeypatch.delenv("MEMORY_DATABASE_URL")
    assert main([*keys, "callers", "import"]) == 2


def test_a_broken_callers_file_stops_the_first_start_on_a_database_with_a_clear_error(postgres_url, callers_file):
    callers_file.write_text("[callers.alice\n")
    callers_file.chmod(0o644)
    settings = Settings.from_env({"MEMORY_DATABASE_URL": postgres_url})
    with pytest.raises(InvalidArgumentError, match=r"callers\.toml.*first start"):
        channel_state(settings, callers_file.parent, PrivateKey.generate("server"))


def test_callers_import_of_a_missing_file_is_refused_and_changes_nothing(
    postgres_url, callers_file, monkeypatch, capsys
):
    monkeypatch.setenv("MEMORY_DATABASE_URL", postgres_url)
    update_shared_callers(postgres_url, callers_file, granted("alice"))
    wrong = callers_file.parent.parent / "no-such-keys"
    assert main(["--keys-dir", str(wrong), "callers", "import"]) == 2
    assert "no callers file" in capsys.readouterr().err
    with psycopg.connect(postgres_url) as conn:
        row = conn.execute("SELECT version, document FROM channel.callers").fetchone()
    assert row is not None and row[0] == 2 and ALICE.line().split()[1] in row[1]  # the import, then alice


def test_callers_import_that_would_lock_every_device_out_needs_allow_no_keys(
    postgres_url, callers_file, monkeypatch, capsys
):
    monkeypatch.setenv("MEMORY_DATABASE_URL", postgres_url)
    keys = ["--keys-dir", str(callers_file.parent)]
    update_shared_callers(postgres_url, callers_file, granted("alice"))
    write_callers(callers_file, CallersConfig())
    assert main([*keys, "callers", "import"]) == 2
    assert "--allow-no-keys" in capsys.readouterr().err
    replica = SharedCallers(postgres_url, callers_file)
    try:
        assert replica.lookup(ALICE.x25519) is not None
        assert main([*keys, "callers", "import", "--allow-no-keys"]) == 0
        assert replica.reload() and replica.lookup(ALICE.x25519) is None
    finally:
        replica.close()


@pytest.mark.parametrize("backend", ["file", "database"])
def test_a_key_comment_that_is_not_utf8_is_refused_the_same_way_by_both_backends(
    backend, postgres_url, callers_file, monkeypatch, capsys
):
    if backend == "database":
        monkeypatch.setenv("MEMORY_DATABASE_URL", postgres_url)
    line = " ".join(ALICE.line().split(" ")[:2]) + " ren\udce9@laptop"  # how argv passes on a Latin-1 byte
    keys = ["--keys-dir", str(callers_file.parent)]
    assert main([*keys, "callers", "add", "alice", "--key", line, "--grant", "notes=rw"]) == 2
    assert "not valid UTF-8 text" in capsys.readouterr().err
    assert not callers_file.exists()


def test_a_check_the_database_cannot_answer_keeps_the_last_list_for_a_second_then_lookups_are_unavailable(
    postgres_url, callers_file, reachable
):
    # A revocation is a write to that database, so the list the last answered check read misses none; past
    # STALE_AFTER this replica may be the only one not seeing it, and refuses (503s) rather than let a key in.
    update_shared_callers(postgres_url, callers_file, granted("alice"))
    now = [0.0]
    replica = SharedCallers(postgres_url, callers_file, clock=lambda: now[0])
    try:
        reachable(False)
        now[0] += CHECK_EVERY
        identity = replica.lookup(ALICE.x25519)
        assert identity is not None and identity.name == "alice"
        now[0] += STALE_AFTER
        with pytest.raises(StoreUnavailable):
            replica.lookup(ALICE.x25519)
        reachable(True)
        now[0] += OUTAGE_MAX_SECONDS  # past any backoff: the next check reaches the database
        assert replica.lookup(ALICE.x25519) is not None
    finally:
        replica.close()


def test_a_lookup_after_an_idle_spell_waits_for_a_reload_under_way_instead_of_refusing_as_stale(
    postgres_url, callers_file
):
    # The listener's thread may be reading the list (a notice came) just as the first lookup after more than
    # STALE_AFTER of quiet arrives; that reload confirms the list, so the lookup waits for it, not a 503.
    update_shared_callers(postgres_url, callers_file, granted("alice"))
    now = [0.0]
    replica = SharedCallers(postgres_url, callers_file, clock=lambda: now[0])
    holding, done = threading.Event(), threading.Event()

    def reloading() -> None:
        with replica._lock:
            holding.set()
            done.wait(HEARD_WITHIN)
            replica._read()

    thread = threading.Thread(target=reloading)
    try:
        now[0] += 2 * STALE_AFTER
        thread.start()
        assert holding.wait(HEARD_WITHIN)
        threading.Timer(RELOAD_WAIT / 5, done.set).start()  # the reload ends while the lookup waits for it
        identity = replica.lookup(ALICE.x25519)
        assert identity is not None and identity.name == "alice"
    finally:
        done.set()
        thread.join()
        replica.close()


def test_lookups_while_the_database_is_out_of_reach_try_one_connection_per_backoff_not_one_each(
    postgres_url, callers_file, reachable, monkeypatch
):
    # Lookups run on the event loop, and each connection attempt may wait the whole connect timeout.
    update_shared_callers(postgres_url, callers_file, granted("alice"))
    now = [0.0]
    replica = SharedCallers(postgres_url, callers_file, clock=lambda: now[0])
    attempts: list[float] = []
    connect = replica._db._connect

    def counted() -> object:
        attempts.append(now[0])
        return connect()

    monkeypatch.setattr(replica._db, "_connect", counted)
    try:
        reachable(False)
        for _ in range(8):  # a lookup at every check for 4 s
            now[0] += CHECK_EVERY
            with contextlib.suppress(StoreUnavailable):
                replica.lookup(ALICE.x25519)
        # The backoff doubling from 1 s, one attempt each (on a thread of its own), and one at the first lookup
        # when the database's goodbye had reached the connection by then (`ended_while_idle`).
        assert attempts in ([0.5, 1.5, 3.5], [1.5, 3.5])
    finally:
        replica.close()


@pytest.mark.anyio
async def test_a_handshake_while_the_database_is_out_of_reach_gets_the_stores_503_not_a_500(
    postgres_url, callers_file, reachable
):
    await anyio.to_thread.run_sync(update_shared_callers, postgres_url, callers_file, granted("alice"))
    server_key = PrivateKey.generate("memory-server")
    callers = SharedCallers(postgres_url, callers_file, check_every=0)  # each lookup checks the database
    store = PgSessionStore(postgres_url, server_key, time.time)
    try:
        with serve_channel(inner_app(AppState()), callers, server_key=server_key, sessions=store) as running:
            await anyio.to_thread.run_sync(reachable, False)
            hello = create_initiation(DEVICE, server_key.public, time.time_ns(), os.urandom)[0]
            async with httpx2.AsyncClient() as http:
                with anyio.fail_after(10):
                    answer = await http.post(running.url + HANDSHAKE_PATH, content=hello)
        assert (answer.status_code, answer.headers.get("retry-after")) == (503, "1")
    finally:
        callers.close()
        store.close()
