"""Checks of the service's arguments, pure: each returns the clean value or raises InvalidArgumentError naming
the argument."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import json
import re
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from server.errors import InvalidArgumentError
from server.index.markdown import MAX_HEADING_CHARS
from server.index.naming import validate_name
from server.memory.sections import parse_name
from server.memory.text import utf8
from server.mirror.mirror import ABSENT
from server.mirror.paths import normalise_mirror_path
from syncproto.wire import MAX_WRITE_BYTES, is_content_hash

MAX_KEY_CHARS = 128
MAX_HEADING_ARGUMENT_CHARS = 500
MAX_VERSION = 2**63 - 1  # revisions are 64-bit integers in SQLite and PostgreSQL; a larger one failed there
_TIMEZONE = re.compile(r"^[A-Za-z0-9_+\-]+(?:/[A-Za-z0-9_+\-]+){0,2}$")


def valid_index_name(name: str) -> bool:
    try:
        validate_name(name)
    except InvalidArgumentError:
        return False
    return True


def check_content(content: object) -> None:
    if not isinstance(content, str):
        raise InvalidArgumentError("content must be a string")
    if not content.strip():
        raise InvalidArgumentError("content is empty")
    if len(utf8(content, "content")) > MAX_WRITE_BYTES:
        raise InvalidArgumentError(f"content is larger than {MAX_WRITE_BYTES // 1024} KiB; split it into parts")


def check_topic(value: object) -> str | None:
    """A `topic` argument: text a file may hold (it becomes part of an entry's heading)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidArgumentError("topic must be a string")
    utf8(value, "topic")
    return value


def check_expected_hash(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidArgumentError("expected_hash must be a string")
    lowered = value.strip().lower()
    if lowered == ABSENT or is_content_hash(lowered):
        return lowered
    raise InvalidArgumentError(f"expected_hash must be a sha256 hex digest (64 characters) or {ABSENT!r}")


def check_heading(value: object) -> tuple[str, ...] | None:
    """The titles of a `heading` argument (`Decisions`, `Project > Decisions`), or None when there is none."""
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_HEADING_ARGUMENT_CHARS:
        raise InvalidArgumentError(f"heading must be a string of at most {MAX_HEADING_ARGUMENT_CHARS} characters")
    if not value.isprintable():
        raise InvalidArgumentError("heading must be one line of text (no line breaks or control characters)")
    parts = parse_name(value)
    if not all(parts):
        raise InvalidArgumentError("heading must name a heading by its text, e.g. 'Decisions' or 'Project > Decisions'")
    if any(len(part) > MAX_HEADING_CHARS for part in parts):
        raise InvalidArgumentError(f"each heading in heading must be at most {MAX_HEADING_CHARS} characters")
    return parts


def check_version(value: object, argument: str = "version") -> int:
    """A version number as the tools take it (`version`, `before`): a whole number from 1 (to MAX_VERSION)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_VERSION:
        raise InvalidArgumentError(f"{argument} must be a whole number from 1 (a version listed by memory_history)")
    return value


def check_idempotency_key(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_KEY_CHARS or not value.isprintable():
        raise InvalidArgumentError(f"idempotency_key must be 1 to {MAX_KEY_CHARS} printable characters")
    return value


def time_zone(name: object) -> ZoneInfo:
    if name is None or name == "":
        return ZoneInfo("UTC")
    if not isinstance(name, str) or len(name) > 64 or not _TIMEZONE.match(name):
        raise InvalidArgumentError("timezone must be an IANA time zone name such as Europe/Paris")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidArgumentError(f"unknown timezone {name!r}; use an IANA name such as Europe/Paris") from None


def check_day(value: object, argument: str) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, str) and len(value) == 10:
        try:
            return dt.date.fromisoformat(value).isoformat()
        except ValueError:
            pass
    raise InvalidArgumentError(f"{argument} must be a date written YYYY-MM-DD")


def request_digest(arguments: dict[str, object]) -> str:
    return hashlib.sha256(json.dumps(arguments, sort_keys=True, ensure_ascii=True).encode()).hexdigest()


def encode_cursor(path: str) -> str:
    return base64.urlsafe_b64encode(f"after:{path}".encode()).decode().rstrip("=")


def decode_cursor(cursor: object) -> str | None:
    """The path a `memory_list` cursor continues after (a memory file or a session transcript: the listing holds
    both), or None for no cursor."""
    if cursor is None or cursor == "":
        return None
    if isinstance(cursor, str) and len(cursor) <= 2048:
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("utf-8")
        except (binascii.Error, ValueError):
            raw = ""
        if raw.startswith("after:"):
            try:
                return normalise_mirror_path(raw.removeprefix("after:"))  # a page may end on a transcript
            except InvalidArgumentError:
                pass
    raise InvalidArgumentError("cursor is not one this server handed out; start again without it")
