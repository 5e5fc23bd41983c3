"""Where the losing side of a sync conflict is kept: the conflict copy's name, pure.

The rest of the protocol's pure parts (limits, message shapes, request parsing) are in `syncproto`;
`server.sync.service` applies them to a mirror and `server.sync.app` serves them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from server.errors import InvalidArgumentError
from syncproto.paths import DAILY_LOG_DIR, MAX_PATH_CHARS, MAX_SEGMENT_BYTES

MIN_STEM_CHARS = 8  # of the file's stem kept in its copy's name, at least, or the copy goes under `memory/`


def conflict_path(path: str, caller: str, moment: dt.datetime, taken: Callable[[str], bool]) -> str:
    """Where the losing side of a conflict on `path` is kept: `<folder>/<stem>.conflict-<caller>-<UTC time>.md`
    beside it (root files' copies go under `memory/`, the only folder the mirror holds), never a taken name. The
    stem is shortened so the copy is a valid path (MAX_SEGMENT_BYTES per name, MAX_PATH_CHARS in all); a folder too
    deep to leave room for the suffix keeps its copies under `memory/` instead."""
    folder, _, name = path.rpartition("/")
    folder = folder or DAILY_LOG_DIR
    stem = name[:-3] if name.endswith(".md") else name
    stamp = moment.astimezone(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    for attempt in range(1, 1000):
        suffix = f".conflict-{caller}-{stamp}" + (f"-{attempt}" if attempt > 1 else "") + ".md"
        where = folder if _stem_room(folder, suffix) >= MIN_STEM_CHARS else DAILY_LOG_DIR
        room = _stem_room(where, suffix)
        short = stem[:room].encode("utf-8")[: MAX_SEGMENT_BYTES - len(suffix.encode("utf-8"))]
        kept = short.decode("utf-8", "ignore").rstrip(". ") or "file"
        candidate = f"{where}/{kept}{suffix}"
        if not taken(candidate):
            return candidate
    raise InvalidArgumentError(f"too many conflict copies of {path} this second")


def _stem_room(folder: str, suffix: str) -> int:
    """How many characters of the stem fit in a path of at most MAX_PATH_CHARS."""
    return MAX_PATH_CHARS - len(folder) - 1 - len(suffix)
