"""Which files of a project folder are synced, and where a path named by the server may be written.

The name rules mirror the server's (`syncproto/paths.py`, which the proxy must not import): a local name the server
would refuse is never pushed, and a server path that breaks them is never written. Everything here is pure except
`safe_target`, which looks (lstat only) at the folders between the project and the file.
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
import unicodedata
from collections.abc import Iterable
from pathlib import Path

from client_proxy.errors import ProxyError

ROOT_FILES = ("MEMORY.md", "memory.md")
MEMORY_DIR = "memory"
DEFAULT_MAX_FILE_BYTES = 2 * 1024 * 1024  # the server's own cap
MAX_PATH_CHARS = 512
MAX_SEGMENTS = 16
MAX_SEGMENT_BYTES = 255
MAX_PATTERN_CHARS = 512

_PERCENT_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")
_FORBIDDEN_CHARS = frozenset('\\:<>"|?*')
_WINDOWS_DEVICES = frozenset(
    {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(10)), *(f"LPT{i}" for i in range(10))}
)


class UnsafePath(ProxyError):
    """A path that must not be read or written here: outside the memory files, or reached through a symlink."""


def is_memory_path(rel: str) -> bool:
    """Whether a relative POSIX path has the shape of a memory file: a root file, or `memory/**/*.md`."""
    if rel in ROOT_FILES:
        return True
    parts = rel.split("/")
    return len(parts) >= 2 and parts[0] == MEMORY_DIR and parts[-1].endswith(".md") and len(parts[-1]) > 3


def name_problem(rel: str) -> str | None:
    """Why `rel` (relative, '/'-separated) cannot be a synced memory file, or None when it can."""
    if not rel:
        return "empty path"
    if len(rel) > MAX_PATH_CHARS:
        return f"path longer than {MAX_PATH_CHARS} characters"
    if rel.startswith("/") or re.match(r"^[A-Za-z]:", rel):
        return "absolute path"
    if any(_is_control(ch) for ch in rel):
        return "control or invisible characters in the name"
    if _PERCENT_ESCAPE.search(rel):
        return "a percent-encoded sequence in the name"
    bad = sorted({ch for ch in rel if ch in _FORBIDDEN_CHARS})
    if bad:
        return f"{bad[0]!r} in the name (the server refuses it: other laptops could not hold it)"
    if unicodedata.normalize("NFC", rel) != rel:
        return "a name not in Unicode NFC form (the server would store it under another name); rename it"
    segments = rel.split("/")
    if len(segments) > MAX_SEGMENTS:
        return f"more than {MAX_SEGMENTS} folder levels"
    for segment in segments:
        problem = _segment_problem(segment)
        if problem:
            return problem
    if not is_memory_path(rel):
        return "not a memory file (MEMORY.md, memory.md or memory/**/*.md)"
    return None


def _segment_problem(segment: str) -> str | None:
    folded = unicodedata.normalize("NFKC", segment)
    if segment == "":
        return "an empty path part"
    if segment in (".", "..") or folded.strip(". ") == "":
        return "a '.' or '..' part"
    if segment.startswith(".") or folded.startswith("."):
        return "a hidden file or folder"
    if segment != segment.strip() or segment.endswith("."):
        return "a part that starts or ends with a space or ends with '.'"
    if len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES:
        return f"a part longer than {MAX_SEGMENT_BYTES} bytes"
    if segment.split(".", 1)[0].upper() in _WINDOWS_DEVICES:
        return f"a reserved device name ({segment.split('.', 1)[0]})"
    return None


def _is_control(ch: str) -> bool:
    # The server's rule: controls (incl. NUL, newlines), invisible format characters, line/paragraph separators and
    # lone surrogates (a file name that is not valid UTF-8 arrives as surrogate escapes).
    return unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Cs")


def is_excluded(rel: str, patterns: Iterable[str]) -> bool:
    """Whether `rel` matches one of the `sync_exclude` patterns (fnmatch, case-sensitive; `*` also crosses '/')."""
    return any(fnmatch.fnmatchcase(rel, pattern) for pattern in patterns)


def pattern_problem(pattern: str) -> str | None:
    """Why a `sync_exclude` pattern is unusable, or None."""
    if not pattern or len(pattern) > MAX_PATTERN_CHARS:
        return f"a pattern must be 1 to {MAX_PATTERN_CHARS} characters"
    if pattern.startswith("/") or "\\" in pattern:
        return "a pattern is a relative path with '/' between folders, e.g. memory/private/**"
    if any(_is_control(ch) for ch in pattern):
        return "a pattern must not hold control characters"
    return None


def content_problem(data: bytes, max_bytes: int) -> str | None:
    """Why these bytes cannot be synced as a memory file (too large, NUL, not UTF-8), or None."""
    if len(data) > max_bytes:
        return f"larger than {_size(max_bytes)}"
    if b"\x00" in data:
        return "holds a NUL byte (binary, not text)"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return "not UTF-8 text"
    return None


def _size(count: int) -> str:
    return f"{count // (1024 * 1024)} MiB" if count % (1024 * 1024) == 0 else f"{count} bytes"


def safe_target(project: Path, rel: str) -> Path:
    """Where the memory file `rel` lives under `project`, refusing (`UnsafePath`) a name that breaks the rules and any
    folder between the project and the file, or the file itself, that is a symlink or not what it should be."""
    problem = name_problem(rel)
    if problem:
        raise UnsafePath(f"{rel!r}: {problem}")
    current = project
    parts = rel.split("/")
    for part in parts[:-1]:
        current = current / part
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            return project.joinpath(*parts)  # the rest does not exist yet: nothing to follow
        if stat.S_ISLNK(info.st_mode):
            raise UnsafePath(f"{rel}: {current.relative_to(project)} is a symlink; sync never follows symlinks")
        if not stat.S_ISDIR(info.st_mode):
            raise UnsafePath(f"{rel}: {current.relative_to(project)} is not a folder")
    target = current / parts[-1]
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        return target
    if stat.S_ISLNK(info.st_mode):
        raise UnsafePath(f"{rel} is a symlink; sync never follows symlinks")
    if not stat.S_ISREG(info.st_mode):
        raise UnsafePath(f"{rel} is not a regular file")
    return target
