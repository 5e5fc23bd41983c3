"""Noticing edits to the memory files: watchdog events, crossed into anyio and debounced.

The project folder is watched alone (its `MEMORY.md`, `memory.md` and the memory folders coming and going), and each
memory folder (`memory/` and the server's extra folders) recursively while it is a real folder (`refresh` adds or
drops those watches). Events only wake the syncer,
which rescans: a burst of saves becomes one scan, at most `MAX_DELAY` after its first event.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

import anyio
import anyio.from_thread
import anyio.lowlevel
from watchdog.events import (
    EVENT_TYPE_CLOSED,
    EVENT_TYPE_CREATED,
    EVENT_TYPE_DELETED,
    EVENT_TYPE_MODIFIED,
    EVENT_TYPE_MOVED,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver, ObservedWatch

from client_proxy.sync.scope import ROOT_FILES, memory_folders

log = logging.getLogger(__name__)

QUIET: Final = 0.2  # seconds without events before a burst counts as over
MAX_DELAY: Final = 1.0  # seconds after a burst's first event, however long it goes on
# Reading a file (our own scans do) is an event too: only changes wake the syncer. A folder's "modified" only
# repeats what the events of its entries say.
_FILE_CHANGES: Final = frozenset(
    {EVENT_TYPE_CREATED, EVENT_TYPE_MODIFIED, EVENT_TYPE_CLOSED, EVENT_TYPE_DELETED, EVENT_TYPE_MOVED}
)
_FOLDER_CHANGES: Final = frozenset({EVENT_TYPE_CREATED, EVENT_TYPE_DELETED, EVENT_TYPE_MOVED})


class Wakeup:
    """A debounced wake-up: `poke` from any thread, `await wait(timeout)` on the event loop it was made on."""

    def __init__(self, *, quiet: float = QUIET, max_delay: float = MAX_DELAY) -> None:
        self._quiet = quiet
        self._max_delay = max_delay
        self._token = anyio.lowlevel.current_token()
        self._loop_thread = threading.get_ident()
        self._lock = threading.Lock()
        self._event = anyio.Event()
        self._first: float | None = None
        self._last = 0.0
        self._due: float | None = None  # wake no later than this (`poke_in`)
        self._urgent = False
        self._hurry = anyio.Event()  # an urgent poke came while `wait` waits out a burst's quiet time

    @classmethod
    def debounced(cls, quiet: float) -> Wakeup:
        """A wake-up that waits `quiet` seconds without events (`watch_debounce_ms`); a burst that goes on is
        still scanned after at most MAX_DELAY, or five times `quiet` when that is longer."""
        return cls(quiet=quiet, max_delay=max(MAX_DELAY, 5 * quiet))

    def poke(self, *, urgent: bool = False) -> None:
        """Note a change (`urgent`: scan now, no debounce); safe from any thread."""
        self._note(urgent=urgent)

    def poke_in(self, seconds: float) -> None:
        """Wake `seconds` from now at the latest, however long a burst of events goes on (a file that may be half
        saved is looked at again once it has settled). Call it on the event loop, before `wait`."""
        self._note(due=seconds)

    def _note(self, *, urgent: bool = False, due: float | None = None) -> None:
        now = time.monotonic()
        with self._lock:
            idle = self._first is None and self._due is None
            if due is None:  # an event
                self._first = now if self._first is None else self._first
                self._last = now
                self._urgent = self._urgent or urgent
            else:
                self._due = now + due if self._due is None else min(now + due, self._due)
        if not idle and not urgent:
            return  # the loop was already woken for this burst
        if threading.get_ident() == self._loop_thread:
            self._set()
            return
        with contextlib.suppress(RuntimeError):  # the event loop is gone: nobody waits any more
            anyio.from_thread.run_sync(self._set, token=self._token)

    def _set(self) -> None:
        with self._lock:
            pending, urgent = self._first is not None or self._due is not None, self._urgent
        if not pending:
            return  # a poke from another thread that arrives after `wait` has already taken its burst
        self._event.set()
        if urgent:
            self._hurry.set()

    async def wait(self, timeout: float) -> bool:
        """True once pokes have gone quiet (or an urgent one came, or the time asked by `poke_in`); False after
        `timeout` seconds without any."""
        with anyio.move_on_after(timeout):
            await self._event.wait()
        if not self._event.is_set():
            return False
        while True:
            with self._lock:
                deadlines = [] if self._due is None else [self._due]
                if self._first is not None:
                    quiet_end = min(self._last + self._quiet, self._first + self._max_delay)
                    deadlines.append(self._first if self._urgent else quiet_end)
                remaining = min(deadlines) - time.monotonic()
                if remaining <= 0:
                    self._first, self._due, self._urgent, self._event = None, None, False, anyio.Event()
                    return True
                self._hurry = anyio.Event()
            with anyio.move_on_after(remaining):
                await self._hurry.wait()


class _Handler(FileSystemEventHandler):
    def __init__(self, root: Path, wakeup: Wakeup, *, top: bool) -> None:
        self._root = root
        self._wakeup = wakeup
        self._top = top

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type not in (_FOLDER_CHANGES if event.is_directory else _FILE_CHANGES):
            return
        paths = [event.src_path, event.dest_path] if event.dest_path else [event.src_path]
        if any(self._relevant(path) for path in paths):
            self._wakeup.poke()

    def _relevant(self, path: str | bytes) -> bool:
        name = Path(path.decode("utf-8", "surrogateescape") if isinstance(path, bytes) else path).name
        if self._top:
            return name in ROOT_FILES or name in memory_folders()
        return not name.startswith(".")  # our own temporary files are hidden


class Watcher:
    """The watchdog observer over one project folder; `refresh` follows the memory folders appearing, vanishing,
    reappearing (and the extra ones the server announces)."""

    def __init__(self, project: Path, wakeup: Wakeup, observer: Callable[[], BaseObserver] = Observer) -> None:
        self._project = project
        self._wakeup = wakeup
        self._observer = observer()
        self._watches: dict[str, ObservedWatch] = {}  # memory folder -> its recursive watch

    def start(self) -> None:
        """Start watching (blocking: call in a worker thread)."""
        self._observer.schedule(_Handler(self._project, self._wakeup, top=True), str(self._project), recursive=False)
        self._observer.start()
        self.refresh()

    def refresh(self) -> None:
        """Watch each memory folder recursively while it is a real folder (never through a symlink); blocking."""
        folders = memory_folders()
        for name in dict.fromkeys((*folders, *self._watches)):
            folder = self._project / name
            real = name in folders and folder.is_dir() and not folder.is_symlink()
            watch = self._watches.get(name)
            if real and watch is None:
                try:
                    handler = _Handler(folder, self._wakeup, top=False)
                    self._watches[name] = self._observer.schedule(handler, str(folder), recursive=True)
                except OSError as exc:  # e.g. the inotify watch limit: the periodic rescan still finds every change
                    log.warning("sync: cannot watch %s (%s); changes are picked up by the periodic rescan", folder, exc)
                    continue
                self._wakeup.poke(urgent=True)  # whatever was written before the watch began
            elif not real and watch is not None:
                with contextlib.suppress(KeyError, OSError):  # the folder is gone and its watch with it
                    self._observer.unschedule(watch)
                del self._watches[name]

    def stop(self) -> None:
        """Stop the observer thread and wait for it (blocking)."""
        self._observer.stop()
        if self._observer.is_alive():
            self._observer.join(timeout=5)
