"""A consistent copy of a live data folder, taken beside a serving server (another process) without stopping it.

Per index, SQLite's online backup copies `state.sqlite3` in one read transaction: one point in time. The mirror
files are then written from that copy, not from the disk that keeps changing: every live row names its content by
sha256, and the `versions` table holds the bytes of every memory file the mirror recorded (written in the same
transaction as the row). What it does not hold is read from the disk, once, and kept if its sha256 is the one the
copy records. When it is not:
- a session transcript (no versions: never merged) is archived as the disk holds it then, and the copy's row is made
  to say so (hash, size, lines; a tombstone when the file was removed). Its revision, and who changed it when, stay
  the copy's: transcripts have no history and are never pulled, and the copy's revision counter must stay the point
  in time it is (a laptop that synced past it sees the restored server's history restart). A laptop that uploads
  every few seconds thus never fails a backup, and the archive holds its transcript as it was a moment later.
- a memory file recorded before the versions table existed (or too large to keep a version of) must be the content
  its history names, so the whole index is copied again (`ATTEMPTS`). A write through the mirror stores the new
  bytes as a version, so the next copy has them. One whose disk content still differs from a recorded state that
  did not move between two copies was changed behind the mirror (edited or removed by hand), not by a write in
  flight: its change is recorded as the server records one it finds on a read (`Mirror.read`, as by "(disk)"), and
  the next copy holds the disk's content.
So the files and the state agree by construction. Before the first copy, every change made on disk behind the
server (a file added, edited or removed by hand) is recorded the same way, as the server does when it lists the
folder (`Mirror.reconcile_all`): a file the state has no row for yet would otherwise be in no copy at all. Only
in a state of this version's schema: one another version keeps (an older server served on while the operator
upgrades) is left at its schema, since a mirror opened on it would migrate it under that server; that server
records such changes itself when it lists the folder, and the archive holds what its state last recorded. The
copies are the backup's own, and are brought to this version's schemas once taken (`bring_up_to_date`).
The mirror's lock is a thread lock of the serving process, so the backup could only hold writers off with SQLite's
write lock, stalling every upload of the index for the whole copy; it takes none.
The search index is copied the same way right after the state: the database index.json names as live
(`index-<n>.sqlite3` once a re-chunk swapped one in, else `index.sqlite3`), copied again if a swap came in between
(a re-chunk swaps once per change of the chunking settings; writes never do), and archived as `index.sqlite3` under
an index.json that names no other. Where it differs from the state (changes in flight, indexed just after they were
recorded), the restored server's freshness check on a search re-indexes those files.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import stat
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import apsw

from server.backup.archive import INDEX_FILES, KEY_FILES, SETTINGS, TIMESTAMPS, Member
from server.callers.config import CALLERS_FILE
from server.callers.file import read_checked as read_callers_file
from server.errors import BackupError, InvalidArgumentError, MemoryServerError, UnsafePathError
from server.index.migrations import SCHEMA_VERSION as INDEX_SCHEMA
from server.index.migrations import migrate as migrate_index
from server.index.rechunk import live_database, present_database
from server.index.store import BUSY_TIMEOUT_MS, load_vec, vec_available
from server.mirror import queries as q
from server.mirror.files import Snapshot, take_snapshot
from server.mirror.mirror import Mirror
from server.mirror.state import MIGRATIONS as STATE_MIGRATIONS
from server.mirror.state import FileState, migrate_state, state_of
from syncproto.paths import is_session_file
from syncproto.wire import sha256_hex

log = logging.getLogger(__name__)

ATTEMPTS = 5  # copies of one index's state before giving up on memory files that keep changing under it
RETRY_PAUSE = 0.2  # seconds, times the attempt number
_NO_CAP = 1 << 62  # a file is copied whatever its size: the mirror's cap is the server's business
_DATABASE_KEYS = ("database", "next_database")  # index.json's names of a re-chunk's databases (server.index.rechunk)


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
    recording = (directory / "state.sqlite3").is_file() and _state_is_current(directory)
    if recording:
        _record_disk_changes(directory, None)
    unmoved: set[FileState] = set()  # the states the last copy could not find the content of
    for attempt in range(1, ATTEMPTS + 1):
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True, mode=0o700)
        copied = IndexCopy(name)
        has_state = copy_database(directory / "state.sqlite3", work / "state.sqlite3")
        # At once: the server indexes a change right after recording it, so the two copies differ by the few
        # changes in flight (the restored server indexes those on its first search).
        description = _copy_search_index(directory, work / "index.sqlite3")
        # The copies are the backup's own: brought to this version's schemas here, never the live databases.
        if has_state:
            bring_up_to_date(work / "state.sqlite3", migrate_state, len(STATE_MIGRATIONS))
        if (work / "index.sqlite3").is_file():
            bring_up_to_date(work / "index.sqlite3", migrate_index, INDEX_SCHEMA, vec=True)
        if has_state:
            changed = _copy_files(directory, work / "state.sqlite3", blobs, copied)
            if changed:
                log.info("backup: %s: %d memory files changed while copied; copying again", name, len(changed))
                if attempt == ATTEMPTS:
                    raise BackupError(
                        f"index {name!r}: {len(changed)} memory files kept changing during {ATTEMPTS} copies "
                        f"(first: {changed[0].path}); try again when the server is quieter"
                    )
                behind = [state.path for state in changed if state in unmoved]
                if behind and not recording:
                    raise BackupError(
                        f"index {name!r}: {behind[0]} was changed on disk behind the server, and its state (another "
                        "version's, which this backup leaves as it is) keeps no copy of what it records: let that "
                        "server record the change (it does when it lists the folder: a search, a sync) and back up "
                        "again"
                    )
                if behind:
                    _record_disk_changes(directory, behind)
                unmoved = set(changed)
                time.sleep(RETRY_PAUSE * attempt)
                continue
        break
    if description is not None:
        (work / "index.json").write_text(json.dumps(description), "utf-8")
    for part in INDEX_FILES:
        if (work / part).is_file():
            copied.members.append(Member(f"indexes/{name}/{part}", work / part))
    return copied


def _copy_search_index(directory: Path, target: Path) -> dict[str, Any] | None:
    """Copy the search index's live database to `target`; the index's description (index.json) as archived: the
    one the copy was named by, without its database names (the copy is the archive's `index.sqlite3`). None when
    the index has no description."""
    for _ in range(ATTEMPTS):
        target.unlink(missing_ok=True)
        info = _description(directory)
        live = live_database(info)
        copy_database(directory / live, target, vec=True)
        if live_database(_description(directory)) == live:
            if info is None:
                return None
            return {key: value for key, value in info.items() if key not in _DATABASE_KEYS}
        log.info(
            "backup: %s: a re-chunk swapped the search index in while it was copied; copying again", directory.name
        )
    raise BackupError(f"index {directory.name!r}: its search index was swapped during {ATTEMPTS} copies; try again")


def _description(directory: Path) -> dict[str, Any] | None:
    """The index's index.json, None when there is none. One that is not a JSON object names the newest database
    in the folder, as the engine rewrites it (`present_database`)."""
    data = read_regular(directory / "index.json")
    if data is None:
        return None
    try:
        info = json.loads(data)
    except ValueError:  # not JSON, or not UTF-8
        info = None
    return info if isinstance(info, dict) else {"database": present_database(directory)}


def schema_version(path: Path) -> int:
    """The schema version (`PRAGMA user_version`) of the database at `path`, read without writing to it."""
    db = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        db.set_busy_timeout(BUSY_TIMEOUT_MS)
        return int(db.execute("PRAGMA user_version").fetchall()[0][0])  # type: ignore[arg-type]
    finally:
        db.close()


def bring_up_to_date(
    copy: Path, migrate: Callable[[apsw.Connection], object], known: int, *, vec: bool = False
) -> None:
    """Run this version's migrations (`migrate`, reaching schema `known`) on the backup's own `copy` of a database an
    older server wrote. One a newer server wrote stays as it is: verify and restore refuse it, naming the cause."""
    db = apsw.Connection(str(copy))
    try:
        db.set_busy_timeout(BUSY_TIMEOUT_MS)
        if vec and vec_available():
            load_vec(db)
        if int(db.execute("PRAGMA user_version").fetchall()[0][0]) < known:  # type: ignore[arg-type]
            migrate(db)
    except (apsw.Error, MemoryServerError) as exc:
        raise BackupError(f"cannot bring the copy of {copy.name} up to date ({type(exc).__name__})") from exc
    finally:
        db.close()


def _state_is_current(directory: Path) -> bool:
    """Whether the live state is of this version's schema, so the backup may record changes made on disk in it as
    the server does. Another version's is left as it is: opening a mirror on it would migrate an older server's
    state under it (that server then records changes without their history, and refuses every write after a
    restart); that server records such changes itself when it lists the folder."""
    try:
        found = schema_version(directory / "state.sqlite3")
    except apsw.Error as exc:
        raise BackupError(f"cannot read state.sqlite3 of {directory.name!r}: {type(exc).__name__}") from exc
    known = len(STATE_MIGRATIONS)
    if found != known:
        log.warning(
            "backup: %s: its state was written by %s version (schema %d; this one knows %d) and is left as it is; "
            "files changed on disk behind that server are archived as its state last recorded them",
            directory.name,
            "an older" if found < known else "a newer",
            found,
            known,
        )
    return found == known


def _record_disk_changes(directory: Path, paths: list[str] | None) -> None:
    """Record what is on disk at `paths` (None: in the whole folder) in the index's live state, as the server does
    when it reads a file (or lists the folder). A failure (the server writing that file at this very moment) is
    left to the next copy, or to the server's next listing."""
    try:
        mirror = Mirror(directory)
    except (MemoryServerError, apsw.Error) as exc:
        log.warning("backup: %s: cannot record changes made on disk (%s)", directory.name, exc)
        return
    try:
        if paths is None:
            try:
                mirror.reconcile_all()
            except (MemoryServerError, apsw.Error) as exc:
                log.warning("backup: %s: cannot record changes made on disk (%s)", directory.name, exc)
        for path in paths or ():
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
    """Put the content of every live file of the state copy in `blobs`; the states of the memory files whose
    content was neither in the copy nor on the disk any more (changed since)."""
    changed: list[FileState] = []
    db = apsw.Connection(str(state))  # our own copy
    try:
        copied.revision = int(db.execute(*q.current_revision()).fetchall()[0][0])  # type: ignore[arg-type]
        for row in db.execute(*q.live_states()).fetchall():
            live = state_of(row)
            assert live.hash is not None, "live rows have a hash"
            kept = live if (blobs / live.hash).exists() else _keep_content(db, directory / "files", live, blobs)
            if kept is None:
                changed.append(live)
            elif kept.hash is not None:
                copied.files += 1
                copied.members.append(Member(f"indexes/{copied.name}/files/{live.path}", blobs / kept.hash))
    finally:
        db.close()
    return changed


def _keep_content(db: apsw.Connection, files_dir: Path, live: FileState, blobs: Path) -> FileState | None:
    """Write the content of the live file `live` to `blobs` (named by its sha256), from the copy's versions table
    or else from the disk; its state as archived. A transcript the disk now holds otherwise is archived as the disk
    holds it, and so described by the copy (`_describe`). None for a memory file whose content is in neither."""
    assert live.hash is not None, "live rows have a hash"
    rows = db.execute("SELECT data FROM versions WHERE hash = ?", (live.hash,)).fetchall()
    data: bytes | None = zlib.decompress(rows[0][0]) if rows else None  # type: ignore[arg-type]
    if data is not None and sha256_hex(data) == live.hash:
        _write_blob(blobs / live.hash, data)
        return live
    try:
        snapshot = take_snapshot(files_dir, live.path, _NO_CAP)  # read once: what is archived is what was read
    except UnsafePathError as exc:
        raise BackupError(f"{live.path} cannot be read in the mirror: {exc}") from None
    if snapshot is None or snapshot.digest != live.hash:
        if not is_session_file(live.path):
            return None
        log.info("backup: %s changed while copied; archived as the disk holds it now", live.path)
        live = _describe(db, live, snapshot)
    if snapshot is not None:
        assert snapshot.data is not None, "read without a size cap"
        _write_blob(blobs / snapshot.digest, snapshot.data)
    return live


def _describe(db: apsw.Connection, live: FileState, snapshot: Snapshot | None) -> FileState:
    """Make the copy's row of the transcript `live` describe `snapshot`, what the disk holds of it (None: removed,
    a tombstone); the new state. Its revision and who changed it when stay the row's (see the module's doc)."""
    if snapshot is None:
        digest, size, mtime_ns, lines = None, 0, 0, 0
    else:
        digest, size, mtime_ns, lines = snapshot.digest, snapshot.size, snapshot.mtime_ns, snapshot.lines
    with db:
        db.execute(
            *q.upsert_file(live.path, digest, size, mtime_ns, lines, live.revision, live.updated_by, live.updated_at)
        )
    return replace(live, hash=digest, size=size, lines=lines)


def _write_blob(blob: Path, data: bytes) -> None:
    temp = blob.with_name(blob.name + ".tmp")
    temp.write_bytes(data)
    os.replace(temp, blob)


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


def read_key_file(keys_dir: Path, name: str) -> bytes | None:
    """The bytes of the key file `name` in `keys_dir`, None when there is none. `callers.toml` is read as the
    server reads it (a link from config management followed, the folders and the file's mode checked); the key
    pair never through a link."""
    if name != CALLERS_FILE:
        return read_regular(keys_dir / name)
    try:
        found = read_callers_file(keys_dir / name)
    except OSError as exc:
        raise BackupError(f"cannot read {name}: {exc.strerror}") from None
    return None if found is None else found[0]


def copy_keys(keys_dir: Path, work: Path, *, server_key: bool) -> list[Member]:
    """The server's key pair (the private key only with `server_key`) and `callers.toml`, as they are now."""
    members = []
    work.mkdir(parents=True, exist_ok=True, mode=0o700)
    for name in KEY_FILES:
        if name == "server.key" and not server_key:
            continue
        data = read_key_file(keys_dir, name)
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
