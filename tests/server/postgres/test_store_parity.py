"""The PostgreSQL session store behaves as the in-memory table: every `tables` test of `tests/channel/test_session.py`
runs again here, on a store in a fresh database (expiry, idle time, timestamps, caps, ending a key, replay)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from channel.keys import PrivateKey
from server.postgres.sessions import PgSessionStore
from tests.channel.test_session import (  # noqa: F401 - collected here again, with this module's `tables`
    Clock,
    Tables,
    test_a_caller_over_its_cap_loses_its_oldest_session_not_another_callers,
    test_a_frame_counter_and_a_request_id_are_each_accepted_once,
    test_a_full_server_refuses_new_sessions_but_purges_dead_ones_first,
    test_a_handshake_timestamp_long_before_the_newest_accepted_stays_stale_whatever_the_clock_says,
    test_a_handshake_timestamp_recorded_far_ahead_of_the_clock_is_ignored,
    test_a_session_idle_too_long_is_gone,
    test_a_session_is_found_until_its_absolute_expiry_even_when_used,
    test_dropping_a_key_ends_every_session_of_that_key,
    test_the_handshake_timestamp_must_grow_per_key_and_is_committed_only_on_open,
)

SERVER = PrivateKey.generate("server")


@pytest.fixture
def tables(postgres_url: str) -> Iterator[Tables]:
    made: list[PgSessionStore] = []

    def make(clock: Clock, **options: float) -> PgSessionStore:
        made.append(PgSessionStore(postgres_url, SERVER, clock, **options))  # type: ignore[arg-type]
        return made[-1]

    yield make  # type: ignore[misc]
    for store in made:
        store.close()
