"""Errors of the memory service, beside the engine's (`server.index.errors`). Messages are safe to show callers:
they name the argument, never another index's content, library exception text or secrets."""

from __future__ import annotations

from server.index.errors import EngineError, InvalidArgumentError


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


class ServiceClosedError(EngineError):
    """The server is shutting down and takes no new calls."""
