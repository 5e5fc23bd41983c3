"""Which files of a project folder are synced, and where a path named by the server may be written.

The name rules are the server's own (`syncproto.paths`, the one copy both sides import): a local name the server
would refuse is never pushed, and a server path that breaks them is never written. Everything here is pure except
`safe_target`, which looks (lstat only) at the folders between the project and the file.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from client_proxy.errors import ProxyError
from syncproto.content import content_problem
from syncproto.paths import MEMORY_DIR, ROOT_FILES, is_control, memory_folders
from syncproto.paths import is_memory_file as is_memory_path
from syncproto.paths import synced_path_problem as name_problem
from syncproto.wire import MAX_FILE_BYTES as DEFAULT_MAX_FILE_BYTES  # the server's own cap

__all__ = [
    "DEFAULT_MAX_FILE_BYTES",
    "MEMORY_DIR",
    "ROOT_FILES",
    "UnsafePathError",
    "content_problem",
    "is_excluded",
    "is_memory_path",
    "memory_folders",
    "name_problem",
    "pattern_problem",
    "safe_target",
]

MAX_PATTERN_CHARS = 512


class UnsafePathError(ProxyError):
    """A path that must not be read or written here: outside the memory files, or reached through a symlink."""


def is_excluded(rel: str, patterns: Iterable[str]) -> bool:
    """Whether `rel` matches one of the `sync_exclude` patterns (fnmatch, case-sensitive; `*` also crosses '/')."""
    return any(fnmatch.fnmatchcase(rel, pattern) for pattern in patterns)


def pattern_problem(pattern: str) -> str | None:
    """Why a `sync_exclude` pattern is unusable, or None."""
    if not pattern or len(pattern) > MAX_PATTERN_CHARS:
        return f"a pattern must be 1 to {MAX_PATTERN_CHARS} characters"
    if pattern.startswith("/") or "\\" in pattern:
        return "a pattern is a relative path with '/' between folders, e.g. memory/private/**"
    if any(is_control(ch) for ch in pattern):
        return "a pattern must not hold control characters"
    return None


def safe_target(project: Path, rel: str) -> Path:
    """Where the memory file `rel` lives under `project`, refusing (`UnsafePathError`) a name that breaks the rules
    and any folder between the project and the file, or the file itself, that is a symlink or not what it should
    be."""
    problem = name_problem(rel)
    if problem:
        raise UnsafePathError(f"{rel!r}: {problem}")
    current = project
    parts = rel.split("/")
    for part in parts[:-1]:
        current = current / part
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            return project.joinpath(*parts)  # the rest does not exist yet: nothing to follow
        if stat.S_ISLNK(info.st_mode):
            raise UnsafePathError(f"{rel}: {current.relative_to(project)} is a symlink; sync never follows symlinks")
        if not stat.S_ISDIR(info.st_mode):
            raise UnsafePathError(f"{rel}: {current.relative_to(project)} is not a folder")
    target = current / parts[-1]
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        return target
    if stat.S_ISLNK(info.st_mode):
        raise UnsafePathError(f"{rel} is a symlink; sync never follows symlinks")
    if not stat.S_ISREG(info.st_mode):
        raise UnsafePathError(f"{rel} is not a regular file")
    return target
