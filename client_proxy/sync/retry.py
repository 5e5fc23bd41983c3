"""Retrying after a failed sync step: exponential backoff, jittered, that any success cuts short."""

from __future__ import annotations

import random
from typing import Final

import anyio

BACKOFF_START: Final = 1.0
BACKOFF_MAX: Final = 30.0


class Retry:
    """Exponential backoff shared by both loops (1 s doubling to 30 s, jittered); a success anywhere ends every
    pause at once, so sync resumes as soon as the server answers again."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._delay = BACKOFF_START
        self._recovered = anyio.Event()

    def next_delay(self) -> float:
        """The next pause: the current step, jittered down by up to half (so laptops do not retry in step)."""
        delay = self._delay * self._rng.uniform(0.5, 1.0)
        self._delay = min(self._delay * 2, BACKOFF_MAX)
        return delay

    async def pause(self) -> None:
        with anyio.move_on_after(self.next_delay()):
            await self._recovered.wait()

    def succeeded(self) -> None:
        self._delay = BACKOFF_START
        self._recovered.set()
        self._recovered = anyio.Event()
