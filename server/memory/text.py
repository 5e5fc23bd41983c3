"""Pure text rules of memory files: how lines are counted and paged, and what an append adds. No I/O.

Lines are numbered from 1 the way the chunker numbers them (`\\r\\n`, `\\r` and `\\n` end a line), so a search
hit's `L10-L20` is what `memory_get(start_line=10, end_line=20)` returns. A final line terminator does not start
another line: `"a\\nb\\n"` has two lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from server.errors import InvalidArgumentError
from server.index.markdown import split_lines

MAX_TOPIC_CHARS = 120
_LINE_END = re.compile(r"\r\n|\r|\n")


def file_lines(text: str) -> list[str]:
    """The lines of `text` without terminators; no phantom empty line after a final newline."""
    if text == "":
        return []
    lines = split_lines(text)
    if lines[-1] == "":
        lines.pop()
    return lines


def line_end(text: str) -> str:
    """The line ending `text` uses (its first line's: `\\r\\n`, `\\r` or `\\n`), `\\n` for text without one: what
    a write adds to a file ends its lines this way, so a CRLF file stays CRLF."""
    found = _LINE_END.search(text)
    return found.group() if found else "\n"


def utf8(text: str, argument: str) -> bytes:
    """The bytes of `text` in a memory file; InvalidArgumentError naming `argument` for text no file may hold (NUL
    characters, lone surrogates): the one rule for every piece of free text that is stored."""
    if "\x00" in text:
        raise InvalidArgumentError(f"{argument} must not contain NUL characters")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgumentError(f"{argument} is not valid Unicode text (lone surrogates)") from None


def count_lines(text: str) -> int:
    return len(file_lines(text))


def count_lines_of_bytes(data: bytes) -> int:
    """`count_lines` of the bytes' text, without decoding (line ends are ASCII in UTF-8)."""
    if not data:
        return 0
    normal = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return normal.count(b"\n") + (0 if normal.endswith(b"\n") else 1)


@dataclass(frozen=True)
class Page:
    content: str
    start_line: int  # 0 when no line is returned
    end_line: int
    total_lines: int
    truncated: bool
    next_start_line: int | None
    next_start_char: int | None = None  # the page ends inside line `end_line`: its first character not returned


def page(text: str, start_line: int | None, end_line: int | None, max_chars: int, start_char: int = 1) -> Page:
    """Lines `start_line`..`end_line` (1-based, inclusive, clamped to the file) joined with `\\n`, at most
    `max_chars` characters, the first of them from its character `start_char` (1-based, in code points). When the
    cap cuts the range short, `next_start_line` says which line to go on with; a single line longer than the cap is
    cut, and `next_start_char` says where its rest begins (read it with `start_char`)."""
    lines = file_lines(text)
    total = len(lines)
    first = start_line or 1
    last = min(end_line if end_line is not None else total, total)
    if first > last:
        return Page("", 0, 0, total, False, None)
    skip = start_char - 1
    if skip > len(lines[first - 1]):
        raise InvalidArgumentError(
            f"start_char {start_char} is past the end of line {first}, which has {len(lines[first - 1])} characters"
        )
    taken: list[str] = []
    used = 0
    for number in range(first, last + 1):
        line = lines[number - 1][skip:] if number == first else lines[number - 1]
        cost = len(line) + (1 if taken else 0)
        if used + cost > max_chars:
            if not taken:  # one huge line (lines hold no line ends, so no cut splits one): what fits of it
                following = number + 1 if number < last else None
                return Page(line[:max_chars], first, number, total, True, following, skip + max_chars + 1)
            return Page("\n".join(taken), first, number - 1, total, True, number, None)
        taken.append(line)
        used += cost
    return Page("\n".join(taken), first, last, total, False, None)


def clean_topic(topic: str | None) -> str | None:
    """One line of at most MAX_TOPIC_CHARS: whitespace runs (newlines too) become one space."""
    if topic is None:
        return None
    flat = " ".join(topic.split())
    if not flat:
        return None
    if len(flat) > MAX_TOPIC_CHARS:
        flat = flat[: MAX_TOPIC_CHARS - 1].rstrip() + "…"
    return flat


def entry_title(time_of_day: str, topic: str | None) -> str:
    """The title of a timed entry's heading: `HH:MM — topic`, or `HH:MM` without a topic."""
    return f"{time_of_day} — {topic}" if topic else time_of_day


def entry_heading(time_of_day: str, topic: str | None) -> str:
    """`## HH:MM — topic`, or `## HH:MM` without a topic."""
    return f"## {entry_title(time_of_day, topic)}"


@dataclass(frozen=True)
class Appended:
    text: str  # the whole new file
    start_line: int  # first line of the added entry (its heading when it has one)
    end_line: int


def compose_append(existing: str, content: str, *, title: str | None = None, heading: str | None = None) -> Appended:
    """`existing` + a blank line + (`heading` + blank line) + `content`, ending in one line end, every line ended
    the way `existing` ends its lines (`line_end`). `title` starts an empty file (`# 2024-05-01`). Blank lines
    around `content` are dropped; its inner text is kept as sent, but for its line ends."""
    eol = line_end(existing)
    body = eol.join(split_lines(content.strip("\r\n")))
    before = existing
    if before == "" and title:
        before = f"{title}{eol}"
    if before:
        if not before.endswith(("\n", "\r")):
            before += eol
        if not before.endswith(("\n\n", "\r\n\r\n", "\r\r")):
            before += eol
    entry = f"{heading}{eol}{eol}{body}{eol}" if heading else f"{body}{eol}"
    start = count_lines(before) + 1
    text = before + entry
    return Appended(text, start, count_lines(text))
