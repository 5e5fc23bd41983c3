"""Where the losing side of a sync conflict is kept: the conflict copy's name, pure.

The rest of the protocol's pure parts (limits, message shapes, request parsing) are in `syncproto`;
`server.sync.service` applies them to a mirror and `server.sync.app` serves them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from server.errors import InvalidArgumentError
from syncproto.paths import DAILY_LOG_DIR, MAX_SEGMENT_BYTES


def conflict_path(path: str, caller: str, moment: dt.datetime, taken: Callable[[str], bool]) -> str:
    """Where the losing side of a conflict on `path` is kept: `<folder>/<stem>.conflict-<caller>-<UTC time>.md`
    beside it (root files' copies go under `memory/`, the only folder the mirror holds), never a taken name."""
    folder, _, name = path.rpartition("/")
    folder = folder or DAILY_LOG_DIR
    stem = name[:-3] if name.endswith(".md") else name
    stamp = moment.astimezone(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    for attempt in range(1, 1000):
        suffix = f".conflict-{caller}-{stamp}" + (f"-{attempt}" if attempt > 1 else "") + ".md"
        room = MAX_SEGMENT_BYTES - len(suffix.encode("utf-8"))
        short = stem.encode("utf-8")[:room].decode("utf-8", "ignore").rstrip(". ") or "file"
        candidate = f"{folder}/{short}{suffix}"
        if not taken(candidate):
            return candidate
    raise InvalidArgumentError(f"too many conflict copies of {path} this second")
