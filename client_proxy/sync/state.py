"""What the proxy remembers about one synced folder, kept in the user's state directory, never in the project.

One JSON file per (server URL, index, project folder), named by a short hash of the three::

    {"version": 1, "server_url": "...", "index": "notes", "project": "/home/alice/app",
     "revision": 57,                                   # the last `next` pulled
     "files": {"memory/a.md": {"base": "<sha256>", "revision": 55, "size": 120, "mtime_ns": 1732...}},
     "last_pull_at": "2026-11-23T10:15:00Z", "last_push_at": ..., "last_push_revision": 58,
     "last_error": {"at": ..., "message": ...} | null, "read_only": false,
     "conflicts": [{"path": "memory/x.md", "copy": "memory/x.conflict-alice-....md", "at": ...}],
     "rejected": {"memory/bad.md": {"hash": "<sha256 or null for a delete>", "message": ..., "at": ...}},
     "unapplied": {"memory/x.md": {"revision": 56, "message": "cannot be written (...)", "at": ...}},
     "reset_listed": ["memory/a.md", ...] | null}      # a reset listing's paths so far, until its last page

`base` is the hash this laptop last agreed with the server; `size`/`mtime_ns` (or null) are the local file's when
it was last seen to hold exactly `base`. Pending pushes are not stored: they are the files that differ from their
base (see `sync_plan`), so the offline queue survives restarts with nothing else written. `unapplied` holds the
pulled changes this laptop could not write (see `client_proxy/sync/unapplied.py`); files of older versions have none.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from channel.files import atomic_write
from client_proxy.errors import ProxyError
from client_proxy.sync.scope import name_problem
from syncproto.wire import is_content_hash

log = logging.getLogger(__name__)

STATE_VERSION = 1
MAX_CONFLICTS = 50  # the most recent ones; the copies themselves stay on disk
MAX_STATE_BYTES = 64 * 1024 * 1024


class StateCorruptError(ProxyError):
    """The state file cannot be read or does not hold a sync state for this folder."""


def state_home(env: Mapping[str, str]) -> Path:
    """`$MEMORY_PROXY_STATE_HOME`, else `$XDG_STATE_HOME/memory-proxy`, else `~/.local/state/memory-proxy`
    (a leading `~` expanded, as for the config directory)."""
    if env.get("MEMORY_PROXY_STATE_HOME"):
        return Path(env["MEMORY_PROXY_STATE_HOME"]).expanduser()
    if env.get("XDG_STATE_HOME"):
        return Path(env["XDG_STATE_HOME"]).expanduser() / "memory-proxy"
    return Path(env.get("HOME") or Path.home()) / ".local" / "state" / "memory-proxy"


def state_path(home: Path, server_url: str, index: str, project: Path, suffix: str) -> Path:
    """A state file of one (server, index, project) in `home`: a digest of the three, then `suffix`."""
    digest = hashlib.sha256(json.dumps((server_url, index, str(project))).encode("utf-8")).hexdigest()[:16]
    return home / f"{digest}{suffix}"


def utc_stamp(moment: datetime | None = None) -> str:
    """ISO 8601 in UTC to the second, as the server writes times: `2026-11-23T10:15:00Z`."""
    return (moment or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Base:
    """The version of one path this laptop last agreed with the server."""

    base: str
    revision: int
    size: int | None = None
    mtime_ns: int | None = None


@dataclass
class Unapplied:
    """A pulled change that could not be brought to disk here (a folder not writable, a name taken): the pull went
    on past it, so it is pulled again later, until it applies."""

    revision: int
    message: str
    at: str


@dataclass
class SyncState:
    """The whole persisted state of one synced folder; plain data, changed under the syncer's lock."""

    server_url: str
    index: str
    project: str
    revision: int = 0
    files: dict[str, Base] = field(default_factory=dict)
    last_pull_at: str | None = None
    last_push_at: str | None = None
    last_push_revision: int | None = None
    last_error: dict[str, str] | None = None
    read_only: bool = False
    conflicts: list[dict[str, str]] = field(default_factory=list)
    rejected: dict[str, dict[str, str | None]] = field(default_factory=dict)
    # The paths of a reset listing (the server restored from a backup) while its pages arrive: kept across restarts,
    # since only its first page says it is a reset, and only its end tells which bases the server no longer knows.
    reset_listed: list[str] | None = None
    unapplied: dict[str, Unapplied] = field(default_factory=dict)

    def add_conflict(self, path: str, copy: str, at: str) -> None:
        self.conflicts = [*self.conflicts, {"path": path, "copy": copy, "at": at}][-MAX_CONFLICTS:]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        return {"version": STATE_VERSION, **data}

    @classmethod
    def from_json(cls, data: object) -> SyncState:
        """Check every field's type and shape; `StateCorruptError` naming the first that is wrong. Entries naming a
        path the current rules refuse are dropped on their own, with one warning (`_drop_refused`)."""
        if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
            raise StateCorruptError(f"not a version {STATE_VERSION} sync state")
        state = cls(
            server_url=_typed(data, "server_url", str),
            index=_typed(data, "index", str),
            project=_typed(data, "project", str),
            revision=_revision(data.get("revision"), "revision"),
            last_pull_at=_optional(data, "last_pull_at", str),
            last_push_at=_optional(data, "last_push_at", str),
            last_push_revision=_optional(data, "last_push_revision", int),
            last_error=_string_map(data.get("last_error"), "last_error", nullable=True),
            read_only=_typed(data, "read_only", bool),
        )
        files = data.get("files")
        if not isinstance(files, dict):
            raise StateCorruptError("files must be an object")
        state.files = {path: _base(entry, path) for path, entry in files.items()}
        conflicts = data.get("conflicts")
        if not isinstance(conflicts, list):
            raise StateCorruptError("conflicts must be a list")
        state.conflicts = [_string_map(item, "conflicts", nullable=False) or {} for item in conflicts]
        rejected = data.get("rejected")
        if not isinstance(rejected, dict):
            raise StateCorruptError("rejected must be an object")
        for path, item in rejected.items():
            if not isinstance(item, dict) or not all(isinstance(v, str | None) for v in item.values()):
                raise StateCorruptError(f"rejected[{path!r}] must be an object of strings")
            state.rejected[path] = dict(item)
        listed = data.get("reset_listed")  # absent in the files of older versions
        if listed is not None and (not isinstance(listed, list) or not all(isinstance(path, str) for path in listed)):
            raise StateCorruptError("reset_listed must be a list of paths or null")
        state.reset_listed = listed
        unapplied = data.get("unapplied", {})  # absent in the files of older versions
        if not isinstance(unapplied, dict):
            raise StateCorruptError("unapplied must be an object")
        state.unapplied = {path: _unapplied(item, path) for path, item in unapplied.items()}
        dropped = _drop_refused(state)
        if dropped:
            log.warning(
                "sync state: dropped %d entries naming paths the current path rules refuse, kept the rest;"
                " those paths sync as unknown ones",
                dropped,
            )
        return state


def _typed(data: dict[str, Any], name: str, kind: type) -> Any:
    value = data.get(name)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise StateCorruptError(f"{name} must be a {kind.__name__}")
    return value


def _optional(data: dict[str, Any], name: str, kind: type) -> Any:
    return None if data.get(name) is None else _typed(data, name, kind)


def _revision(value: object, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise StateCorruptError(f"{name} must be an integer >= 0")
    return value


def _string_map(value: object, name: str, *, nullable: bool) -> dict[str, str] | None:
    if value is None and nullable:
        return None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise StateCorruptError(f"{name} must hold objects of strings")
    return dict(value)


def _drop_refused(state: SyncState) -> int:
    """Drop the entries of `state` whose paths the path rules refuse; how many there were. The rules were tightened
    since older versions saved their state: setting the whole file aside for one such path would lose every base,
    and offline edits would then be merged with none."""

    def refused(path: str) -> bool:
        # The rules alone, not the folders announced now: a fresh process knows the server's extra folders only
        # from its first pull, and whether a folder is still synced is the scan's and the pull's question.
        return name_problem(path, any_extra_folder=True) is not None

    def entries() -> int:
        return len(state.files) + len(state.rejected) + len(state.unapplied) + len(state.reset_listed or ())

    before = entries()
    state.files = {path: base for path, base in state.files.items() if not refused(path)}
    state.rejected = {path: item for path, item in state.rejected.items() if not refused(path)}
    state.unapplied = {path: item for path, item in state.unapplied.items() if not refused(path)}
    if state.reset_listed is not None:
        state.reset_listed = [path for path in state.reset_listed if not refused(path)]
    return before - entries()


def _base(entry: object, path: str) -> Base:
    if not isinstance(entry, dict) or not isinstance(entry.get("base"), str) or not is_content_hash(entry["base"]):
        raise StateCorruptError(f"files[{path!r}].base must be a sha256 hex digest")
    size, mtime = entry.get("size"), entry.get("mtime_ns")
    if not all(value is None or (isinstance(value, int) and not isinstance(value, bool)) for value in (size, mtime)):
        raise StateCorruptError(f"files[{path!r}] size and mtime_ns must be integers or null")
    return Base(entry["base"], _revision(entry.get("revision"), f"files[{path!r}].revision"), size, mtime)


def _unapplied(item: object, path: str) -> Unapplied:
    if not isinstance(item, dict) or not isinstance(item.get("message"), str) or not isinstance(item.get("at"), str):
        raise StateCorruptError(f"unapplied[{path!r}] must hold a revision, a message and a time")
    return Unapplied(_revision(item.get("revision"), f"unapplied[{path!r}].revision"), item["message"], item["at"])


class StateStore:
    """The state file of one (server, index, project): loaded once, then saved atomically whenever it changed."""

    def __init__(self, home: Path, server_url: str, index: str, project: Path) -> None:
        self.home = home
        self.identity = (server_url, index, str(project))
        self.path = state_path(home, server_url, index, project, ".json")
        self._written: bytes | None = None
        self._lock_fd: int | None = None

    def claim(self) -> bool:
        """Take the folder's sync lock (`<state>.lock`, held until `release`); False while another `memory-proxy`
        holds it. Two proxies syncing one folder (two Claude Code sessions in one project) would each keep a
        different idea of the bases in one file."""
        self._prepare_home()
        fd = os.open(self.path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._lock_fd = fd
        return True

    def claimed(self) -> bool:
        """Whether a running `memory-proxy` holds this folder's sync lock now (looks only; creates nothing)."""
        try:
            fd = os.open(self.path.with_suffix(".lock"), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    def release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing drops the flock
            self._lock_fd = None

    def fresh(self) -> SyncState:
        return SyncState(*self.identity)

    def read(self) -> SyncState | None:
        """The stored state without changing anything (for `memory-proxy status`); None when there is none yet."""
        try:
            with open(self.path, "rb") as handle:
                data = handle.read(MAX_STATE_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StateCorruptError(f"cannot read {self.path}: {exc.strerror}") from None
        if len(data) > MAX_STATE_BYTES:
            raise StateCorruptError(f"{self.path} is larger than {MAX_STATE_BYTES} bytes")
        try:
            state = SyncState.from_json(json.loads(data))
        except (ValueError, RecursionError, StateCorruptError) as exc:  # RecursionError: JSON nested too deep
            raise StateCorruptError(f"{self.path}: {exc}") from None
        if (state.server_url, state.index, state.project) != self.identity:
            raise StateCorruptError(f"{self.path} belongs to another server, index or folder")
        self._written = data
        return state

    def load(self) -> SyncState:
        """The stored state, or a fresh one; a corrupt file is moved aside with a warning (sync then starts over,
        which loses nothing: local files are pushed with no base and the server merges)."""
        try:
            return self.read() or self.fresh()
        except StateCorruptError as exc:
            aside = self.path.with_name(f"{self.path.name}.corrupt-{utc_stamp().replace(':', '')}")
            try:
                os.replace(self.path, aside)
                log.warning("sync state unusable (%s): moved aside to %s; starting over", exc, aside)
            except OSError as move:
                log.warning("sync state unusable (%s) and cannot be moved aside (%s); starting over", exc, move)
            self._written = None
            return self.fresh()

    def save(self, state: SyncState) -> None:
        """Write the state (mode 0600, in a 0700 folder) if it changed since it was last read or written."""
        data = json.dumps(state.to_json(), indent=1, sort_keys=True, ensure_ascii=False).encode("utf-8")
        if data == self._written:
            return
        self._prepare_home()
        atomic_write(self.path, data, 0o600)
        self._written = data

    def _prepare_home(self) -> None:
        if not self.home.is_dir():
            self.home.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(self.home, 0o700)  # mkdir's mode is masked by the umask
