"""Per-caller limits inside the tunnel: requests and request bytes in flight, and requests per second.

One caller (a laptop, or a stolen key) must not hold the server's memory with many concurrent 32 MiB bodies or
crowd out the others. A request over a limit is answered 429 with `Retry-After` before its body is read: it was
never opened, so the client may send it again. The rate counts only requests that opened: the session id travels
in clear, and frames forged under it must not spend the caller's budget (`refund`). Pure bookkeeping; nothing awaits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from channel.constants import MAX_REQUEST_FRAME
from channel.ratelimit import Rate, RateLimiter

RETRY_AFTER = 1  # seconds, in the 429's Retry-After
CALLER_RATE = Rate(burst=400.0, per_second=200.0)  # requests per second, far above an agent's pace


@dataclass(frozen=True)
class CallerLimits:
    max_requests: int = 32  # in flight at once (long-polls and event streams count: a laptop holds two or three)
    max_bytes: int = 2 * MAX_REQUEST_FRAME  # declared request bytes in flight at once: two full-size bodies
    rate: Rate = CALLER_RATE


class CallerLoad:
    def __init__(self, clock: Callable[[], float], limits: CallerLimits | None = None) -> None:
        self.limits = limits or CallerLimits()
        self._rate = RateLimiter(self.limits.rate, clock)
        self._requests: dict[str, int] = {}
        self._bytes: dict[str, int] = {}

    def admit(self, caller: str, size: int) -> bool:
        """Count a request of `size` bytes in flight for `caller`; False (nothing counted) when over a limit.
        Every admitted request must be `release`d."""
        requests, held = self._requests.get(caller, 0), self._bytes.get(caller, 0)
        if requests >= self.limits.max_requests or (requests and held + size > self.limits.max_bytes):
            return False
        if not self._rate.allow(caller):
            return False
        self._requests[caller], self._bytes[caller] = requests + 1, held + size
        return True

    def refund(self, caller: str) -> None:
        """Take back the rate charge of an admitted request that opened nothing (a frame forged or replayed under
        the caller's session id, which travels in clear): only requests the caller really sent count."""
        self._rate.refund(caller)

    def release(self, caller: str, size: int) -> None:
        requests = self._requests.get(caller, 0) - 1
        if requests <= 0:
            self._requests.pop(caller, None)
            self._bytes.pop(caller, None)
        else:
            self._requests[caller], self._bytes[caller] = requests, self._bytes[caller] - size
