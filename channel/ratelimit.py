"""A token bucket per client address, for handshakes. Bounded memory: full buckets are forgotten."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

MAX_TRACKED = 10_000


@dataclass(frozen=True)
class Rate:
    burst: float = 20.0
    per_second: float = 5.0


class RateLimiter:
    def __init__(self, rate: Rate, clock: Callable[[], float]) -> None:
        self._rate = rate
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # address -> (tokens, at)

    def allow(self, address: str) -> bool:
        now = self._clock()
        tokens, at = self._buckets.get(address, (self._rate.burst, now))
        tokens = min(self._rate.burst, tokens + max(0.0, now - at) * self._rate.per_second)
        if tokens < 1.0:
            self._buckets[address] = (tokens, now)
            return False
        if len(self._buckets) >= MAX_TRACKED and address not in self._buckets:
            self._forget_full(now)
        self._buckets[address] = (tokens - 1.0, now)
        return True

    def refund(self, address: str) -> None:
        """Give back the token `allow` took for something that turned out not to count."""
        bucket = self._buckets.get(address)
        if bucket is not None:  # a forgotten bucket was full
            self._buckets[address] = (min(self._rate.burst, bucket[0] + 1.0), bucket[1])

    def _forget_full(self, now: float) -> None:
        rate = self._rate
        full = [a for a, (t, at) in self._buckets.items() if t + (now - at) * rate.per_second >= rate.burst]
        for address in full:
            del self._buckets[address]
        if len(self._buckets) >= MAX_TRACKED:  # under a flood, start over rather than grow
            self._buckets.clear()
