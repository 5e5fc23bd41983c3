"""Line-based markdown structure: sections (by ATX heading) made of units (paragraphs, list items, fences).

Pure and non-recursive, so deeply nested or malformed markdown costs linear time and never raises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from server.index.labels import split_inline

_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
_CLOSING_HASHES = re.compile(r"(?:^|[ \t]+)#+[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_LIST_ITEM = re.compile(r"^([ \t]*)(?:[-*+]|\d{1,9}[.)])(?:[ \t]+|$)")
MAX_HEADING_CHARS = 200
# Between the titles of a heading path written as one string: a chunk's stored heading, a search hit's `heading`, and
# a section named by its path (`server.memory.sections`), so a hit's heading can be passed back.
HEADING_SEPARATOR = " > "


@dataclass(frozen=True)
class Unit:
    """A block that should stay whole when it fits: lines `start`..`end`, 0-based and inclusive."""

    start: int
    end: int
    kind: str  # "heading", "paragraph", "item", "fence"


@dataclass
class Section:
    """The units under one heading; `path` is the heading titles from the top level down to this one."""

    path: tuple[str, ...]
    path_lines: tuple[int, ...] = ()  # 0-based line of each heading in `path`
    units: list[Unit] = field(default_factory=list)


def split_lines(text: str) -> list[str]:
    """Lines without their terminators; `\\r\\n` and lone `\\r` count as line ends like `\\n`."""
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def heading_title(line: str) -> tuple[int, str] | None:
    """(level, title) when `line` is an ATX heading, else None; trailing inline labels (`[tags: a]`,
    `server.index.labels`) are not part of the title."""
    match = _HEADING.match(line)
    if match is None:
        return None
    if line.rstrip().endswith("]"):
        match = _HEADING.match(split_inline(line.rstrip())[0]) or match
    title = _CLOSING_HASHES.sub("", match.group(2) or "").strip()
    return len(match.group(1)), title[:MAX_HEADING_CHARS]


def parse_sections(lines: list[str]) -> list[Section]:
    """Group lines into sections and units. Blank lines separate units and belong to none."""
    sections = [Section(path=())]
    stack: list[tuple[int, str, int]] = []
    i, n = 0, len(lines)
    while i < n:
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        fence = _FENCE.match(line)
        if fence:
            end = _fence_end(lines, i, fence.group(1))
            sections[-1].units.append(Unit(i, end, "fence"))
            i = end + 1
            continue
        heading = heading_title(line)
        if heading is not None:
            level, title = heading
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, title, i))
            named = [(t, line) for _, t, line in stack if t]
            section = Section(path=tuple(t for t, _ in named), path_lines=tuple(line for _, line in named))
            section.units.append(Unit(i, i, "heading"))
            sections.append(section)
            i += 1
            continue
        item = _LIST_ITEM.match(line)
        if item:
            end = _item_end(lines, i, len(item.group(1).expandtabs(4)))
            sections[-1].units.append(Unit(i, end, "item"))
            i = end + 1
            continue
        end = _paragraph_end(lines, i)
        sections[-1].units.append(Unit(i, end, "paragraph"))
        i = end + 1
    return [s for s in sections if s.units]


def _fence_end(lines: list[str], start: int, opener: str) -> int:
    char, width = opener[0], len(opener)
    closing = re.compile(r"^ {0,3}" + re.escape(char) + "{" + str(width) + r",}[ \t]*$")
    for j in range(start + 1, len(lines)):
        if closing.match(lines[j]):
            return j
    return len(lines) - 1  # an unclosed fence runs to the end of the file, as CommonMark says


def _starts_block(line: str) -> bool:
    return bool(_FENCE.match(line) or heading_title(line) is not None)


def _item_end(lines: list[str], start: int, indent: int) -> int:
    """A list item runs until a blank line, a block start, or a sibling or shallower item."""
    end = start
    for j in range(start + 1, len(lines)):
        line = lines[j]
        if not line.strip() or _starts_block(line):
            break
        item = _LIST_ITEM.match(line)
        if item and len(item.group(1).expandtabs(4)) <= indent:
            break
        end = j
    return end


def _paragraph_end(lines: list[str], start: int) -> int:
    end = start
    for j in range(start + 1, len(lines)):
        line = lines[j]
        if not line.strip() or _starts_block(line) or _LIST_ITEM.match(line):
            break
        end = j
    return end
