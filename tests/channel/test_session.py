"""Server-side session bookkeeping and the handshake rate limit, on a clock the test moves.

The tests taking `tables` hold for every `SessionStore`: `tests/server/postgres/test_store_parity.py` runs them
again on the PostgreSQL store the replicas share.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from channel.constants import CLOCK_WINDOW, REQUEST_ID_MEMORY
from channel.ratelimit import MAX_TRACKED, Rate, RateLimiter
from channel.session import Session, SessionTable


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


Tables = Callable[..., SessionTable]  # (clock, **options) -> a store


@pytest.fixture
def tables() -> Tables:
    return SessionTable


def session(clock: Clock, caller: str = "alice", static: bytes = b"K" * 32, lifetime: float = 3600.0) -> Session:
    return Session(
        id=os.urandom(16),
        caller=caller,
        static_key=static,
        receive_key=os.urandom(32),
        send_key=os.urandom(32),
        created=clock.now,
        expires_at=clock.now + lifetime,
        last_used=clock.now,
    )


def test_a_session_is_found_until_its_absolute_expiry_even_when_used(tables: Tables):
    clock = Clock()
    table = tables(clock, lifetime=100, idle=60)
    live = session(clock, lifetime=100)
    assert table.open(live, 1)
    for _ in range(3):
        clock.now += 30
        assert table.get(live.id) is live
        table.touch(live)
    clock.now += 10
    assert table.get(live.id) is None and len(table) == 0


def test_a_session_idle_too_long_is_gone(tables: Tables):
    clock = Clock()
    table = tables(clock, idle=60)
    live = session(clock)
    table.open(live, 1)
    clock.now += 59
    assert table.get(live.id) is live
    clock.now += 1
    assert table.get(live.id) is None


def test_the_handshake_timestamp_must_grow_per_key_and_is_committed_only_on_open(tables: Tables):
    clock = Clock()
    table = tables(clock)
    assert table.timestamp_is_fresh(b"K" * 32, 10)
    assert table.open(session(clock), 10)
    assert not table.timestamp_is_fresh(b"K" * 32, 10) and not table.open(session(clock), 10)
    assert not table.open(session(clock), 9)
    assert table.timestamp_is_fresh(b"J" * 32, 1)  # another key has its own timestamps
    assert table.open(session(clock), 11)


def test_a_handshake_timestamp_long_before_the_newest_accepted_stays_stale_whatever_the_clock_says(tables: Tables):
    clock = Clock()
    table = tables(clock)
    recorded = int(clock.now * 1e9)
    assert table.open(session(clock), recorded)
    clock.now += 3600
    assert table.open(session(clock), int(clock.now * 1e9))
    # A msg1 recorded an hour ago is a replay, never a clock that is off (that answer would say the key is known).
    assert not table.timestamp_is_fresh(b"K" * 32, recorded + 1)
    assert table.timestamp_is_fresh(b"K" * 32, int(clock.now * 1e9) + 1)


def test_a_handshake_timestamp_recorded_far_ahead_of_the_clock_is_ignored(tables: Tables):
    clock = Clock()
    table = tables(clock)
    assert table.open(session(clock), int((clock.now + 2 * CLOCK_WINDOW + 1) * 1e9))  # before the clock check
    assert table.timestamp_is_fresh(b"K" * 32, int(clock.now * 1e9))
    assert table.open(session(clock), int(clock.now * 1e9))
    assert not table.timestamp_is_fresh(b"K" * 32, int(clock.now * 1e9))


def test_a_caller_over_its_cap_loses_its_oldest_session_not_another_callers(tables: Tables):
    clock = Clock()
    table = tables(clock, max_per_caller=3)
    bob = session(clock, caller="bob", static=b"B" * 32)
    table.open(bob, 1)
    mine = []
    for timestamp in range(1, 5):
        clock.now += 1
        mine.append(session(clock))
        assert table.open(mine[-1], timestamp)
    assert table.get(mine[0].id) is None
    assert all(table.get(s.id) is s for s in mine[1:]) and table.get(bob.id) is bob


def test_a_full_server_refuses_new_sessions_but_purges_dead_ones_first(tables: Tables):
    clock = Clock()
    table = tables(clock, max_sessions=2, idle=60)
    assert table.open(session(clock, "a", b"A" * 32), 1)
    assert table.open(session(clock, "b", b"B" * 32), 1)
    assert not table.open(session(clock, "c", b"C" * 32), 1)
    assert table.timestamp_is_fresh(b"C" * 32, 1)  # a refused handshake commits nothing
    clock.now += 61
    assert table.open(session(clock, "c", b"C" * 32), 1)


def test_dropping_a_key_ends_every_session_of_that_key(tables: Tables):
    clock = Clock()
    table = tables(clock)
    doomed = [session(clock) for _ in range(3)]
    for timestamp, s in enumerate(doomed, 1):
        table.open(s, timestamp)
    other = session(clock, "bob", b"B" * 32)
    table.open(other, 1)
    assert table.drop_key(b"K" * 32) == 3
    assert len(table) == 1 and table.get(other.id) is other


def test_a_frame_counter_and_a_request_id_are_each_accepted_once(tables: Tables):
    clock = Clock()
    table = tables(clock, idle=60)
    first, second = session(clock), session(clock)
    assert table.open(first, 1) and table.open(second, 2)
    clock.now += 30
    assert table.commit_request(first, 5, b"q" * 16) is None
    assert table.commit_request(first, 5, b"x" * 16) == "replayed-counter"
    assert table.commit_request(first, 6, b"q" * 16) == "repeated-request"
    assert table.commit_request(second, 5, b"q" * 16) == "repeated-request"  # the id, in any session of the key
    clock.now += 59
    assert table.get(first.id) is first  # each commit marked it in use
    assert table.get(second.id) is None


def test_a_request_id_is_usable_once_per_key_across_sessions():
    clock = Clock()
    table = SessionTable(clock)
    assert table.first_use_of_request_id(b"K" * 32, b"r" * 16)
    assert not table.first_use_of_request_id(b"K" * 32, b"r" * 16)
    assert table.first_use_of_request_id(b"J" * 32, b"r" * 16)


def ids(clock: Clock, count: int) -> list[bytes]:
    """Request ids as a transport makes them (`channel.request_ids`), one a microsecond from now."""
    start = int(clock.now * 1e9)
    return [bytes(4) + (start + 1000 * n).to_bytes(8, "big") + os.urandom(4) for n in range(count)]


def test_a_request_id_the_memory_let_go_is_refused_not_run_again():
    clock = Clock()
    table = SessionTable(clock)
    held, *later = ids(clock, REQUEST_ID_MEMORY + 1)
    assert table.first_use_of_request_id(b"K" * 32, held)
    assert all(table.first_use_of_request_id(b"K" * 32, request_id) for request_id in later)
    assert not table.first_use_of_request_id(b"K" * 32, held)  # no longer remembered, but older than one let go
    clock.now += 2 * table.lifetime
    assert not table.first_use_of_request_id(b"K" * 32, later[-1])  # let go for its age: refused all the same
    assert table.first_use_of_request_id(b"K" * 32, ids(clock, 1)[0])  # a new request still runs
    assert table.first_use_of_request_id(b"J" * 32, held)  # another key has its own memory


def test_request_ids_opened_a_little_out_of_order_each_run_once_while_older_ones_are_let_go():
    clock = Clock()
    table = SessionTable(clock, request_id_memory=4)
    made = ids(clock, 12)
    crossed = [1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10]  # two transports' requests, each overtaking the other's
    assert all(table.first_use_of_request_id(b"K" * 32, made[n]) for n in crossed)
    assert not any(table.first_use_of_request_id(b"K" * 32, request_id) for request_id in made)


def test_random_request_ids_of_older_proxies_are_still_remembered_and_never_lock_the_key_out():
    clock = Clock()
    table = SessionTable(clock, request_id_memory=4)
    legacy = [os.urandom(16) for _ in range(8)]
    assert all(table.first_use_of_request_id(b"K" * 32, request_id) for request_id in legacy)
    assert not table.first_use_of_request_id(b"K" * 32, legacy[-1])
    assert all(table.first_use_of_request_id(b"K" * 32, request_id) for request_id in ids(clock, 8))


def test_session_secrets_stay_out_of_reprs_and_the_tag_is_a_prefix():
    clock = Clock()
    live = session(clock)
    text = repr(live)
    for secret in (live.id, live.send_key, live.receive_key):
        assert repr(secret) not in text and secret.hex() not in text
    assert live.tag == live.id[:4].hex()


def test_the_rate_limit_allows_a_burst_then_refills():
    clock = Clock()
    limiter = RateLimiter(Rate(burst=3, per_second=1), clock)
    assert [limiter.allow("10.0.0.1") for _ in range(4)] == [True, True, True, False]
    assert limiter.allow("10.0.0.2")
    clock.now += 1
    assert limiter.allow("10.0.0.1") and not limiter.allow("10.0.0.1")


def test_the_rate_limiter_memory_is_bounded_under_a_flood_of_addresses():
    clock = Clock()
    limiter = RateLimiter(Rate(burst=2, per_second=0.001), clock)
    for n in range(MAX_TRACKED * 2):
        limiter.allow(f"10.{n >> 16}.{(n >> 8) & 255}.{n & 255}")
    assert len(limiter._buckets) <= MAX_TRACKED
