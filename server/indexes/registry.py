"""The registry of open indexes: each index's storage opened once on first use, kept in step with its files, and
closed with the service. Blocking and thread-safe, like the service that owns it.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from server.errors import EngineError
from server.index.migrations import RELABEL_HASH
from server.indexes.storage import Backend, FileStore, SearchIndex
from server.mirror.state import FileState

log = logging.getLogger(__name__)

# A search first indexes at most this many of the files changed behind the engine (on disk, or by another server
# on the same database); more are left to the next searches, a sync or memory_sync, so no search waits long.
AUTO_INDEX_FILES = 32
# A search looks for files changed on disk behind the service (a walk of the mirror, ~10 ms per 1,000 files) at
# most this often per index; changes made through the service are indexed before the call returns anyway.
RESCAN_SECONDS = 2.0


@dataclass
class OpenIndex:
    """One open index: the search index and the files it indexes (sync works on both through the service)."""

    index: SearchIndex
    mirror: FileStore
    # path -> (hash, why) of a file the engine skipped at that content (not UTF-8, over the cap...)
    unindexable: dict[str, tuple[str, str]] = field(default_factory=dict)
    scanned_at: float | None = None  # time.monotonic() of the last look for disk changes by a search
    pending: int = 0  # files waiting for the index at that look


@dataclass
class _Opening:
    lock: threading.Lock = field(default_factory=threading.Lock)
    users: int = 0  # calls holding or waiting for `lock`


class IndexRegistry:
    """Opens indexes through `backend`; `on_change(name)` hears of every change to an index's files."""

    def __init__(
        self, backend: Backend, on_change: Callable[[str], None], *, rescan_interval: float = RESCAN_SECONDS
    ) -> None:
        self.backend = backend
        self.on_change = on_change
        self.rescan_interval = rescan_interval
        self._lock = threading.Lock()  # guards the two dicts; never held while an index opens
        self._indexes: dict[str, OpenIndex] = {}
        self._opening: dict[str, _Opening] = {}  # name -> the lock its open holds, while anyone wants it

    def open(self, name: str, *, create: bool = True) -> OpenIndex | None:
        """The open index `name`, opened now if need be; None when it does not exist and `create` is false.
        Opening one index (a migration may wait minutes for another replica) keeps no other waiting; two opens
        of the same name open it once."""
        with self._lock:
            handle = self._indexes.get(name)
        if handle is not None:
            return handle
        with self._opening_lock(name):
            with self._lock:
                handle = self._indexes.get(name)  # opened while this call waited for the lock
            if handle is not None:
                return handle
            if not create and not self.backend.exists(name):
                return None
            index, mirror = self.backend.open(name, on_change=lambda: self._changed(name))
            try:
                if index.needs_rebuild:
                    index.start_background_rebuild()
                handle = OpenIndex(index, mirror)
            except BaseException:
                # Not registered, so closed by nobody else: the file store's listener would keep both alive.
                try:
                    index.close()
                finally:
                    mirror.close()
                raise
            with self._lock:
                self._indexes[name] = handle
            return handle

    @contextlib.contextmanager
    def _opening_lock(self, name: str) -> Iterator[None]:
        """Holds index `name`'s own opening lock; it is forgotten when no call holds or waits for it."""
        with self._lock:
            opening = self._opening.setdefault(name, _Opening())
            opening.users += 1
        try:
            with opening.lock:
                yield
        finally:
            with self._lock:
                opening.users -= 1
                if not opening.users:
                    del self._opening[name]

    def _changed(self, name: str) -> None:
        """A change to index `name`'s files, made here or (PostgreSQL) by another server: the next search looks
        for files its engine has not indexed yet, then everyone waiting hears of it."""
        handle = self._indexes.get(name)
        if handle is not None:
            handle.scanned_at = None
        self.on_change(name)

    def get(self, name: str) -> OpenIndex:
        """The open index `name`, created if it does not exist yet."""
        handle = self.open(name)
        assert handle is not None
        return handle

    def close(self) -> None:
        """Close every open index (the service waited for the calls in flight)."""
        with self._lock:
            opened, self._indexes = self._indexes, {}
        for handle in opened.values():
            handle.index.close()
            handle.mirror.close()

    # keeping the index in step with the files ----------------------------------------------------------

    def index_quietly(self, handle: OpenIndex, *, wait: bool = True, paths: builtins.list[str] | None = None) -> bool:
        """Bring the engine up to date with the mirror (only `paths`, after a write or delete through the service);
        False when that failed (logged) or, without `wait`, when another run (a sync) holds the index."""
        try:
            if wait:
                report = handle.index.index(handle.mirror.files_dir, rebuild_now=False, paths=paths)
            else:
                maybe = handle.index.index_if_idle(handle.mirror.files_dir, rebuild_now=False, paths=paths)
                if maybe is None:
                    return False
                report = maybe
        except EngineError as exc:
            log.error("indexing %s after a change failed: %s", handle.index.name, type(exc).__name__)
            return False
        self.remember_skipped(handle, report.skipped)
        handle.scanned_at = None  # the next search looks at the disk again
        return True

    def remember_skipped(self, handle: OpenIndex, skipped: builtins.list[tuple[str, str]]) -> None:
        for path, reason in skipped:
            state = handle.mirror.state(path)
            if state is not None and state.hash is not None:
                handle.unindexable[path] = (state.hash, reason)

    def unreadable(self, handle: OpenIndex) -> dict[str, str]:
        """Files held but not searchable, and why: those the mirror cannot read, and those the engine skipped at
        the content they still have."""
        out: dict[str, str] = {}
        for path, (digest, reason) in sorted(handle.unindexable.items()):
            state = handle.mirror.state(path)
            if state is not None and state.hash == digest:
                out[path] = f"{path} cannot be indexed: {reason}"
        return {**out, **handle.mirror.unreadable}

    def freshen(self, handle: OpenIndex) -> int:
        """Record disk changes, index them now when they are few; the number still waiting. Looks at the disk
        at most once per `rescan_interval` (a write through the service resets nothing: it indexes itself)."""
        now = time.monotonic()
        if handle.scanned_at is not None and now - handle.scanned_at < self.rescan_interval:
            return handle.pending
        pending = self.pending(handle, handle.mirror.reconcile_all())
        # Never wait behind a running sync: answer from the index as it is, and count the files still pending.
        # At most AUTO_INDEX_FILES of them, the first in path order (a replica catching up after a restart); named,
        # so each is read whatever its size and mtime say.
        batch = sorted(pending)[:AUTO_INDEX_FILES]
        if pending and self.index_quietly(handle, wait=False, paths=batch):
            pending = self.pending(handle, handle.mirror.reconcile_all())
        handle.scanned_at, handle.pending = now, len(pending)
        return len(pending)

    def pending(self, handle: OpenIndex, live: builtins.list[FileState], *, for_sync: bool = False) -> set[str]:
        """Paths where the mirror and the engine disagree (changed, new or removed files). A file the mirror cannot
        read (a folder or a link now) keeps its state there but is pending only while the engine still holds it:
        the engine drops it at first sight. Files the engine skipped at the content they still have, and those
        waiting to be chunked again after an upgrade (`server.index.relabel`: its own work, finishing by itself)
        are not, except `for_sync` (memory_sync tries the first again, and does the second now)."""
        indexed = handle.index.indexed_files()
        cannot_read = handle.mirror.unreadable
        out: set[str] = set()
        for state in live:
            if state.path in cannot_read:
                if state.path in indexed:
                    out.add(state.path)
                continue
            digest = indexed.get(state.path)
            if digest == state.hash:
                continue
            if not for_sync and (digest == RELABEL_HASH or handle.unindexable.get(state.path, ("",))[0] == state.hash):
                continue
            out.add(state.path)
        out.update(set(indexed) - {s.path for s in live})
        return out
