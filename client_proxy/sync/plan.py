"""Pending pushes, computed from a scan and the state (never stored): this is the offline queue.

A file with no base is a pending create, a file whose hash differs from its base a pending edit, a base whose file
is gone a pending delete. A change the server rejected is not offered again until the file changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from client_proxy.sync.local_files import Scan
from client_proxy.sync.state import SyncState

Kind = Literal["create", "edit", "delete"]


@dataclass(frozen=True)
class Pending:
    """One path that differs from what this laptop last agreed with the server."""

    path: str
    kind: Kind
    base: str | None
    hash: str | None  # the local file's now (None: deleted)


def pending_pushes(state: SyncState, scan: Scan) -> list[Pending]:
    """What to push, in path order: creates and edits, then deletes."""
    pending: list[Pending] = []
    for path, local in sorted(scan.files.items()):
        entry = state.files.get(path)
        if entry is not None and entry.base == local.hash:
            continue
        if not is_rejected(state, path, local.hash):
            kind: Kind = "create" if entry is None else "edit"
            pending.append(Pending(path, kind, entry.base if entry else None, local.hash))
    for path in sorted(scan.absent):
        entry = state.files.get(path)
        if entry is not None and not is_rejected(state, path, None):
            pending.append(Pending(path, "delete", entry.base, None))
    return pending


def is_rejected(state: SyncState, path: str, digest: str | None) -> bool:
    """Whether the server already rejected exactly this version of `path` (`digest` None: its deletion)."""
    rejected = state.rejected.get(path)
    return rejected is not None and rejected.get("hash") == digest
