"""Checking an archive (`verify_archive`) and restoring it into an empty data folder (`restore_archive`).

Both unpack the archive into a private staging folder first and check it whole: every member's sha256 and size
against the manifest, `PRAGMA integrity_check` of every database, and that each index's files are exactly the
live files its state records, with those hashes. Only then does a restore move the indexes into the data folder
(one rename) and write the key files that are missing; a damaged or hostile archive writes nothing there, and
neither does one whose databases a newer server wrote (their schema is past this server's migrations). An index
the archive holds no search index for (archives an older version took after a re-chunk: their index.json names a
database they lack) is sound, as nothing is lost: both say so once, and the restored server rebuilds it from the
files, embedding every chunk again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import apsw

from channel.files import atomic_write
from server.backup.archive import KEY_FILES, SETTINGS, TIMESTAMPS, fsync_folder, unpack_archive
from server.backup.snapshot import read_key_file, schema_version
from server.backup.work import remove_stale_work, work_folder
from server.callers.config import CALLERS_FILE, FILE_MODE
from server.callers.file import prepare_keys_dir
from server.errors import BackupError, DamagedArchiveError
from server.index.migrations import SCHEMA_VERSION as INDEX_SCHEMA
from server.index.rechunk import live_database
from server.index.store import load_vec, vec_available
from server.mirror import queries as q
from server.mirror.state import MIGRATIONS as STATE_MIGRATIONS
from server.mirror.state import state_of

log = logging.getLogger(__name__)

RESTORED_SETTINGS = "settings-from-backup.toml"
KEY_MODES = {"server.key": 0o600, "server.pub": 0o644, CALLERS_FILE: FILE_MODE}
RESTORE_PREFIX = ".restore-"  # the staging folder inside the data folder: .restore-<pid>
VERIFY_SUFFIX = ".verify"  # beside the archive: .<archive>.<pid>.verify
# The schema versions this server's migrations reach (`PRAGMA user_version`), per database of an index.
KNOWN_SCHEMAS = {"state.sqlite3": len(STATE_MIGRATIONS), "index.sqlite3": INDEX_SCHEMA}


def verify_archive(archive: Path) -> dict[str, Any]:
    """The manifest of `archive` once every check passed; DamagedArchiveError naming the first that failed."""
    with work_folder(_scratch_folder(archive.parent), f".{archive.name}.", VERIFY_SUFFIX) as staging:
        return check_unpacked(archive, staging)


def restore_archive(archive: Path, data_dir: Path, keys_dir: Path) -> dict[str, Any]:
    """Restore `archive` into the empty (or missing) `data_dir` and the key files it holds into `keys_dir`."""
    if data_dir.is_dir() and not data_dir.is_symlink():
        remove_stale_work(data_dir, RESTORE_PREFIX)  # a killed restore's staging folder is no one's data
    refuse_non_empty(data_dir)
    created = not data_dir.exists()
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        return _restore(archive, data_dir, keys_dir)
    except BaseException:
        if created:
            with contextlib.suppress(OSError):
                data_dir.rmdir()  # only if still empty: nothing of a failed restore stays
        raise


def _restore(archive: Path, data_dir: Path, keys_dir: Path) -> dict[str, Any]:
    with work_folder(data_dir, RESTORE_PREFIX) as staging:
        manifest = check_unpacked(archive, staging)
        for warning in manifest["warnings"]:
            log.warning("restore: %s", warning)
        keys, kept = _keys_to_write(staging / "keys", keys_dir)
        for name in manifest["indexes"]:
            _point_at_files(staging / "indexes" / name, data_dir / "indexes" / name)
        if keys:
            prepare_keys_dir(keys_dir)
        for name, data in keys.items():
            atomic_write(keys_dir / name, data, KEY_MODES[name], overwrite=False)
        for extra, placed in ((SETTINGS, RESTORED_SETTINGS), (TIMESTAMPS, TIMESTAMPS)):
            if (staging / extra).is_file():
                os.rename(staging / extra, data_dir / placed)
        (staging / "indexes").mkdir(exist_ok=True, mode=0o700)
        os.rename(staging / "indexes", data_dir / "indexes")  # the restored data appears in one step
        fsync_folder(data_dir)
    manifest["keys_written"], manifest["keys_kept"] = sorted(keys), kept
    return manifest


def refuse_non_empty(data_dir: Path) -> None:
    if data_dir.is_symlink() or (data_dir.exists() and not data_dir.is_dir()):
        raise BackupError(f"{data_dir} is not a folder; restore into an empty data folder")
    if data_dir.is_dir() and any(data_dir.iterdir()):
        raise BackupError(
            f"the data folder {data_dir} is not empty; restore only into an empty one (a new volume, or move this "
            "one aside), so nothing a server wrote is ever overwritten"
        )


def _scratch_folder(preferred: Path) -> Path:
    return preferred if os.access(preferred, os.W_OK) else Path(tempfile.gettempdir())


def check_unpacked(archive: Path, staging: Path) -> dict[str, Any]:
    """Unpack `archive` into `staging` and check it whole (hashes, databases, files against state); its manifest,
    with `warnings`: what a restore of a sound archive will not find in it. BackupError for databases of a schema
    newer than this server's."""
    manifest = unpack_archive(archive, staging)
    indexes = manifest["indexes"]  # its shape checked with the seal (`manifest.unseal`)
    found = {entry.name for entry in (staging / "indexes").iterdir()} if (staging / "indexes").is_dir() else set()
    if found != set(indexes):
        raise DamagedArchiveError("the manifest's indexes are not the archive's")
    hashes = {entry["name"]: entry["sha256"] for entry in manifest["members"]}
    for name in sorted(indexes):
        folder = staging / "indexes" / name
        for database, known in KNOWN_SCHEMAS.items():
            if (folder / database).is_file():
                refuse_newer(folder / database, f"{name}/{database}", known)
                check_integrity(folder / database, f"{name}/{database}")
        if (folder / "state.sqlite3").is_file():
            _check_files_agree(folder / "state.sqlite3", name, hashes)
    manifest["warnings"] = [warning for name in sorted(indexes) if (warning := _without_search_index(staging, name))]
    return manifest


def _without_search_index(staging: Path, name: str) -> str | None:
    """What to say of index `name` when the archive lacks the search index its index.json names: the restored
    server finds none and rebuilds it from the files, which lose nothing but take a while (every chunk embedded)."""
    folder = staging / "indexes" / name
    if not (folder / "index.json").is_file():
        return None
    try:
        info = json.loads((folder / "index.json").read_text("utf-8"))
    except (UnicodeDecodeError, ValueError):
        info = None  # the restored server rewrites it, naming the database the folder holds
    database = live_database(info if isinstance(info, dict) else None)
    if (folder / database).is_file():
        return None
    return (
        f"index {name!r}: the archive lacks its search index ({database}, which its index.json names); "
        "a restore rebuilds it from the files, embedding every chunk again (nothing is lost)"
    )


def refuse_newer(path: Path, shown: str, known: int) -> None:
    """BackupError when the database at `path` records more migrations than the `known` this server has: a newer
    server took the archive, and this one could not open what it restored."""
    try:
        version = schema_version(path)
    except apsw.Error:
        raise DamagedArchiveError(f"{shown} cannot be opened") from None
    if version > known:
        raise BackupError(
            f"{shown} was taken by a newer server (schema {version}; this one knows {known}): restore it with "
            "that version; nothing was written"
        )


def check_integrity(path: Path, shown: str) -> None:
    """DamagedArchiveError unless SQLite finds the database at `path` sound."""
    try:
        db = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READWRITE)
    except apsw.Error:
        raise DamagedArchiveError(f"{shown} cannot be opened") from None
    try:
        if vec_available():
            load_vec(db)
        rows = db.execute("PRAGMA integrity_check").fetchall()
    except apsw.Error as exc:
        raise DamagedArchiveError(f"{shown} is not a sound database ({type(exc).__name__})") from None
    finally:
        db.close()
    if rows != [("ok",)]:
        raise DamagedArchiveError(f"{shown} fails SQLite's integrity check: {str(rows[0][0])[:200]}")


def _check_files_agree(state: Path, name: str, hashes: dict[str, str]) -> None:
    """Every live file of the state is in the archive with its recorded hash, and no other file is."""
    db = apsw.Connection(str(state))
    try:
        live = {row.path: row.hash for row in map(state_of, db.execute(*q.live_states()).fetchall())}
    finally:
        db.close()
    prefix = f"indexes/{name}/files/"
    held = {member.removeprefix(prefix): digest for member, digest in hashes.items() if member.startswith(prefix)}
    for path in sorted(set(live) | set(held)):
        if path not in held:
            raise DamagedArchiveError(f"{name}: {path} is recorded in the state but missing from the archive")
        if path not in live:
            raise DamagedArchiveError(f"{name}: {path} is in the archive but not a live file of the state")
        if live[path] != held[path]:
            raise DamagedArchiveError(f"{name}: {path} differs from the content its state records")


def _keys_to_write(staged: Path, keys_dir: Path) -> tuple[dict[str, bytes], list[str]]:
    """The key files to write (those missing from `keys_dir`), and those kept as they are though they differ from
    the backup's. A different server key is refused: the restored server would not be the one the laptops pinned.
    A different `callers.toml` is kept: it is the operator's newer word on who may connect."""
    wanted: dict[str, bytes] = {}
    kept: list[str] = []
    for name in KEY_FILES:
        source = staged / name
        if not source.is_file():
            continue
        data = source.read_bytes()
        target = keys_dir / name
        if target.is_symlink() or target.exists():
            if not _holds(keys_dir, name, data):
                if name == CALLERS_FILE:
                    kept.append(name)
                    continue
                raise BackupError(
                    f"{target} already exists and differs from the backup's {name}; move it aside to restore "
                    "the backed-up one, or restore with an empty --keys-dir"
                )
            continue
        wanted[name] = data
    return wanted, kept


def _holds(keys_dir: Path, name: str, data: bytes) -> bool:
    """Whether the key file `name` in `keys_dir` holds `data`: `callers.toml` read as the server reads it (a link
    from config management followed, its folder and mode checked), the key pair never through a link."""
    if name == CALLERS_FILE:
        return read_key_file(keys_dir, name) == data
    target = keys_dir / name
    return not target.is_symlink() and target.is_file() and target.read_bytes() == data


def _point_at_files(staged: Path, final: Path) -> None:
    """The index's description names its folder of files: the restored one, wherever the data folder now is."""
    description = staged / "index.json"
    if not description.is_file() or not (staged / "state.sqlite3").is_file():
        return
    try:
        info = json.loads(description.read_text("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise DamagedArchiveError(f"{staged.name}/index.json is not JSON") from None
    if isinstance(info, dict):
        info["root"] = str((final / "files").absolute())
        description.write_text(json.dumps(info), "utf-8")
