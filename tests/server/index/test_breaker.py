"""The circuit breaker of one embedding provider, on a clock the test holds."""

from __future__ import annotations

from server.index.embeddings.breaker import MAX_DELAY, REFUSED_DELAY, Breaker


def test_a_closed_breaker_lets_every_call_through():
    breaker = Breaker()
    assert breaker.available(0.0) and breaker.describe(0.0) is None and breaker.down_for(5.0) == 0.0


def test_each_failure_in_a_row_doubles_the_rest_up_to_the_cap():
    breaker = Breaker(first_delay=2.0)
    rests = []
    for _ in range(12):
        breaker.failed(100.0, "HTTP 503")
        rests.append(breaker.open_until - 100.0)
    assert rests[:4] == [2.0, 4.0, 8.0, 16.0] and rests[-1] == MAX_DELAY
    assert not breaker.available(100.0 + MAX_DELAY - 1) and breaker.available(100.0 + MAX_DELAY)


def test_retry_after_and_a_refused_key_lengthen_the_rest():
    told = Breaker()
    told.failed(0.0, "HTTP 429", retry_after=45.0)
    assert told.open_until == 45.0
    absurd = Breaker()
    absurd.failed(0.0, "HTTP 429", retry_after=1e9)
    assert absurd.open_until == MAX_DELAY
    refused = Breaker()
    refused.failed(0.0, "HTTP 401", refused=True)
    assert refused.open_until == REFUSED_DELAY


def test_a_success_closes_it_and_forgets_the_outage():
    breaker = Breaker()
    breaker.failed(10.0, "timed out")
    breaker.failed(20.0, "timed out")
    assert breaker.down_for(50.0) == 40.0
    assert "timed out" in (breaker.describe(20.0) or "") and "next try in 4 s" in (breaker.describe(20.0) or "")
    assert "next call is a trial" in (breaker.describe(30.0) or "")
    breaker.succeeded()
    assert breaker.available(20.0) and breaker.describe(20.0) is None and breaker.down_for(99.0) == 0.0
