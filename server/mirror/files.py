"""The mirror's files on disk, reached safely: every path is walked one folder at a time through directory
descriptors opened with `O_NOFOLLOW`, so a symbolic link planted anywhere inside `files/` is refused, never
followed, even if it appears between a check and a use. A file is read as a snapshot (bytes, hash, size, lines;
a file over the cap is hashed as it streams by, never held), and written to a temporary file beside the target,
fsynced, for the caller to rename over it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import re
import secrets
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from server.errors import InvalidArgumentError, UnsafePathError
from server.memory.text import count_lines_of_bytes, utf8
from server.mirror.paths import normalise_mirror_path
from syncproto.content import NotRegularFile, open_regular
from syncproto.paths import SESSIONS_DIR, memory_folders

log = logging.getLogger(__name__)

_READ_BLOCK = 1 << 20
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_HIDDEN_NAME = re.compile(r"\.[0-9a-f]{16}\.tmp")  # what `_hidden_name` makes, and nothing else


@dataclass(frozen=True)
class Snapshot:
    """A file as read from disk: its bytes (None when over the size cap), and what the state records of it."""

    data: bytes | None
    digest: str
    size: int
    lines: int
    mtime_ns: int


def _read_snapshot(fd: int, mtime_ns: int, max_bytes: int) -> Snapshot:
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
        return Snapshot(data, hasher.hexdigest(), size, count_lines_of_bytes(data), mtime_ns)
    # Line ends counted on the stream (a \r\n split over two blocks counts once); the last line may lack one.
    lines += 0 if last in (b"\n", b"\r") else 1
    return Snapshot(None, hasher.hexdigest(), size, lines, mtime_ns)


def _newlines(data: bytes) -> int:
    return data.replace(b"\r\n", b"\n").replace(b"\r", b"\n").count(b"\n")


def take_snapshot(files_dir: Path, path: str, max_bytes: int, *, quiet: bool = False) -> Snapshot | None:
    """The regular file at `path` as it is now, or None when there is none. A symbolic link or other
    non-file anywhere on the way raises UnsafePathError, or counts as no file when `quiet`. A file over the
    size cap is hashed and counted as it streams by, never held in memory."""
    try:
        with folder(files_dir, path) as parent:
            name = path.rsplit("/", 1)[-1]
            try:
                fd, info = open_regular(name, dir_fd=parent)
            except FileNotFoundError:
                return None
            except NotRegularFile:
                raise UnsafePathError(f"{path} is not a regular file in the mirror") from None
            except OSError as exc:
                raise _unsafe(path, exc) from None
            try:
                return _read_snapshot(fd, info.st_mtime_ns, max_bytes)
            finally:
                os.close(fd)
    except FileNotFoundError:
        return None
    except UnsafePathError:
        if quiet:
            return None
        raise


@contextlib.contextmanager
def folder(files_dir: Path, path: str, *, create: bool = False) -> Iterator[int]:
    """A descriptor of the folder holding `path`, reached one component at a time without following links.
    FileNotFoundError when a folder is missing (and `create` is false)."""
    fd = _open_dir(str(files_dir), None, "the mirror folder")
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


def walk(files_dir: Path, *, sweep_before_ns: int | None = None) -> Iterator[tuple[str, os.stat_result]]:
    """(path, lstat) of every regular memory file under `files/`; links and hidden names are skipped.

    With `sweep_before_ns`, the mirror's own hidden files (`_hidden_name`) last modified before it are removed on
    the way: what a write or delete the process did not live to finish left behind. The caller holds the mirror's
    lock, so none of its own is under way; the history keeps every recorded text, so none holds the only copy."""
    try:
        root = _open_dir(str(files_dir), None, "the mirror folder")
    except UnsafePathError:
        log.error("mirror folder %s is not a plain folder; listing nothing", files_dir)
        return
    try:
        yield from _walk_dir(root, "", sweep_before_ns)
    finally:
        os.close(root)


def _walk_dir(fd: int, prefix: str, sweep_before_ns: int | None) -> Iterator[tuple[str, os.stat_result]]:
    with os.scandir(fd) as entries:
        names = sorted((e.name, e.is_dir(follow_symlinks=False), e.is_file(follow_symlinks=False)) for e in entries)
    for name, is_dir, is_file in names:
        if name.startswith("."):
            if sweep_before_ns is not None and is_file and _HIDDEN_NAME.fullmatch(name):
                _sweep(fd, f"{prefix}{name}", sweep_before_ns)
            continue
        relpath = f"{prefix}{name}"
        if is_dir and (prefix or name in (*memory_folders(), SESSIONS_DIR)):
            try:
                child = _open_dir(name, fd, relpath)
            except (UnsafePathError, FileNotFoundError):
                continue
            try:
                yield from _walk_dir(child, relpath + "/", sweep_before_ns)
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


def _sweep(fd: int, relpath: str, before_ns: int) -> None:
    name = relpath.rsplit("/", 1)[-1]
    try:
        info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if stat.S_ISREG(info.st_mode) and info.st_mtime_ns < before_ns:
            os.unlink(name, dir_fd=fd)
            log.info("removed %s, left in the mirror by a write or delete that did not finish", relpath)
    except OSError as exc:
        log.warning("could not remove %s from the mirror (%s)", relpath, errno.errorcode.get(exc.errno or 0, "error"))


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


def lstat_file(parent: int, name: str, path: str) -> os.stat_result | None:
    """lstat of the target; refuses anything but a regular file (a symbolic link, a folder)."""
    try:
        info = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(info.st_mode):
        raise UnsafePathError(f"{path} is a symbolic link or not a regular file in the mirror; refused")
    return info


class Staged:
    """A file's new bytes written beside it (fsynced, mtime later than the old file's), waiting to be renamed.

    `publish` renames them over the file inside the state's transaction, keeping the old file under a hidden name
    (a hard link, no copy); `undo` puts it back when the transaction does not commit, so a write that reports
    "nothing was stored" left the file as it was; `settle` drops it once the commit succeeded."""

    def __init__(self, parent: int, name: str, path: str, data: bytes) -> None:
        self.parent, self.name, self.path = parent, name, path
        old = lstat_file(parent, name, path)
        floor = old.st_mtime_ns + 1 if old is not None else 0
        self.tmp = _hidden_name()
        self.kept: str | None = None
        self.published = False
        fd = os.open(self.tmp, _NEW_FILE_FLAGS, 0o644, dir_fd=parent)
        try:
            try:
                write_all(fd, data)
                # A later mtime than the old file's even within one clock tick, so the engine's size+mtime
                # check never mistakes a same-size rewrite for an unchanged file.
                now = max(now_ns(), floor)
                os.utime(fd, ns=(now, now))
                os.fsync(fd)
                self.mtime_ns = os.fstat(fd).st_mtime_ns
            finally:
                os.close(fd)
        except BaseException:
            self.discard()
            raise

    def publish(self) -> None:
        """Rename the new bytes over the file, the old one kept aside (the caller fsyncs the folder)."""
        if lstat_file(self.parent, self.name, self.path) is not None:
            kept = _hidden_name()
            os.link(self.name, kept, src_dir_fd=self.parent, dst_dir_fd=self.parent, follow_symlinks=False)
            self.kept = kept
        os.rename(self.tmp, self.name, src_dir_fd=self.parent, dst_dir_fd=self.parent)
        self.published = True

    def undo(self) -> None:
        """The change was not recorded: the file goes back to what it was, and nothing staged is left behind."""
        if not self.published:
            self.discard()
        elif self.kept is not None:
            put_back(self.parent, self.kept, self.name)
        else:
            os.unlink(self.name, dir_fd=self.parent)
        self.settle()

    def settle(self) -> None:
        """The change was recorded: the old file is not needed any more."""
        if self.kept is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.kept, dir_fd=self.parent)
            self.kept = None

    def discard(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.tmp, dir_fd=self.parent)


def set_aside(parent: int, name: str, path: str) -> str:
    """Move the file `name` (a regular file, never a link) to a hidden name beside it, for `put_back` or removal."""
    lstat_file(parent, name, path)
    hidden = _hidden_name()
    os.rename(name, hidden, src_dir_fd=parent, dst_dir_fd=parent)
    return hidden


def put_back(parent: int, hidden: str, name: str) -> None:
    os.rename(hidden, name, src_dir_fd=parent, dst_dir_fd=parent)


def _hidden_name() -> str:
    """A name for the mirror's own files beside a memory file: hidden (the walk skips it) and of a fixed length, not
    the file's name plus more, so a name of up to MAX_SEGMENT_BYTES never makes it too long for the file system."""
    return f".{secrets.token_hex(8)}.tmp"


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def now_ns() -> int:
    return time.time_ns()


def encoded(text: str) -> bytes:
    """The bytes a file holding `text` has; InvalidArgumentError for text no memory file may hold."""
    return utf8(text, "content")


def decoded_text(path: str, data: bytes | None, max_bytes: int) -> str:
    """The text of a snapshot's bytes; InvalidArgumentError when it is over the cap (`data` None), or not text."""
    if data is None:
        raise InvalidArgumentError(f"{path} is larger than {max_bytes} bytes and cannot be read here")
    if b"\x00" in data:
        raise InvalidArgumentError(f"{path} is not text (it contains NUL bytes)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidArgumentError(f"{path} is not UTF-8 text") from None
