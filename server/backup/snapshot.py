"""A consistent copy of a live data folder, taken beside a serving server (another process) without stopping it.

Per index, SQLite's online backup copies `state.sqlite3` in one read transaction: one point in time. The mirror
files are then written from that copy, not from the disk that keeps changing: every live row names its content by
sha256, and the `versions` table holds the bytes of every memory file the mirror recorded (written in the same
transaction as the row). What it does not hold (session transcripts, which have no versions, and files recorded
before the table existed) is read from the disk and kept only if its sha256 is the one the copy records; when a
file changed in between, the whole index is copied again (`ATTEMPTS`). So the files and the state agree by
construction. A file whose disk content still differs from a recorded state that did not move between two copies
was changed behind the mirror (edited or removed by hand), not by a write in flight: its change is recorded as the
server records one it finds on a read (`Mirror.read`, as by "(disk)"), and the next copy holds the disk's content.
The search index (`index.sqlite3`) is copied the same way right after the state; where it differs from it (changes
in flight, indexed just after they were recorded), the restored server's freshness check on a search re-indexes
those files.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import apsw

from server.backup.archive import INDEX_FILES, KEY_FILES, SETTINGS, TIMESTAMPS, Member
from server.errors import BackupError, InvalidArgumentError, MemoryServerError, UnsafePathError
from server.index.store import BUSY_TIMEOUT_MS, load_vec, vec_available
from server.mirror import queries as q
from server.mirror.files import take_snapshot
from server.mirror.mirror import Mirror
from server.mirror.state import FileState, state_of
from syncproto.wire import sha256_hex

log = logging.getLogger(__name__)

ATTEMPTS = 5  # copies of one index's state before giving up on files that keep changing under it
RETRY_PAUSE = 0.2  # seconds, times the attempt number
_NO_CAP = 1 << 62  # a file is copied whatever its size: the mirror's cap is the server's business


@dataclass
class IndexCopy:
    """What one index's copy holds: its revision, its live files and the archive members."""

    name: str
    revision: int = 0
    files: int = 0
    members: list[Member] = field(default_factory=list)


def copy_database(source: Path, target: Path, *, vec: bool = False) -> bool:
    """Copy the SQLite database at `source` to `target` in one read transaction (online backup); False when
    there is no database at `source`."""
    try:
        db = apsw.Connection(str(source), flags=apsw.SQLITE_OPEN_READWRITE)  # never creates one
    except apsw.CantOpenError:
        return False
    try:
        db.set_busy_timeout(BUSY_TIMEOUT_MS)
        if vec and vec_available():
            load_vec(db)
        copy = apsw.Connection(str(target))
        try:
            with copy.backup("main", db, "main") as backup:
                while not backup.done:
                    backup.step(-1)  # every page in one step: one read transaction, one point in time
        finally:
            copy.close()
    except apsw.Error as exc:
        raise BackupError(f"cannot copy {source.name} of {source.parent.name!r}: {type(exc).__name__}") from exc
    finally:
        db.close()
    return True


def copy_index(directory: Path, work: Path, blobs: Path) -> IndexCopy:
    """A consistent copy of the index in `directory` under `work`, its files' contents in `blobs` (by sha256)."""
    name = directory.name
    blobs.mkdir(parents=True, exist_ok=True, mode=0o700)
    unmoved: set[FileState] = set()  # the states the last copy could not find the content of
    for attempt in range(1, ATTEMPTS + 1):
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True, mode=0o700)
        copied = IndexCopy(name)
        has_state = copy_database(directory / "state.sqlite3", work / "state.sqlite3")
        # At once: the server indexes a change right after recording it, so the two copies differ by the few
        # changes in flight (the restored server indexes those on its first search).
        copy_database(directory / "index.sqlite3", work / "index.sqlite3", vec=True)
        if has_state:
            changed = _copy_files(directory, work / "state.sqlite3", blobs, copied)
            if changed:
                log.info("backup: %s: %d files changed while copied; copying again", name, len(changed))
                if attempt == ATTEMPTS:
                    raise BackupError(
                        f"index {name!r}: {len(changed)} files kept changing during {ATTEMPTS} copies "
                        f"(first: {changed[0].path}); try again when the server is quieter"
                    )
                behind = [state.path for state in changed if state in unmoved]
                if behind:
                    _record_disk_changes(directory, behind)
                unmoved = set(changed)
                time.sleep(RETRY_PAUSE * attempt)
                continue
        break
    description = read_regular(directory / "index.json")
    if description is not None:
        (work / "index.json").write_bytes(description)
    for part in INDEX_FILES:
        if (work / part).is_file():
            copied.members.append(Member(f"indexes/{name}/{part}", work / part))
    return copied


def _record_disk_changes(directory: Path, paths: list[str]) -> None:
    """Record what is on disk at `paths` in the index's live state, as the server does when it reads one. A failure
    (the server writing that file at this very moment) is left to the next copy."""
    try:
        mirror = Mirror(directory)
    except (MemoryServerError, apsw.Error) as exc:
        log.warning("backup: %s: cannot record changes made on disk (%s)", directory.name, exc)
        return
    try:
        for path in paths:
            log.info("backup: %s: %s was changed on disk behind the server; recording it", directory.name, path)
            try:
                mirror.read(path)  # records the disk's content (or its absence) first
            except UnsafePathError as exc:
                raise BackupError(f"{path} cannot be read in the mirror: {exc}") from None
            except InvalidArgumentError:
                pass  # recorded, though the server cannot serve it as text (over its cap, not UTF-8)
            except (MemoryServerError, apsw.Error) as exc:
                log.warning("backup: %s: cannot record %s (%s)", directory.name, path, exc)
    finally:
        mirror.close()


def _copy_files(directory: Path, state: Path, blobs: Path, copied: IndexCopy) -> list[FileState]:
    """Put the content of every live file of the state copy in `blobs`; the states whose content was neither in
    the copy nor on the disk any more (changed since)."""
    changed: list[FileState] = []
    db = apsw.Connection(str(state))  # our own copy
    try:
        copied.revision = int(db.execute(*q.current_revision()).fetchall()[0][0])  # type: ignore[arg-type]
        for row in db.execute(*q.live_states()).fetchall():
            live = state_of(row)
            assert live.hash is not None, "live rows have a hash"
            blob = blobs / live.hash
            if not blob.exists() and not _keep_content(db, directory / "files", live.path, live.hash, blob):
                changed.append(live)
                continue
            copied.files += 1
            copied.members.append(Member(f"indexes/{copied.name}/files/{live.path}", blob))
    finally:
        db.close()
    return changed


def _keep_content(db: apsw.Connection, files_dir: Path, path: str, digest: str, blob: Path) -> bool:
    """Write the bytes whose sha256 is `digest` to `blob`: from the versions table, else from the disk if the
    file there still has that content. False when neither has it."""
    rows = db.execute("SELECT data FROM versions WHERE hash = ?", (digest,)).fetchall()
    data: bytes | None = zlib.decompress(rows[0][0]) if rows else None  # type: ignore[arg-type]
    if data is None or sha256_hex(data) != digest:
        try:
            snapshot = take_snapshot(files_dir, path, _NO_CAP)
        except UnsafePathError as exc:
            raise BackupError(f"{path} cannot be read in the mirror: {exc}") from None
        data = snapshot.data if snapshot is not None and snapshot.digest == digest else None
    if data is None:
        return False
    temp = blob.with_name(blob.name + ".tmp")
    temp.write_bytes(data)
    os.replace(temp, blob)
    return True


def read_regular(path: Path, limit: int = 16 << 20) -> bytes | None:
    """The bytes of the regular file at `path` (no link followed), None when there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BackupError(f"cannot read {path.name}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise BackupError(f"{path.name} is not a regular file; refused")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise BackupError(f"{path.name} is larger than {limit} bytes; refused")
    return data


def copy_keys(keys_dir: Path, work: Path, *, server_key: bool) -> list[Member]:
    """The server's key pair (the private key only with `server_key`) and `callers.toml`, as they are now."""
    members = []
    work.mkdir(parents=True, exist_ok=True, mode=0o700)
    for name in KEY_FILES:
        if name == "server.key" and not server_key:
            continue
        data = read_regular(keys_dir / name)
        if data is None:
            continue
        fd = os.open(work / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        members.append(Member(f"keys/{name}", work / name))
    return members


def copy_extras(data_dir: Path, work: Path, settings: str) -> list[Member]:
    """The non-secret settings (TOML text) and the handshake timestamps (a replayed handshake stays dead)."""
    members = []
    (work / SETTINGS).write_text(settings, "utf-8")
    members.append(Member(SETTINGS, work / SETTINGS))
    with contextlib.suppress(BackupError):  # a damaged timestamps file: the restored server starts without it
        stamps = read_regular(data_dir / TIMESTAMPS, 1 << 20)
        if stamps is not None:
            (work / TIMESTAMPS).write_bytes(stamps)
            members.append(Member(TIMESTAMPS, work / TIMESTAMPS))
    return members
