"""The backup archive: one uncompressed tar whose last member, `manifest.json` (`server.backup.manifest`), lists
every other member with its size and sha256 and seals every byte before it.

Writing (`write_archive`): to a private temporary file (mode 0600) in the target's folder, fsynced, renamed over
the target, the folder fsynced: a writer killed at any moment leaves the old file or none, never half of one.
Reading (`unpack_archive`): the archive is hostile until proven otherwise. Only regular-file members whose names
match the layout (`member_kind`) are accepted; no name is ever used as given, links and devices are refused, a
name may appear once, and every byte is counted and hashed against the manifest before anything is trusted. A
header the tar reader cannot parse is damage like any other, never a traceback.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

from server.backup.manifest import FORMAT, FORMAT_VERSION, seal, unseal
from server.errors import BackupError, DamagedArchiveError
from server.index.naming import NAME_PATTERN
from syncproto.errors import PathRefused
from syncproto.paths import is_session_file, normalise_mirror_path, synced_path_problem

MANIFEST = "manifest.json"
SETTINGS = "settings.toml"
TIMESTAMPS = "handshake-timestamps.json"
KEY_FILES = ("server.key", "server.pub", "callers.toml")
INDEX_FILES = ("state.sqlite3", "index.sqlite3", "index.json")
MAX_MANIFEST_BYTES = 64 << 20
_BLOCK = 1 << 20
_INDEX_MEMBER = re.compile(r"^indexes/([^/]+)/(.+)$")

T = TypeVar("T")


def member_kind(name: str) -> str | None:
    """What a member name is in the layout (`manifest`, `settings`, `timestamps`, `key`, `index`, `file`), or
    None for a name the layout has no place for (absolute, `..`, unknown, not canonical)."""
    if name == MANIFEST:
        return "manifest"
    if name == SETTINGS:
        return "settings"
    if name == TIMESTAMPS:
        return "timestamps"
    if name.startswith("keys/") and name.removeprefix("keys/") in KEY_FILES:
        return "key"
    match = _INDEX_MEMBER.match(name)
    if match is None or not NAME_PATTERN.match(match.group(1)):
        return None
    rest = match.group(2)
    if rest in INDEX_FILES:
        return "index"
    if rest.startswith("files/"):
        return "file" if is_mirror_file(rest.removeprefix("files/")) else None
    return None


def is_mirror_file(path: str) -> bool:
    """Whether `path` is a file a mirror may hold, in canonical form, by the path rules that do not depend on this
    process's extra folders (the backed-up server's may differ): a session transcript, or a memory file in
    `memory/` or in any folder that could be an extra one. Every segment passes the same checks either way."""
    if is_session_file(path):
        try:
            return normalise_mirror_path(path) == path
        except PathRefused:
            return False
    return synced_path_problem(path, any_extra_folder=True) is None


@dataclass(frozen=True)
class Member:
    """One member to write: its name in the archive and where its bytes are now."""

    name: str
    source: Path


def _sha256_of(path: Path, limit: int | None = None) -> tuple[str, int]:
    """sha256 and size of the file at `path`, or of its first `limit` bytes."""
    hasher, size = hashlib.sha256(), 0
    with path.open("rb") as handle:
        while block := handle.read(_BLOCK if limit is None else min(_BLOCK, limit - size)):
            hasher.update(block)
            size += len(block)
    return hasher.hexdigest(), size


def write_archive(target: Path, members: list[Member], manifest: dict[str, Any], work: Path) -> dict[str, Any]:
    """Write `members`, then the manifest (`manifest` completed with every member's size and sha256), to
    `target` atomically through a temporary file in `work` (a folder beside `target`); the manifest written."""
    listed: list[dict[str, Any]] = []
    for member in members:
        if member_kind(member.name) in (None, "manifest"):
            raise BackupError(f"internal: {member.name!r} has no place in the archive layout")
        digest, size = _sha256_of(member.source)
        listed.append({"name": member.name, "size": size, "sha256": digest})
    manifest = {"format": FORMAT, "version": FORMAT_VERSION, **manifest, "members": listed}
    temp = work / f"archive-{secrets.token_hex(4)}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), 0o600)  # it may hold the server's private key and every memory file
            with tarfile.open(fileobj=handle, mode="w", format=tarfile.PAX_FORMAT) as tar:
                for member, entry in zip(members, listed, strict=True):
                    with member.source.open("rb") as source:
                        tar.addfile(_info(member.name, entry["size"]), source)  # our own copies: unchanging
                handle.flush()
                manifest["archive_sha256"] = _sha256_of(temp, tar.offset)[0]
                data = seal(manifest)
                tar.addfile(_info(MANIFEST, len(data)), _Reader(data))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
    fsync_folder(target.parent)
    return manifest


def _info(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.type = size, 0o600, tarfile.REGTYPE
    return info


class _Reader:
    """Bytes as the file object `TarFile.addfile` reads."""

    def __init__(self, data: bytes) -> None:
        self._data, self._at = data, 0

    def read(self, size: int = -1) -> bytes:
        end = len(self._data) if size < 0 else self._at + size
        chunk, self._at = self._data[self._at : end], min(end, len(self._data))
        return chunk


def fsync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# reading ----------------------------------------------------------------------------------------------------


def unpack_archive(archive: Path, into: Path) -> dict[str, Any]:
    """Check `archive` against its manifest while writing each member under the empty folder `into` (members
    only: the manifest is returned). DamagedArchiveError for anything truncated, altered or hostile."""
    seen: dict[str, tuple[str, int]] = {}
    manifest_data: bytes | None = None
    manifest_at = 0
    try:
        with _open_tar(archive) as (tar, handle):
            for info in _headers(tar):
                name = info.name
                if not info.isreg():
                    raise DamagedArchiveError(f"member {name!r} is not a regular file (a link or a device); refused")
                if info.issparse():  # its holes read as zeros: a few bytes of archive could fill the disk
                    raise DamagedArchiveError(f"member {name!r} is a sparse file, which no backup writes; refused")
                if member_kind(name) is None:
                    raise DamagedArchiveError(f"member {name!r} has no place in a backup; refused")
                if name in seen or (name == MANIFEST and manifest_data is not None):
                    raise DamagedArchiveError(f"member {name!r} appears twice; refused")
                if manifest_data is not None:
                    raise DamagedArchiveError("a member follows the manifest; refused")
                stream = tar.extractfile(info)
                assert stream is not None, "a regular member has a stream"
                if name == MANIFEST:
                    if info.size > MAX_MANIFEST_BYTES:
                        raise DamagedArchiveError("the manifest is implausibly large")
                    manifest_data, manifest_at = stream.read(), info.offset
                    _check_end(handle, info.offset_data + info.size)
                    continue
                seen[name] = _copy_member(stream, into, name)
    except (tarfile.TarError, EOFError) as exc:
        raise DamagedArchiveError(f"the archive is damaged, truncated or not a backup ({type(exc).__name__})") from None
    if manifest_data is None:
        raise DamagedArchiveError("the archive has no manifest (truncated?)")
    manifest = unseal(manifest_data)
    listed = {entry["name"]: (entry["sha256"], entry["size"]) for entry in manifest["members"]}
    for name in sorted(set(listed) | set(seen)):
        if name not in seen:
            raise DamagedArchiveError(f"member {name} is listed in the manifest but missing")
        if name not in listed:
            raise DamagedArchiveError(f"member {name} is not listed in the manifest")
        if seen[name] != listed[name]:
            raise DamagedArchiveError(f"member {name} does not match its sha256 or size in the manifest")
    if _sha256_of(archive, manifest_at) != (manifest["archive_sha256"], manifest_at):
        raise DamagedArchiveError("the archive's bytes before the manifest were altered (headers or padding)")
    return manifest


@contextlib.contextmanager
def _open_tar(archive: Path) -> Iterator[tuple[tarfile.TarFile, IO[bytes]]]:
    try:
        handle = archive.open("rb")
    except FileNotFoundError:
        raise BackupError(f"no archive at {archive}") from None
    with handle, _parsed(lambda: tarfile.open(fileobj=handle, mode="r:")) as tar:
        yield tar, handle


def _headers(tar: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    members = iter(tar)
    while (info := _parsed(lambda: next(members, None))) is not None:
        yield info


def _parsed(read: Callable[[], T]) -> T:
    """`read()` (opening the tar, or reading its next header), a header it cannot parse raised as the TarError it
    is: tarfile raises ValueError (UnicodeDecodeError among them) for a malformed GNU sparse map or PAX field."""
    try:
        return read()
    except ValueError as exc:
        raise tarfile.HeaderError(f"a malformed header ({type(exc).__name__})") from None


def _check_end(handle: IO[bytes], offset: int) -> None:
    """Only zeros follow the manifest's bytes (its padding, the end-of-archive marker, zeros to a whole record): a
    file cut anywhere, even in that padding, or altered there, is not the archive that was written."""
    at = handle.tell()
    handle.seek(offset)
    rest = handle.read(3 * tarfile.RECORDSIZE)
    whole = os.fstat(handle.fileno()).st_size % tarfile.RECORDSIZE == 0
    if len(rest) < 2 * tarfile.BLOCKSIZE or rest.strip(b"\0") or handle.read(1) or not whole:
        raise DamagedArchiveError("the archive is truncated, or altered after its manifest")
    handle.seek(at)


def _copy_member(stream: IO[bytes], into: Path, name: str) -> tuple[str, int]:
    """Write one member below `into` (its name checked against the layout already) and hash it."""
    target = into.joinpath(*name.split("/"))
    hasher, size = hashlib.sha256(), 0
    try:
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except (FileExistsError, NotADirectoryError, IsADirectoryError):
        raise DamagedArchiveError(f"member {name!r} collides with another member (a file and a folder)") from None
    with os.fdopen(fd, "wb") as out:
        while block := stream.read(_BLOCK):
            hasher.update(block)
            size += len(block)
            out.write(block)
    return hasher.hexdigest(), size
