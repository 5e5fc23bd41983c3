"""Sections of a markdown memory file, pure: finding one by its heading, its line range and hash, replacing it,
appending under it. No I/O.

A section is a heading line and everything after it up to the next heading of the same or a higher level (its
subsections included), less the blank lines that end it: those separate it from what follows and stay put. Its
own text is the part before its first subsection. Headings inside code fences are not headings (the chunker's
parser, `server.index.markdown`, decides).

A heading is named by its title, without the `#`s: `Decisions`, or a path from an enclosing heading down,
`Project memory > Decisions` (the ` > ` form a search hit's `heading` uses, so a hit's heading can be passed back).
A name matches every section whose heading path ends with it, compared exactly first and then case-insensitively;
more than one match is an error that lists them, unless a line is given and only one of them holds it (how a
reader reaches either of two headings of the same path). A heading a write adds never repeats the path of one the
file has (`distinct_title`); the user's own headings are never renamed.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass

from server.errors import InvalidArgumentError
from server.index.markdown import HEADING_SEPARATOR, heading_title, parse_sections
from server.memory.text import line_end

MAX_LEVEL = 6
MAX_LISTED = 12  # headings named in an error
_RAW_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")
_LIST_ITEM = re.compile(r"^[ \t]*(?:[-*+]|\d{1,9}[.)])[ \t]")
_PATH_SPLIT = re.compile(r"(?:^|\s+)>(?:\s+|$)")


@dataclass(frozen=True)
class Span:
    """One section: lines `start` (its heading) to `end` (exclusive), 0-based; `own_end` ends its own text."""

    path: tuple[str, ...]  # heading titles from the top level down to this one
    level: int
    start: int
    own_end: int
    end: int

    @property
    def name(self) -> str:
        return HEADING_SEPARATOR.join(self.path)


@dataclass(frozen=True)
class Edit:
    """A file after a section write: the whole text, the written lines (1-based) and the section written to."""

    text: str
    start_line: int
    end_line: int
    heading: str
    section_hash: str


def parse_name(name: str) -> tuple[str, ...]:
    """The titles of a heading argument (`Project > Decisions`); leading `#`s are forgiven."""
    parts = tuple(part.strip() for part in _PATH_SPLIT.split(name.strip().lstrip("#").strip()))
    return tuple(part.lstrip("#").strip() for part in parts)


def raw_lines(text: str) -> list[str]:
    """The lines of `text` with their terminators (`\\r\\n`, `\\r` or `\\n`), numbered as `server.memory.text`."""
    return _RAW_LINE.findall(text)


def plain(raw: list[str]) -> list[str]:
    return [line.rstrip("\r\n") for line in raw]


def spans(lines: list[str]) -> list[Span]:
    """Every section of the file whose lines (without terminators) are `lines`, in file order."""
    found: list[tuple[int, int, tuple[str, ...]]] = []
    for section in parse_sections(lines):
        first = section.units[0]
        parsed = heading_title(lines[first.start]) if first.kind == "heading" else None
        if parsed is not None:
            level, title = parsed
            found.append((first.start, level, section.path if title else (*section.path, "")))
    result = []
    for number, (start, level, path) in enumerate(found):
        later = found[number + 1 :]
        own_end = later[0][0] if later else len(lines)
        end = next((line for line, other, _ in later if other <= level), len(lines))
        result.append(Span(path, level, start, _trimmed(lines, start, own_end), _trimmed(lines, start, end)))
    return result


def _trimmed(lines: list[str], start: int, end: int) -> int:
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    return end


def matches(all_spans: list[Span], parts: tuple[str, ...]) -> list[Span]:
    """The sections named by `parts`: exact matches if any, else case-insensitive ones."""
    size = len(parts)
    exact = [s for s in all_spans if s.path[-size:] == parts and len(s.path) >= size]
    if exact:
        return exact
    folded = tuple(part.casefold() for part in parts)
    return [s for s in all_spans if len(s.path) >= size and tuple(p.casefold() for p in s.path[-size:]) == folded]


def locate(lines: list[str], parts: tuple[str, ...], where: str, line: int | None = None) -> Span | None:
    """The one section named by `parts` (of several, the one holding the 0-based `line` when only one does), or
    None; an ambiguous name is an InvalidArgumentError listing candidates."""
    found = matches(spans(lines), parts)
    holding = [s for s in found if line is not None and s.start <= line < s.end]
    if len(found) > 1 and len(holding) == 1:
        return holding[0]
    if len(found) > 1:
        listed = ", ".join(f"{s.name!r} (line {s.start + 1})" for s in found[:MAX_LISTED])
        named = HEADING_SEPARATOR.join(parts)
        hint = f"name one by its path, e.g. {found[0].name!r}"
        if len({s.name for s in found}) < len(found):  # a path names several: only a line tells them apart
            hint = (
                "sections of the same name are told apart by a line inside them: memory_get reads one with heading"
                f" and start_line, e.g. start_line={found[1].start + 1}"
            )
        raise InvalidArgumentError(f"heading {named!r} is ambiguous in {where}: it matches {listed}; {hint}")
    return found[0] if found else None


def distinct_title(before: list[str], after: list[str], title: str) -> str:
    """The title for the heading a write added to the file of lines `before`, making the file of lines `after`:
    `title`, or, when the heading repeats the path of a section already there (two entries of one topic in one
    minute), the first of `title (2)`, `title (3)`, ... that none of the sections beside it has."""
    old = Counter(span.path for span in spans(before))
    new = Counter(span.path for span in spans(after))
    clash = next((path for path in new - old if new[path] > 1), None)
    if clash is None:
        return title
    beside = {path[-1] for path in new if path[:-1] == clash[:-1]}
    number = 2
    while f"{title} ({number})" in beside:
        number += 1
    return f"{title} ({number})"


def not_found(lines: list[str], parts: tuple[str, ...], where: str) -> InvalidArgumentError:
    """The error for a heading that is not in the file, listing the headings that are."""
    names = [s.name for s in spans(lines) if s.path[-1]]
    listed = ", ".join(repr(name) for name in names[:MAX_LISTED]) + (", ..." if len(names) > MAX_LISTED else "")
    return InvalidArgumentError(
        f"no heading {HEADING_SEPARATOR.join(parts)!r} in {where}; "
        + (f"its headings are: {listed}" if names else "it has no headings")
    )


def section_hash(lines: list[str], span: Span) -> str:
    """sha256 of the section's lines joined with `\\n` (what memory_get with this heading returns, uncut)."""
    return hashlib.sha256("\n".join(lines[span.start : span.end]).encode("utf-8")).hexdigest()


def replace(text: str, span: Span, content: str) -> Edit:
    """The file with the section `span` replaced; every line outside it is kept byte for byte. `content` is the
    section's new text under its heading; when it begins with a heading of the section's level or higher, that
    heading replaces the old one (a rename)."""
    raw = raw_lines(text)
    eol = line_end(text)
    new = _content_lines(content)
    parsed = heading_title(new[0])
    if parsed is not None and parsed[0] <= span.level:
        middle = [line + eol for line in new]
    else:
        gap = [eol] if span.start + 1 < span.end and not raw[span.start + 1].strip() else []
        middle = [_terminated(raw[span.start], eol), *gap, *(line + eol for line in new)]
    if not raw[span.end - 1].endswith(("\n", "\r")):  # the section ended the file without a final newline
        middle[-1] = middle[-1].rstrip("\r\n")
    result = "".join(raw[: span.start]) + "".join(middle) + "".join(raw[span.end :])
    return _edit(result, span.start, span.start + 1, span.start + len(middle))


def append(
    text: str,
    parts: tuple[str, ...],
    content: str,
    *,
    where: str,
    entry: str | None = None,
    title: str | None = None,
) -> Edit:
    """The file with `content` added under the section named `parts` (created when missing: see `new_level`).

    Plain text goes at the end of the section's own text, before its first subsection (after it, the text would
    belong to that subsection). With `entry` (a title such as `09:30 — deploy`) the text goes under a new heading
    one level below the section, after its subsections. `title` starts an empty file (`# 2024-05-01`)."""
    raw = raw_lines(text)
    if not "".join(raw).strip() and title is not None:
        raw = [f"{title}\n"]
    eol = line_end("".join(raw))
    lines = plain(raw)
    target = locate(lines, parts, where)
    created: list[str] = []
    if target is not None:
        level, at, heading_line = target.level, (target.end if entry else target.own_end), target.start
    else:
        parent, missing = _deepest(lines, parts, where)
        level = parent.level if parent is not None else new_level(lines) - 1
        at = parent.end if parent is not None else _content_end(lines)
        for name in missing:
            level = _deeper(level, name)
            created.append(f"{'#' * level} {name}")
        heading_line = -1
    if entry is not None:
        created.append(f"{'#' * _deeper(level, entry)} {entry}")
    refuse_open_fence(lines, at, where)
    block = [*_spaced(created), *_content_lines(content)]
    before, after = raw[:at], raw[at:]
    if before:
        before[-1] = _terminated(before[-1], eol)
    # One blank line apart, except a list item added right after a list item: the list goes on.
    lead = (
        [""] if before and not (not created and _LIST_ITEM.match(block[0]) and _LIST_ITEM.match(lines[at - 1])) else []
    )
    tail = [""] if after and after[0].strip() else []
    result = "".join(before) + "".join(line + eol for line in [*lead, *block, *tail]) + "".join(after)
    first = at + len(lead)
    if heading_line < 0:  # the named section is the deepest heading created, two lines each
        heading_line = first + 2 * (len(created) - 1 - (entry is not None))
    return _edit(result, heading_line, first + 1, first + len(block))


def new_level(lines: list[str]) -> int:
    """The level of a new top-level section: `##` under a file's lone `#` title, else the level of the file's
    shallowest headings (siblings of its top sections), `##` in a file without headings."""
    levels = [span.level for span in spans(lines)]
    if not levels:
        return 2
    if levels.count(1) == 1:
        return 2
    return min(levels)


def _deepest(lines: list[str], parts: tuple[str, ...], where: str) -> tuple[Span | None, tuple[str, ...]]:
    """The deepest existing section on the path `parts` (None: none is), and the titles still missing below it."""
    for size in range(len(parts) - 1, 0, -1):
        found = locate(lines, parts[:size], where)
        if found is not None:
            return found, parts[size:]
    return None, parts


def open_fence(lines: list[str]) -> int | None:
    """The 0-based line of the code fence that is never closed (it runs to the end of the file), or None."""
    # Parsed with one more (blank) line: an unclosed fence grows to take it, a closed one ends where it did.
    fences = [unit for section in parse_sections([*lines, ""]) for unit in section.units if unit.kind == "fence"]
    return fences[-1].start if fences and fences[-1].end == len(lines) else None


def refuse_open_fence(lines: list[str], at: int, where: str) -> None:
    """InvalidArgumentError when text added at line `at` (0-based) of the file `where` would follow an unclosed
    fence's opening: it would be code, and a heading in it no heading."""
    fence = open_fence(lines)
    if fence is not None and at > fence:
        raise InvalidArgumentError(
            f"{where} ends inside a code fence opened on line {fence + 1} and never closed, so text written after it"
            " would land inside it; nothing was written. Close the fence (a line of ``` after the code) by"
            " replacing the file or its section, then write again"
        )


def refuse_unclosed_fence(content: str) -> None:
    """InvalidArgumentError when `content` opens a code fence (``` or ~~~) it does not close: whatever follows it in
    the file, later entries and their labels included, would be code. The one rule for every `memory_write`."""
    lines = plain(raw_lines(content))
    fence = open_fence(lines)
    if fence is not None:
        opener = lines[fence].lstrip(" ")
        marker = opener[: len(opener) - len(opener.lstrip(opener[0]))]  # its run of ` or ~: the closing one's length
        raise InvalidArgumentError(
            f"content opens a code fence on its line {fence + 1} ({marker}) and never closes it, so what follows"
            f" in the file would land inside it; nothing was written. Close the fence (a line of {marker} after the"
            " code), then write again"
        )


def _deeper(level: int, name: str) -> int:
    if level >= MAX_LEVEL:
        raise InvalidArgumentError(f"no heading can go below a level-{MAX_LEVEL} heading (for {name!r})")
    return level + 1


def _spaced(headings: list[str]) -> list[str]:
    return [line for heading in headings for line in (heading, "")]


def _content_lines(content: str) -> list[str]:
    return plain(raw_lines(content.strip("\r\n"))) or [""]


def _content_end(lines: list[str]) -> int:
    end = len(lines)
    while end > 0 and not lines[end - 1].strip():
        end -= 1
    return end


def _terminated(line: str, eol: str) -> str:
    return line if line.endswith(("\n", "\r")) else line + eol


def _edit(text: str, heading_line: int, start_line: int, end_line: int) -> Edit:
    lines = plain(raw_lines(text))
    span = next(s for s in spans(lines) if s.start == heading_line)
    return Edit(text, start_line, end_line, span.name, section_hash(lines, span))
