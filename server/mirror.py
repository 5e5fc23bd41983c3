"""The server's copy of one index's markdown files, and the record of who changed what (`state.sqlite3`).

Layout under `<data>/indexes/<name>/`: `files/` holds `MEMORY.md`, `memory.md` and `memory/**/*.md`, and the
laptops' session transcripts under `sessions/<caller>/` (the folder the engine indexes); `state.sqlite3` (see
`server.mirror_state`) holds, per path, the content hash, the revision (one counter per index), a tombstone after
a delete, and who changed it when, plus idempotency records, past versions (merge bases for sync; none for
transcripts, which are never merged) and each caller's last sync. The state cannot be rebuilt from the files (it is
the sync history), unlike the engine's `index.sqlite3`.

Every file operation walks the path one folder at a time through directory file descriptors opened with
`O_NOFOLLOW`, so a symbolic link planted anywhere inside `files/` is refused, never followed, even if it appears
between a check and a use. Writes go to a temporary file in the same folder, are fsynced and renamed over the
target. One lock per mirror serialises writes and state changes. A file edited on disk behind the mirror's back
is noticed on the next read or listing (size, mtime, then hash) and recorded as changed by `"(disk)"`.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import hashlib
import logging
import os
import secrets
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import apsw

from channel.names import find_collision
from server.errors import ConflictError, UnsafePathError
from server.index.errors import EngineError, InvalidArgumentError
from server.index.scan import DEFAULT_MAX_FILE_BYTES, day_of
from server.memory_text import count_lines_of_bytes
from server.mirror_state import (
    STATE_COLUMNS,
    STATE_SCHEMA_VERSION,
    CallerSync,
    FileState,
    IdempotencyRecord,
    idempotency_key_digest,
    iso,
    load_version,
    migrate_state,
    prune_versions,
    record_sync,
    sha256_hex,
    state_of,
    store_version,
    sync_callers,
    utc_now,
)
from server.paths import SESSIONS_DIR, is_session_file, normalise_mirror_path

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

ABSENT = "absent"  # `expected_hash` meaning "the file must not exist yet"
DISK = "(disk)"  # `updated_by` of changes found on disk rather than made through the service
BUSY_TIMEOUT_MS = 10_000
IDEMPOTENCY_DAYS = 7
PRUNE_SECONDS = 3600.0  # versions are pruned at most this often per mirror
_READ_BLOCK = 1 << 20
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class MirrorFile:
    """A live file: its bytes decoded (UTF-8) and its state."""

    path: str
    text: str
    hash: str
    lines: int
    size: int
    revision: int
    updated_by: str
    updated_at: str


@dataclass(frozen=True)
class _Snapshot:
    """A file as read from disk: its bytes (None when over the size cap), and what the state records of it."""

    data: bytes | None
    digest: str
    size: int
    lines: int
    mtime_ns: int


def _read_snapshot(fd: int, mtime_ns: int, max_bytes: int) -> _Snapshot:
    hasher = hashlib.sha256()
    kept = bytearray()
    size = lines = 0
    last = b""
    while block := os.read(fd, _READ_BLOCK):
        hasher.update(block)
        size += len(block)
        if size <= max_bytes:
            kept += block
        else:
            if kept:
                lines += _newlines(bytes(kept))
                last = bytes(kept[-1:])
                kept = bytearray()
            lines += _newlines(last + block) - _newlines(last)
            last = block[-1:]
    if size <= max_bytes:
        data = bytes(kept)
        return _Snapshot(data, hasher.hexdigest(), size, count_lines_of_bytes(data), mtime_ns)
    # Line ends counted on the stream (a \r\n split over two blocks counts once); the last line may lack one.
    lines += 0 if last in (b"\n", b"\r") else 1
    return _Snapshot(None, hasher.hexdigest(), size, lines, mtime_ns)


def _newlines(data: bytes) -> int:
    return data.replace(b"\r\n", b"\n").replace(b"\r", b"\n").count(b"\n")


# the mirror --------------------------------------------------------------------------------------------


class Mirror:
    """The files and state of one index. Thread-safe; every method blocks."""

    def __init__(
        self,
        directory: Path,
        *,
        clock: Callable[[], datetime] = utc_now,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        """`on_change` is called (in whatever thread made it) after every recorded change, for long-polls."""
        self.directory = directory
        self.on_change = on_change
        self._held = threading.local()  # per thread: depth of `holding_changes` blocks, a notice waiting
        self._pruned_at = 0.0
        self.files_dir = directory / "files"
        self.clock = clock
        self.max_file_bytes = max_file_bytes
        self.lock = threading.RLock()  # held across read-modify-write sequences by the service
        # Files the server holds but cannot read or send (no permission, over the size cap, not UTF-8): path -> why.
        # Kept as they are everywhere, and listed by memory_status until fixed.
        self.unreadable: dict[str, str] = {}
        self.files_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._db = apsw.Connection(str(directory / "state.sqlite3"))
        except apsw.Error as exc:
            raise EngineError(f"the mirror state of {directory.name!r} cannot be opened") from exc
        try:
            self._db.set_busy_timeout(BUSY_TIMEOUT_MS)
            self._db.execute("PRAGMA journal_mode=WAL").fetchall()
            self._db.execute("PRAGMA synchronous=FULL")  # the state is not rebuildable: durable commits
            migrate_state(self._db)
        except BaseException as exc:
            self._db.close()
            if isinstance(exc, apsw.Error):
                raise EngineError(f"the mirror state of {directory.name!r} cannot be opened") from exc
            raise

    def close(self) -> None:
        with self.lock:
            self._db.close()

    # reading -------------------------------------------------------------------------------------------

    def read(self, path: str) -> MirrorFile | None:
        """The live file at `path` (None when there is none); a change made on disk is recorded first.
        Refuses symbolic links, non-files, files over the size cap and text that is not UTF-8."""
        path = normalise_mirror_path(path)
        with self.lock:
            snapshot = self._snapshot(path)
            state = self._reconcile(path, snapshot)
        if snapshot is None or state is None or state.hash is None:
            self.unreadable.pop(path, None)
            return None
        data = snapshot.data
        try:
            if data is None:
                raise InvalidArgumentError(f"{path} is larger than {self.max_file_bytes} bytes and cannot be read here")
            if b"\x00" in data:
                raise InvalidArgumentError(f"{path} is not text (it contains NUL bytes)")
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidArgumentError(f"{path} is not UTF-8 text") from None
        except InvalidArgumentError as exc:
            self.unreadable[path] = str(exc)
            raise
        self.unreadable.pop(path, None)
        return MirrorFile(
            path, text, state.hash, state.lines, state.size, state.revision, state.updated_by, state.updated_at
        )

    def state(self, path: str) -> FileState | None:
        """The recorded state of `path` (tombstones included), without looking at the disk."""
        with self.lock:
            rows = self._db.execute(f"SELECT {STATE_COLUMNS} FROM files WHERE path = ?", (path,)).fetchall()
        return state_of(rows[0]) if rows else None

    def states(self, paths: list[str]) -> dict[str, FileState]:
        """Recorded states of several paths at once (for labelling search hits)."""
        if not paths:
            return {}
        marks = ", ".join("?" for _ in paths)
        with self.lock:
            rows = self._db.execute(f"SELECT {STATE_COLUMNS} FROM files WHERE path IN ({marks})", paths).fetchall()
        return {s.path: s for s in map(state_of, rows)}

    def list(
        self, prefix: str = "", date_from: str | None = None, date_to: str | None = None
    ) -> builtins.list[FileState]:
        """Live files sorted by path, after recording changes made on disk. `prefix` is a plain string prefix
        of the path; with a date bound, only daily logs (`memory/**/YYYY-MM-DD.md`) in the range are listed."""
        files = [s for s in self.reconcile_all() if s.path.startswith(prefix)]
        if date_from or date_to:
            low, high = date_from or "0000-01-01", date_to or "9999-12-31"
            files = [s for s in files if (day := day_of(s.path)) is not None and low <= day <= high]
        return files

    def reconcile_all(self) -> builtins.list[FileState]:
        """Walk `files/`, record every change made on disk (new, edited, vanished files) as by `"(disk)"`, and
        return the live files sorted by path. Files whose size and mtime are unchanged are not re-read."""
        with self.lock:
            known = {
                str(path): (digest, int(size), int(mtime))
                for path, digest, size, mtime in self._db.execute(
                    "SELECT path, hash, size, mtime_ns FROM files WHERE hash IS NOT NULL"
                )
            }
            seen: set[str] = set()
            for path, info in self._walk():
                seen.add(path)
                old = known.get(path)
                if old is not None and (old[1], old[2]) == (info.st_size, info.st_mtime_ns):
                    continue
                self._reconcile_readable(path)
            for path in sorted(set(known) - seen):
                self._reconcile_readable(path)
            rows = self._db.execute(
                f"SELECT {STATE_COLUMNS} FROM files WHERE hash IS NOT NULL ORDER BY path"
            ).fetchall()
        return [state_of(r) for r in rows]

    def changes_since(self, revision: int, limit: int = 1000) -> builtins.list[FileState]:
        """Paths changed after `revision` (deletions as tombstones), oldest change first."""
        with self.lock:
            rows = self._db.execute(
                f"SELECT {STATE_COLUMNS} FROM files WHERE revision > ? ORDER BY revision LIMIT ?",
                (revision, limit),
            ).fetchall()
        return [state_of(r) for r in rows]

    def version_text(self, digest: str) -> str | None:
        """The text of a version this mirror has held (a merge base), or None when it is not known any more."""
        with self.lock:
            data = load_version(self._db, digest)
            if data is None:
                current = [str(p) for (p,) in self._db.execute("SELECT path FROM files WHERE hash = ?", (digest,))]
                snapshot = self._snapshot(current[0], quiet=True) if current else None
                data = snapshot.data if snapshot is not None and snapshot.digest == digest else None
        if data is None:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return None

    def record_sync(self, caller: str, kind: Literal["pull", "push"], revision: int) -> None:
        """Remember that `caller` pulled or pushed up to `revision` now (shown by `memory_status`)."""
        with self.lock, self._db:
            record_sync(self._db, caller, kind, revision, iso(self.clock()))

    def sync_callers(self) -> builtins.list[CallerSync]:
        with self.lock:
            return sync_callers(self._db)

    def revision(self) -> int:
        """The index's current revision: the last change's number (0 when nothing ever changed)."""
        with self.lock:
            return int(self._db.execute("SELECT value FROM meta WHERE key = 'revision'").fetchall()[0][0])  # type: ignore[arg-type]

    # writing -------------------------------------------------------------------------------------------

    def write(
        self,
        path: str,
        text: str,
        *,
        caller: str,
        expected_hash: str | None = None,
        record: IdempotencyRecord | None = None,
    ) -> FileState:
        """Replace the file at `path` with `text` atomically. `expected_hash`: None writes whatever is there,
        ABSENT requires that no file exists, a hash requires the current file to have it (else ConflictError,
        nothing changed). `record` is stored in the same transaction as the file's new state."""
        path = normalise_mirror_path(path)
        data = _encode(text, path)
        if len(data) > self.max_file_bytes:
            raise InvalidArgumentError(f"the file would be larger than {self.max_file_bytes} bytes")
        with self.lock:
            current = self._current(path)
            check_expected(path, current.hash if current else None, expected_hash)
            if current is None:
                self._refuse_collision(path)
            digest = sha256_hex(data)
            if current is not None and current.hash == digest:
                with self._db:
                    self._remember(record)
                return current
            with self._dir(path, create=True) as parent:
                name = path.rsplit("/", 1)[-1]
                old = _lstat(parent, name, path)
                floor = old.st_mtime_ns + 1 if old is not None else 0
                tmp = f".{name}.{secrets.token_hex(6)}.tmp"
                fd = os.open(tmp, _NEW_FILE_FLAGS, 0o644, dir_fd=parent)
                try:
                    try:
                        _write_all(fd, data)
                        # A later mtime than the old file's even within one clock tick, so the engine's
                        # size+mtime check never mistakes a same-size rewrite for an unchanged file.
                        now = max(_now_ns(), floor)
                        os.utime(fd, ns=(now, now))
                        os.fsync(fd)
                        mtime_ns = os.fstat(fd).st_mtime_ns
                    finally:
                        os.close(fd)
                    with self._db:
                        state = self._record(path, digest, len(data), mtime_ns, count_lines_of_bytes(data), caller)
                        if not is_session_file(path):  # transcripts are never merged: no merge bases
                            store_version(self._db, digest, data, state.updated_at)
                        self._remember(record)
                        self._prune_versions()
                        os.rename(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
                except BaseException:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp, dir_fd=parent)
                    raise
                os.fsync(parent)
        self._changed()
        return state

    def delete(self, path: str, *, caller: str, expected_hash: str | None = None) -> FileState | None:
        """Remove the file at `path`, leaving a tombstone; returns the state it had (None when there was none).
        A given `expected_hash` must match (ConflictError otherwise)."""
        path = normalise_mirror_path(path)
        with self.lock:
            current = self._current(path)
            if current is None:
                if expected_hash not in (None, ABSENT):
                    check_expected(path, current.hash if current else None, expected_hash)
                return None
            check_expected(path, current.hash if current else None, expected_hash)
            with self._dir(path) as parent:
                name = path.rsplit("/", 1)[-1]
                with self._db:
                    self._record(path, None, 0, 0, 0, caller)
                    _lstat(parent, name, path)  # refuses a symbolic link
                    os.unlink(name, dir_fd=parent)
                os.fsync(parent)
        self._changed()
        return current

    # idempotency ---------------------------------------------------------------------------------------

    def recall(self, caller: str, key: str) -> IdempotencyRecord | None:
        with self.lock:
            rows = self._db.execute(
                "SELECT request, result FROM idempotency WHERE caller = ? AND key = ?",
                (caller, idempotency_key_digest(key)),
            ).fetchall()
        return IdempotencyRecord(caller, key, str(rows[0][0]), str(rows[0][1])) if rows else None

    def remember(self, record: IdempotencyRecord) -> None:
        """Store or overwrite a record on its own (the service updates `indexed` after indexing)."""
        with self.lock, self._db:
            self._remember(record)

    def _remember(self, record: IdempotencyRecord | None) -> None:
        if record is None:
            return
        now = self.clock()
        self._db.execute(
            "INSERT INTO idempotency(caller, key, request, result, created_at) VALUES(?, ?, ?, ?, ?)"
            " ON CONFLICT(caller, key) DO UPDATE SET result = excluded.result",
            (record.caller, idempotency_key_digest(record.key), record.request, record.result, iso(now)),
        )
        cutoff = iso(datetime.fromtimestamp(now.timestamp() - IDEMPOTENCY_DAYS * 86400, UTC))
        self._db.execute("DELETE FROM idempotency WHERE created_at < ?", (cutoff,))

    # internals -----------------------------------------------------------------------------------------

    def _refuse_collision(self, path: str) -> None:
        """InvalidArgumentError when a live file is the same file as `path` on a case-insensitive laptop disk."""
        live = (str(row[0]) for row in self._db.execute("SELECT path FROM files WHERE hash IS NOT NULL"))
        other = find_collision(path, live)
        if other is not None:
            raise InvalidArgumentError(
                f"{path} would be the same file as {other} on macOS and Windows laptops (names differing only in "
                f"case or Unicode form); use {other}, or another name"
            )

    def _reconcile_readable(self, path: str) -> None:
        """Record what is on disk at `path`; a file (or folder) that is there but cannot be read keeps its recorded
        state and is listed in `unreadable`: "cannot read" must never become "deleted" on every laptop."""
        try:
            snapshot = self._snapshot(path)
        except UnsafePathError as exc:
            if path not in self.unreadable:
                log.warning("mirror: %s cannot be read (%s); kept as it was everywhere", path, exc)
            self.unreadable[path] = str(exc)
            return
        self.unreadable.pop(path, None)
        self._reconcile(path, snapshot)

    def _current(self, path: str) -> FileState | None:
        state = self._reconcile(path, self._snapshot(path))
        return state if state is not None and state.hash is not None else None

    def _reconcile(self, path: str, snapshot: _Snapshot | None) -> FileState | None:
        """Record `snapshot` (None: no file) as the state of `path` if it differs from what is recorded."""
        rows = self._db.execute(f"SELECT {STATE_COLUMNS} FROM files WHERE path = ?", (path,)).fetchall()
        state = state_of(rows[0]) if rows else None
        digest = snapshot.digest if snapshot is not None else None
        if state is not None and state.hash == digest:
            if snapshot is not None:
                with self._db:
                    self._db.execute("UPDATE files SET mtime_ns = ? WHERE path = ?", (snapshot.mtime_ns, path))
            return state
        if snapshot is None and state is None:
            return None
        log.info("mirror: %s changed on disk", path)
        with self._db:
            if snapshot is None:
                recorded = self._record(path, None, 0, 0, 0, DISK)
            else:
                recorded = self._record(path, digest, snapshot.size, snapshot.mtime_ns, snapshot.lines, DISK)
                if snapshot.data is not None and not is_session_file(path):
                    store_version(self._db, snapshot.digest, snapshot.data, recorded.updated_at)
        self._changed()
        return recorded

    @contextlib.contextmanager
    def holding_changes(self) -> Iterator[None]:
        """Hold this thread's change notices until the block ends, then send one.

        Writers wrap a write and its indexing in this, so a woken long-poll never sees a file that is not
        yet searchable, and a push of a hundred files wakes its readers once."""
        depth = getattr(self._held, "depth", 0)
        self._held.depth = depth + 1
        try:
            yield
        finally:
            self._held.depth = depth
            if depth == 0 and getattr(self._held, "waiting", False):
                self._held.waiting = False
                self._changed()

    def _changed(self) -> None:
        if self.on_change is None:
            return
        if getattr(self._held, "depth", 0):
            self._held.waiting = True
            return
        try:
            self.on_change()
        except Exception:  # a listener's failure must never undo or fail a recorded change
            log.exception("mirror change listener failed")

    def _prune_versions(self) -> None:
        """Drop old versions at most every PRUNE_SECONDS (call inside a transaction)."""
        now = time.monotonic()
        if self._pruned_at and now - self._pruned_at < PRUNE_SECONDS:
            return
        self._pruned_at = now
        gone = prune_versions(self._db, self.clock())
        if gone:
            log.info("mirror: forgot %d old versions", gone)

    def _record(self, path: str, digest: str | None, size: int, mtime_ns: int, lines: int, by: str) -> FileState:
        """Bump the revision and store the new state of `path`; call inside a transaction."""
        revision = int(self._db.execute("SELECT value FROM meta WHERE key = 'revision'").fetchall()[0][0]) + 1  # type: ignore[arg-type]
        self._db.execute("UPDATE meta SET value = ? WHERE key = 'revision'", (str(revision),))
        at = iso(self.clock())
        self._db.execute(
            "INSERT INTO files(path, hash, size, mtime_ns, lines, revision, updated_by, updated_at)"
            " VALUES(?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(path) DO UPDATE SET hash = excluded.hash,"
            " size = excluded.size, mtime_ns = excluded.mtime_ns, lines = excluded.lines,"
            " revision = excluded.revision, updated_by = excluded.updated_by, updated_at = excluded.updated_at",
            (path, digest, size, mtime_ns, lines, revision, by, at),
        )
        return FileState(path, digest, size, lines, revision, by, at)

    def _snapshot(self, path: str, *, quiet: bool = False) -> _Snapshot | None:
        """The regular file at `path` as it is now, or None when there is none. A symbolic link or other
        non-file anywhere on the way raises UnsafePathError, or counts as no file when `quiet`. A file over the
        size cap is hashed and counted as it streams by, never held in memory."""
        try:
            with self._dir(path) as parent:
                name = path.rsplit("/", 1)[-1]
                try:
                    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=parent)
                except FileNotFoundError:
                    return None
                except OSError as exc:
                    raise _unsafe(path, exc) from None
                try:
                    info = os.fstat(fd)
                    if not stat.S_ISREG(info.st_mode):
                        raise UnsafePathError(f"{path} is not a regular file in the mirror")
                    return _read_snapshot(fd, info.st_mtime_ns, self.max_file_bytes)
                finally:
                    os.close(fd)
        except FileNotFoundError:
            return None
        except UnsafePathError:
            if quiet:
                return None
            raise

    @contextlib.contextmanager
    def _dir(self, path: str, *, create: bool = False) -> Iterator[int]:
        """A descriptor of the folder holding `path`, reached one component at a time without following links.
        FileNotFoundError when a folder is missing (and `create` is false)."""
        fd = _open_dir(str(self.files_dir), None, "the mirror folder")
        try:
            for part in path.split("/")[:-1]:
                try:
                    child = _open_dir(part, fd, path)
                except FileNotFoundError:
                    if not create:
                        raise
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o755, dir_fd=fd)
                    child = _open_dir(part, fd, path)
                os.close(fd)
                fd = child
            yield fd
        finally:
            os.close(fd)

    def _walk(self) -> Iterator[tuple[str, os.stat_result]]:
        """(path, lstat) of every regular memory file under `files/`; links and hidden names are skipped."""
        try:
            root = _open_dir(str(self.files_dir), None, "the mirror folder")
        except UnsafePathError:
            log.error("mirror folder %s is not a plain folder; listing nothing", self.files_dir)
            return
        try:
            yield from self._walk_dir(root, "")
        finally:
            os.close(root)

    def _walk_dir(self, fd: int, prefix: str) -> Iterator[tuple[str, os.stat_result]]:
        with os.scandir(fd) as entries:
            names = sorted((e.name, e.is_dir(follow_symlinks=False), e.is_file(follow_symlinks=False)) for e in entries)
        for name, is_dir, is_file in names:
            if name.startswith("."):
                continue
            relpath = f"{prefix}{name}"
            if is_dir and (prefix or name in ("memory", SESSIONS_DIR)):
                try:
                    child = _open_dir(name, fd, relpath)
                except (UnsafePathError, FileNotFoundError):
                    continue
                try:
                    yield from self._walk_dir(child, relpath + "/")
                finally:
                    os.close(child)
            elif is_file:
                try:
                    if normalise_mirror_path(relpath) != relpath:
                        continue
                    info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except (InvalidArgumentError, OSError):
                    continue
                if stat.S_ISREG(info.st_mode):
                    yield relpath, info


def _open_dir(name: str, dir_fd: int | None, shown: str) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise _unsafe(shown, exc) from None


def _unsafe(path: str, exc: OSError) -> UnsafePathError:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EISDIR, errno.ENXIO):
        return UnsafePathError(f"{path} goes through a symbolic link or a non-folder in the mirror; refused")
    return UnsafePathError(f"{path} cannot be opened in the mirror ({errno.errorcode.get(exc.errno or 0, 'error')})")


def _lstat(parent: int, name: str, path: str) -> os.stat_result | None:
    """lstat of the target; refuses anything but a regular file (a symbolic link, a folder)."""
    try:
        info = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(info.st_mode):
        raise UnsafePathError(f"{path} is a symbolic link or not a regular file in the mirror; refused")
    return info


def check_expected(path: str, actual: str | None, expected: str | None) -> None:
    """ConflictError unless `expected` (None: anything, ABSENT: no file, or a hash) matches the file's current
    hash `actual` (None: no file)."""
    if expected is None:
        return
    if expected == ABSENT:
        if actual is not None:
            raise ConflictError(f"{path} already exists (current hash {actual}); pass that hash to replace it", actual)
        return
    if actual != expected:
        shown = actual if actual is not None else f"{ABSENT!r} (the file does not exist)"
        raise ConflictError(f"{path} has changed: expected_hash does not match; the current hash is {shown}", actual)


def _encode(text: str, path: str) -> bytes:
    if "\x00" in text:
        raise InvalidArgumentError("content must not contain NUL characters")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgumentError("content is not valid Unicode text (lone surrogates)") from None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _now_ns() -> int:
    return time.time_ns()
