"""The one table of how each error reaches a caller: over MCP (a tool, resource or prompt error with the error's
message, or a bare JSON-RPC error) and over HTTP on `/sync/*` (status, code, and the message or a generic one).

`answer_for` is the one lookup; `server.mcp.calls`, `server.mcp.tools` (resources/list) and `server.sync.app` use it.
Messages of the errors mapped here are written for callers: they name the argument or the rule, never another
index's content, library exception text, secrets or a path on the server's disk (`tests/server/test_errors.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

from server.callers.config import CallersFileError
from server.errors import (
    BackupError,
    ConflictError,
    CorruptIndexError,
    DamagedArchiveError,
    EmbeddingError,
    EmbeddingUnavailableError,
    EngineError,
    InvalidArgumentError,
    MemoryServerError,
    PermissionDeniedError,
    SecretsRefusedError,
    ServiceClosedError,
    StorageFullError,
    TooLargeError,
    UnknownIndexError,
    UnsafePathError,
)
from server.index.store import is_disk_full
from syncproto.errors import MessageRefused, PathRefused, ProtocolError


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


INTERNAL = ErrorAnswer(500, "internal", shown=False)  # also a bug's answer, where one is given

# Every error class the server, the engine and the protocol raise on purpose, most specific first. A class not
# here falls back to its nearest mapped base; tests/test_errors.py checks that none has to.
ERROR_TABLE: dict[type[Exception], ErrorAnswer] = {
    PermissionDeniedError: ErrorAnswer(403, "forbidden"),
    UnsafePathError: ErrorAnswer(400, "bad_request"),
    SecretsRefusedError: ErrorAnswer(400, "bad_request"),
    InvalidArgumentError: ErrorAnswer(400, "bad_request"),
    PathRefused: ErrorAnswer(400, "bad_request"),
    MessageRefused: ErrorAnswer(400, "bad_request"),
    ProtocolError: ErrorAnswer(400, "bad_request"),
    TooLargeError: ErrorAnswer(413, "too_large"),
    ServiceClosedError: ErrorAnswer(503, "unavailable"),
    StorageFullError: ErrorAnswer(507, "insufficient_storage"),
    ConflictError: ErrorAnswer(409, "conflict"),  # over sync: a file other servers kept changing (`rewritten`)
    DamagedArchiveError: INTERNAL,  # backups and restores run from the operator's command line only
    BackupError: INTERNAL,
    CallersFileError: INTERNAL,  # the operator's file; never a caller's doing
    UnknownIndexError: INTERNAL,
    CorruptIndexError: INTERNAL,
    EmbeddingUnavailableError: INTERNAL,
    EmbeddingError: INTERNAL,
    EngineError: INTERNAL,
    MemoryServerError: INTERNAL,
}

KNOWN_ERRORS: tuple[type[Exception], ...] = (MemoryServerError, ProtocolError)


STORAGE_FULL = "the server's disk is full: nothing was stored; the same request succeeds once space is freed"


def recognised(exc: BaseException) -> BaseException | None:
    """`exc` as an error raised on purpose: itself when it is one, a `StorageFullError` for a full disk (which
    the OS or SQLite may raise anywhere under a write); None for anything else (a bug)."""
    if isinstance(exc, KNOWN_ERRORS):
        return exc
    return StorageFullError(STORAGE_FULL) if is_disk_full(exc) else None


def answer_for(exc: BaseException) -> ErrorAnswer | None:
    """How `exc` reaches a caller; None for an error nobody raised on purpose (a bug: the caller gets a generic
    answer and the log the traceback)."""
    for cls in type(exc).__mro__:
        answer = ERROR_TABLE.get(cls)
        if answer is not None:
            return answer
    return None
