"""Which files of a memory folder are indexed, and what a readable memory file is. Pure rules, no walking."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from functools import cached_property

from syncproto.wire import MAX_FILE_BYTES

DEFAULT_MAX_FILE_BYTES = MAX_FILE_BYTES  # the protocol's cap; `MEMORY_MAX_FILE_BYTES` may change it
_DAILY = re.compile(r"^(\d{4}-\d{2}-\d{2})\.md$")
_SESSION_DAY = re.compile(r"^sessions/[^/]+/(\d{4}-\d{2}-\d{2})-[^/]+\.md$")  # a transcript: the day it began


@dataclass(frozen=True)
class ScanRule:
    """A glob over relative POSIX paths (`*`, `?`, and `**/` for any number of folders) and its source tag."""

    pattern: str
    source: str = "memory"

    @cached_property
    def regex(self) -> re.Pattern[str]:
        return re.compile(glob_to_regex(self.pattern))


DEFAULT_RULES = (
    ScanRule("MEMORY.md"),
    ScanRule("memory.md"),
    ScanRule("memory/**/*.md"),
    ScanRule("sessions/*/*.md", "sessions"),  # laptops' Claude Code transcripts, one folder per laptop
)


@dataclass(frozen=True)
class ScanConfig:
    rules: tuple[ScanRule, ...] = DEFAULT_RULES
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES

    def source_of(self, relpath: str) -> str | None:
        """The source of the first rule matching `relpath`, or None when no rule takes it."""
        for rule in self.rules:
            if rule.regex.fullmatch(relpath):
                return rule.source
        return None


def glob_to_regex(pattern: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append(r"(?:[^/]+/)*")
            i += 3
        elif pattern[i] == "*":
            out.append(r"[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append(r"[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return "".join(out)


def day_of(relpath: str) -> str | None:
    """`YYYY-MM-DD` when the file name is a daily log's, or a session transcript's first day (a real calendar
    date), else None."""
    match = _SESSION_DAY.match(relpath) or _DAILY.match(relpath.rsplit("/", 1)[-1])
    if match is None:
        return None
    try:
        dt.date.fromisoformat(match.group(1))
    except ValueError:
        return None
    return match.group(1)


class UnreadableFile(Exception):
    """The file is not indexable memory text; the message says why."""


def decode_memory(data: bytes, max_bytes: int) -> str:
    """The text of a memory file, or UnreadableFile for binary, non-UTF-8 or oversized content."""
    if len(data) > max_bytes:
        raise UnreadableFile(f"larger than {max_bytes} bytes")
    if b"\x00" in data:
        raise UnreadableFile("binary (contains NUL bytes)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnreadableFile(f"not UTF-8 (invalid byte at offset {exc.start})") from None
    return text.removeprefix("\ufeff")
