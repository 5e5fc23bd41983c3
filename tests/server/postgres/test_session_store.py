"""Channel sessions in PostgreSQL (`server.postgres.sessions`): two stores on one database behave as one table,
and what the database holds opens nothing without the server's key."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import psycopg
import pytest

from channel.constants import SESSION_IDLE, SESSION_LIFETIME
from channel.errors import StoreUnavailable
from channel.keys import PrivateKey
from channel.session import Session
from server.errors import EngineError
from server.postgres.channel_schema import STATEMENT_TIMEOUT_MS, open_channel_db
from server.postgres.outage import OUTAGE_FIRST_SECONDS
from server.postgres.sealing import KeySealer, hkdf_sha256
from server.postgres.sessions import SEND_BLOCK, SEND_RESERVE, PgSessionStore
from tests.channel.test_session import Clock, session
from tests.postgres_support import cut_all

SERVER = PrivateKey.generate("server")
DEVICE = PrivateKey.generate("alice@laptop")


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def replicas(postgres_url: str, clock: Clock) -> Iterator[Callable[..., PgSessionStore]]:
    made: list[PgSessionStore] = []

    def make(**options: object) -> PgSessionStore:
        made.append(PgSessionStore(postgres_url, SERVER, clock, **options))  # type: ignore[arg-type]
        return made[-1]

    yield make
    for store in made:
        store.close()


def new_session(clock: Clock, caller: str = "alice", key: bytes = DEVICE.public.x25519) -> Session:
    return session(clock, caller, key, SESSION_LIFETIME)


def stamp(clock: Clock) -> int:
    return int(clock.now * 1e9)


def test_a_session_opened_on_one_replica_is_found_with_its_keys_on_the_other(replicas, clock):
    a, b = replicas(), replicas()
    session = new_session(clock)
    assert a.open(session, stamp(clock))
    found = b.get(session.id)
    assert found is not None and found is not session
    assert (found.receive_key, found.send_key, found.caller) == (session.receive_key, session.send_key, "alice")
    assert b.get(session.id) is found  # cached: the same object while it lives
    assert len(a) == len(b) == 1


def test_expired_and_idle_sessions_are_gone_on_both_replicas_and_from_the_table(replicas, clock, postgres_url):
    a, b = replicas(), replicas()
    start = clock.now
    lasting, idle = new_session(clock), new_session(clock)
    assert a.open(lasting, stamp(clock)) and a.open(idle, stamp(clock) + 1)
    assert b.get(lasting.id) is not None and b.get(idle.id) is not None
    clock.now += SESSION_IDLE - 1
    assert b.commit_request(b.get(lasting.id), 0, b"r" * 16) is None  # keeps `lasting` in use everywhere
    clock.now += 2
    assert a.get(idle.id) is None and b.get(idle.id) is None
    assert a.get(lasting.id) is not None
    clock.now = start + SESSION_LIFETIME
    assert a.get(lasting.id) is None and b.get(lasting.id) is None
    assert a.purge() == 2
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT count(*) FROM channel.sessions").fetchone() == (0,)


def test_a_counter_or_request_id_accepted_on_one_replica_is_refused_on_the_other(replicas, clock):
    a, b = replicas(), replicas()
    session = new_session(clock)
    assert a.open(session, stamp(clock))
    there = b.get(session.id)
    assert a.commit_request(session, 7, b"q" * 16) is None
    assert b.commit_request(there, 7, b"x" * 16) == "replayed-counter"
    assert b.commit_request(there, 8, b"q" * 16) == "repeated-request"
    assert b.commit_request(there, 9, b"y" * 16) is None
    assert a.commit_request(session, 9, b"z" * 16) == "replayed-counter"


def test_a_request_id_stays_used_across_a_new_session_of_the_same_key(replicas, clock):
    a, b = replicas(), replicas()
    first, second = new_session(clock), new_session(clock)
    assert a.open(first, stamp(clock)) and b.open(second, stamp(clock) + 1)
    assert a.commit_request(first, 0, b"q" * 16) is None
    assert b.commit_request(second, 0, b"q" * 16) == "repeated-request"


def test_a_handshake_timestamp_accepted_on_one_replica_is_refused_on_the_other(replicas, clock):
    a, b = replicas(), replicas()
    assert a.open(new_session(clock), stamp(clock))
    assert not b.timestamp_is_fresh(DEVICE.public.x25519, stamp(clock))
    assert not b.open(new_session(clock), stamp(clock))
    assert b.open(new_session(clock), stamp(clock) + 1)


def test_the_caps_per_caller_and_in_total_hold_across_replicas(replicas, clock):
    a, b = replicas(max_per_caller=2, max_sessions=3), replicas(max_per_caller=2, max_sessions=3)
    oldest, middle, newest = (new_session(clock) for _ in range(3))
    assert a.open(oldest, stamp(clock))
    clock.now += 1
    assert b.open(middle, stamp(clock))
    clock.now += 1
    assert a.open(newest, stamp(clock))  # alice's third: her oldest ends, wherever it was made
    assert a.get(oldest.id) is None and b.get(oldest.id) is None and b.get(middle.id) is not None
    bob = PrivateKey.generate("bob").public.x25519
    assert b.open(new_session(clock, "bob", bob), stamp(clock))
    carol = PrivateKey.generate("carol").public.x25519
    assert not a.open(new_session(clock, "carol", carol), stamp(clock))  # three live: full
    assert len(a) == 3


def test_two_replicas_never_seal_responses_under_the_same_nonce(replicas, clock):
    a, b = replicas(), replicas()
    session = new_session(clock)
    assert a.open(session, stamp(clock))
    there = b.get(session.id)
    mine = [session.next_send_counter() for _ in range(3)]
    theirs = [there.next_send_counter() for _ in range(3)]
    assert mine == [0, 1, 2] and theirs == [SEND_BLOCK, SEND_BLOCK + 1, SEND_BLOCK + 2]


def test_a_request_leases_its_answers_nonces_with_its_commit_so_a_database_lost_meanwhile_does_not_cut_it(
    replicas, clock, reachable
):
    store = replicas()
    session = new_session(clock)
    assert store.open(session, stamp(clock))
    assert store.commit_request(session, 0, b"q" * 16) is None
    reachable(False)  # while the inner app runs
    assert [session.next_send_counter() for _ in range(3)] == [0, 1, 2]


def test_a_nonce_lease_that_failed_is_tried_again_on_the_next_frame_once_the_database_is_back(
    replicas, clock, reachable
):
    store = replicas()
    session = new_session(clock)
    assert store.open(session, stamp(clock))
    reachable(False)
    with pytest.raises(StoreUnavailable):
        session.next_send_counter()
    reachable(True)
    clock.now += OUTAGE_FIRST_SECONDS  # the outage's backoff passed
    first = session.next_send_counter()
    assert [session.next_send_counter() for _ in range(2)] == [first + 1, first + 2]


def test_a_commit_leases_a_new_block_only_when_few_nonces_are_left_and_the_nonces_keep_growing(replicas, clock):
    store = replicas()
    session = new_session(clock)
    assert store.open(session, stamp(clock))
    assert store.commit_request(session, 0, b"a" * 16) is None
    assert session.next_send_counter() == 0
    assert store.commit_request(session, 1, b"b" * 16) is None  # plenty left: none leased
    assert session.next_send_counter() == 1
    for _ in range(SEND_BLOCK - SEND_RESERVE - 1):
        session.next_send_counter()
    assert store.commit_request(session, 2, b"c" * 16) is None  # fewer than SEND_RESERVE left: the next block
    assert session.next_send_counter() == SEND_BLOCK


def test_ending_a_key_ends_its_sessions_on_every_replica(replicas, clock):
    a, b = replicas(), replicas()
    session = new_session(clock)
    assert a.open(session, stamp(clock))
    there = b.get(session.id)
    assert a.drop_key(DEVICE.public.x25519) == 1
    assert b.commit_request(there, 0, b"q" * 16) == "no-session"
    assert b.get(session.id) is None


def test_a_dump_of_the_channel_tables_holds_no_session_key(replicas, clock, postgres_url):
    a = replicas()
    session = new_session(clock)
    assert a.open(session, stamp(clock))
    assert a.commit_request(session, 0, b"q" * 16) is None
    with psycopg.connect(postgres_url) as conn:
        tables = [
            row[0]
            for row in conn.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'channel'")
        ]
        dump = b"".join(
            bytes(str(row), "utf-8") + b"".join(bytes(v) for v in row if isinstance(v, (bytes, memoryview)))
            for table in tables
            for row in conn.execute(f'SELECT * FROM channel."{table}"')
        )
    assert session.id in dump  # the dump is real: the row is there
    for secret in (session.receive_key, session.send_key, SERVER.x25519):
        assert secret not in dump and secret.hex().encode() not in dump


def test_stored_keys_open_only_with_the_server_key_and_only_for_their_session():
    sealed = KeySealer(SERVER).seal(b"i" * 16, b"r" * 32, b"s" * 32, b"n" * 24)
    assert KeySealer(SERVER).open(b"i" * 16, sealed) == (b"r" * 32, b"s" * 32)
    with pytest.raises(EngineError):
        KeySealer(PrivateKey.generate("another server")).open(b"i" * 16, sealed)
    with pytest.raises(EngineError):
        KeySealer(SERVER).open(b"j" * 16, sealed)
    assert repr(KeySealer(SERVER)) == "KeySealer()"


def test_the_sealing_key_derivation_is_rfc_5869_hkdf_sha256():
    okm = hkdf_sha256(bytes([0x0B] * 22), bytes(range(13)), bytes(range(0xF0, 0xFA)), 42)
    assert okm.hex() == ("3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865")


def test_the_channels_connection_keeps_its_settings_when_it_connects_again(postgres_url):
    db = open_channel_db(postgres_url, {"synchronous_commit": "off"})
    try:
        for _ in range(2):  # as made, then made again after every connection was cut
            timeout = db.execute("SELECT setting FROM pg_settings WHERE name = 'statement_timeout'").fetchone()
            commit = db.execute("SHOW synchronous_commit").fetchone()
            assert (timeout, commit) == ((str(STATEMENT_TIMEOUT_MS),), ("off",))
            assert cut_all(postgres_url) >= 1
    finally:
        db.close()
