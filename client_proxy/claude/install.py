"""`memory-proxy install-claude`: the files `settings_edit` computes, read and written safely.

A file that is not valid JSON, or whose shape we cannot edit, is refused with a clear error and left untouched;
nothing is written unless both files could be computed. Each write is atomic (a new file renamed over the old,
keeping its mode; through a symlink, the file it points to is replaced). Files are written back with two-space
indentation, so only the layout of a hand-formatted file may change, never a value or the order of keys.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from channel.files import atomic_write
from client_proxy.claude import settings_edit
from client_proxy.claude.settings_edit import Json, SettingsFormatError
from client_proxy.errors import ProxyError
from syncproto.content import read_capped

SETTINGS_FILE: Final = Path(".claude") / "settings.json"
LOCAL_SETTINGS_FILE: Final = Path(".claude") / "settings.local.json"
MCP_FILE: Final = Path(".mcp.json")
MAX_SETTINGS_BYTES: Final = 4 * 1024 * 1024
NEW_FILE_MODE: Final = 0o644


@dataclass(frozen=True)
class Change:
    path: Path
    status: str  # "added", "updated", "removed", "unchanged", "absent"


def install(project: Path, index: str | None, *, remove: bool = False, local: bool = False) -> list[Change]:
    """Register memory-proxy with Claude Code for `project` (or take it out again, with `remove`)."""
    if not project.is_dir():
        raise ProxyError(f"no project folder {project}: pass --project DIR or run from the project folder")
    settings_path = project / (LOCAL_SETTINGS_FILE if local else SETTINGS_FILE)
    mcp_path = project / MCP_FILE
    settings, mcp = read_json(settings_path), read_json(mcp_path)
    try:
        if remove:
            new_settings = settings_edit.remove_hooks(settings) if settings is not None else None
            new_mcp = settings_edit.remove_server(mcp) if mcp is not None else None
        else:
            new_settings = settings_edit.add_hooks(settings if settings is not None else {})
            new_mcp = settings_edit.add_server(mcp if mcp is not None else {}, index)
    except SettingsFormatError as exc:
        raise SettingsFormatError(f"{exc}; nothing was changed") from None
    changes = [_apply(mcp_path, mcp, new_mcp), _apply(settings_path, settings, new_settings)]
    if changes[1].status == "removed" and not settings_path.exists():
        with contextlib.suppress(OSError):  # `.claude/`, emptied by that removal; with the user's files in it, it stays
            settings_path.parent.rmdir()
    return changes


def read_json(path: Path) -> Json | None:
    """The JSON object in `path`, None when there is no such file; `SettingsFormatError` for anything else."""
    try:  # follows a symbolic link (settings kept in a dotfiles repository); O_NONBLOCK: a FIFO must not hang us
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ProxyError(f"cannot read {path}: {exc.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SettingsFormatError(f"{path} is not a regular file; nothing was changed")
        data = read_capped(fd, MAX_SETTINGS_BYTES)
    except OSError as exc:
        raise ProxyError(f"cannot read {path}: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_SETTINGS_BYTES:
        raise SettingsFormatError(f"{path} is larger than {MAX_SETTINGS_BYTES // (1024 * 1024)} MiB; nothing changed")
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        where = f" (line {exc.lineno}, column {exc.colno})" if isinstance(exc, json.JSONDecodeError) else ""
        raise SettingsFormatError(
            f"{path} is not valid JSON{where}: fix or move it, then run this again; nothing was changed"
        ) from None
    if not isinstance(document, dict):
        raise SettingsFormatError(f"{path} must hold a JSON object; nothing was changed")
    return document


def render(document: Mapping[str, Any]) -> bytes:
    return (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _apply(path: Path, old: Json | None, new: Json | None) -> Change:
    if new is None:
        return Change(path, "absent")
    if new == old:
        return Change(path, "unchanged")
    target = Path(os.path.realpath(path))
    if not new and old is not None:  # our removal left nothing: the file goes, as before it was made
        target.unlink()
        return Change(path, "removed")
    target.parent.mkdir(parents=True, exist_ok=True)
    mode = os.stat(target).st_mode & 0o777 if old is not None else NEW_FILE_MODE
    atomic_write(target, render(new), mode)
    status = "added" if old is None else "updated" if _has_ours(new) else "removed"
    return Change(path, status)


def _has_ours(document: Json) -> bool:
    return bool(settings_edit.installed_hooks(document)) or settings_edit.registered_server(document) is not None
