"""Where the server's log goes and how it looks: stderr, as text lines or as one JSON object per line.

A JSON line holds `time` (UTC, ISO 8601, milliseconds), `level`, `logger`, `message`, every field a call passed
with `extra={...}`, and `exception` (the traceback) when there is one. Both formats carry the same facts: what is
logged is decided where it is logged, and no call logs keys, frames or memory text.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from typing import TextIO

TEXT_FORMAT = "%(levelname)s %(name)s: %(message)s"
# Held at WARNING (or quieter, with the whole log) even at debug level: libraries that say too much, and ones
# whose debug and info lines carry what must never be logged. sse_starlette logs every event it streams (tool
# results: memory text); the MCP transport logs whole MCP session ids; MCPServer logs every tool and resource error
# verbatim at INFO, before `server.mcp.boundary` redacts it (the caller's arguments, echoed).
NOISY = (
    "sentence_transformers",
    "transformers",
    "httpx2",
    "httpcore2",
    "huggingface_hub",
    "sse_starlette",
    "mcp.server.streamable_http",
    "mcp.server.streamable_http_manager",
    "mcp.server.mcpserver.server",
)
# The attributes every LogRecord has; anything else on a record came from `extra=` (except uvicorn's copy of
# each message with terminal colours).
_STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName", "color_message"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_") and key not in entry:
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def formatter(log_format: str) -> logging.Formatter:
    """The formatter for `text` or `json`."""
    return JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)


def configure(level: str, log_format: str, stream: TextIO | None = None) -> None:
    """Send the log to `stream` (stderr) at `level`, formatted as `log_format`. Like `logging.basicConfig`, this
    leaves a root logger that already has handlers alone (a test capturing the log keeps its own)."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(formatter(log_format))
    logging.basicConfig(level=level.upper(), handlers=[handler])
    for noisy in NOISY:
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLogger().level))
