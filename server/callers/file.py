"""`callers.toml` on disk: safe reads, locked atomic edits, and the `CallerDirectory` that reloads it.

The channel asks `CallersFile.lookup` on every handshake and request. At most every `CHECK_EVERY` seconds the
file's (mtime_ns, size, inode, mode) is compared with the version last read, and a change reloads it:

- a valid version replaces the table at once, so a removed or revoked key gets None on its next request and its
  live sessions end;
- a missing file (or keys directory) means no callers, logged with a hint: deleting the file locks everyone out;
- an invalid or unsafe version (bad TOML, a bad key line, a group-writable file...) keeps the last good table,
  logs the reason as an error once and shows it in `error` until fixed. A broken edit thus neither locks
  everybody out nor grants anything new; with no good version yet (a broken file at start) nobody gets in.
"""

from __future__ import annotations

import fcntl
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from channel.authz import Identity
from channel.files import atomic_write
from server.callers.config import (
    FILE_MODE,
    MAX_FILE_BYTES,
    CallersConfig,
    CallersFileError,
    parse_callers,
    render_callers,
)

CHECK_EVERY = 0.5
MAX_LINKS = 40  # symlinks followed to reach the callers file, as Linux's own limit
Signature = tuple[int, int, int, int]

log = logging.getLogger("server.callers.config")


def prepare_keys_dir(path: Path) -> None:
    """Create the keys directory with mode 0700 when missing; refuse one that group or others may write."""
    if not path.exists():
        path.mkdir(mode=0o700, parents=True)
        os.chmod(path, 0o700)  # mkdir's mode is masked by the umask
    _check_directory(path)


def read_callers(path: Path) -> tuple[CallersConfig, Signature | None]:
    """The callers and the signature of the version read; no callers and None when the file is missing."""
    try:
        found = read_checked(path)
    except OSError as exc:
        raise CallersFileError(f"cannot read {path}: {exc.strerror}") from None
    if found is None:
        return CallersConfig(), None
    data, info = found
    try:
        return parse_callers(data.decode("utf-8")), _signature(info)
    except UnicodeDecodeError:
        raise CallersFileError(f"{path}: not UTF-8 text") from None
    except CallersFileError as exc:
        raise CallersFileError(f"{path}: {exc}") from None


def read_checked(path: Path) -> tuple[bytes, os.stat_result] | None:
    """The callers file's bytes and status as the server may trust them (None when there is none); also the backup's
    reader, so an archive holds what the server would read. CallersFileError when the file or a folder deciding it
    may be changed by group or others, or it is not a regular file, or too large."""
    if not path.parent.is_dir():
        return None
    _check_directory(path.parent)
    real, folders = _resolved(path)
    try:  # O_NONBLOCK: a FIFO planted here must not hang the server; fstat below refuses it
        # The file the links led to, opened without following another: one swapped in since is refused (ELOOP).
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as handle:
        for folder in folders:
            _check_directory(Path(folder), f"folder on the way to {path.name}")
        info = os.fstat(handle.fileno())
        mode = stat.S_IMODE(info.st_mode)
        if not stat.S_ISREG(info.st_mode):
            raise CallersFileError(f"refusing {path}: not a regular file")
        if mode & 0o022:
            raise CallersFileError(
                f"refusing {path}: mode {mode:04o} lets group or others change who may connect; run: chmod go-w {path}"
            )
        data = handle.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise CallersFileError(f"refusing {path}: larger than {MAX_FILE_BYTES} bytes")
    return data, info


def _resolved(path: Path) -> tuple[str, list[str]]:
    """Where `path` (in the keys directory) leads, its symlinks followed one name at a time, and every folder that
    decides it: each one holding a link on the way (whoever may write there can point the link elsewhere) and the
    one holding the file. A `..data/` link inside the keys directory (Kubernetes' mounts) stays in it."""
    resolved, links = os.path.realpath(path.parent), 0
    folders: list[str] = []
    pending = [path.name]
    while pending:
        name = pending.pop()
        if name in ("", "."):
            continue
        if name == "..":
            resolved = os.path.dirname(resolved)
            continue
        candidate = os.path.join(resolved, name)
        if not os.path.islink(candidate):
            resolved = candidate
            continue
        links += 1
        if links > MAX_LINKS:
            raise CallersFileError(f"refusing {path}: more than {MAX_LINKS} symlinks to follow")
        folders.append(resolved)
        target = os.readlink(candidate)
        if target.startswith("/"):
            resolved = "/"
        pending.extend(reversed(target.split("/")))
    folders.append(os.path.dirname(resolved))
    return resolved, list(dict.fromkeys(folders))


def write_callers(path: Path, config: CallersConfig) -> None:
    """Replace the file atomically (temp file, fsync, rename) with the canonical rendering, mode 0644."""
    prepare_keys_dir(path.parent)
    if path.is_symlink():
        raise CallersFileError(f"refusing to replace {path}: it is a symlink; edit the file it points to")
    atomic_write(path, render_callers(config).encode("utf-8"), FILE_MODE)  # CallerEntry refuses non-UTF-8 comments


def update_callers(path: Path, change: Callable[[CallersConfig], CallersConfig]) -> tuple[CallersConfig, CallersConfig]:
    """Read, change and write back under a lock on the keys directory, so concurrent edits never lose one.

    Returns (before, after). When `change` raises, the file is left untouched.
    """
    prepare_keys_dir(path.parent)
    with _locked(path.parent):
        before, _ = read_callers(path)
        after = change(before)
        write_callers(path, after)
    return before, after


class CallersFile:
    """A `CallerDirectory` over `callers.toml` that follows the file's changes (see the module docstring)."""

    def __init__(
        self, path: Path, *, check_every: float = CHECK_EVERY, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.path = path
        self._check_every = check_every
        self._clock = clock
        self._lock = threading.Lock()
        self._config = CallersConfig()
        self._table = self._config.table()
        self._error: str | None = None
        self._seen: Signature | None = None
        self._next_check = 0.0
        self.reload()

    def lookup(self, static_key: bytes) -> Identity | None:
        now = self._clock()
        if now >= self._next_check:
            with self._lock:
                if now >= self._next_check:
                    self._next_check = now + self._check_every
                    if _stat(self.path) != self._seen:
                        self._load()
        return self._table.lookup(static_key)

    def reload(self) -> bool:
        """Read the file now; True when it was valid (and is now the table), False when the last good one stays."""
        with self._lock:
            self._next_check = self._clock() + self._check_every
            return self._load()

    @property
    def config(self) -> CallersConfig:
        """The last good version: what `lookup` answers from."""
        return self._config

    @property
    def error(self) -> str | None:
        """Why the file on disk is not in use, or None when it is."""
        return self._error

    def _load(self) -> bool:
        try:
            config, signature = read_callers(self.path)
        except CallersFileError as exc:
            self._seen = _stat(self.path)  # so a broken version is reported once, not every check
            self._error = str(exc)
            kept = len(self._config.callers)
            log.error("%s. Still using the last good version (%d callers) until it is fixed.", exc, kept)
            return False
        self._seen, self._config, self._table, self._error = signature, config, config.table(), None
        if signature is None:
            log.warning(
                "no callers file at %s: nobody can connect. Add a device with: "
                "memory-server callers add NAME --key 'memory-ed25519 ...' --grant INDEX=rw",
                self.path,
            )
        else:
            keys = sum(len(entry.keys) for entry in config.callers)
            log.info("loaded %s: %d callers, %d active keys", self.path, len(config.callers), keys)
        return True


def _check_directory(path: Path, what: str = "keys directory") -> None:
    info = os.stat(path)
    mode = stat.S_IMODE(info.st_mode)
    if not stat.S_ISDIR(info.st_mode):
        raise CallersFileError(f"{path} is not a directory")
    if mode & 0o022:
        raise CallersFileError(
            f"refusing {what} {path}: mode {mode:04o} lets group or others replace files in it; run: chmod go-w {path}"
        )


def _signature(info: os.stat_result) -> Signature:
    return (info.st_mtime_ns, info.st_size, info.st_ino, info.st_mode)


def _stat(path: Path) -> Signature | None:
    try:
        return _signature(os.stat(path))
    except OSError:
        return None


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released when the descriptor closes
        yield
    finally:
        os.close(fd)
