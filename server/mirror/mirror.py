"""The server's copy of one index's markdown files, and the record of who changed what (`state.sqlite3`).

Layout under `<data>/indexes/<name>/`: `files/` holds `MEMORY.md`, `memory.md` and `memory/**/*.md`, and the
laptops' session transcripts under `sessions/<caller>/` (the folder the engine indexes); `state.sqlite3` (see
`server.mirror.state`) holds, per path, the content hash, the revision (one counter per index), a tombstone after
a delete, and who changed it when, plus idempotency records, past versions (merge bases for sync; none for
transcripts, which are never merged) and each caller's last sync. The state cannot be rebuilt from the files (it is
the sync history), unlike the engine's `index.sqlite3`.

Files are reached without following links (`server.mirror.files`); writes go to a temporary file, fsynced and
renamed over the target. The SQL is built in `server.mirror.queries`, the change notices sent by
`server.mirror.feed`. One lock per mirror serialises writes and state changes in this process; across processes (a
backup beside the server opens its own mirror) every change holds SQLite's write lock from its start (`open_state`).
A file edited on disk behind the mirror's back is noticed on the next read or listing (size, mtime, then hash) and
recorded as by `"(disk)"`, after reading it again under that lock (`Mirror._reconcile`).
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import os
import threading
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from server.errors import InvalidArgumentError, UnsafePathError
from server.index.scan import DEFAULT_MAX_FILE_BYTES
from server.memory.text import count_lines_of_bytes
from server.mirror import queries as q
from server.mirror.files import (
    Snapshot,
    Staged,
    decoded_text,
    encoded,
    folder,
    now_ns,
    put_back,
    set_aside,
    take_snapshot,
    walk,
)
from server.mirror.history import ChangeKind, MirrorHistory, Retention, Version, change_stamp, record_change
from server.mirror.paths import normalise_mirror_path, refuse_collision
from server.mirror.records import StateRecords
from server.mirror.state import (
    ABSENT,
    STATE_SCHEMA_VERSION,
    CallerSync,
    FileState,
    IdempotencyRecord,
    MirrorFile,
    check_expected,
    has_version,
    iso,
    load_version,
    open_state,
    state_of,
    store_version,
    utc_now,
)
from syncproto.faults import fault_point
from syncproto.paths import is_session_file
from syncproto.wire import sha256_hex

__all__ = [
    "ABSENT",
    "DISK",
    "STATE_SCHEMA_VERSION",
    "CallerSync",
    "FileState",
    "IdempotencyRecord",
    "Mirror",
    "MirrorFile",
    "check_expected",
    "iso",
    "sha256_hex",
    "utc_now",
]

log = logging.getLogger(__name__)

DISK = "(disk)"  # `updated_by` of changes found on disk rather than made through the service
LEFTOVER_AGE_NS = 3600 * 10**9  # a hidden file of the mirror's own this old was left by a crash: the walk removes it


class Mirror(StateRecords):
    """The files and state of one index. Thread-safe; every method blocks."""

    def __init__(
        self,
        directory: Path,
        *,
        clock: Callable[[], datetime] = utc_now,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        on_change: Callable[[], None] | None = None,
        retention: Retention | None = None,
    ) -> None:
        """`on_change` is called (in whatever thread made it) after every recorded change, for long-polls;
        `retention`: how long the history keeps versions (`server.mirror.history`)."""
        self.retention = retention or Retention()
        self.directory = directory
        super().__init__(on_change)
        self.files_dir = directory / "files"
        self.clock = clock
        self.max_file_bytes = max_file_bytes
        self.lock = threading.RLock()  # held across read-modify-write sequences by the service
        # Files the server holds but cannot read or send (no permission, over the size cap, not UTF-8): path -> why.
        # Kept as they are everywhere, and listed by memory_status until fixed.
        self.unreadable: dict[str, str] = {}
        self.files_dir.mkdir(parents=True, exist_ok=True)
        self._db = open_state(directory)
        self.history = MirrorHistory(self._db, self.lock, self.version_text)

    def close(self) -> None:
        with self.lock:
            self._db.close()

    # reading -------------------------------------------------------------------------------------------

    def read(self, path: str) -> MirrorFile | None:
        """The live file at `path` (None when there is none); a change made on disk is recorded first.
        Refuses symbolic links, non-files, files over the size cap and text that is not UTF-8."""
        path = normalise_mirror_path(path)
        with self.lock:
            state, snapshot = self._reconcile(path, take_snapshot(self.files_dir, path, self.max_file_bytes))
        if snapshot is None or state is None or state.hash is None:
            self.unreadable.pop(path, None)
            return None
        try:
            text = decoded_text(path, snapshot.data, self.max_file_bytes)
        except InvalidArgumentError as exc:
            self.unreadable[path] = str(exc)
            raise
        self.unreadable.pop(path, None)
        return MirrorFile(
            path, text, state.hash, state.lines, state.size, state.revision, state.updated_by, state.updated_at
        )

    def reconcile_all(self) -> builtins.list[FileState]:
        """Walk `files/`, record every change made on disk (new, edited, vanished files) as by `"(disk)"`, and
        return the live files sorted by path. Files whose size and mtime are unchanged are not re-read."""
        with self.lock:
            known = {
                str(path): (digest, int(size), int(mtime))
                for path, digest, size, mtime in self._db.execute(*q.known_files())
            }
            seen: set[str] = set()
            for path, info in walk(self.files_dir, sweep_before_ns=now_ns() - LEFTOVER_AGE_NS):
                seen.add(path)
                old = known.get(path)
                if old is not None and (old[1], old[2]) == (info.st_size, info.st_mtime_ns):
                    continue
                self._reconcile_readable(path)
            for path in sorted(set(known) - seen):
                self._reconcile_readable(path)
            rows = self._db.execute(*q.live_states()).fetchall()
        return [state_of(r) for r in rows]

    def version_text(self, digest: str) -> str | None:
        """The text of a version this mirror has held (a merge base), or None when it is not known any more."""
        with self.lock:
            data = load_version(self._db, digest)
            if data is None:
                current = [str(p) for (p,) in self._db.execute(*q.paths_with_hash(digest))]
                snapshot = (
                    take_snapshot(self.files_dir, current[0], self.max_file_bytes, quiet=True) if current else None
                )
                data = snapshot.data if snapshot is not None and snapshot.digest == digest else None
        if data is None:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return None

    def revision(self) -> int:
        """The index's current revision: the last change's number (0 when nothing ever changed)."""
        with self.lock:
            return self._revision()

    # writing -------------------------------------------------------------------------------------------

    def write(
        self,
        path: str,
        text: str,
        *,
        caller: str,
        expected_hash: str | None = None,
        record: IdempotencyRecord | None = None,
        change: ChangeKind = "write",
    ) -> FileState:
        """Replace the file at `path` with `text` atomically. `expected_hash`: None writes whatever is there,
        ABSENT requires that no file exists, a hash requires the current file to have it (else ConflictError,
        nothing changed). `record` is stored in the same transaction as the file's new state, and so is the new
        version in the history, marked as `change`."""
        path = normalise_mirror_path(path)
        data = encoded(text)
        if len(data) > self.max_file_bytes:
            raise InvalidArgumentError(f"the file would be larger than {self.max_file_bytes} bytes")
        with self.lock:
            current, snapshot = self._current(path)
            check_expected(path, current.hash if current else None, expected_hash)
            if current is None:
                refuse_collision(path, (str(row[0]) for row in self._db.execute(*q.live_paths())))
            digest = sha256_hex(data)
            if current is not None and current.hash == digest:
                if record is not None:
                    with self._db:
                        self._remember(record)
                return current
            replaced = self._unkept_bytes(path, current, snapshot)
            with folder(self.files_dir, path, create=True) as parent:
                staged = Staged(parent, path.rsplit("/", 1)[-1], path, data)
                fault_point("mirror.write.staged")
                try:
                    with self._db:
                        self._keep(current, replaced)
                        lines = count_lines_of_bytes(data)
                        state = self._record(path, digest, len(data), staged.mtime_ns, lines, caller, change)
                        fault_point("mirror.write.recorded")
                        if not is_session_file(path):  # transcripts are never merged: no merge bases
                            store_version(self._db, digest, data, state.updated_at)
                        self._remember(record)
                        self._prune_versions()
                        # Inside the transaction, so a crash before the commit is a change on disk, seen later; a
                        # commit that fails (disk full) puts the old file back: nothing was stored, as the error says.
                        staged.publish()
                        fault_point("mirror.write.published")
                except BaseException:
                    staged.undo()
                    raise
                staged.settle()
                fault_point("mirror.write.committed")
                os.fsync(parent)
            self.unreadable.pop(path, None)
        self._changed()
        return state

    def delete(
        self, path: str, *, caller: str, expected_hash: str | None = None, change: ChangeKind = "delete"
    ) -> FileState | None:
        """Remove the file at `path`, leaving a tombstone (and a version of the history marked as `change`);
        returns the state it had (None when there was none). A given `expected_hash` must match (else ConflictError)."""
        path = normalise_mirror_path(path)
        with self.lock:
            current, snapshot = self._current(path)
            if current is None:
                if expected_hash not in (None, ABSENT):
                    check_expected(path, current.hash if current else None, expected_hash)
                return None
            check_expected(path, current.hash if current else None, expected_hash)
            deleted = self._unkept_bytes(path, current, snapshot)
            with folder(self.files_dir, path) as parent:
                name = path.rsplit("/", 1)[-1]
                aside: str | None = None
                try:
                    with self._db:
                        self._keep(current, deleted)
                        self._record(path, None, 0, 0, 0, caller, change)
                        aside = set_aside(parent, name, path)  # refuses a symbolic link
                        fault_point("mirror.delete.unlinked")
                except BaseException:
                    if aside is not None:  # the deletion was not recorded: the file stays
                        put_back(parent, aside, name)
                    raise
                if aside is not None:
                    with contextlib.suppress(OSError):
                        os.unlink(aside, dir_fd=parent)
                os.fsync(parent)
            self.unreadable.pop(path, None)
        self._changed()
        return current

    # idempotency ---------------------------------------------------------------------------------------

    # internals -----------------------------------------------------------------------------------------

    def _reconcile_readable(self, path: str) -> None:
        """Record what is on disk at `path`; a file (or folder) that is there but cannot be read keeps its recorded
        state and is listed in `unreadable`: "cannot read" must never become "deleted" on every laptop."""
        try:
            self._reconcile(path, take_snapshot(self.files_dir, path, self.max_file_bytes))
        except UnsafePathError as exc:
            if path not in self.unreadable:
                log.warning("mirror: %s cannot be read (%s); kept as it was everywhere", path, exc)
            self.unreadable[path] = str(exc)
            return
        self.unreadable.pop(path, None)

    def _current(self, path: str) -> tuple[FileState | None, Snapshot | None]:
        """The live file at `path` as recorded after looking at the disk (None: none), and what was read of it."""
        state, snapshot = self._reconcile(path, take_snapshot(self.files_dir, path, self.max_file_bytes))
        return (state, snapshot) if state is not None and state.hash is not None else (None, None)

    def _unkept_bytes(self, path: str, current: FileState | None, snapshot: Snapshot | None) -> bytes | None:
        """The bytes of the file a change is about to replace or delete when no version keeps them yet (None: there
        is nothing to keep), so that the change can be undone. InvalidArgumentError when they cannot be kept: a
        file over the size cap is never held, so replacing or deleting it would lose it for good."""
        if current is None or current.hash is None or is_session_file(path) or has_version(self._db, current.hash):
            return None
        if snapshot is None or snapshot.data is None or snapshot.digest != current.hash:
            raise InvalidArgumentError(
                f"{path} is larger than {self.max_file_bytes} bytes and its text is not kept, so this could not be"
                " undone; shorten it or move it away on the server's disk first"
            )
        return snapshot.data

    def _keep(self, current: FileState | None, data: bytes | None) -> None:
        """Store `data`, the bytes of `current` (`_unkept_bytes`), as its version; call inside the transaction."""
        if current is not None and current.hash is not None and data is not None:
            store_version(self._db, current.hash, data, current.updated_at)

    def _reconcile(self, path: str, snapshot: Snapshot | None) -> tuple[FileState | None, Snapshot | None]:
        """Record what is on disk at `path` as its state if it differs from what is recorded (as by `"(disk)"`);
        the state then and what was read of the file (None: no file). `snapshot` is what was read of it before."""
        state = self._recorded(path)
        if not _differ(state, snapshot):
            self._touch(path, snapshot)
            return state, snapshot
        # The row was read after the file: another process (the server, beside a backup) may have written the file
        # in between, so that the row is newer than what was read. Every write holds the write lock from before it
        # renames its file into place until its row is committed: read under that lock, file and row agree unless
        # the file was changed behind the mirror.
        with self._db:  # BEGIN IMMEDIATE (`open_state`)
            state = self._recorded(path)
            snapshot = take_snapshot(self.files_dir, path, self.max_file_bytes)
            if not _differ(state, snapshot):
                self._touch(path, snapshot)
                return state, snapshot
            log.info("mirror: %s changed on disk", path)
            if snapshot is None:
                recorded = self._record(path, None, 0, 0, 0, DISK, "disk")
            else:
                recorded = self._record(
                    path, snapshot.digest, snapshot.size, snapshot.mtime_ns, snapshot.lines, DISK, "disk"
                )
                if snapshot.data is not None and not is_session_file(path):
                    store_version(self._db, snapshot.digest, snapshot.data, recorded.updated_at)
        self._changed()
        return recorded, snapshot

    def _recorded(self, path: str) -> FileState | None:
        rows = self._db.execute(*q.state_of_path(path)).fetchall()
        return state_of(rows[0]) if rows else None

    def _touch(self, path: str, snapshot: Snapshot | None) -> None:
        """Record the mtime of a file found as recorded (unless another process changed the row since)."""
        if snapshot is not None:
            with self._db:
                self._db.execute(*q.touch_file(path, snapshot.digest, snapshot.mtime_ns))

    def _revision(self) -> int:
        return int(self._db.execute(*q.current_revision()).fetchall()[0][0])

    def _record(
        self, path: str, digest: str | None, size: int, mtime_ns: int, lines: int, by: str, change: ChangeKind
    ) -> FileState:
        """Bump the revision, store the new state of `path` and its version; call inside a transaction."""
        revision = self._revision() + 1
        self._db.execute(*q.set_revision(revision))
        at = change_stamp(self._db, self.clock())  # never before the last change: the clock may be set back
        self._db.execute(*q.upsert_file(path, digest, size, mtime_ns, lines, revision, by, at))
        if not is_session_file(path):
            record_change(self._db, Version(path, revision, digest, size, change, by, at))
        return FileState(path, digest, size, lines, revision, by, at)


def _differ(state: FileState | None, snapshot: Snapshot | None) -> bool:
    """Whether what was read on disk (None: no file) is not what is recorded (None: nothing, or a tombstone)."""
    return (state.hash if state is not None else None) != (snapshot.digest if snapshot is not None else None)
