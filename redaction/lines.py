"""Where a line starts and ends, in a text that may hold its lines JSON-escaped: a transcript holds a file's text
as `…\\nDB_PASSWORD=…\\n…` inside one JSON string, whose closing quote then ends its last line.

A `.env` assignment's value and a `.pgpass` line's password are read to the end of their line, Twilio's and
Notion's plain prefixes count after their issuer's name on the same line. Every look back is bounded, so a scan
stays linear.
"""

from __future__ import annotations

import re

_ESCAPED_BREAK = r"\\[nr]"
_BREAK = re.compile(rf"[\r\n]|{_ESCAPED_BREAK}")
_LINE_END = re.compile(rf"[ \t]{{0,200}}+(?:$|[\r\n]|{_ESCAPED_BREAK})", re.MULTILINE)
_WORD_REACH = 253  # the longest host name; a variable's name is shorter
_INDENT_REACH = 40


def line_start(prefix: str = "") -> re.Pattern[str]:
    """A line break (real, or escaped: the `escaped` group), indentation, then `prefix`, ending where searched to."""
    return re.compile(rf"(?:^|(?P<escaped>{_ESCAPED_BREAK}))[ \t]{{0,16}}+{prefix}\Z", re.MULTILINE)


def line_before(text: str, start: int, reach: int) -> str:
    """What precedes `start` on its line, `reach` characters at most."""
    return _BREAK.split(text[max(0, start - reach) : start])[-1]


def word_start(text: str, end: int) -> int:
    """Where the word that ends at `end` starts: an identifier, a dotted name or a host name."""
    start, low = end, max(0, end - _WORD_REACH)
    while start > low and (text[start - 1].isalnum() or text[start - 1] in "_.-"):
        start -= 1
    if start < end and text[start] in "nr" and text[start - 1 : start] == "\\":
        start += 1  # `\nDB_PASSWORD`: the `n` ends an escaped line break
    return start


def starts_line(text: str, start: int, pattern: re.Pattern[str]) -> re.Match[str] | None:
    """The line's start (a `line_start` pattern) if nothing but it comes before `start` on its line, else None."""
    return pattern.search(text, max(0, start - _INDENT_REACH), start)


def ends_line(text: str, end: int, line: re.Match[str]) -> bool:
    """Whether nothing but spaces follows `end` on the line that `line` started."""
    return _LINE_END.match(text, end) is not None or (line.group("escaped") is not None and text[end : end + 1] == '"')
