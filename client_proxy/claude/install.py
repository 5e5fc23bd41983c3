"""`memory-proxy install-claude`: the files `settings_edit` computes, read and written safely.

A file that is not valid JSON, or whose shape we cannot edit, is refused with a clear error and left untouched;
so is one holding a number no JSON reader keeps (`1e400` would come back as `Infinity`, which is not JSON).
Nothing is written unless both files' new bytes could be computed. Each write is atomic (a new file renamed over
the old, keeping its mode; through a symlink, the file it points to is replaced). Files are written back with
two-space indentation, so only the layout of a hand-formatted file may change, never a value or the order of keys
(a lone surrogate, valid in JSON only as an escape, is written back as its escape).

A file install creates is noted in `records` (a folder of the proxy's state); `--remove` deletes a file its
removal leaves empty only when it is so noted, so a file the user made, even an empty one, is never deleted.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
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
_LONE_SURROGATE: Final = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class Change:
    path: Path
    status: str  # "added", "updated", "removed", "unchanged", "absent"


@dataclass(frozen=True)
class _Plan:
    """One file's change, computed in full before any file is touched."""

    change: Change
    old: Json | None
    data: bytes | None = None  # the new content; None: nothing to write
    delete: bool = False


class _NumberError(ValueError):
    """A JSON number Python's reader cannot keep as written (infinite as a float), or not a JSON number at all."""


def install(
    project: Path, index: str | None, *, remove: bool = False, local: bool = False, records: Path | None = None
) -> list[Change]:
    """Register memory-proxy with Claude Code for `project` (or take it out again, with `remove`). `records` is
    where the files install creates are noted (None: nothing is noted, and `remove` deletes no file)."""
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
    plans = [_plan(mcp_path, mcp, new_mcp, records), _plan(settings_path, settings, new_settings, records)]
    for plan in plans:
        _carry_out(plan, records)
    if plans[1].delete:
        with contextlib.suppress(OSError):  # `.claude/`, emptied by that removal; with the user's files in it, it stays
            settings_path.parent.rmdir()
    return [plan.change for plan in plans]


def read_json(path: Path, max_bytes: int = MAX_SETTINGS_BYTES) -> Json | None:
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
        data = read_capped(fd, max_bytes)
    except OSError as exc:
        raise ProxyError(f"cannot read {path}: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise SettingsFormatError(f"{path} is larger than {max_bytes // (1024 * 1024)} MiB; nothing was changed")
    document = _parse(path, data)
    if not isinstance(document, dict):
        raise SettingsFormatError(f"{path} must hold a JSON object; nothing was changed")
    return document


def _parse(path: Path, data: bytes) -> Any:
    """The JSON in `data`; `SettingsFormatError` naming the fault when it is not JSON we can write back as read."""
    try:
        return json.loads(data.decode("utf-8"), parse_float=_finite, parse_constant=_not_a_number)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        where = f" (line {exc.lineno}, column {exc.colno})" if isinstance(exc, json.JSONDecodeError) else ""
        fault = f"is not valid JSON{where}"
    except _NumberError as exc:
        fault = f"holds {exc}"
    except ValueError:  # an integer past the interpreter's digit limit
        fault = "holds an integer too long to read"
    except RecursionError:
        fault = "is nested too deeply to read"
    raise SettingsFormatError(f"{path} {fault}: fix or move it, then run this again; nothing was changed")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):  # written back it would be `Infinity`: not JSON, and Claude Code could not read the file
        raise _NumberError(f"the number {text[:40]}, beyond the range JSON readers keep")
    return value


def _not_a_number(text: str) -> float:
    raise _NumberError(f"{text}, which is not a JSON number")


def render(document: Mapping[str, Any]) -> bytes:
    """The file's bytes: two-space-indented UTF-8 JSON; a lone surrogate (no UTF-8 for it) as its JSON escape."""
    text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    return _LONE_SURROGATE.sub(lambda match: f"\\u{ord(match.group()):04x}", text).encode("utf-8")


def _plan(path: Path, old: Json | None, new: Json | None, records: Path | None) -> _Plan:
    if new is None:
        return _Plan(Change(path, "absent"), old)
    if new == old:
        return _Plan(Change(path, "unchanged"), old)
    if not new and old is not None and records is not None and _record(records, path).exists():
        return _Plan(Change(path, "removed"), old, delete=True)  # made by install, emptied by it: it goes
    status = "added" if old is None else "updated" if _has_ours(new) else "removed"
    return _Plan(Change(path, status), old, render(new))


def _carry_out(plan: _Plan, records: Path | None) -> None:
    path = plan.change.path
    target = Path(os.path.realpath(path))
    if plan.delete:
        target.unlink()
        assert records is not None
        _record(records, path).unlink(missing_ok=True)
    elif plan.data is not None:
        target.parent.mkdir(parents=True, exist_ok=True)
        mode = os.stat(target).st_mode & 0o777 if plan.old is not None else NEW_FILE_MODE
        atomic_write(target, plan.data, mode)
        if plan.old is None and records is not None:
            _note_created(records, path)


def _record(records: Path, path: Path) -> Path:
    """The note that install created the file at `path` (named by its real path's digest)."""
    return records / (hashlib.sha256(os.fsencode(os.path.realpath(path))).hexdigest()[:32] + ".created")


def _note_created(records: Path, path: Path) -> None:
    records.mkdir(parents=True, exist_ok=True, mode=0o700)
    atomic_write(_record(records, path), os.fsencode(os.path.realpath(path)) + b"\n", 0o600, durable=False)


def _has_ours(document: Json) -> bool:
    return bool(settings_edit.installed_hooks(document)) or settings_edit.registered_server(document) is not None
