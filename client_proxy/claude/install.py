"""`memory-proxy install-claude`: the files `settings_edit` computes, read and written safely.

A file that is not valid JSON, or whose shape we cannot edit, is refused with a clear error and left untouched;
so is one holding a number no JSON reader keeps (`1e400` would come back as `Infinity`, which is not JSON), one
nested deeper than `MAX_JSON_DEPTH`, and one its owner may not write (read-only: its mode bits say so, as they do
for root too). Nothing is written unless both files' new bytes could be computed, and it is all or nothing: when
the second file cannot be written, the first gets its old bytes and mode back (or goes, if install created it).
Each write is atomic (a new file renamed over the old, keeping its mode; through a symlink, the file it points to
is replaced). Just before it, the file is read again: if it is no longer what was read (Claude Code or an editor
saved it meanwhile), everything is computed again from the new content, up to `MAX_TRIES` times. Files are
written back with two-space indentation, so only the layout of a hand-formatted file may change, never a value or
the order of keys (a lone surrogate, valid in JSON only as an escape, is written back as its escape).

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
MAX_JSON_DEPTH: Final = 100  # levels of objects and lists; Claude Code's own settings use a handful
MAX_TRIES: Final = 3  # computations in a row that another program's edit may overtake before install gives up
NEW_FILE_MODE: Final = 0o644
_LONE_SURROGATE: Final = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class Change:
    path: Path
    status: str  # "added", "updated", "removed", "unchanged", "absent"


@dataclass(frozen=True)
class _File:
    """A settings file as read: its bytes, its permission bits (of the file a symlink points to), its JSON."""

    data: bytes
    mode: int
    document: Json


@dataclass(frozen=True)
class _Plan:
    """One file's change, computed in full before any file is touched."""

    change: Change
    old: _File | None
    data: bytes | None = None  # the new content; None: nothing to write
    delete: bool = False

    @property
    def writes(self) -> bool:
        return self.data is not None or self.delete


class _ChangedMeanwhile(Exception):
    """A file is no longer what install read (another program saved it): compute again."""


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
    for _ in range(MAX_TRIES):
        plans = _plans(settings_path, mcp_path, index, remove, records)
        try:
            _carry_out(plans, records)
        except _ChangedMeanwhile:
            continue
        if plans[1].delete:
            with contextlib.suppress(OSError):  # `.claude/`, emptied by that removal; with the user's files, it stays
                settings_path.parent.rmdir()
        return [plan.change for plan in plans]
    raise ProxyError(
        f"{settings_path} or {mcp_path} kept changing while install-claude ran ({MAX_TRIES} tries): run it again "
        "when nothing else is saving them; nothing was changed"
    )


def _plans(settings_path: Path, mcp_path: Path, index: str | None, remove: bool, records: Path | None) -> list[_Plan]:
    """Both files' changes, `.mcp.json`'s first; refused (nothing written) when either cannot be made."""
    settings_file, mcp_file = _read(settings_path), _read(mcp_path)
    settings = settings_file.document if settings_file else None
    mcp = mcp_file.document if mcp_file else None
    try:
        if remove:
            new_settings = settings_edit.remove_hooks(settings) if settings is not None else None
            new_mcp = settings_edit.remove_server(mcp) if mcp is not None else None
        else:
            new_settings = settings_edit.add_hooks(settings if settings is not None else {})
            new_mcp = settings_edit.add_server(mcp if mcp is not None else {}, index)
    except SettingsFormatError as exc:
        raise SettingsFormatError(f"{exc}; nothing was changed") from None
    plans = [_plan(mcp_path, mcp_file, new_mcp, records), _plan(settings_path, settings_file, new_settings, records)]
    for plan in plans:
        if plan.writes and plan.old is not None and not plan.old.mode & stat.S_IWUSR:
            raise ProxyError(
                f"{plan.change.path} is read-only (mode {plan.old.mode:04o}): make it writable (chmod u+w) for "
                "install-claude to change it; nothing was changed"
            )
    return plans


def read_json(path: Path, max_bytes: int = MAX_SETTINGS_BYTES) -> Json | None:
    """The JSON object in `path`, None when there is no such file; `SettingsFormatError` for anything else."""
    file = _read(path, max_bytes)
    return file.document if file else None


def _read(path: Path, max_bytes: int = MAX_SETTINGS_BYTES) -> _File | None:
    read = _read_bytes(path, max_bytes)
    if read is None:
        return None
    data, mode = read
    document = _parse(path, data)
    if not isinstance(document, dict):
        raise SettingsFormatError(f"{path} must hold a JSON object; nothing was changed")
    return _File(data, mode, document)


def _read_bytes(path: Path, max_bytes: int = MAX_SETTINGS_BYTES) -> tuple[bytes, int] | None:
    """The bytes of `path` and its permission bits, None when there is no such file."""
    try:  # follows a symbolic link (settings kept in a dotfiles repository); O_NONBLOCK: a FIFO must not hang us
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ProxyError(f"cannot read {path}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SettingsFormatError(f"{path} is not a regular file; nothing was changed")
        data = read_capped(fd, max_bytes)
    except OSError as exc:
        raise ProxyError(f"cannot read {path}: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise SettingsFormatError(f"{path} is larger than {max_bytes // (1024 * 1024)} MiB; nothing was changed")
    return data, info.st_mode & 0o777


def _parse(path: Path, data: bytes) -> Any:
    """The JSON in `data`; `SettingsFormatError` naming the fault when it is not JSON we can write back as read."""
    try:
        document = json.loads(data.decode("utf-8"), parse_float=_finite, parse_constant=_not_a_number)
        if _deeper_than(document, MAX_JSON_DEPTH):  # copying, comparing and writing it back would overflow the stack
            raise RecursionError
        return document
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


def _deeper_than(document: Any, limit: int) -> bool:
    """Whether objects and lists in `document` nest more than `limit` levels (the document itself is level 1)."""
    stack = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        for child in children:
            if isinstance(child, dict | list):
                if depth == limit:
                    return True
                stack.append((child, depth + 1))
    return False


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


def _plan(path: Path, old: _File | None, new: Json | None, records: Path | None) -> _Plan:
    if new is None:
        return _Plan(Change(path, "absent"), old)
    if old is not None and new == old.document:
        return _Plan(Change(path, "unchanged"), old)
    if not new and old is not None and records is not None and _record(records, path).exists():
        return _Plan(Change(path, "removed"), old, delete=True)  # made by install, emptied by it: it goes
    status = "added" if old is None else "updated" if _has_ours(new) else "removed"
    return _Plan(Change(path, status), old, render(new))


def _carry_out(plans: list[_Plan], records: Path | None) -> None:
    """Write every plan, or none: on any failure the files already written get their old content back."""
    done: list[_Plan] = []
    made: list[Path] = []  # folders made for a new file
    place = plans[0].change.path
    try:
        for plan in plans:
            if not plan.writes:
                continue
            place = plan.change.path
            now = _read_bytes(place)  # Claude Code may have saved the file since we read it
            if (now[0] if now else None) != (plan.old.data if plan.old else None):
                raise _ChangedMeanwhile
            _replace(plan, made)
            done.append(plan)
            if records is not None:
                place = _record(records, plan.change.path)
                _note(plan, records)
    except BaseException as exc:
        undone = _undo(done, made, records)
        if isinstance(exc, OSError):
            raise ProxyError(f"cannot write {place}: {exc.strerror}; {undone}") from None
        raise


def _replace(plan: _Plan, made: list[Path]) -> None:
    target = Path(os.path.realpath(plan.change.path))
    if plan.delete:
        target.unlink()
        return
    assert plan.data is not None
    if not target.parent.is_dir():
        missing = [folder for folder in (target.parent, *target.parent.parents) if not folder.exists()]
        target.parent.mkdir(parents=True, exist_ok=True)
        made.extend(missing)  # innermost first
    atomic_write(target, plan.data, plan.old.mode if plan.old is not None else NEW_FILE_MODE)


def _note(plan: _Plan, records: Path) -> None:
    """Keep the record of the files install created in step with the plan that was carried out."""
    if plan.delete:
        _record(records, plan.change.path).unlink(missing_ok=True)
    elif plan.old is None:
        _note_created(records, plan.change.path)


def _undo(done: list[_Plan], made: list[Path], records: Path | None) -> str:
    """Put the files of `done` back as they were read; what the user is told about that."""
    try:
        for plan in reversed(done):
            target = Path(os.path.realpath(plan.change.path))
            if plan.old is None:  # install created it
                target.unlink(missing_ok=True)
                if records is not None:
                    _record(records, plan.change.path).unlink(missing_ok=True)
            else:
                atomic_write(target, plan.old.data, plan.old.mode)
                if plan.delete and records is not None:
                    _note_created(records, plan.change.path)
        for folder in made:
            with contextlib.suppress(OSError):  # one the user has put something into meanwhile stays
                folder.rmdir()
    except OSError as exc:
        return f"putting back {exc.filename or done[0].change.path} failed too ({exc.strerror}): check it"
    return "nothing was changed"


def _record(records: Path, path: Path) -> Path:
    """The note that install created the file at `path` (named by its real path's digest)."""
    return records / (hashlib.sha256(os.fsencode(os.path.realpath(path))).hexdigest()[:32] + ".created")


def _note_created(records: Path, path: Path) -> None:
    records.mkdir(parents=True, exist_ok=True, mode=0o700)
    atomic_write(_record(records, path), os.fsencode(os.path.realpath(path)) + b"\n", 0o600, durable=False)


def _has_ours(document: Json) -> bool:
    return bool(settings_edit.installed_hooks(document)) or settings_edit.registered_server(document) is not None
