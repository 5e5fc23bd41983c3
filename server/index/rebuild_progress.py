"""How far a background vector rebuild has got: chunks embedded of the chunks to embed, with the rate and the time
left (`syncproto.progress.estimate`), for `memory_status`. One writer (the rebuild thread), any number of readers."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from syncproto.progress import estimate, progress_line


@dataclass(frozen=True)
class RebuildSnapshot:
    done: int
    total: int
    per_second: float | None  # None in the first second
    seconds_left: float | None
    line: str  # "rebuilding vectors: 256/1,000 chunks (25%), 85.3/s, about 9s left"


@dataclass
class RebuildProgress:
    total: int
    clock: Callable[[], float] = time.monotonic
    label: str = "rebuilding vectors"  # or "re-chunking", counted in files
    done: int = 0
    started: float = field(init=False)

    def __post_init__(self) -> None:
        self.started = self.clock()

    def add(self, chunks: int) -> None:
        """A batch of `chunks` is embedded, or files are cut again (called by the rebuild's thread)."""
        self.done += chunks

    def snapshot(self) -> RebuildSnapshot:
        done, elapsed = min(self.done, self.total), self.clock() - self.started
        rated = estimate(done, self.total, elapsed)
        per_second, seconds_left = rated if rated else (None, None)
        unit = "chunks" if self.label == "rebuilding vectors" else "files"
        line = progress_line(self.label, done, self.total, elapsed, unit=unit)
        return RebuildSnapshot(done, self.total, per_second, seconds_left, line)
