"""Who gets a handshake's work, and who pays for it, so that a flood cannot be turned against honest devices.

Limiting handshakes per sender address before authentication lets one host's garbage lock out every device behind
the same address (an office NAT, a VPN exit). So no address is charged for an honest device's handshake:

- A msg1 of the wrong length, version or kind is refused before any cryptography (free).
- An authentic msg1 from a known device key is charged to that key (`per_key`, a token bucket per key).
- Every failed handshake (bad message, unknown key, replay, clock off) is charged to one global budget
  (`failures`), and so is every refused tunnel frame (anyone who saw a session id can send them). While it lasts,
  each failure is logged. When it is spent (a flood), failures are no longer logged one by one (a summary line
  counts them) and msg1s from addresses that have not authenticated a device recently are refused with 429 before
  the cryptography, which bounds the flood's CPU. Addresses where a device did
  authenticate within the last hour keep being served, so devices already in use are never locked out; a new
  address waits only while the flood lasts.

Pure bookkeeping with the clock passed in; nothing awaits, so each check-and-charge is atomic on the event loop.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from channel.constants import SESSION_LIFETIME
from channel.ratelimit import MAX_TRACKED, Rate, RateLimiter

FAILURE_RATE = Rate(burst=200.0, per_second=50.0)  # ~50 x 90 us of X25519 per second: under 1% of a core
SUMMARY_EVERY = 10.0  # seconds between two "failures not logged" lines during a flood


class Bucket:
    """One token bucket."""

    def __init__(self, rate: Rate, clock: Callable[[], float]) -> None:
        self._rate = rate
        self._clock = clock
        self._tokens = rate.burst
        self._at = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self._rate.burst, self._tokens + max(0.0, now - self._at) * self._rate.per_second)
        self._at = now

    def has_tokens(self) -> bool:
        self._refill()
        return self._tokens >= 1.0

    def take(self) -> bool:
        """Take one token; False (and nothing taken) when there is none."""
        self._refill()
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True


class HandshakeAdmission:
    """The handshake limits of one server: per device key after authentication, one global budget for failures."""

    def __init__(
        self,
        clock: Callable[[], float],
        *,
        per_key: Rate | None = None,
        failures: Rate | None = None,
        trust_for: float = SESSION_LIFETIME,
    ) -> None:
        self._clock = clock
        self._keys = RateLimiter(per_key or Rate(), clock)
        self._failures = Bucket(failures or FAILURE_RATE, clock)
        self._trust_for = trust_for
        self._trusted: OrderedDict[str, float] = OrderedDict()  # address -> when a device last authenticated there
        self.unlogged = 0  # failures not logged one by one since the last summary
        self._summary_at = clock()

    def may_try(self, address: str) -> bool:
        """Before the cryptography: whether this msg1 gets it (always, unless a flood spent the failure budget)."""
        if self._failures.has_tokens():
            return True
        seen = self._trusted.get(address)
        if seen is not None and self._clock() - seen < self._trust_for:
            return True
        self.unlogged += 1
        return False

    def failed(self) -> bool:
        """Charge a failed handshake to the global budget; whether to log it (False once the budget is spent)."""
        if self._failures.take():
            return True
        self.unlogged += 1
        return False

    def authenticated(self, static_key: bytes, address: str) -> bool:
        """Charge an authentic handshake to its device key; False when that key is over its rate."""
        if not self._keys.allow(static_key.hex()):
            return False
        self._trusted[address] = self._clock()
        self._trusted.move_to_end(address)
        while len(self._trusted) > MAX_TRACKED:
            self._trusted.popitem(last=False)
        return True

    def summary_due(self) -> int:
        """How many failures went unlogged, when a summary line is due (then the count restarts); else 0."""
        now = self._clock()
        if not self.unlogged or now - self._summary_at < SUMMARY_EVERY:
            return 0
        count, self.unlogged, self._summary_at = self.unlogged, 0, now
        return count
