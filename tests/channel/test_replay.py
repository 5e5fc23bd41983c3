"""The sliding replay window: each counter accepted once, late ones within the window, old ones never."""

from __future__ import annotations

import random
import threading

from channel.constants import MAX_COUNTER, REPLAY_WINDOW
from channel.replay import ReplayWindow


def test_each_counter_is_accepted_exactly_once_in_any_order_within_the_window():
    window = ReplayWindow()
    counters = list(range(REPLAY_WINDOW))
    random.Random(7).shuffle(counters)
    assert all(window.accept(c) for c in counters)
    assert not any(window.accept(c) for c in counters)


def test_a_counter_older_than_the_window_is_refused_even_if_never_seen():
    window = ReplayWindow(size=64)
    assert window.accept(1000)
    assert window.accept(1000 - 63)
    assert not window.might_accept(1000 - 64) and not window.accept(1000 - 64)


def test_a_big_jump_forgets_everything_behind_the_window():
    window = ReplayWindow(size=64)
    assert window.accept(5)
    assert window.accept(10_000)
    assert not window.accept(5) and not window.accept(10_000)
    assert window.accept(9_999)


def test_the_pre_check_commits_nothing():
    window = ReplayWindow()
    assert window.might_accept(3) and window.might_accept(3)
    assert window.accept(3)
    assert not window.might_accept(3)


def test_counters_outside_the_protocol_range_are_refused():
    window = ReplayWindow()
    assert not window.accept(-1) and not window.accept(MAX_COUNTER + 1)
    assert window.accept(MAX_COUNTER)


def test_concurrent_accepts_of_one_counter_let_exactly_one_through():
    window = ReplayWindow()
    results: list[bool] = []
    barrier = threading.Barrier(16)

    def attempt() -> None:
        barrier.wait()
        results.append(window.accept(42))

    threads = [threading.Thread(target=attempt) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results.count(True) == 1
