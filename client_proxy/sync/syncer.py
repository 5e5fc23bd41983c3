"""The sync loop beside the forwarder: local edits pushed, the server's changes pulled, both ways, until cancelled.

On start: one scan and a push of everything pending (the offline queue), then a pull from the stored revision.
Then two tasks: a long-poll pull loop, and a push loop woken by the watcher (or every `RESCAN` seconds, or at once
when a pull meets a locally edited file). Every change to the state and to the files happens under one lock. A
failing server never stops the proxy: local changes stay pending and both loops retry with backoff. A pulled change
the disk refuses costs that file only, and is pulled again later (`unapplied.py`).
"""

from __future__ import annotations

import functools
import logging
import math
import random
import time
from collections import Counter
from collections.abc import Callable
from typing import Final

import anyio
import anyio.lowlevel
import anyio.to_thread

from client_proxy.sync.api import (
    EXPECTED_FAILURES,
    Changes,
    PushChange,
    PushResult,
    SyncApi,
    SyncRefusedError,
    describe_failure,
)
from client_proxy.sync.apply import Reconciler
from client_proxy.sync.local_files import LocalFiles
from client_proxy.sync.plan import pending_pushes
from client_proxy.sync.retry import Retry
from client_proxy.sync.state import StateStore, SyncState, utc_stamp
from client_proxy.sync.unapplied import UnappliedRetry
from client_proxy.sync.watcher import Wakeup, Watcher
from syncproto.faults import fault_point
from syncproto.paths import memory_folders
from syncproto.progress import Progress
from syncproto.wire import MAX_PUSH_CHANGES

log = logging.getLogger(__name__)

LONG_POLL: Final = 25  # seconds a pull waits for news; below the server's 30 and every proxy's idle timeout
RESCAN: Final = 30.0  # seconds between full rescans when the watcher reports nothing (a safety net)
LOCK_RETRY: Final = 30.0  # seconds between attempts to take over a folder another proxy syncs
PUSH_GRACE: Final = 5.0  # seconds an in-flight push may still take once sync is stopping
SETTLE_MARGIN: Final = 0.005  # seconds past the moment a waiting file settles before it is looked at again


class Syncer:
    """Two-way sync of one project folder with one index, over the channel's HTTP client."""

    def __init__(
        self,
        api: SyncApi,
        files: LocalFiles,
        store: StateStore,
        *,
        server_url: str,
        wakeup: Wakeup,
        watcher: Watcher | None = None,
        rng: random.Random | None = None,
        now: Callable[[], str] = utc_stamp,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._files = files
        self._store = store
        self._server_url = server_url
        self._wakeup = wakeup
        self._watcher = watcher
        self._now = now
        self._clock = clock
        self._retry = Retry(rng)
        self._lock = anyio.Lock()
        self._pushed_once = anyio.Event()
        self._failing: str | None = None
        self._in_flight: anyio.CancelScope | None = None
        self._save_failed = False
        self._pulling: tuple[int, Progress] | None = None  # where a pull of several pages began, and its progress
        self.state: SyncState = store.fresh()
        self._settle_saves = False  # whether a push pass leaves a file saved just now (not the run's first)
        self.push_passes = 0  # completed scans-and-pushes, and pull answers applied (for the log and tests)
        self.pulls = 0
        self._reconciler = Reconciler(files, self.state, now)
        self._unapplied = UnappliedRetry(clock)
        self._replaying: int | None = None  # the pull cursor before a retry of unapplied changes moved it back

    async def run(self) -> None:
        """Sync until cancelled (once no other proxy syncs this folder); then stop the watcher, flush the state."""
        if not await anyio.to_thread.run_sync(self._store.claim):
            log.info(
                "sync: another memory-proxy is syncing %s; this one forwards only until it stops", self._files.project
            )
            while not await anyio.to_thread.run_sync(self._store.claim):
                await anyio.sleep(LOCK_RETRY)
        try:
            await self._run()
        finally:
            self._store.release()

    async def _run(self) -> None:
        self.state = await anyio.to_thread.run_sync(self._store.load)
        self.state.read_only = False  # the grant may have changed since the last run: find out again
        self._reconciler = Reconciler(self._files, self.state, self._now)
        self._unapplied = UnappliedRetry(self._clock)
        for path, entry in self.state.files.items():
            if entry.size is not None and entry.mtime_ns is not None:
                self._files.remember(path, entry.size, entry.mtime_ns, entry.base)
        known, revision = len(self.state.files), self.state.revision
        log.info("sync: started on %s (%d files known, revision %d)", self._files.project, known, revision)
        try:
            if self._watcher is not None:
                await anyio.to_thread.run_sync(self._start_watcher)
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._push_loop)
                tasks.start_soon(self._pull_loop)
                tasks.start_soon(self._until_cancelled)
        finally:
            with anyio.CancelScope(shield=True):
                if self._watcher is not None:
                    await anyio.to_thread.run_sync(self._watcher.stop)
                await anyio.to_thread.run_sync(self._save)

    def request_scan(self) -> None:
        """Scan (and push what changed) now rather than at the next watcher event or periodic rescan."""
        self._wakeup.poke(urgent=True)

    def _start_watcher(self) -> None:
        assert self._watcher is not None
        try:
            self._watcher.start()
        except OSError as exc:
            log.warning("sync: cannot watch %s (%s); rescanning every %d s instead", self._files.project, exc, RESCAN)

    async def _push_loop(self) -> None:
        while True:
            while True:
                try:
                    if self._watcher is not None:
                        await anyio.to_thread.run_sync(self._watcher.refresh)
                    await self._push_pending()
                except Exception as exc:
                    await self._failed("push", exc)
                    self._pushed_once.set()  # pulling is safe anyway: it never writes over a local edit
                    await self._retry.pause()
                else:
                    self.push_passes += 1
                    self._succeeded()
                    break
            self._pushed_once.set()
            await self._wakeup.wait(RESCAN)

    async def _pull_loop(self) -> None:
        await self._pushed_once.wait()
        wait, paging = 0, False
        while True:
            try:
                if not paging:
                    wait = await self._retry_unapplied(wait)
                since, folders = self.state.revision, memory_folders()
                answer = await self._api.changes(since, wait)
                async with self._lock:
                    dirty = await anyio.to_thread.run_sync(self._apply_changes, answer)
                self._pull_progress(since, answer)
            except Exception as exc:
                await self._failed("pull", exc)
                wait = 0
                await self._retry.pause()
                continue
            self.pulls += 1
            self._succeeded()
            if dirty or memory_folders() != folders:  # the server announced other memory folders: scan them now
                self._wakeup.poke(urgent=True)
            paging = answer.more
            wait = 0 if answer.more else LONG_POLL

    async def _retry_unapplied(self, wait: int) -> int:
        """Between complete pulls: move the cursor back to pull the changes left unapplied again, if they are due
        (see `unapplied.py`); the next pull's wait, which ends no later than when they are due."""
        async with self._lock:
            cursor = self.state.revision
            if self._unapplied.rewind(self.state):
                self._replaying = cursor
                return 0
            due_in = self._unapplied.due_in(self.state)
        return wait if due_in is None else min(wait, math.ceil(due_in))

    def _pull_progress(self, since: int, answer: Changes) -> None:
        """A pull of several pages (a first sync, a long absence) reports its progress, counted in revisions."""
        if self._pulling is None and answer.more:
            self._pulling = (since, _progress("pulling", max(answer.revision - since, 1), unit="revisions"))
        if self._pulling is not None:
            start, progress = self._pulling
            progress.advance(min(answer.next, answer.revision) - start)
            if not answer.more:
                self._pulling = None

    def _succeeded(self) -> None:
        if self._failing is not None:
            log.info("sync: working again")
            self._failing = None
        self._retry.succeeded()

    async def _failed(self, what: str, exc: Exception) -> None:
        """Record and log (once per kind of failure, not at every retry) why a pull or push failed."""
        message = describe_failure(exc, self._server_url)
        if message != self._failing:
            if isinstance(exc, EXPECTED_FAILURES):
                log.warning("sync: %s failed: %s; local changes stay pending, retrying", what, message)
            else:  # a bug here must not take the forwarder down with it
                log.error("sync: %s failed unexpectedly", what, exc_info=exc)
        self._failing = message
        async with self._lock:
            self.state.last_error = {"at": self._now(), "message": f"{what}: {message}"}
            await anyio.to_thread.run_sync(self._save)

    async def _push_pending(self) -> None:
        if self.state.read_only:
            return
        async with self._lock:
            known = list(self.state.files)
            scan = await anyio.to_thread.run_sync(self._files.scan, known)
            self._reconciler.record_stamps(scan)
            queue = pending_pushes(self.state, scan)
            counts: Counter[str] = Counter()
            progress = _progress("pushing", len(queue)) if len(queue) > MAX_PUSH_CHANGES else None
            # The run's first pass pushes every file as found: a save racing the proxy's start is rare, and holding
            # back whatever was saved just before it would delay the first sync. Later passes leave a file saved
            # just now for the next one.
            settle, self._settle_saves = self._settle_saves, True
            take_batch = functools.partial(self._reconciler.take_batch, settle=settle)
            while queue and not self.state.read_only:
                batch = await anyio.to_thread.run_sync(take_batch, queue)
                if batch:
                    await self._push_batch(batch, counts)
                if progress is not None:
                    progress.advance(progress.total - len(queue))
            if self._reconciler.look_again_ns is not None:  # a file that may be half saved: look again once settled
                self._wakeup.poke_in(self._reconciler.look_again_ns / 1e9 + SETTLE_MARGIN)
                self._reconciler.look_again_ns = None
            if counts:
                self.state.last_push_at = self._now()
                log.info("sync: pushed %d changes (%s)", counts.total(), _summary(counts))
            await anyio.to_thread.run_sync(self._save)

    async def _push_batch(self, batch: list[PushChange], counts: Counter[str]) -> None:
        # Once sent, a push is seen through to its recorded answer even when sync is being stopped (within
        # `PUSH_GRACE`): a push the server applied but this laptop never recorded would be sent again later with
        # the old base, and merged where it should simply have been applied.
        await anyio.lowlevel.checkpoint_if_cancelled()  # but none is started once stopping
        with anyio.CancelScope(shield=True) as scope:
            self._in_flight = scope
            try:
                await self._push_and_record(batch, counts)
            finally:
                self._in_flight = None
        if scope.cancelled_caught:
            log.info("sync: stopped before the server answered a push; it is checked again at the next start")

    async def _until_cancelled(self) -> None:
        """Sleep until sync stops; then give an in-flight push `PUSH_GRACE` seconds to be answered and recorded."""
        try:
            await anyio.sleep_forever()
        finally:
            if self._in_flight is not None:
                self._in_flight.deadline = anyio.current_time() + PUSH_GRACE

    async def _push_and_record(self, batch: list[PushChange], counts: Counter[str]) -> None:
        try:
            revision, results = await self._api.push(batch)
        except SyncRefusedError as exc:
            if exc.status == 403:
                self.state.read_only = True
                log.warning("sync: this device may only read index %s: local changes are not pushed", self.state.index)
                return
            if exc.status not in (400, 413):
                raise
            if len(batch) > 1:  # find the change the server cannot take; send the others
                await self._push_and_record(batch[: len(batch) // 2], counts)
                await self._push_and_record(batch[len(batch) // 2 :], counts)
                return
            refused = [PushResult(batch[0].path, "rejected", None, 0, message=str(exc))]
            await anyio.to_thread.run_sync(self._apply_results, batch, refused)
            counts["rejected"] += 1
            return
        await anyio.to_thread.run_sync(self._apply_results, batch, results)
        self.state.last_push_revision = revision
        counts.update(result.status for result in results)

    def _apply_results(self, batch: list[PushChange], results: list[PushResult]) -> None:
        fault_point("proxy.push.answered")
        for sent, result in zip(batch, results, strict=True):
            self._reconciler.apply_result(sent, result)
        self._save()

    def _apply_changes(self, answer: Changes) -> bool:
        """Apply one pull answer (blocking, under the lock); True when some local file needs pushing first."""
        if answer.reset:  # only a listing's first page says so
            log.warning("sync: the server's history restarted (restored from a backup?): checking every file again")
            self.state.reset_listed = []
            self.state.unapplied.clear()  # their revisions are of the lost history; the listing brings every path
            self._replaying = None
        resetting = self.state.reset_listed is not None
        outcomes: Counter[str] = Counter()
        for change in answer.changes:
            outcomes[self._reconciler.apply_change(change, reset=resetting)] += 1
            fault_point("proxy.pull.written")
        dropped = self._reset_listing(answer) if resetting else 0
        self.state.revision = answer.next
        self.state.last_pull_at = self._now()
        if answer.changes:
            count, summary = len(answer.changes), _summary(outcomes)
            quiet = self._replaying is not None and set(outcomes) == {"skipped"}  # a retry that brought nothing
            level = logging.DEBUG if quiet else logging.INFO
            log.log(level, "sync: pulled %d changes up to revision %d (%s)", count, answer.next, summary)
        if self._replaying is not None and answer.next >= self._replaying:
            self._replaying = None
        self._save()
        fault_point("proxy.pull.saved")
        return outcomes["dirty"] > 0 or answer.reset or dropped > 0

    def _reset_listing(self, answer: Changes) -> int:
        """Add a page of a reset listing to the paths it named; after its last, drop the bases of paths it did not
        name (so their files are pushed again) and return how many."""
        assert self.state.reset_listed is not None
        listed = {*self.state.reset_listed, *(change.path for change in answer.changes)}
        if answer.more:
            self.state.reset_listed = sorted(listed)
            return 0
        self.state.reset_listed = None
        dropped = self._reconciler.forget_unlisted(listed)
        if dropped:
            log.info("sync: %d files unknown to the restored server will be pushed again", dropped)
        return dropped

    def _save(self) -> None:
        try:
            self._store.save(self.state)
        except OSError as exc:
            if not self._save_failed:
                log.warning("sync: cannot write the state file %s: %s", self._store.path, exc.strerror)
            self._save_failed = True
        else:
            self._save_failed = False


def _progress(label: str, total: int, unit: str = "files") -> Progress:
    """Progress of a long pull or push as log lines (stderr and the log file; stdout is MCP's), one a second."""
    return Progress(total, f"sync: {label}", unit=unit, emit=log.info)


def _summary(counts: Counter[str]) -> str:
    return ", ".join(f"{count} {name}" for name, count in sorted(counts.items()))
