"""A sliding replay window over frame counters, as in WireGuard (RFC 6479 style, one big-int bitmap).

`accept` checks and commits in one step under a lock, and must be called only after the frame authenticated:
an attacker's forged counter must never move the window.
"""

from __future__ import annotations

import threading

from channel.constants import MAX_COUNTER, REPLAY_WINDOW


class ReplayWindow:
    __slots__ = ("_bits", "_lock", "_size", "_top")

    def __init__(self, size: int = REPLAY_WINDOW) -> None:
        self._size = size
        self._top = -1  # the highest counter accepted so far
        self._bits = 0  # bit i set: counter (top - i) was accepted
        self._lock = threading.Lock()

    def might_accept(self, counter: int) -> bool:
        """A cheap pre-check before decrypting; not a commitment."""
        if not 0 <= counter <= MAX_COUNTER:
            return False
        if counter > self._top:
            return True
        offset = self._top - counter
        return offset < self._size and not (self._bits >> offset) & 1

    def accept(self, counter: int) -> bool:
        """Record `counter` and return True, or return False if it is too old or already seen."""
        if not 0 <= counter <= MAX_COUNTER:
            return False
        with self._lock:
            if counter > self._top:
                shift = counter - self._top
                self._bits = ((self._bits << shift) | 1) & ((1 << self._size) - 1) if shift < self._size else 1
                self._top = counter
                return True
            offset = self._top - counter
            if offset >= self._size or (self._bits >> offset) & 1:
                return False
            self._bits |= 1 << offset
            return True
