"""A circuit breaker for one provider (an embedder, the reranker): pure state, the clock passed in; `through` runs a
call behind one.

Closed, a provider is used. A failure opens it: no call for `delay` seconds, doubling with each failure in a row
up to `cap`; at least a `Retry-After` the provider sent, or `REFUSED_DELAY` when it refused the key, but never
past `cap`.
Once the delay is over it is half-open: the next call is the trial, and a success closes it. Callers therefore
never wait on a provider known to be down, and a recovered one is taken back by the next call after its delay.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from server.index.errors import EmbeddingError

T = TypeVar("T")

FIRST_DELAY = 2.0  # seconds a provider rests after its first failure in a row
MAX_DELAY = 300.0  # the longest rest between two trials
REFUSED_DELAY = 60.0  # a refused key (401, 403) is not fixed in seconds: rest at least this long


@dataclass
class Breaker:
    first_delay: float = FIRST_DELAY
    max_delay: float = MAX_DELAY
    failures: int = 0  # in a row
    failing_since: float | None = None  # when the first of them happened
    open_until: float = 0.0
    reason: str | None = None  # the last failure, safe to show (no key, no provider body)

    def available(self, now: float) -> bool:
        """Closed, or open with its delay over (the next call is the trial)."""
        return self.failures == 0 or now >= self.open_until

    def failed(self, now: float, reason: str, *, retry_after: float | None = None, refused: bool = False) -> None:
        self.failures += 1
        if self.failing_since is None:
            self.failing_since = now
        delay = min(self.first_delay * 2 ** (self.failures - 1), self.max_delay)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_delay))
        if refused:
            delay = max(delay, min(REFUSED_DELAY, self.max_delay))
        self.open_until = now + delay
        self.reason = reason

    def succeeded(self) -> None:
        self.failures, self.failing_since, self.open_until, self.reason = 0, None, 0.0, None

    def down_for(self, now: float) -> float:
        """Seconds since the provider began failing (0 while it works)."""
        return 0.0 if self.failing_since is None else now - self.failing_since

    def describe(self, now: float) -> str | None:
        """None while closed; else the last failure and when the next trial comes."""
        if self.failures == 0:
            return None
        wait = self.open_until - now
        when = f"next try in {wait:.0f} s" if wait > 0.5 else "next call is a trial"
        return f"{self.reason}; {when}"


def through(breaker: Breaker, lock: threading.Lock, clock: Callable[[], float], name: str, call: Callable[[], T]) -> T:
    """`call()` while `breaker` lets calls through, its EmbeddingError recorded as a failure and re-raised; while
    the breaker rests, an EmbeddingError at once, naming `name` and the next try."""
    with lock:
        now = clock()
        if not breaker.available(now):
            raise EmbeddingError(f"{name} is unavailable ({breaker.describe(now)})")
    try:
        answer = call()
    except EmbeddingError as exc:
        with lock:
            breaker.failed(clock(), str(exc), retry_after=exc.retry_after, refused=exc.refused)
        raise
    with lock:
        breaker.succeeded()
    return answer
