"""`memory-proxy context`: the project's memory as text for a Claude Code `SessionStart` hook.

The text is `MEMORY.md` (or `memory.md`; its first lines) and the daily logs of today and yesterday (their last
lines), each under a header naming the file. It is read from the local files only, never from the server. A file
that links out of the project, is not UTF-8 or is larger than `MAX_FILE_BYTES` is skipped with a note. The whole
text stays under `MAX_OUTPUT_CHARS`: Claude Code replaces hook output past 10,000 characters by a file path and a
preview, and a huge log must not flood the agent's context anyway. Characters are counted as Claude Code (a
JavaScript program) counts them, in UTF-16 units (`units`): an emoji or another character past U+FFFF is two.
Control characters are shown escaped (`client_proxy.log_escape.for_terminal`), line breaks and tabs aside: a file
a teammate synced must not set the terminal's clipboard or rewrite its lines when the text is printed there.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from zoneinfo import ZoneInfo

from client_proxy.errors import ProxyError
from client_proxy.log_escape import for_terminal
from syncproto.content import NotRegularFile, open_regular, read_capped
from syncproto.paths import ROOT_FILES, daily_log_path
from syncproto.wire import MAX_FILE_BYTES

MEMORY_LINES: Final = 200  # MEMORY.md: its first lines
DAILY_LINES: Final = 200  # a daily log: its last lines
MAX_OUTPUT_CHARS: Final = 9_000  # UTF-16 units: under Claude Code's 10,000, with room


class SkippedFileError(Exception):
    """A memory file that exists but is not shown; the message says why."""


@dataclass(frozen=True)
class Section:
    """One file's part of the context: its lines after the line cap, and how many lines were left out."""

    path: str
    label: str
    lines: list[str]
    left_out: int
    keep: str  # "head" (MEMORY.md: the start matters) or "tail" (a daily log: the latest entries matter)


def local_today(now: dt.datetime, zone: str) -> dt.date:
    """The calendar date of the aware instant `now` in the IANA zone `zone` (the laptop's, as the server dates logs)."""
    return now.astimezone(ZoneInfo(zone)).date()


def build_context(project: Path, today: dt.date, max_chars: int = MAX_OUTPUT_CHARS) -> str:
    """The context text for `project` on the laptop's date `today`; `ProxyError` only if the folder is missing."""
    root = _project_root(project)
    sections: list[Section] = []
    notes: list[str] = []
    wanted = [(_root_memory_file(root), "", "head")]
    wanted += [
        (daily_log_path(today), " (today)", "tail"),
        (daily_log_path(today - dt.timedelta(days=1)), " (yesterday)", "tail"),
    ]
    for relpath, label, keep in wanted:
        if relpath is None:
            continue
        try:
            text = read_memory_file(root, relpath)
        except SkippedFileError as exc:
            notes.append(f"[skipped {relpath}: {exc}]")
            continue
        if text is None or not text.strip():
            continue
        sections.append(_capped(relpath, label, for_terminal(text), keep))
    if not sections and not notes:
        return (
            f"Project memory is empty: no MEMORY.md and no daily log for {today} or the day before in {root}. "
            "Write what is worth remembering to MEMORY.md or memory/YYYY-MM-DD.md.\n"
        )
    return render(sections, notes, max_chars)


def read_memory_file(root: Path, relpath: str) -> str | None:
    """The text of `root/relpath`, None when there is no such file; `SkippedFileError` when it must not be shown.

    `root` is an absolute folder without symlinks (see `_project_root`). A symlink is followed only while it stays
    inside `root`; the file must be a regular, UTF-8 file of at most `MAX_FILE_BYTES`.
    """
    path = root / relpath
    try:
        os.lstat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:  # `memory` is a file
        return None
    except OSError as exc:
        raise SkippedFileError(f"cannot read it ({exc.strerror})") from None
    real = Path(os.path.realpath(path))
    if not real.is_relative_to(root):
        raise SkippedFileError("it links outside the project")
    try:  # never blocks on a FIFO under that name; never follows a link (`real` was resolved just above)
        fd, info = open_regular(real)
    except FileNotFoundError:  # a dangling link inside the project, or gone meanwhile
        return None
    except NotRegularFile:
        raise SkippedFileError("not a regular file") from None
    except OSError as exc:
        raise SkippedFileError(f"cannot read it ({exc.strerror})") from None
    try:
        if info.st_size > MAX_FILE_BYTES:
            raise SkippedFileError(f"larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB")
        data = read_capped(fd, MAX_FILE_BYTES)
    except OSError as exc:
        raise SkippedFileError(f"cannot read it ({exc.strerror})") from None
    finally:
        os.close(fd)
    return decode(data)


def decode(data: bytes) -> str:
    """Memory text from bytes; `SkippedFileError` for oversized, binary or non-UTF-8 content."""
    if len(data) > MAX_FILE_BYTES:
        raise SkippedFileError(f"larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB")
    if b"\x00" in data:
        raise SkippedFileError("binary (contains NUL bytes)")
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise SkippedFileError(f"not UTF-8 (invalid byte at offset {exc.start})") from None


def render(sections: list[Section], notes: list[str], max_chars: int) -> str:
    """Headers, the sections' lines fitted into `max_chars` in all, and the notes after them."""
    headers = [f"=== {s.path}{s.label} ===" for s in sections]
    # Each cut note names a line count; 80 characters each is room for it.
    fixed = sum(units(h) + 2 for h in headers) + sum(units(n) + 1 for n in notes) + 80 * len(sections)
    budgets = share(max(0, max_chars - fixed), [_size(s.lines) for s in sections])
    parts: list[str] = []
    for header, section, budget in zip(headers, sections, budgets, strict=True):
        lines, cut = _fit(section.lines, budget, section.keep)
        parts.append(header)
        if section.keep == "head":
            parts.extend(lines)
            if section.left_out or cut:
                shown = f"cut after {len(lines)} lines" if lines else "not shown (output limit)"
                parts.append(f"[{section.path}: {shown}; {section.left_out + cut} more lines not shown]")
        else:
            if section.left_out or cut:
                parts.append(f"[{section.path}: {section.left_out + cut} earlier lines not shown]")
            parts.extend(lines)
        parts.append("")
    parts.extend(notes)
    return "\n".join(parts).rstrip("\n") + "\n"


def share(budget: int, sizes: list[int]) -> list[int]:
    """Split `budget` between parts of `sizes`: equal shares, what a small part does not need going to the others."""
    shares = [0] * len(sizes)
    left = budget
    order = sorted(range(len(sizes)), key=lambda i: sizes[i])
    for rank, i in enumerate(order):
        shares[i] = min(sizes[i], left // (len(sizes) - rank))
        left -= shares[i]
    return shares


def _capped(path: str, label: str, text: str, keep: str) -> Section:
    lines = text.splitlines()
    limit = MEMORY_LINES if keep == "head" else DAILY_LINES
    kept = lines[:limit] if keep == "head" else lines[-limit:]
    return Section(path, label, kept, len(lines) - len(kept), keep)


def _fit(lines: list[str], budget: int, keep: str) -> tuple[list[str], int]:
    """The whole lines from the start (head) or the end (tail) that fit in `budget`, and how many were cut."""
    if _size(lines) <= budget:
        return lines, 0
    ordered = lines if keep == "head" else lines[::-1]
    kept: list[str] = []
    used = 0
    for line in ordered:
        size = units(line) + 1
        if used + size > budget:
            if not kept and budget > 1:  # one line longer than the whole budget: show its part that fits
                kept.append(_cut(line, budget - 2) + "…")
            break
        kept.append(line)
        used += size
    if keep == "tail":
        kept.reverse()
    return kept, len(lines) - len(kept)


def _size(lines: list[str]) -> int:
    return sum(units(line) + 1 for line in lines)


def units(text: str) -> int:
    """The length of `text` as Claude Code counts it: in UTF-16 code units."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def _cut(text: str, limit: int) -> str:
    """The start of `text` that is at most `limit` UTF-16 units long (never half a character)."""
    start = text.encode("utf-16-le", "surrogatepass")[: 2 * limit].decode("utf-16-le", "surrogatepass")
    return start[:-1] if start and "\ud800" <= start[-1] <= "\udbff" else start  # the half of a pair cut through


def _project_root(project: Path) -> Path:
    if not project.exists():
        raise ProxyError(f"no project folder {project}: pass --project DIR or run from the project folder")
    if not project.is_dir():
        raise ProxyError(f"{project} is not a folder: pass --project DIR with the project folder")
    return Path(os.path.realpath(project))


def _root_memory_file(root: Path) -> str | None:
    """`MEMORY.md`, else `memory.md`, by their exact names (a case-insensitive file system answers both)."""
    try:
        names = set(os.listdir(root))
    except OSError:
        names = {name for name in ROOT_FILES if os.path.lexists(root / name)}
    return next((name for name in ROOT_FILES if name in names), None)
