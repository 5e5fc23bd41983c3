"""Writing a small file atomically: a private temporary file beside it, fsync, then one rename (or a no-clobber
link), then fsync of the folder. Both ends keep their key material and settings this way (key files, callers.toml,
proxy.toml), so a crash leaves the old file or the new one, never half of either."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def atomic_write(path: Path, data: bytes, mode: int, *, overwrite: bool = True, durable: bool = True) -> None:
    """Put `data` at `path` with exactly `mode`. Without `overwrite`, raise FileExistsError if anything is there
    (even a dangling symlink). Without `durable`, skip the fsyncs (the rename stays atomic)."""
    temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)  # the umask must neither narrow nor widen it
            handle.write(data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        if overwrite:
            os.replace(temp, path)
        else:
            os.link(temp, path)
    finally:
        temp.unlink(missing_ok=True)
    if durable:
        directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
