"""Pending pushes, computed from a scan and the state (never stored): this is the offline queue.

A file with no base is a pending create, a file whose hash differs from its base a pending edit, a base whose file
is gone a pending delete. A change the server rejected is not offered again until the file changes, or, for a name
refused as the same file as another one on macOS and Windows, until that other name is gone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

from client_proxy.sync.local_files import Scan
from client_proxy.sync.state import SyncState
from syncproto.names import find_collision

Kind = Literal["create", "edit", "delete"]

# How the server words its refusal of a new name that is the same file as a live one on macOS and Windows
# (`refuse_collision` in server/mirror/paths.py): such a refusal lasts only as long as the other name.
COLLISION_REFUSAL: Final = "would be the same file as"


@dataclass(frozen=True)
class Pending:
    """One path that differs from what this laptop last agreed with the server."""

    path: str
    kind: Kind
    base: str | None
    hash: str | None  # the local file's now (None: deleted)


def pending_pushes(state: SyncState, scan: Scan) -> list[Pending]:
    """What to push, in path order: deletes, then creates and edits. A name changed only in case (`Notes.md` to
    `notes.md`) is a delete and a create, and the server refuses the create while the old name lives."""
    pending: list[Pending] = []
    for path in sorted(scan.absent):
        entry = state.files.get(path)
        if entry is not None and not is_rejected(state, path, None):
            pending.append(Pending(path, "delete", entry.base, None))
    deleting = {item.path for item in pending}
    held = [*(path for path in state.files if path not in deleting), *state.unapplied]  # once the deletes are through
    for path, local in sorted(scan.files.items()):
        entry = state.files.get(path)
        if entry is not None and entry.base == local.hash:
            continue
        if not is_rejected(state, path, local.hash) or collision_gone(state, path, held):
            kind: Kind = "create" if entry is None else "edit"
            pending.append(Pending(path, kind, entry.base if entry else None, local.hash))
    return pending


def is_rejected(state: SyncState, path: str, digest: str | None) -> bool:
    """Whether the server already rejected exactly this version of `path` (`digest` None: its deletion)."""
    rejected = state.rejected.get(path)
    return rejected is not None and rejected.get("hash") == digest


def collision_gone(state: SyncState, path: str, held: Iterable[str]) -> bool:
    """Whether `path` was refused as the same file as another name (on macOS and Windows) of which the server, as
    far as this laptop knows, holds none now (`held`: the names it holds)."""
    rejected = state.rejected.get(path) or {}
    return COLLISION_REFUSAL in (rejected.get("message") or "") and find_collision(path, held) is None
