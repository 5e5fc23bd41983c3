"""Claude Code's session files for one project: where they are, which really ran in the project, and reading one.

Claude Code appends one JSON object per line to `<config>/projects/<munged cwd>/<session id>.jsonl`. The munging is
lossy (`/a/b-c` and `/a/b/c` share a folder) and has changed between releases, so every spelling is tried and each
session's own `cwd` has the last word. Nothing here follows a symlink to a session file or folder. What the lines
mean is `client_proxy.transcripts.lines`; the markdown made of them, `client_proxy.transcripts.render`.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePath
from typing import BinaryIO, Final

from client_proxy.errors import ProxyError
from client_proxy.transcripts.lines import LineReader, Transcript
from syncproto.content import NotRegularFile, open_regular

# One line, its newline included (a tool result with an image runs to a few MiB). A longer line is skipped unread,
# a chunk at a time, so a session goes on uploading however large its file grows.
MAX_LINE_BYTES: Final = 16 * 1024 * 1024
_SKIP_CHUNK: Final = 1024 * 1024  # what skipping a longer line holds in memory at once
# Claude Code cuts a munged folder name to 200 characters and appends a hash of the path we cannot recompute.
_MAX_MUNGED_CHARS: Final = 200
_LEGACY_SEPARATORS: Final = re.compile(r"[/.\\:]")  # older releases replaced only these


class TranscriptError(ProxyError):
    """A transcript file that cannot be read at all: missing, a symlink or not a regular file."""


def claude_home(environ: Mapping[str, str]) -> Path:
    """Claude Code's configuration folder: `CLAUDE_CONFIG_DIR` when set and non-empty, else `~/.claude`."""
    configured = environ.get("CLAUDE_CONFIG_DIR", "")
    if configured:
        return Path(configured)
    home = environ.get("HOME", "")
    return (Path(home) if home else Path.home()) / ".claude"


def munged_name(path: str) -> str:
    """The folder name current Claude Code releases give a project: every character but an ASCII letter or digit
    becomes `-`, counted in UTF-16 units as JavaScript does (so a character beyond the BMP gives two dashes)."""
    return "".join(c if c.isascii() and c.isalnum() else "--" if ord(c) > 0xFFFF else "-" for c in path)


def transcript_folders(project: Path, environ: Mapping[str, str]) -> list[Path]:
    """The existing folders that may hold `project`'s sessions: both mungings of its real path and of the path as
    given. Different projects can munge to one name, so a reader still checks each session's `cwd` (`belongs_to`)."""
    projects = claude_home(environ) / "projects"
    names: dict[str, None] = {}
    for spelling in (os.path.realpath(project), os.path.abspath(project)):
        current = munged_name(spelling)
        names[current] = None
        names[_LEGACY_SEPARATORS.sub("-", spelling)] = None
        if len(current) > _MAX_MUNGED_CHARS:
            names.update(dict.fromkeys(_hashed_names(projects, current[:_MAX_MUNGED_CHARS] + "-")))
    return [projects / name for name in names if _is_real_dir(projects / name)]


def _hashed_names(projects: Path, prefix: str) -> list[str]:
    try:
        return sorted(name for name in os.listdir(projects) if name.startswith(prefix))
    except OSError:
        return []


def _is_real_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def session_files(folders: Iterable[Path]) -> list[Path]:
    """The `*.jsonl` regular files at the top of each folder, sorted by path. Symlinks are never followed, and the
    per-session side folders (`<id>/subagents/`, `<id>/tool-results/`) are not entered."""
    found: list[Path] = []
    for folder in folders:
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    if entry.name.endswith(".jsonl") and stat.S_ISREG(entry.stat(follow_symlinks=False).st_mode):
                        found.append(Path(entry.path))
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise TranscriptError(f"cannot list Claude Code sessions in {folder}: {exc.strerror}") from exc
    return sorted(found)


def belongs_to(transcript: Transcript, project: Path) -> bool:
    """Whether the session ran in `project` or below it; one without a `cwd` is given the benefit of the doubt,
    since only its folder name (which matched) says where it ran."""
    if transcript.cwd is None:
        return True
    roots = {PurePath(os.path.realpath(project)), PurePath(os.path.abspath(project))}
    for spelling in {os.path.normpath(transcript.cwd), os.path.realpath(transcript.cwd)}:
        cwd = PurePath(spelling)
        if any(cwd == root or root in cwd.parents for root in roots):
            return True
    return False


def is_empty(transcript: Transcript) -> bool:
    """True when nobody said anything: no user or assistant text (only commands, summaries or tool calls)."""
    return not any(m.role in ("user", "assistant") and m.text for m in transcript.messages)


def read_transcript(path: Path, *, max_line_bytes: int = MAX_LINE_BYTES) -> Transcript:
    """Read the complete lines of one session file; one longer than `max_line_bytes` is skipped and counted in
    `bad_lines`. A last line without its newline is still being written: it is left for the next read, and
    `complete_bytes` stops before it."""
    try:
        fd, info = open_regular(path)
    except NotRegularFile:
        raise TranscriptError(f"{path} is not a regular file") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise TranscriptError(f"{path} is a symlink; session files are never read through links") from exc
        raise TranscriptError(f"cannot open {path}: {exc.strerror}") from exc
    reader = LineReader()
    complete = lines = 0
    try:
        with os.fdopen(fd, "rb") as handle:
            remaining = info.st_size  # what was there when we looked: a file still growing is read next time
            while remaining > 0:
                raw = handle.readline(min(remaining, max_line_bytes))
                if raw.endswith(b"\n"):
                    length = len(raw)
                    reader.feed(raw)
                elif len(raw) == max_line_bytes < remaining and (skipped := _skip_line(handle, len(raw), remaining)):
                    length = skipped
                    reader.too_long()
                else:  # the last line, not written to its end yet
                    break
                remaining -= length
                complete += length
                lines += 1
    except OSError as exc:
        raise TranscriptError(f"cannot read {path}: {exc.strerror}") from exc
    return reader.finish(path.stem, complete_bytes=complete, line_count=lines)


def _skip_line(handle: BinaryIO, read: int, remaining: int) -> int | None:
    """The length of the line whose first `read` bytes were read, reading its rest a chunk at a time and keeping
    none of it; None when the `remaining` bytes end before its newline (it is still being written)."""
    while read < remaining:
        chunk = handle.readline(min(remaining - read, _SKIP_CHUNK))
        if not chunk:
            return None
        read += len(chunk)
        if chunk.endswith(b"\n"):
            return read
    return None
