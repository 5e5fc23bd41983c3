"""The file-sync protocol's pure parts: limits, request parsing, answers, and conflict-copy names.

No I/O here. `docs/sync-protocol.md` is the specification; `server.sync.service` applies it to a mirror and
`server.sync.app` serves it.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from server.index.errors import InvalidArgumentError
from syncproto.paths import DAILY_LOG_DIR, MAX_SEGMENT_BYTES

MAX_PUSH_CHANGES = 100
MAX_PUSH_BYTES = 8 * 1024 * 1024
MAX_CHANGES = 500  # changes per pull answer
MAX_CHANGE_BYTES = 4 * 1024 * 1024  # content per pull answer (a longer answer says `more`)
MAX_WAIT = 30.0  # seconds a pull may long-poll

Status = Literal["applied", "merged", "unchanged", "conflict", "deleted", "kept", "rejected"]

_HASH = re.compile(r"[0-9a-f]{64}")
_CHANGE_FIELDS = frozenset({"path", "base", "content", "delete"})


@dataclass(frozen=True)
class PushChange:
    """One pushed change as sent: `content` None means delete. `path` is checked per change, later."""

    path: str
    base: str | None
    content: str | None


@dataclass(frozen=True)
class PushResult:
    """The server's file after one change; see the table in the protocol."""

    path: str
    status: Status
    hash: str | None
    revision: int
    content: str | None = None
    conflict_path: str | None = None
    conflict_revision: int | None = None
    message: str | None = None

    def as_json(self) -> dict[str, object]:
        out: dict[str, object] = {"path": self.path, "status": self.status, "hash": self.hash}
        out["revision"] = self.revision
        for name in ("content", "conflict_path", "conflict_revision", "message"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out


def parse_push(document: object) -> list[PushChange]:
    """The changes of a push body (`{"changes": [...]}`); InvalidArgumentError for a malformed request."""
    if not isinstance(document, dict) or set(document) != {"changes"}:
        raise InvalidArgumentError('the body must be {"changes": [...]}')
    raw = document["changes"]
    if not isinstance(raw, list):
        raise InvalidArgumentError("changes must be a list")
    if len(raw) > MAX_PUSH_CHANGES:
        raise InvalidArgumentError(f"at most {MAX_PUSH_CHANGES} changes per push")
    changes: list[PushChange] = []
    seen: set[str] = set()
    for number, item in enumerate(raw):
        change = _parse_change(item, number)
        if change.path in seen:
            raise InvalidArgumentError(f"changes[{number}]: {change.path!r} appears twice in one push")
        seen.add(change.path)
        changes.append(change)
    return changes


def _parse_change(item: object, number: int) -> PushChange:
    where = f"changes[{number}]"
    if not isinstance(item, dict):
        raise InvalidArgumentError(f"{where} must be an object")
    unknown = sorted(set(item) - _CHANGE_FIELDS)
    if unknown:
        raise InvalidArgumentError(f"{where} has an unknown field {unknown[0]!r}")
    path, base = item.get("path"), item.get("base")
    if not isinstance(path, str) or not path:
        raise InvalidArgumentError(f"{where}.path must be a non-empty string")
    if base is not None and (not isinstance(base, str) or not _HASH.fullmatch(base)):
        raise InvalidArgumentError(f"{where}.base must be null or a sha256 hex hash")
    delete = item.get("delete", False)
    if delete is not True and delete is not False:
        raise InvalidArgumentError(f"{where}.delete must be true or false")
    content = item.get("content")
    if delete:
        if content is not None:
            raise InvalidArgumentError(f"{where} deletes and sends content; send one or the other")
        return PushChange(path, base, None)
    if not isinstance(content, str):
        raise InvalidArgumentError(f"{where}.content must be a string (or delete: true)")
    return PushChange(path, base, content)


def parse_since(raw: str | None) -> int:
    """The `since` query parameter: a whole number from 0 (absent: 0)."""
    if raw is None or raw == "":
        return 0
    if not raw.isascii() or not raw.isdigit() or len(raw) > 18:
        raise InvalidArgumentError("since must be a whole number from 0")
    return int(raw)


def parse_wait(raw: str | None) -> float:
    """The `wait` query parameter: seconds from 0 to MAX_WAIT (absent: 0)."""
    if raw is None or raw == "":
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        raise InvalidArgumentError(f"wait must be a number of seconds from 0 to {MAX_WAIT:g}") from None
    if not 0.0 <= value <= MAX_WAIT:  # also refuses nan and inf
        raise InvalidArgumentError(f"wait must be a number of seconds from 0 to {MAX_WAIT:g}")
    return value


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
