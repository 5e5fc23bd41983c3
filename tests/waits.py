"""Bounded waits on events for the tests: never a sleep to let something happen."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any
from unittest import mock

import anyio.to_thread

from server.sync import app as sync_app
from server.sync.service import ChangesAnswer, SyncService


@contextlib.contextmanager
def long_poll_waiting() -> Iterator[threading.Event]:
    """An event set once a long-poll (a pull with `wait` > 0) has looked and found nothing to send: it now waits
    for a change, and the next one wakes it."""
    taken = threading.Event()
    waiting = threading.Event()
    parse_wait, changes = sync_app.parse_wait, SyncService.changes

    def observed_wait(raw: str | None) -> float:
        wait = parse_wait(raw)
        if wait > 0:
            taken.set()
        return wait

    def observed_changes(self: SyncService, *args: Any, **kwargs: Any) -> ChangesAnswer:
        answer = changes(self, *args, **kwargs)
        if taken.is_set() and not (answer.changes or answer.reset or answer.more):
            waiting.set()
        return answer

    with (
        mock.patch.object(sync_app, "parse_wait", observed_wait),
        mock.patch.object(SyncService, "changes", observed_changes),
    ):
        yield waiting


async def set_within(event: threading.Event, what: str, within: float = 10.0) -> None:
    """Return once `event` is set; AssertionError naming `what` after `within` seconds."""
    if not await anyio.to_thread.run_sync(event.wait, within):
        raise AssertionError(f"still waiting after {within:g} s for {what}")
