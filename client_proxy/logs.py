"""Logging for the forwarder: stderr (Claude Code keeps it in its MCP logs) and optionally a file; never stdout.

The HTTP libraries log every request's URL at INFO, and watchdog every inotify event at DEBUG (thousands a
second while a folder is scanned); they are held at WARNING. Log lines name methods, ids, sizes,
statuses and error classes, never a message body (it is the user's memory text) or a key.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from client_proxy.log_escape import EscapingFormatter

FORMAT = "%(asctime)s memory-proxy[%(process)d] %(levelname)s %(name)s: %(message)s"
QUIET = ("httpx2", "httpcore2", "httpx", "httpcore", "watchdog")


def configure(level: int, log_file: Path | None) -> None:
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(log_file, encoding="utf-8"))
    for handler in handlers:  # control characters from outside (a server's path) never start a line of their own
        handler.setFormatter(EscapingFormatter(FORMAT))
    logging.basicConfig(level=level, handlers=handlers, force=True)
    for name in QUIET:
        logging.getLogger(name).setLevel(max(level, logging.WARNING))
