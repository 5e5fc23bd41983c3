"""The server's errors, and the one table that says how each reaches a caller over MCP and over HTTP.

One root, `MemoryServerError` (defined in `server.index.errors`, the bottom layer, and re-exported here); under it
the index engine's `EngineError` (`server.index.errors`), whose `InvalidArgumentError` also serves the service's
argument checks and under which the service's refusals hang. The sync protocol's `ProtocolError`
(`syncproto.errors`) is mapped here too. Messages of these errors are written for
callers: they name the argument or the rule, never another index's content, library exception text, secrets or
a path on the server's disk. `answer_for` is the one lookup; `server.mcp.calls` and `server.sync.app` use it.
"""

from __future__ import annotations

from dataclasses import dataclass

from server.index.errors import (
    CorruptIndexError,
    EmbeddingError,
    EmbeddingUnavailableError,
    EngineError,
    InvalidArgumentError,
    MemoryServerError,
    UnknownIndexError,
)
from syncproto.errors import MessageRefused, PathRefused, ProtocolError

__all__ = [
    "ERROR_TABLE",
    "KNOWN_ERRORS",
    "ConflictError",
    "ErrorAnswer",
    "MemoryServerError",
    "PermissionDeniedError",
    "ServiceClosedError",
    "TooLargeError",
    "UnsafePathError",
    "answer_for",
]


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


class TooLargeError(MemoryServerError):
    """A request body over the protocol's cap."""


@dataclass(frozen=True)
class ErrorAnswer:
    """How one error class reaches a caller. Over MCP every mapped error is the caller's error with its message
    (a tool, resource or prompt error; `mcp_code` where a bare JSON-RPC error is answered). Over HTTP (`/sync/*`)
    `status` and `code`, with the message only when `shown`; otherwise a generic message and a log line naming
    the class."""

    status: int
    code: str
    shown: bool = True
    mcp_code: int = -32602  # INVALID_PARAMS


_INTERNAL = ErrorAnswer(500, "internal", shown=False)

# Every error class the server, the engine and the protocol raise on purpose, most specific first. A class not
# here falls back to its nearest mapped base; tests/test_errors.py checks that none has to.
ERROR_TABLE: dict[type[Exception], ErrorAnswer] = {
    PermissionDeniedError: ErrorAnswer(403, "forbidden"),
    UnsafePathError: ErrorAnswer(400, "bad_request"),
    InvalidArgumentError: ErrorAnswer(400, "bad_request"),
    PathRefused: ErrorAnswer(400, "bad_request"),
    MessageRefused: ErrorAnswer(400, "bad_request"),
    ProtocolError: ErrorAnswer(400, "bad_request"),
    TooLargeError: ErrorAnswer(413, "too_large"),
    ServiceClosedError: ErrorAnswer(503, "unavailable"),
    # A push writes under the mirror's lock with the hash it just read: a conflict there is the server's fault.
    ConflictError: _INTERNAL,
    UnknownIndexError: _INTERNAL,
    CorruptIndexError: _INTERNAL,
    EmbeddingUnavailableError: _INTERNAL,
    EmbeddingError: _INTERNAL,
    EngineError: _INTERNAL,
    MemoryServerError: _INTERNAL,
}

KNOWN_ERRORS: tuple[type[Exception], ...] = (MemoryServerError, ProtocolError)


def answer_for(exc: BaseException) -> ErrorAnswer | None:
    """How `exc` reaches a caller; None for an error nobody raised on purpose (a bug: the caller gets a generic
    answer and the log the traceback)."""
    for cls in type(exc).__mro__:
        answer = ERROR_TABLE.get(cls)
        if answer is not None:
            return answer
    return None
