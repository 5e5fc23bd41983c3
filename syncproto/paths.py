"""The one gate for every path either side names: which strings are memory files, in one canonical spelling.

Pure rules, no I/O. A path that passes is relative POSIX, NFC-normalised, made of plain visible segments, and one
of `MEMORY.md`, `memory.md` or `memory/**/*.md`; joined to any folder it stays inside that folder. Names that
Windows or macOS laptops could not hold (`:`, `<>"|?*`, `CON`, trailing dots) are refused too, because every
file here is synced to laptops.

Extra folders (the server's `extra_paths` setting, announced to laptops in every changes answer) are memory
folders like `memory/`: `<folder>/**/*.md` passes too. `set_extra_folders` sets them for this process, on the server
at start and on a laptop when the server announces them; both sides then ask the same `is_memory_file`.

The mirror also holds session transcripts, `sessions/<caller>/<YYYY-MM-DD>-<session>[.<part>].md`, one folder per
laptop that uploads them (source `sessions`). They are readable by path but never written through the tools and
never synced down to laptops' project folders: `normalise_memory_path` refuses them, `normalise_mirror_path`
takes both. A laptop asks `synced_path_problem`: the same rules, and the name must already be canonical.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
import unicodedata
from collections.abc import Sequence

from syncproto.errors import PathRefused

MAX_PATH_CHARS = 512
MAX_SEGMENTS = 16
MAX_SEGMENT_BYTES = 255
MEMORY_DIR = "memory"
DAILY_LOG_DIR = MEMORY_DIR  # where the daily logs `memory/YYYY-MM-DD.md` go

_PERCENT_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")
_DRIVE = re.compile(r"^[A-Za-z]:")
_FORBIDDEN_CHARS = frozenset('\\:<>"|?*')
_WINDOWS_DEVICES = frozenset(
    {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(10)), *(f"LPT{i}" for i in range(10))}
)
ROOT_FILES = ("MEMORY.md", "memory.md")
SESSIONS_DIR = "sessions"
# A transcript part's name: the session's first day, its id (Claude Code's are UUIDs), a part number after the first.
SESSION_FILE = re.compile(r"(\d{4}-\d{2}-\d{2})-([A-Za-z0-9][A-Za-z0-9_-]{0,127})(?:\.([2-9]|[1-9][0-9]{1,2}))?\.md")
_CALLER_FOLDER = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")  # channel.authz.NAME_PATTERN
MAX_EXTRA_FOLDERS = 16
_extra_folders: tuple[str, ...] = ()  # set_extra_folders


def extra_folder_problem(name: object) -> str | None:
    """Why `name` cannot be an extra memory folder, or None: one plain top-level folder name, obeying the path
    rules, other than `memory`, `sessions` and the root files' names."""
    try:
        segments = _segments(name, "an extra folder")
    except PathRefused as exc:
        return str(exc)
    if len(segments) != 1 or segments[0] != name:
        return "an extra folder is one folder name beside memory/ (no '/', in canonical form)"
    if name in (MEMORY_DIR, SESSIONS_DIR, *ROOT_FILES) or str(name).lower() in (MEMORY_DIR, SESSIONS_DIR):
        return f"{name!r} is already a memory path or reserved"
    return None


def set_extra_folders(folders: Sequence[str]) -> None:
    """Make `<folder>/**/*.md` memory files for this process (replacing the previous extra folders)."""
    global _extra_folders
    problems = [f"{folder!r}: {problem}" for folder in folders if (problem := extra_folder_problem(folder))]
    if problems:
        raise PathRefused(f"extra folders refused: {'; '.join(problems)}")
    if len(folders) > MAX_EXTRA_FOLDERS:
        raise PathRefused(f"at most {MAX_EXTRA_FOLDERS} extra folders")
    _extra_folders = tuple(dict.fromkeys(folders))
    _canonical.cache_clear()


def memory_folders() -> tuple[str, ...]:
    """The folders whose `**/*.md` are memory files: `memory` and the extra folders."""
    return (MEMORY_DIR, *_extra_folders)


def normalise_memory_path(raw: str, *, argument: str = "path") -> str:
    """The canonical form of a memory file path, or PathRefused naming `argument` and the rule broken."""
    if isinstance(raw, str):
        return _canonical(raw, argument)
    return _canonical_uncached(raw, argument)


@functools.lru_cache(maxsize=16384)
def _canonical(raw: str, argument: str) -> str:
    # Listing a mirror checks every file name on every call; the answers never change. Errors are not cached.
    return _canonical_uncached(raw, argument)


def _canonical_uncached(raw: object, argument: str) -> str:
    segments = _segments(raw, argument)
    path = "/".join(segments)
    if not is_memory_file(path):
        if segments[0] == SESSIONS_DIR:
            raise PathRefused(
                f"{argument} names a session transcript; transcripts are read-only (the laptops upload them)"
            )
        raise PathRefused(f"{argument} must name a memory file: MEMORY.md, memory.md or memory/<folders>/<name>.md")
    return path


def normalise_mirror_path(raw: str, *, argument: str = "path") -> str:
    """The canonical form of a path the mirror holds: a memory file or a session transcript."""
    segments = _segments(raw, argument)
    path = "/".join(segments)
    if not (is_memory_file(path) or is_session_file(path)):
        raise PathRefused(
            f"{argument} must name a memory file (MEMORY.md, memory.md or memory/<folders>/<name>.md)"
            " or a session transcript (sessions/<laptop>/<file>.md)"
        )
    return path


def is_session_file(path: str) -> bool:
    """Whether an already canonical path is a session transcript's (`sessions/<caller>/<day>-<id>[.<n>].md`)."""
    parts = path.split("/")
    return (
        len(parts) == 3
        and parts[0] == SESSIONS_DIR
        and _CALLER_FOLDER.fullmatch(parts[1]) is not None
        and SESSION_FILE.fullmatch(parts[2]) is not None
    )


def session_file_path(caller: str, day: dt.date, session: str, part: int) -> str:
    """Where part `part` (from 1) of a caller's session transcript lives in the mirror."""
    suffix = "" if part == 1 else f".{part}"
    path = f"{SESSIONS_DIR}/{caller}/{day.isoformat()}-{session}{suffix}.md"
    if not is_session_file(path):
        raise PathRefused(f"no transcript path can be made of caller {caller!r}, session {session!r}")
    return path


def normalise_memory_prefix(raw: str | None, *, argument: str = "prefix") -> str:
    """A path prefix for filters (`memory/`, `memory/2024-`): the same character rules, any string prefix.
    Empty or None means everything."""
    if raw is None or raw == "":
        return ""
    trailing = isinstance(raw, str) and raw.endswith("/")
    segments = _segments(raw[:-1] if trailing else raw, argument)
    return "/".join(segments) + ("/" if trailing else "")


def is_memory_file(path: str, *, any_extra_folder: bool = False) -> bool:
    """Whether an already canonical path is one the mirror holds (the engine's default scan rules); with
    `any_extra_folder`, a path under any folder that could be announced as an extra one passes too."""
    if path in ROOT_FILES:
        return True
    parts = path.split("/")
    if len(parts) < 2 or not parts[-1].endswith(".md") or len(parts[-1]) <= 3:
        return False
    return parts[0] in memory_folders() or (any_extra_folder and extra_folder_problem(parts[0]) is None)


def synced_path_problem(rel: str, *, any_extra_folder: bool = False) -> str | None:
    """Why a laptop must not sync the file `rel` ('/'-separated, as spelled on its disk), or None: a name the
    server would refuse, or one it would store under another spelling. With `any_extra_folder`, the folders the
    server announces now do not matter (a laptop's stored state outlives an announcement)."""
    try:
        segments = _segments(rel, "path")
    except PathRefused as exc:
        return str(exc)
    if "/".join(segments) != rel:
        if unicodedata.normalize("NFC", rel) != rel:
            return "a name not in Unicode NFC form (the server would store it under another name); rename it"
        return "a name not in canonical form (the server would store it under another name)"
    if not is_memory_file(rel, any_extra_folder=any_extra_folder):
        return "not a memory file (MEMORY.md, memory.md or memory/**/*.md)"
    return None


def daily_log_path(day: dt.date) -> str:
    """`memory/YYYY-MM-DD.md`, the default target of an append."""
    return f"{DAILY_LOG_DIR}/{day.isoformat()}.md"


def _segments(raw: object, argument: str) -> list[str]:
    if not isinstance(raw, str):
        raise PathRefused(f"{argument} must be a string")
    if raw == "":
        raise PathRefused(f"{argument} is empty")
    if len(raw) > MAX_PATH_CHARS:
        raise PathRefused(f"{argument} is longer than {MAX_PATH_CHARS} characters")
    if any(is_control(ch) for ch in raw):
        raise PathRefused(f"{argument} contains control or invisible characters")
    if _PERCENT_ESCAPE.search(raw):
        raise PathRefused(f"{argument} contains a percent-encoded sequence; send the plain characters")
    if raw.startswith("/") or _DRIVE.match(raw):
        raise PathRefused(f"{argument} must be relative to the memory folder, not absolute")
    bad = sorted({ch for ch in raw if ch in _FORBIDDEN_CHARS})
    if bad:
        raise PathRefused(f"{argument} contains {bad[0]!r}; use '/' between folders and plain names")
    text = unicodedata.normalize("NFC", raw)
    while text.startswith("./"):
        text = text[2:]
    segments = text.split("/")
    if len(segments) > MAX_SEGMENTS:
        raise PathRefused(f"{argument} has more than {MAX_SEGMENTS} parts")
    for segment in segments:
        _check_segment(segment, argument)
    return segments


def _check_segment(segment: str, argument: str) -> None:
    if segment == "":
        raise PathRefused(f"{argument} has an empty part ('//' or a trailing '/')")
    if segment in (".", "..") or unicodedata.normalize("NFKC", segment).strip(". ") == "":
        raise PathRefused(f"{argument} must not contain '.' or '..' parts")
    if segment.startswith(".") or unicodedata.normalize("NFKC", segment).startswith("."):
        raise PathRefused(f"{argument} must not name hidden files or folders (starting with '.')")
    if segment != segment.strip() or segment.endswith("."):
        raise PathRefused(f"{argument} has a part that starts or ends with a space or ends with '.'")
    if len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES:
        raise PathRefused(f"{argument} has a part longer than {MAX_SEGMENT_BYTES} bytes")
    if segment.split(".", 1)[0].upper() in _WINDOWS_DEVICES:
        raise PathRefused(f"{argument} uses a reserved device name ({segment.split('.', 1)[0]})")


def is_control(ch: str) -> bool:
    """Whether a character may not appear in a synced name (controls, invisible format characters, separators)."""
    # Cc: C0/C1 controls incl. NUL and newlines; Cf: invisible format characters (bidi overrides, zero width);
    # Zl/Zp: line and paragraph separators; Cs: lone surrogates (not encodable as UTF-8).
    return unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Cs")
