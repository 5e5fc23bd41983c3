"""The synced files on this laptop's disk: finding and hashing them, and changing them without ever losing an edit.

A scan walks `MEMORY.md`, `memory.md` and `memory/` without following symlinks and hashes each file, unless its
(size, mtime_ns) are those of a hash already known. Writes go to a temporary file beside the target, are fsynced,
and replace the target only if it still holds what the caller expected (or is still absent): an edit the user
saved meanwhile is never overwritten. Deletes check the same way. None of this runs on the event loop.
"""

from __future__ import annotations

import logging
import os
import secrets
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from client_proxy.errors import ProxyError
from client_proxy.sync.scope import (
    ROOT_FILES,
    UnsafePathError,
    content_problem,
    is_excluded,
    memory_folders,
    name_problem,
    safe_target,
)
from syncproto.content import NotRegularFile, open_regular, read_capped
from syncproto.wire import sha256_hex

log = logging.getLogger(__name__)

# A (size, mtime) seen less than this after the file's mtime may hide a second write in the same clock tick, so
# it is not trusted as a cache key (git's "racy" rule). Such a file is simply hashed again on the next scan.
RACY_NS: Final = 2_000_000_000
# A save in progress. A file written less than WRITING_NS ago may be half written: an in-place save truncates the
# file first, and Linux shows a long write page by page. Pushed, the part read deletes the rest on the server, and a
# merge with another laptop's edit made meanwhile keeps that deletion (its lines end up before the file's own). So
# such a file is not pushed yet but looked at again once it has settled; its time is taken after the
# read, so a write during the read counts. An empty file waits SETTLE_EMPTY_NS, since a truncated file looks like one
# emptied on purpose; if it stays empty, it is pushed then. A file written without a pause for MAX_SETTLING_NS is
# pushed as it is (the writing may never stop). The syncer's first pass pushes every file as found
# (`Reconciler.take_batch(settle=False)`).
WRITING_NS: Final = 100_000_000
SETTLE_EMPTY_NS: Final = 1_000_000_000
MAX_SETTLING_NS: Final = 10_000_000_000
MAX_DEPTH: Final = 15  # folders below memory/; the server allows 16 path parts in all


class UnsyncableError(ProxyError):
    """A local file that exists but cannot be synced (too large, binary, not UTF-8, a symlink), or that the disk
    refuses to read or write (permissions, a name too long): it is skipped, and the other files sync."""


@contextmanager
def _this_file_only(doing: Literal["read", "written"]) -> Iterator[None]:
    """The one place an OSError on one file becomes `UnsyncableError`, so that it costs that file only, never a
    whole scan, pull or push. A read's FileNotFoundError passes: it means the file is absent."""
    try:
        yield
    except OSError as exc:
        if doing == "read" and isinstance(exc, FileNotFoundError):
            raise
        raise UnsyncableError(f"cannot be {doing} ({exc.strerror or type(exc).__name__})") from None


@dataclass(frozen=True)
class LocalFile:
    """One synced file as last hashed; `stable` when its (size, mtime_ns) may serve as a cache key."""

    hash: str
    size: int
    mtime_ns: int
    stable: bool


@dataclass
class Scan:
    """What a scan found: synced files, files in scope that cannot be synced (with why), and known paths now gone."""

    files: dict[str, LocalFile] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    absent: set[str] = field(default_factory=set)


class LocalFiles:
    """The memory files of one project folder."""

    def __init__(
        self,
        project: Path,
        *,
        exclude: tuple[str, ...] = (),
        max_bytes: int,
        clock_ns: Callable[[], int] = time.time_ns,
        warn: bool = True,
    ) -> None:
        self.project = project
        self.exclude = exclude
        self.max_bytes = max_bytes
        self._clock_ns = clock_ns
        self._cache: dict[str, tuple[int, int, str]] = {}  # path -> (size, mtime_ns, hash)
        self._warned: set[tuple[str, str]] = set()
        self._warn = warn  # `memory-proxy status` lists skipped files itself

    def remember(self, rel: str, size: int, mtime_ns: int, digest: str) -> None:
        """Seed the hash cache (from the state file's stamps of clean files)."""
        self._cache[rel] = (size, mtime_ns, digest)

    def in_scope(self, rel: str) -> bool:
        """Whether `rel` is a path this folder syncs (valid name, not excluded)."""
        return name_problem(rel) is None and not is_excluded(rel, self.exclude)

    def scan(self, known: Iterable[str] = ()) -> Scan:
        """Every synced file; `known` paths (those with a base) are reported `absent` when truly gone. Raises
        OSError when the project folder itself cannot be listed."""
        found = Scan()
        for rel, reason in self._candidates(found):
            if reason is not None:
                self._skip(found, rel, reason)
                continue
            try:
                with _this_file_only("read"):
                    found.files[rel] = self._hashed(self.project / rel)
            except FileNotFoundError:
                continue  # deleted while we looked
            except UnsyncableError as exc:
                self._skip(found, rel, str(exc))
        for rel in known:
            if rel not in found.files and rel not in found.skipped and self.in_scope(rel):
                try:
                    if self.current(rel) is None:
                        found.absent.add(rel)
                except (UnsafePathError, UnsyncableError) as exc:
                    self._skip(found, rel, str(exc))
        for rel in [rel for rel in self._cache if rel not in found.files]:  # gone: a proxy running for months
            del self._cache[rel]  # kept an entry for every file ever deleted
        return found

    def _candidates(self, found: Scan) -> Iterable[tuple[str, str | None]]:
        """(path, None) for each regular file in scope, or (path, why not) for one that is in scope but unusable."""
        # The folder's own spelling of each name: on a case-insensitive disk `memory.md` would also open MEMORY.md,
        # and one file must not be synced as two. A project folder that cannot be listed (gone, unmounted) fails
        # the scan: its files must not look deleted.
        folders = memory_folders()  # memory/ and the extra folders the server announced
        entries = {entry.name: entry for entry in os.scandir(self.project) if entry.name in (*ROOT_FILES, *folders)}
        for name in ROOT_FILES:
            if name in entries and not is_excluded(name, self.exclude):
                entry = entries[name]
                yield name, None if entry.is_file(follow_symlinks=False) else _not_a_file(entry)
        for name in folders:
            folder = entries.get(name)
            if folder is not None and folder.is_symlink():
                self._skip(found, name, "is a symlink; sync never follows symlinks")
            elif folder is not None and folder.is_dir(follow_symlinks=False):
                yield from self._walk(name, depth=1)

    def _walk(self, rel_dir: str, depth: int) -> Iterable[tuple[str, str | None]]:
        try:
            entries = sorted(os.scandir(self.project / rel_dir), key=lambda entry: entry.name)
        except OSError as exc:
            log.warning("sync: cannot list %s: %s", rel_dir, exc.strerror)
            return
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}"
            if entry.name.startswith(".") or is_excluded(rel, self.exclude):
                continue
            if entry.is_symlink():
                yield rel, _not_a_file(entry)
            elif entry.is_dir(follow_symlinks=False):
                if depth < MAX_DEPTH:
                    yield from self._walk(rel, depth + 1)
            elif entry.name.endswith(".md") and entry.is_file(follow_symlinks=False):
                yield rel, name_problem(rel)

    def _skip(self, found: Scan, rel: str, reason: str) -> None:
        found.skipped[rel] = reason
        if self._warn and (rel, reason) not in self._warned:  # once per run, not at every rescan
            self._warned.add((rel, reason))
            log.warning("sync: not syncing %s: %s", rel, reason)

    def current(self, rel: str) -> str | None:
        """The hash of the file now (None: absent); `UnsafePathError` or `UnsyncableError` when it must not be
        touched."""
        try:
            with _this_file_only("read"):
                return self._hashed(safe_target(self.project, rel)).hash
        except FileNotFoundError:
            return None

    def read(self, rel: str) -> tuple[bytes, str, int] | None:
        """The file's bytes, their hash and in how many ns it stops being one that may be half saved (written less
        than WRITING_NS ago, or SETTLE_EMPTY_NS when empty; 0: it is not), checked as a push needs them; None when
        absent."""
        try:
            with _this_file_only("read"):
                data, info = self._read(safe_target(self.project, rel))
        except FileNotFoundError:
            return None
        age, settles = self.now_ns() - info.st_mtime_ns, WRITING_NS if data else SETTLE_EMPTY_NS
        return data, sha256_hex(data), settles - age if 0 <= age < settles else 0

    def now_ns(self) -> int:
        """This folder's clock (the one file times are compared with)."""
        return self._clock_ns()

    def _hashed(self, path: Path) -> LocalFile:
        info = os.lstat(path)
        rel = path.relative_to(self.project).as_posix()
        cached = self._cache.get(rel)
        if cached and cached[:2] == (info.st_size, info.st_mtime_ns) and stat.S_ISREG(info.st_mode):
            return LocalFile(cached[2], info.st_size, info.st_mtime_ns, True)
        data, info = self._read(path)
        found = LocalFile(sha256_hex(data), info.st_size, info.st_mtime_ns, self._stable(info))
        if found.stable:
            self._cache[rel] = (found.size, found.mtime_ns, found.hash)
        return found

    def _stable(self, info: os.stat_result) -> bool:
        return info.st_mtime_ns < self.now_ns() - RACY_NS

    def _read(self, path: Path) -> tuple[bytes, os.stat_result]:
        try:
            fd, info = open_regular(path)
        except NotRegularFile:
            raise UnsyncableError("is not a regular file") from None
        try:
            data = read_capped(fd, self.max_bytes)
            info = os.fstat(fd)  # after the read: a write that landed during it makes the file look just saved
        finally:
            os.close(fd)
        problem = content_problem(data, self.max_bytes)
        if problem:
            raise UnsyncableError(problem)
        return data, info

    def write(self, rel: str, data: bytes, expected: str | None) -> LocalFile | None:
        """Put `data` at `rel` atomically, only if the file still has hash `expected` (None: is still absent).
        Returns the file as written, or None when it changed meanwhile (nothing was written)."""
        with _this_file_only("written"):
            return self._write(rel, data, expected)

    def _write(self, rel: str, data: bytes, expected: str | None) -> LocalFile | None:
        safe_target(self.project, rel)  # before making any folder: never through a symlink
        self._make_parents(rel)
        target = safe_target(self.project, rel)  # again: a folder made meanwhile could be a symlink
        try:
            mode = stat.S_IMODE(os.lstat(target).st_mode)
        except FileNotFoundError:
            mode = None
        # Hidden (never synced, ignored by the watcher) and of a fixed length: any name the rules allow still fits.
        temp = target.with_name(f".sync-{secrets.token_hex(8)}.tmp")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        try:
            with os.fdopen(fd, "wb") as handle:
                if mode is not None:
                    os.fchmod(handle.fileno(), mode)
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            if self._current_or_changed(rel) != expected:
                return None
            if expected is None:
                try:
                    os.link(temp, target)  # never replaces a file that appeared in the last instant
                except FileExistsError:
                    return None
            else:
                os.replace(temp, target)
        finally:
            temp.unlink(missing_ok=True)
        _fsync_dir(target.parent)
        self._cache.pop(rel, None)
        return self._hashed(target)

    def delete(self, rel: str, expected: str) -> bool:
        """Delete `rel` only if it still has hash `expected`; True when it is gone."""
        current = self._current_or_changed(rel)
        if current is None:
            return True
        if current != expected:
            return False
        with _this_file_only("written"):
            target = safe_target(self.project, rel)
            target.unlink(missing_ok=True)
            _fsync_dir(target.parent)
        self._cache.pop(rel, None)
        return True

    def _current_or_changed(self, rel: str) -> str | None:
        try:
            return self.current(rel)
        except UnsyncableError:
            return "unsyncable"  # matches no hash: a file that cannot be read is never replaced

    def _make_parents(self, rel: str) -> None:
        folder = self.project
        for part in rel.split("/")[:-1]:
            folder = folder / part
            try:
                folder.mkdir()
            except FileExistsError:
                continue


def _not_a_file(entry: os.DirEntry[str]) -> str:
    return "is a symlink; sync never follows symlinks" if entry.is_symlink() else "is not a regular file"


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
