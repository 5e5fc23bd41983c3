"""The archive's manifest, sealed: pure functions from a dict to the exact bytes written, and back.

The manifest lists every member (name, size, sha256), the format version, when the backup was taken and what each
index held, and `archive_sha256`: the hash of every byte of the tar before the manifest (headers and padding too).
It is written as canonical JSON, `{"manifest": ..., "sha256": <hash of the manifest's canonical JSON>}`, and read
back only if the bytes are exactly that canonical form with that hash. So a flipped byte anywhere is caught: before
the manifest by `archive_sha256`, in it by the seal, after it by the zeros the tar must end with.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from server.errors import DamagedArchiveError

FORMAT = "memory-server-backup"
FORMAT_VERSION = 1


def _canonical(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def seal(manifest: dict[str, Any]) -> bytes:
    """The bytes of `manifest` as the archive holds them."""
    return _canonical({"manifest": manifest, "sha256": hashlib.sha256(_canonical(manifest)).hexdigest()}) + b"\n"


def unseal(data: bytes) -> dict[str, Any]:
    """The manifest in `data`, checked: sealed, ours, of a version this server reads, every field it is read for
    (members, indexes, created_at, server_key) of the shape `take_backup` writes."""
    try:
        outer = json.loads(data.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise DamagedArchiveError("the manifest is not JSON (altered?)") from None
    if not isinstance(outer, dict) or set(outer) != {"manifest", "sha256"} or not isinstance(outer["manifest"], dict):
        raise DamagedArchiveError("this is not a memory-server backup (no manifest of ours)")
    manifest: dict[str, Any] = outer["manifest"]
    if seal(manifest) != data or outer["sha256"] != hashlib.sha256(_canonical(manifest)).hexdigest():
        raise DamagedArchiveError("the manifest was altered (its seal does not match)")
    if manifest.get("format") != FORMAT:
        raise DamagedArchiveError("this is not a memory-server backup (no manifest of ours)")
    if manifest.get("version") != FORMAT_VERSION:
        raise DamagedArchiveError(f"backup format {manifest.get('version')!r} is not one this server reads")
    members = manifest.get("members")
    if not isinstance(members, list) or not all(_is_entry(entry) for entry in members):
        raise DamagedArchiveError("the manifest's member list is malformed")
    if not isinstance(manifest.get("archive_sha256"), str):
        raise DamagedArchiveError("the manifest does not seal the archive")
    indexes = manifest.get("indexes")
    if not isinstance(indexes, dict) or not all(_is_summary(summary) for summary in indexes.values()):
        raise DamagedArchiveError("the manifest's index list is malformed")
    if not isinstance(manifest.get("created_at"), str) or not isinstance(manifest.get("server_key"), bool):
        raise DamagedArchiveError("the manifest does not say when it was taken or whether it holds the server key")
    return manifest


def _is_summary(summary: object) -> bool:
    """What `take_backup` records of an index: {"revision": int, "files": int}."""
    return (
        isinstance(summary, dict)
        and set(summary) == {"revision", "files"}
        and all(isinstance(summary[key], int) and not isinstance(summary[key], bool) for key in summary)
    )


def _is_entry(entry: object) -> bool:
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("name"), str)
        and isinstance(entry.get("size"), int)
        and isinstance(entry.get("sha256"), str)
    )
