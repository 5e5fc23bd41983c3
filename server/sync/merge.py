"""Line-based three-way merge for file sync (docs/sync-protocol.md), pure and stdlib only.

Each side is diffed against the base into hunks; hunks of the two sides that overlap form one region. A region
changed by one side takes that side, one changed alike by both is taken once, and two insertions at the same place
are a clean union (the server's lines first; an insertion the other already contains is taken once, so a retried
push merges to the same text). Anything else changed by both sides is a conflict: the merge answers None.

The diff's work is bounded (MAX_DIFF_WORK): a rewrite too costly to diff in a fraction of a second (a formatter
that changed every other line of a long file of repeated lines) answers None too, so the server keeps both texts
(a conflict copy) instead of holding the index's lock for minutes. Nothing is lost either way.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import pairwise
from math import isqrt
from typing import NamedTuple

_OURS, _THEIRS = 0, 1
# Steps (a line looked at, a diagonal tried) one side's diff may take before the merge gives up as a conflict: a
# quarter of a second or so of Python. Enough for a thousand lines changed among repeated ones, many more elsewhere.
MAX_DIFF_WORK = 600_000


class _TooCostly(Exception):
    """A diff that would pass MAX_DIFF_WORK."""


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
    try:
        hunks = _hunks(base_lines, _lines(ours, eol), _OURS) + _hunks(base_lines, _lines(theirs, eol), _THEIRS)
    except _TooCostly:
        return None
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
    return [_Hunk(i1, i2, side, new[j1:j2]) for i1, i2, j1, j2 in _differences(base, new, MAX_DIFF_WORK)]


_Block = tuple[int, int, int, int]  # a[i1:i2] is replaced by b[j1:j2]


def _differences(a: list[str], b: list[str], budget: int) -> list[_Block]:
    """The blocks of `a` that `b` replaces, in order, each between equal lines. _TooCostly past `budget` steps.

    A patience diff (as git's): the common head and tail of a range are skipped (a local edit or an append costs a
    linear scan); lines found once in each side of what is left anchor it, in their longest run in the same order,
    and the ranges between anchors are diffed again. A range without such a line (a file of repeated lines) gets
    Myers' shortest edit script, whose time grows with the square of the lines changed: that is what the budget
    bounds.
    """
    blocks: list[_Block] = []
    work = 0
    pending = [(0, len(a), 0, len(b))]
    while pending:  # ranges in order: the first is on top
        alo, ahi, blo, bhi = pending.pop()
        while alo < ahi and blo < bhi and a[alo] == b[blo]:
            alo, blo = alo + 1, blo + 1
        while alo < ahi and blo < bhi and a[ahi - 1] == b[bhi - 1]:
            ahi, bhi = ahi - 1, bhi - 1
        if alo == ahi or blo == bhi:
            if alo < ahi or blo < bhi:
                blocks.append((alo, ahi, blo, bhi))
            continue
        work += (ahi - alo) + (bhi - blo)
        if work > budget:
            raise _TooCostly
        anchors = _anchors(a, alo, ahi, b, blo, bhi)
        if anchors:
            edges = [(alo - 1, blo - 1), *anchors, (ahi, bhi)]
            pending += [(i + 1, next_i, j + 1, next_j) for (i, j), (next_i, next_j) in pairwise(edges)][::-1]
            continue
        found, spent = _myers(a[alo:ahi], b[blo:bhi], budget - work)
        work += spent
        blocks += [(alo + i1, alo + i2, blo + j1, blo + j2) for i1, i2, j1, j2 in found]
    return blocks


def _anchors(a: list[str], alo: int, ahi: int, b: list[str], blo: int, bhi: int) -> list[tuple[int, int]]:
    """The longest run, in order on both sides, of (i, j) with a[i] == b[j] a line found once in each range."""
    once: dict[str, int] = {}  # a line -> its index in a, or -1 when it is there twice
    for i in range(alo, ahi):
        once[a[i]] = -1 if a[i] in once else i
    in_b: dict[str, int] = {}
    for j in range(blo, bhi):
        line = b[j]
        if once.get(line, -1) >= 0:
            in_b[line] = -1 if line in in_b else j
    pairs = sorted((once[line], j) for line, j in in_b.items() if j >= 0)
    # Patience sorting: tops[n] is the pair ending the best run of n + 1 found so far; back links rebuild it.
    tops: list[int] = []  # indexes into pairs
    tops_j: list[int] = []
    back: list[int] = [-1] * len(pairs)
    for index, (_, j) in enumerate(pairs):
        place = bisect_left(tops_j, j)
        back[index] = tops[place - 1] if place else -1
        if place == len(tops):
            tops.append(index)
            tops_j.append(j)
        else:
            tops[place], tops_j[place] = index, j
    run: list[tuple[int, int]] = []
    at = tops[-1] if tops else -1
    while at >= 0:
        run.append(pairs[at])
        at = back[at]
    return run[::-1]


def _myers(a: list[str], b: list[str], budget: int) -> tuple[list[_Block], int]:
    """Myers' greedy shortest edit script from `a` to `b` as blocks, and the steps it took (a diagonal tried, or
    a line compared); _TooCostly past `budget` steps. Time O((N+M)D) for D lines inserted or deleted."""
    n, m = len(a), len(b)
    most = min(n + m, isqrt(2 * max(budget, 0)) + 1)  # round d alone takes d + 1 steps
    offset = most + 1
    reach = [0] * (2 * most + 3)  # per diagonal k = x - y (at offset + k): the furthest x reached
    rounds: list[list[int]] = []  # `reach` over diagonals -d..d after each round d, to trace the path back
    work = 0
    for d in range(most + 1):
        for k in range(-d, d + 1, 2):
            if k == -d or (k != d and reach[offset + k - 1] < reach[offset + k + 1]):
                x = reach[offset + k + 1]  # down from diagonal k + 1: b[y - 1] inserted
            else:
                x = reach[offset + k - 1] + 1  # right from diagonal k - 1: a[x - 1] deleted
            y = x - k
            start = x
            while x < n and y < m and a[x] == b[y]:
                x, y = x + 1, y + 1
            work += 1 + x - start
            if work > budget:
                raise _TooCostly
            reach[offset + k] = x
            if x >= n and y >= m:
                rounds.append(reach[offset - d : offset + d + 1])
                return _traced(rounds, n, m), work
        rounds.append(reach[offset - d : offset + d + 1])
    raise _TooCostly


def _traced(rounds: list[list[int]], n: int, m: int) -> list[_Block]:
    """The replaced blocks of the edit path that `rounds` (Myers' furthest reaches per round) found to (n, m)."""
    matches: list[tuple[int, int, int]] = []  # runs of equal lines, last first: a[i:i+size] == b[j:j+size]
    x, y = n, m
    for d in range(len(rounds) - 1, 0, -1):
        k, previous = x - y, rounds[d - 1]  # previous[d - 1 + k] is the reach on diagonal k after round d - 1
        down = k == -d or (k != d and previous[d - 1 + k - 1] < previous[d - 1 + k + 1])
        began = previous[d - 1 + k + 1] if down else previous[d - 1 + k - 1] + 1  # where the equal run began
        if x > began:
            matches.append((began, began - k, x - began))
        x = began if down else began - 1  # where round d's step began, on diagonal k + 1 or k - 1
        y = x - (k + 1 if down else k - 1)
    if x > 0:
        matches.append((0, 0, x))
    blocks: list[_Block] = []
    i = j = 0
    for match_i, match_j, size in [*reversed(matches), (n, m, 0)]:
        if i < match_i or j < match_j:
            blocks.append((i, match_i, j, match_j))
        i, j = match_i + size, match_j + size
    return blocks


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
    # One search, in linear time: after a "\n", a match can only start at the start of a line. (Skipping the
    # matches inside a line one by one took minutes for an insertion of lines that all end alike.)
    return ("\n" + "".join(inner)) in ("\n" + "".join(outer))
