"""The server's errors: one tree under `MemoryServerError`, imported from here by every module outside the index
engine (which defines its own part of the tree in `server.index.errors`). How each reaches a caller is
`server.error_table`.

One root, `MemoryServerError` (defined in `server.index.errors`, the bottom layer, and re-exported here); under it
the index engine's `EngineError` (`server.index.errors`), whose `InvalidArgumentError` also serves the service's
argument checks and under which the service's refusals hang; `CallersFileError` (`server.callers.config`) and
`TooLargeError` beside it. Messages of these errors are written for callers: they name the argument or the rule,
never another index's content, library exception text, secrets or a path on the server's disk.
"""

from __future__ import annotations

from server.index.errors import (
    CorruptIndexError,
    EmbeddingError,
    EmbeddingUnavailableError,
    EngineError,
    InvalidArgumentError,
    MemoryServerError,
    UnknownIndexError,
)

__all__ = [
    "BackupError",
    "ConflictError",
    "CorruptIndexError",
    "DamagedArchiveError",
    "EmbeddingError",
    "EmbeddingUnavailableError",
    "EngineError",
    "InvalidArgumentError",
    "MemoryServerError",
    "PermissionDeniedError",
    "SecretsRefusedError",
    "ServiceClosedError",
    "StorageFullError",
    "TooLargeError",
    "UnknownIndexError",
    "UnsafePathError",
]


class BackupError(EngineError):
    """A backup could not be taken, or an archive cannot be restored here; nothing was written at the target
    (`server.backup`). Only the operator's command line sees it."""


class DamagedArchiveError(BackupError):
    """An archive is truncated, altered or hostile (a hash, a size, a database or a member name is wrong)."""


class PermissionDeniedError(EngineError):
    """The caller has no grant on the index, or only `r` for a write or delete."""


class ConflictError(EngineError):
    """`expected_hash` does not match the file as it is now; nothing was changed."""

    def __init__(self, message: str, current_hash: str | None) -> None:
        super().__init__(message)
        self.current_hash = current_hash


class UnsafePathError(InvalidArgumentError):
    """The path exists in the mirror as something other than a plain file in plain folders (a symbolic link,
    a folder where a file should be); it is refused rather than followed."""


class SecretsRefusedError(InvalidArgumentError):
    """A synced file holds secrets: it is not stored, so the laptop's original is neither leaked nor overwritten
    (`server.memory.intake`); the message names the kinds and lines, never the secret."""


class ServiceClosedError(EngineError):
    """The server is shutting down and takes no new calls."""


class StorageFullError(MemoryServerError):
    """The server's disk (or quota) is full: the change was not stored, nothing half-written stays behind, and the
    same request succeeds once space is freed. Raised at the answering boundaries from the OS's or SQLite's own
    error (`server.error_table.recognised`)."""


class TooLargeError(MemoryServerError):
    """A request body over the protocol's cap."""
