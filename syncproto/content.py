"""What a synced file may hold, and the one way either side opens a file it is about to read.

A file is opened without following a final symbolic link and without blocking on a FIFO planted under its name,
and only a regular file is read, never more than the cap plus one byte (so "over the cap" is still seen).
"""

from __future__ import annotations

import os
import stat
from typing import Final

OPEN_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class NotRegularFile(OSError):
    """The name is a folder, a FIFO, a device or a socket: never read as a memory file."""


def content_problem(data: bytes, max_bytes: int) -> str | None:
    """Why these bytes cannot be synced as a memory file (too large, NUL, not UTF-8), or None."""
    if len(data) > max_bytes:
        return f"larger than {_size(max_bytes)}"
    if b"\x00" in data:
        return "holds a NUL byte (binary, not text)"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return "not UTF-8 text"
    return None


def _size(count: int) -> str:
    return f"{count // (1024 * 1024)} MiB" if count % (1024 * 1024) == 0 else f"{count} bytes"


def open_regular(path: str | os.PathLike[str], *, dir_fd: int | None = None) -> tuple[int, os.stat_result]:
    """A descriptor of the regular file at `path` and its fstat. The open's own OSError passes through
    (FileNotFoundError; ELOOP for a symbolic link); NotRegularFile (closed again) for anything but a file."""
    fd = os.open(path, OPEN_FLAGS, dir_fd=dir_fd)
    try:
        info = os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise NotRegularFile(f"{os.fspath(path)} is not a regular file")
    return fd, info


def read_capped(fd: int, max_bytes: int) -> bytes:
    """At most `max_bytes + 1` bytes from `fd` (one more than the cap shows that the file is over it)."""
    with os.fdopen(os.dup(fd), "rb") as handle:
        return handle.read(max_bytes + 1)
