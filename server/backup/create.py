"""`take_backup`: one archive of a live data folder and its keys, at one point in time per index.

The work happens in a private folder beside the target (`.<name>.<pid>.backup`): database copies, file contents
by sha256, then the archive itself, renamed over the target only once complete. A backup killed at any moment thus
leaves the old target (or none) and this folder, which the next backup beside it removes once its process is gone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from server.backup.archive import Member, write_archive
from server.backup.snapshot import IndexCopy, copy_extras, copy_index, copy_keys
from server.backup.work import work_folder
from server.errors import BackupError
from server.index.naming import NAME_PATTERN
from server.mirror.state import iso, utc_now

WORK_SUFFIX = ".backup"


def take_backup(
    data_dir: Path, keys_dir: Path, target: Path, *, settings: str, server_key: bool, server_version: str
) -> dict[str, Any]:
    """Write the archive of `data_dir` and `keys_dir` to `target`; its manifest. `settings` is the TOML text of
    the non-secret settings; `server_key` puts the server's private key in the archive."""
    target = target.absolute()
    if not data_dir.is_dir():
        raise BackupError(f"no data folder at {data_dir}: is --data-dir the server's?")
    if target.is_dir():
        raise BackupError(f"{target} is a folder; name the archive file to write")
    if not target.parent.is_dir():
        raise BackupError(f"the folder {target.parent} does not exist")
    with work_folder(target.parent, f".{target.name}.", WORK_SUFFIX) as work:
        created_at = iso(utc_now())
        copies = [
            copy_index(directory, work / "indexes" / directory.name, work / "blobs")
            for directory in _index_dirs(data_dir)
        ]
        members: list[Member] = [member for copied in copies for member in copied.members]
        members += copy_keys(keys_dir, work / "keys", server_key=server_key)
        members += copy_extras(data_dir, work, settings)
        manifest = {
            "created_at": created_at,
            "server_version": server_version,
            "indexes": {copied.name: _summary(copied) for copied in copies},
            "server_key": any(member.name == "keys/server.key" for member in members),
        }
        return write_archive(target, members, manifest, work)


def _index_dirs(data_dir: Path) -> list[Path]:
    found: list[Path] = []
    if not (data_dir / "indexes").is_dir():
        return found  # a server that has no index yet: the keys and settings are still worth keeping
    for entry in sorted((data_dir / "indexes").iterdir()):
        if entry.is_symlink() or not entry.is_dir() or not NAME_PATTERN.match(entry.name):
            continue
        if (entry / "index.json").is_file() or (entry / "state.sqlite3").is_file():
            found.append(entry)
    return found


def _summary(copied: IndexCopy) -> dict[str, int]:
    return {"revision": copied.revision, "files": copied.files}
