"""Progress of long work on stderr (stdout stays for results): done of total, the rate, and the time left.

`Progress(total, label).step` is called once per item looked at; it prints at most once every `every` seconds and always
for the last item, so a run of thousands of files shows a line a second, not one per file.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO


def progress_line(label: str, done: int, total: int, elapsed: float) -> str:
    """`label: 120/1,000 files (12%), 8.3/s, about 1m46s left` (no rate or estimate before one second has passed)."""
    share = f" ({done * 100 // total}%)" if total else ""
    line = f"{label}: {done:,}/{total:,} files{share}"
    if elapsed < 1.0 or done == 0:
        return line
    rate = done / elapsed
    left = max(total - done, 0) / rate
    return f"{line}, {rate:.1f}/s, " + ("done" if done >= total else f"about {_duration(left)} left")


def _duration(seconds: float) -> str:
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    minutes, seconds_left = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{seconds_left:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class Progress:
    """Counts finished items and reports them on `out`, throttled to one line every `every` seconds."""

    def __init__(
        self,
        total: int,
        label: str,
        *,
        out: TextIO | None = None,
        every: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total, self.label, self.every, self.clock = total, label, every, clock
        self.out = out if out is not None else sys.stderr
        self.done = 0
        self.started = clock()
        self._shown_at: float | None = None

    def step(self, _item: object = None) -> None:
        self.done += 1
        now = self.clock()
        if self.done >= self.total or self._shown_at is None or now - self._shown_at >= self.every:
            self._shown_at = now
            print(progress_line(self.label, self.done, self.total, now - self.started), file=self.out, flush=True)
