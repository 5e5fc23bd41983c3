"""What the SQLite mirror (`server.mirror.mirror.Mirror`) and the PostgreSQL store (`server.postgres.files`) share:
reading recorded states and the change feed, idempotency records, callers' syncs, pruning old versions and the
change notices. It works through `self._db` (a `server.mirror.sql.SqlConnection`) under `self.lock`; each store
keeps its own way of holding files and counting revisions.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Literal

from server.mirror import queries as q
from server.mirror.feed import ChangeNotices
from server.mirror.history import MirrorHistory, Retention, newest_stamp, prune_history
from server.mirror.sql import SqlConnection
from server.mirror.state import (
    CallerSync,
    FileState,
    IdempotencyRecord,
    idempotency_key_digest,
    iso,
    listing,
    record_sync,
    state_of,
    sync_callers,
)

log = logging.getLogger(__name__)

PRUNE_SECONDS = 3600.0  # versions are pruned at most this often per store


class StateRecords:
    """The records part of a file store; the subclass sets the attributes below and defines `reconcile_all`."""

    _db: SqlConnection
    lock: threading.RLock
    clock: Callable[[], datetime]
    retention: Retention
    history: MirrorHistory

    def __init__(self, on_change: Callable[[], None] | None) -> None:
        self._notices = ChangeNotices(on_change)
        self._pruned_at = 0.0
        self._prune_waits = False  # the last prune was skipped: the clock read earlier than the last change

    def reconcile_all(self) -> builtins.list[FileState]:
        raise NotImplementedError

    def state(self, path: str) -> FileState | None:
        """The recorded state of `path` (tombstones included), without looking at the disk."""
        with self.lock:
            rows = self._db.execute(*q.state_of_path(path)).fetchall()
        return state_of(rows[0]) if rows else None

    def states(self, paths: list[str]) -> dict[str, FileState]:
        """Recorded states of several paths at once (for labelling search hits)."""
        if not paths:
            return {}
        with self.lock:
            rows = self._db.execute(*q.states_of_paths(paths)).fetchall()
        return {s.path: s for s in map(state_of, rows)}

    def list(
        self, prefix: str = "", date_from: str | None = None, date_to: str | None = None
    ) -> builtins.list[FileState]:
        """Live files sorted by path, after recording changes made on disk. `prefix` is a plain string prefix
        of the path; with a date bound, only daily logs (`memory/**/YYYY-MM-DD.md`) in the range are listed."""
        return listing(self.reconcile_all(), prefix, date_from, date_to)

    def changes_since(self, revision: int, limit: int = 1000) -> builtins.list[FileState]:
        """Paths changed after `revision` (deletions as tombstones), oldest change first."""
        with self.lock:
            rows = self._db.execute(*q.changes_after(revision, limit)).fetchall()
        return [state_of(r) for r in rows]

    def record_sync(self, caller: str, kind: Literal["pull", "push"], revision: int) -> None:
        """Remember that `caller` pulled or pushed up to `revision` now (shown by `memory_status`)."""
        with self.lock, self._db:
            record_sync(self._db, caller, kind, revision, iso(self.clock()))

    def sync_callers(self) -> builtins.list[CallerSync]:
        with self.lock:
            return sync_callers(self._db)

    def recall(self, caller: str, key: str) -> IdempotencyRecord | None:
        with self.lock:
            rows = self._db.execute(*q.recall(caller, idempotency_key_digest(key))).fetchall()
        return IdempotencyRecord(caller, key, str(rows[0][0]), str(rows[0][1])) if rows else None

    def remember(self, record: IdempotencyRecord) -> None:
        """Store or overwrite a record on its own (the service updates `indexed` after indexing)."""
        with self.lock, self._db:
            self._remember(record)

    def _remember(self, record: IdempotencyRecord | None) -> None:
        if record is None:
            return
        for statement in q.remember_record(record, self.clock()):
            self._db.execute(*statement)

    def holding_changes(self) -> contextlib.AbstractContextManager[None]:
        """Hold this thread's change notices until the block ends, then send one (`server.mirror.feed`)."""
        return self._notices.holding()

    def _changed(self) -> None:
        self._notices.changed()

    def _prune_versions(self) -> None:
        """Drop old versions at most every PRUNE_SECONDS (call inside a transaction), reckoning with the clock's
        time, but never a later one than the history vouches for (`MirrorHistory.vouched_now`: a clock set ahead
        cannot age versions). Not at all while the clock reads earlier than the last recorded change (it was set
        back: versions written since would look old once it is right again, were their times not kept from going
        backwards); that is logged once."""
        now = time.monotonic()
        if self._pruned_at and now - self._pruned_at < PRUNE_SECONDS:
            return
        self._pruned_at = now
        clock, newest = self.clock(), newest_stamp(self._db)
        if newest is not None and iso(clock) < newest:
            if not self._prune_waits:
                log.warning(
                    "mirror: the clock reads %s, earlier than the last recorded change (%s); old versions are kept"
                    " until it passes that",
                    iso(clock),
                    newest,
                )
            self._prune_waits = True
            return
        self._prune_waits = False
        vouched = self.history.vouched_now()
        versions, gone = prune_history(self._db, self.retention, min(clock, vouched) if vouched is not None else clock)
        if gone or versions:
            log.info("mirror: forgot %d old versions of files, %d contents", versions, gone)
