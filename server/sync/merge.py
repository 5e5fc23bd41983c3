"""Line-based three-way merge for file sync (docs/sync-protocol.md), pure and stdlib only.

Each side is diffed against the base into hunks; hunks of the two sides that overlap form one region. A region
changed by one side takes that side, one changed alike by both is taken once, and two insertions at the same place
are a clean union (the server's lines first; an insertion the other already contains is taken once, so a retried
push merges to the same text). Anything else changed by both sides is a conflict: the merge answers None.
"""

from __future__ import annotations

import difflib
from typing import NamedTuple

_OURS, _THEIRS = 0, 1


class _Hunk(NamedTuple):
    start: int  # base lines [start, end) are replaced by `lines`; start == end is an insertion
    end: int
    side: int
    lines: list[str]


def merge3(base: str, ours: str, theirs: str) -> str | None:
    """Line-based three-way merge; None when it is not clean. `ours` is the server's text, `theirs` the pushed one.

    Lines keep their endings. An unterminated last line is terminated for the merge (so appending after it is not
    a conflict); the result ends with a newline when `ours` or `theirs` does, and otherwise drops that added one.
    """
    if ours in (base, theirs):
        return theirs
    if theirs == base:
        return ours
    eol = _line_ending(base, ours, theirs)
    base_lines = _lines(base, eol)
    hunks = _hunks(base_lines, _lines(ours, eol), _OURS) + _hunks(base_lines, _lines(theirs, eol), _THEIRS)
    merged: list[str] = []
    done = 0
    for region in _regions(hunks):
        start, end = region[0].start, max(hunk.end for hunk in region)
        resolved = _resolve(base_lines, start, end, region)
        if resolved is None:
            return None
        merged += base_lines[done:start]
        merged += resolved
        done = end
    merged += base_lines[done:]
    text = "".join(merged)
    if ours.endswith("\n") or theirs.endswith("\n"):
        return text
    return text.removesuffix(eol)


def merge_unrelated(ours: str, theirs: str) -> str | None:
    """Both sides created the file independently: merge3 with the longest common run of leading lines as the base."""
    eol = _line_ending("", ours, theirs)
    ours_lines, theirs_lines = _lines(ours, eol), _lines(theirs, eol)
    common = 0
    for mine, other in zip(ours_lines, theirs_lines, strict=False):
        if mine != other:
            break
        common += 1
    return merge3("".join(ours_lines[:common]), ours, theirs)


def _line_ending(base: str, *sides: str) -> str:
    """What an unterminated last line is given: the first line ending of `base`, else CRLF if either side's first
    line ending is CRLF (so the merge does not depend on which side is which), else LF."""
    for texts in ((base,), sides):
        firsts = {text[: text.find("\n")].endswith("\r") for text in texts if "\n" in text}
        if firsts:
            return "\r\n" if True in firsts else "\n"
    return "\n"


def _lines(text: str, eol: str) -> list[str]:
    # Split on "\n" only (not str.splitlines, which also splits on \v, \f, U+2028...); "\r\n" stays in the line.
    *lines, tail = text.split("\n")
    terminated = [line + "\n" for line in lines]
    if tail:
        terminated.append(tail + eol)
    return terminated


def _hunks(base: list[str], new: list[str], side: int) -> list[_Hunk]:
    # The common head and tail are skipped first (as git does): a local edit or an append then costs a linear
    # scan. SequenceMatcher on what is left can approach quadratic time for rewrites full of repeated lines
    # (blank lines): about half a second for a shuffled 4,000-line file, acceptable under the 2 MiB cap.
    limit = min(len(base), len(new))
    head = 0
    while head < limit and base[head] == new[head]:
        head += 1
    tail = 0
    while tail < limit - head and base[-1 - tail] == new[-1 - tail]:
        tail += 1
    matcher = difflib.SequenceMatcher(None, base[head : len(base) - tail], new[head : len(new) - tail], autojunk=False)
    return [
        _Hunk(head + i1, head + i2, side, new[head + j1 : head + j2])
        for tag, i1, i2, j1, j2 in matcher.get_opcodes()
        if tag != "equal"
    ]


def _regions(hunks: list[_Hunk]) -> list[list[_Hunk]]:
    """Group overlapping hunks of different sides, transitively, in base order.

    Sorted by (start, end), an insertion comes before a replacement starting at the same line (touching, not
    overlapping). A hunk then overlaps the current region exactly when a hunk of the other side there reaches past
    its start, or both are insertions at the same line; nothing in an earlier region can overlap it.
    """
    regions: list[list[_Hunk]] = []
    reach = [-1, -1]  # per side, the furthest end of a non-empty base range in the current region
    inserted_at = [-1, -1]  # per side, the line of the last insertion in the current region
    for hunk in sorted(hunks, key=lambda hunk: (hunk.start, hunk.end, hunk.side)):
        other = 1 - hunk.side
        is_insertion = hunk.start == hunk.end
        if regions and (reach[other] > hunk.start or (is_insertion and inserted_at[other] == hunk.start)):
            regions[-1].append(hunk)
        else:
            regions.append([hunk])
            reach, inserted_at = [-1, -1], [-1, -1]
        if is_insertion:
            inserted_at[hunk.side] = hunk.start
        else:
            reach[hunk.side] = max(reach[hunk.side], hunk.end)
    return regions


def _resolve(base: list[str], start: int, end: int, region: list[_Hunk]) -> list[str] | None:
    ours = _apply(base, start, end, [hunk for hunk in region if hunk.side == _OURS])
    theirs = _apply(base, start, end, [hunk for hunk in region if hunk.side == _THEIRS])
    if ours is None or ours == theirs:
        return theirs
    if theirs is None:
        return ours
    if start == end:  # both sides only insert, at the same line
        if _contains(ours, theirs):
            return ours
        if _contains(theirs, ours):
            return theirs
        return ours + theirs
    return None


def _apply(base: list[str], start: int, end: int, hunks: list[_Hunk]) -> list[str] | None:
    """One side's version of base lines [start, end), or None when that side did not change them."""
    if not hunks:
        return None
    lines: list[str] = []
    done = start
    for hunk in hunks:
        lines += base[done : hunk.start]
        lines += hunk.lines
        done = hunk.end
    return lines + base[done:end]


def _contains(outer: list[str], inner: list[str]) -> bool:
    """Whether `inner` is a contiguous run of lines of `outer` (every line ends with "\\n")."""
    haystack, needle = "".join(outer), "".join(inner)
    at = haystack.find(needle)
    while at > 0 and haystack[at - 1] != "\n":
        at = haystack.find(needle, at + 1)
    return at >= 0
