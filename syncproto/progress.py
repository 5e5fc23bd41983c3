"""Progress of long work, told the same way on both sides: done of total, the rate, and the time left.

`memory-server index` prints it on stderr (stdout stays for results), the proxy logs its first sync (stderr: its
stdout is MCP's), and `memory_status` reports a background vector rebuild with `estimate`. `Progress(total,
label).step` is called once per item; it reports at most once every `every` seconds and always the last item, so a
run of thousands of files shows a line a second, not one per file.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO


def estimate(done: int, total: int, elapsed: float) -> tuple[float, float] | None:
    """(items per second, seconds left); None before one second has passed or anything was done."""
    if elapsed < 1.0 or done <= 0:
        return None
    rate = done / elapsed
    return rate, max(total - done, 0) / rate


def progress_line(label: str, done: int, total: int, elapsed: float, unit: str = "files") -> str:
    """`label: 120/1,000 files (12%), 8.3/s, about 1m46s left` (no rate or estimate before one second has passed)."""
    share = f" ({min(done, total) * 100 // total}%)" if total else ""
    line = f"{label}: {done:,}/{total:,} {unit}{share}"
    rated = estimate(done, total, elapsed)
    if rated is None:
        return line
    rate, left = rated
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
        unit: str = "files",
        emit: Callable[[str], None] | None = None,
    ) -> None:
        self.total, self.label, self.every, self.clock, self.unit = total, label, every, clock, unit
        self.out = out if out is not None else sys.stderr
        self.emit = emit if emit is not None else self._print
        self.done = 0
        self.started = clock()
        self._shown_at: float | None = None

    def step(self, _item: object = None) -> None:
        self.advance(self.done + 1)

    def advance(self, done: int) -> None:
        """`done` items of the total are finished now (a batch at a time)."""
        self.done = done
        now = self.clock()
        if self.done >= self.total or self._shown_at is None or now - self._shown_at >= self.every:
            self._shown_at = now
            self.emit(progress_line(self.label, self.done, self.total, now - self.started, self.unit))

    def _print(self, line: str) -> None:
        print(line, file=self.out, flush=True)
