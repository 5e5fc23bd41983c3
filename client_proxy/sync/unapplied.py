"""Pulled changes this laptop could not write: pulled again later, so that none is lost to a passing obstacle.

A change the disk refuses for one file (a folder not writable, a file locked, a name another file takes) must not
stop the pull: the cursor moves past it and the other files sync, while `SyncState.unapplied` remembers it. When a
retry is due, the pull starts again from just before the oldest such change (`rewind`): the server lists every
path's latest version after that revision, and a change already here is skipped by its revision, so only the
waiting ones are written; one that fails again is remembered again. Retries come at a run's first pull (the cause
may have been fixed meanwhile), then `RETRY_FIRST` seconds after a change was left, doubling up to `RETRY_MAX`
while a retry brings none of them to disk: a file that can never be written here costs a pull now and then.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final

from client_proxy.sync.state import SyncState

log = logging.getLogger(__name__)

RETRY_FIRST: Final = 60.0  # seconds from a change left unapplied to its first retry
RETRY_MAX: Final = 900.0  # the longest pause between retries of changes that keep failing


class UnappliedRetry:
    """When to pull the unapplied changes again: one per run of the syncer, used under its lock."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._delay = RETRY_FIRST
        self._due: float | None = clock()  # what the last run left is retried at once
        self._tried: frozenset[str] = frozenset()

    def due_in(self, state: SyncState) -> float | None:
        """Seconds until the unapplied changes are pulled again (0: now); None when none wait, or while a reset
        listing (which lists every path anyway) is under way."""
        if not state.unapplied:
            self._due = None
            return None
        if state.reset_listed is not None:
            return None
        if self._due is None:
            fruitless = bool(self._tried) and self._tried.issubset(state.unapplied)  # the last retry wrote none of them
            self._delay = min(self._delay * 2, RETRY_MAX) if fruitless else RETRY_FIRST
            self._due = self._clock() + self._delay
        return max(self._due - self._clock(), 0.0)

    def rewind(self, state: SyncState) -> bool:
        """If the unapplied changes are due, move the pull cursor back to just before the oldest and forget them
        (one that fails again is remembered again); whether it did."""
        if self.due_in(state) != 0.0:
            return False
        oldest = min(item.revision for item in state.unapplied.values())
        since = max(min(oldest - 1, state.revision), 0)  # never forward, whatever the state file says
        log.debug("sync: pulling again from revision %d: %s not written here yet", since, ", ".join(state.unapplied))
        state.revision = since
        self._tried = frozenset(state.unapplied)
        state.unapplied.clear()
        self._due = None
        return True
