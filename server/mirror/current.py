"""What a change finds at a path before it replaces the file: the file with its text, or, for a file the server holds
but cannot read (not UTF-8, NUL bytes, over the size cap), only its recorded hash.

A change that needs only the hash (a restore, a whole-file replace with that `expected_hash`, a laptop's push or
delete whose base is that hash) may then replace the damaged file: that is when an undo is needed. One that needs the
text (an append, a section, a merge) is refused with the reason. The store itself refuses to replace or delete bytes
it could not keep as a version (`server.mirror.mirror.Mirror`), so nothing is lost either way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from server.errors import ConflictError, InvalidArgumentError, UnsafePathError
from server.mirror.state import FileState, MirrorFile

REWRITE_TRIES = 5  # times a change is made over a file that other servers keep writing between its read and its write

T = TypeVar("T")


class _Files(Protocol):
    def read(self, path: str) -> MirrorFile | None: ...
    def state(self, path: str) -> FileState | None: ...


@dataclass(frozen=True)
class Current:
    file: MirrorFile | None  # None: no file, or one whose text cannot be read
    hash: str | None  # None: no file
    unreadable: str | None = None  # why the text cannot be read

    def needs_text(self, change: str) -> MirrorFile | None:
        """The file's text for `change` (e.g. "an append"); InvalidArgumentError when it cannot be read."""
        if self.unreadable is not None:
            raise InvalidArgumentError(
                f"{self.unreadable}, so {change} cannot be made to it; replace the whole file (its hash is"
                f" {self.hash}) or bring back a version with memory_restore (memory_history lists them)"
            )
        return self.file


def current_file(files: _Files, path: str) -> Current:
    """The file at the normalised `path` now (a change on disk recorded first); call under the store's lock, so
    that the hash stays the file's until the change is made."""
    try:
        found = files.read(path)
    except UnsafePathError:  # a link or no regular file: nothing may replace it
        raise
    except InvalidArgumentError as exc:
        state = files.state(path)  # recorded by the read, from the bytes it found
        if state is None or state.hash is None:
            raise
        return Current(None, state.hash, str(exc))
    return Current(found, found.hash if found is not None else None)


def rewritten(files: _Files, path: str, change: Callable[[Current], T]) -> T:
    """`change` made to the file at `path` as `current_file` finds it; call under the store's lock. Servers sharing
    one store are not ordered by it: when another wrote the file between the read and the write (the store refused the
    hash read, ConflictError), the change is made again over that file, as one server's lock would have ordered the two,
    REWRITE_TRIES times at most. A conflict over the file as it was read is the caller's (its expected_hash): raised."""
    found = current_file(files, path)
    for _ in range(REWRITE_TRIES - 1):
        try:
            return change(found)
        except ConflictError:
            now = current_file(files, path)
            if now.hash == found.hash:
                raise
            found = now
    return change(found)
