"""Applying what the server says to the local files and the state, without ever losing a local edit.

A pulled change is written only over a clean file (one that still holds its base, or is absent with no base);
a dirty file is left for the push, whose answer (merged, conflict copy) is applied instead. A push answer is
written only if the file still holds what was pushed: if the user saved again meanwhile, the old base is kept
so the next push lets the server merge. Blocking code: the syncer runs it in a worker thread, under its lock.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Literal

from client_proxy.sync.api import Change, PushChange, PushResult
from client_proxy.sync.local_files import MAX_SETTLING_NS, LocalFile, LocalFiles, Scan, UnsyncableError
from client_proxy.sync.plan import Pending
from client_proxy.sync.scope import UnsafePathError, name_problem
from client_proxy.sync.state import Base, SyncState, Unapplied
from syncproto.names import find_collision
from syncproto.wire import MAX_PUSH_CHANGES, PUSH_BATCH_BYTES, sha256_hex

log = logging.getLogger(__name__)

Outcome = Literal["written", "deleted", "same", "skipped", "dirty"]
_UNREADABLE = "unreadable"  # compares unequal to every hash: such a file is never replaced


class Reconciler:
    """The one place the state's bases change; every method is blocking and expects the syncer's lock held."""

    def __init__(self, files: LocalFiles, state: SyncState, now: Callable[[], str]) -> None:
        self.files = files
        self.state = state
        self._now = now
        self._warned: set[tuple[str, str | None]] = set()
        self.look_again_ns: int | None = None  # files were left unpushed as maybe half saved: scan again in this
        self._waiting: dict[str, tuple[int, int]] = {}  # path -> when first and last left unpushed so (files' clock)

    def record_stamps(self, scan: Scan) -> None:
        """Keep (size, mtime) of files seen to hold their base, so the next start need not hash them again."""
        for path, local in scan.files.items():
            entry = self.state.files.get(path)
            if entry is not None and entry.base == local.hash and local.stable:
                entry.size, entry.mtime_ns = local.size, local.mtime_ns

    def take_batch(self, queue: list[Pending], *, settle: bool) -> list[PushChange]:
        """Read the next pushes off `queue` (at most `MAX_PUSH_CHANGES` and about `PUSH_BATCH_BYTES`); with
        `settle`, a file that may be half saved is left for a later pass."""
        batch: list[PushChange] = []
        size = 0
        while queue and len(batch) < MAX_PUSH_CHANGES:
            change = self._read(queue[0], settle)
            if change is not None:
                change_size = change.wire_size()
                if batch and size + change_size > PUSH_BATCH_BYTES:
                    break
                batch.append(change)
                size += change_size
            queue.pop(0)
        return batch

    def _read(self, pending: Pending, settle: bool) -> PushChange | None:
        try:
            found = self.files.read(pending.path)
        except (UnsafePathError, UnsyncableError) as exc:
            log.debug("sync: %s is no longer pushable: %s", pending.path, exc)
            return None
        if found is None:
            self._waiting.pop(pending.path, None)
            entry = self.state.files.get(pending.path)
            return PushChange(pending.path, entry.base, None, None) if entry else None
        data, digest, settles_in = found
        entry = self.state.files.get(pending.path)
        if entry is not None and entry.base == digest:
            self._waiting.pop(pending.path, None)
            return None  # changed back since the scan
        if settles_in and settle and self._wait(pending.path, settles_in):
            return None
        self._waiting.pop(pending.path, None)
        return PushChange(pending.path, entry.base if entry else None, data.decode("utf-8"), digest)

    def _wait(self, path: str, settles_in: int) -> bool:
        """Whether a file that may be half saved waits for another scan: yes, unless it has waited MAX_SETTLING_NS
        since it was first found so. A wait that ended unseen (the file saved back to its base, or unreadable) is
        over when no scan found it waiting for that long."""
        now = self.files.now_ns()
        first, last = self._waiting.get(path, (now, now))
        if now - last >= MAX_SETTLING_NS:
            first = now
        self._waiting[path] = (first, now)
        if now - first < MAX_SETTLING_NS:
            log.debug("sync: %s was written just now; looking again before pushing it", path)
            self.look_again_ns = min(settles_in, self.look_again_ns or settles_in)
            return True
        log.info(
            "sync: %s has been written to for %d s without a pause; pushing it as it is", path, MAX_SETTLING_NS // 10**9
        )
        return False

    def apply_change(self, change: Change, *, reset: bool) -> Outcome:
        """Bring one pulled change to disk if the local file is clean; "dirty" when it must be pushed instead. One
        that this laptop cannot write now is left in `state.unapplied`, to be pulled again later."""
        path = change.path
        self.state.unapplied.pop(path, None)  # this change supersedes one left before, whatever becomes of it
        if not self.files.in_scope(path):
            log.debug("sync: not applying %s: outside this folder's sync scope", path)
            return "skipped"
        entry = self.state.files.get(path)
        if not reset and entry is not None and entry.revision >= change.revision:
            return "skipped"  # we already have it (our own push, or a change pulled before)
        # A deletion of a path this laptop has no base for writes nothing (`_apply` deletes only a file that holds its
        # base), so it is not held back: the old spelling's tombstone after a rename in case must not wait forever.
        colliding = entry is None and change.hash is not None
        if colliding and (other := find_collision(path, [*self.state.files, *self._on_disk_beside(path)])):
            # Retried: the other name may go (renamed here, or its deletion on the server pulled after this change).
            return self._leave(change, f"on macOS and Windows it is the same file as {other}")
        if change.content is not None and sha256_hex(change.content.encode("utf-8")) != change.hash:
            # Not retried: nothing on this laptop can mend a wrong answer; the file's next change is pulled as usual.
            self._warn(path, "the server sent content that does not match its hash; not applied")
            return "skipped"
        try:
            return self._apply(change, entry, reset=reset)
        except (UnsafePathError, UnsyncableError) as exc:  # this file only: the pull goes on with the others
            return self._leave(change, str(exc))

    def _leave(self, change: Change, reason: str) -> Outcome:
        """Skip a change this laptop cannot write now, and remember it so that a later pull brings it again."""
        self._warn(change.path, f"not applying the server's change: {reason}")
        self.state.unapplied[change.path] = Unapplied(change.revision, reason, self._now())
        return "skipped"

    def _apply(self, change: Change, entry: Base | None, *, reset: bool) -> Outcome:
        path = change.path
        local = self.files.current(path)
        if local == change.hash:
            self._record(path, change.hash, change.revision)
            return "same"
        if reset and local is not None:
            # The server was restored from an older backup: its version may be the older one, so nothing is written
            # or deleted here; ours is pushed instead.
            self._rebase_after_restore(change, entry, local)
            return "dirty"
        clean = entry.base == local if entry is not None else local is None
        if not clean:
            return "dirty"
        if change.hash is None:
            if local is not None and not self.files.delete(path, local):
                return "dirty"
            self.state.files.pop(path, None)
            self.state.rejected.pop(path, None)
            log.debug("sync: deleted %s (revision %d)", path, change.revision)
            return "deleted"
        assert change.content is not None
        written = self.files.write(path, change.content.encode("utf-8"), local)
        if written is None:
            return "dirty"  # saved meanwhile: the push takes it from here
        self._record(path, change.hash, change.revision, written)
        self.state.rejected.pop(path, None)
        log.debug("sync: wrote %s (revision %d)", path, change.revision)
        return "written"

    def _rebase_after_restore(self, change: Change, entry: Base | None, local: str) -> None:
        """The base to push a local file with after a reset listing named its path. A file unchanged since this
        laptop agreed it, later than the server's version (which the backup holds), is pushed over that version:
        the server takes it, or merges it three ways with an edit made there meanwhile. Otherwise (edited here, or
        the server's version may be an edit made since the restore) it goes with no base, and the server merges the
        two texts."""
        newer_here = entry is not None and entry.base == local and change.revision < entry.revision
        if newer_here and change.hash is not None:
            self._record(change.path, change.hash, change.revision)
        else:
            self.state.files.pop(change.path, None)

    def _on_disk_beside(self, path: str) -> list[str]:
        """The names on disk that could be `path` or one of its folders under another spelling (each folder's
        entries along the way), so a file not synced yet counts too."""
        parts, found = path.split("/"), []
        for depth in range(len(parts)):
            prefix = "/".join(parts[:depth])
            try:
                names = os.listdir(self.files.project / prefix) if prefix else os.listdir(self.files.project)
            except OSError:
                break
            found += ["/".join([*parts[:depth], name, *parts[depth + 1 :]]) for name in names]
        return found

    def forget_unlisted(self, listed: set[str]) -> int:
        """After a reset listing: bases of paths the server no longer knows are dropped, so their files are pushed
        again as new (the server was restored from a backup that predates them)."""
        gone = [path for path in self.state.files if path not in listed]
        for path in gone:
            del self.state.files[path]
        return len(gone)

    def apply_result(self, sent: PushChange, result: PushResult) -> None:
        """Record the server's answer to one pushed change and bring its outcome to disk."""
        path, status = sent.path, result.status
        if status == "rejected":
            message = result.message or "rejected by the server"
            self.state.rejected[path] = {"hash": sent.hash, "message": message, "at": self._now()}
            self._warn(path, f"the server rejected this version: {message}", sent.hash)
            return
        self.state.rejected.pop(path, None)
        if result.content is not None and sha256_hex(result.content.encode("utf-8")) != result.hash:
            self._warn(path, "the server's answer does not match its hash; ignored")
            return
        still = self._still(path, sent.hash)
        if status in ("applied", "unchanged"):
            self._record(path, result.hash, result.revision)
        elif status == "deleted":
            self.state.files.pop(path, None)
        elif status == "conflict":
            self._conflict(sent, result, still)
        elif status in ("merged", "kept") and still:
            self._replace(path, result, expected=sent.hash)
        log.debug("sync: pushed %s: %s", path, status)

    def _conflict(self, sent: PushChange, result: PushResult, still: bool) -> None:
        copy = result.conflict_path
        if copy is not None and (problem := name_problem(copy)) is not None:  # the server's names obey our rules
            self._warn(sent.path, f"the server named a conflict copy that breaks the name rules ({problem}); ignored")
            return
        log.warning("sync: conflict on %s: the server kept its version; yours is saved as %s", sent.path, copy)
        if copy is None or sent.content is None or result.conflict_revision is None:
            return
        self.state.add_conflict(sent.path, copy, self._now())
        try:
            written: LocalFile | None = None
            if self.files.current(copy) != sent.hash:
                written = self.files.write(copy, sent.content.encode("utf-8"), None)
                if written is None:
                    self._warn(copy, "another file appeared at the conflict copy's name; the copy is on the server")
                    return
        except (UnsafePathError, UnsyncableError) as exc:
            self._warn(copy, f"cannot write the conflict copy here ({exc}); it is on the server")
            return
        self._record(copy, sent.hash, result.conflict_revision, written)
        if still:  # the pushed text is now safe in the copy: the original may take the server's text
            self._replace(sent.path, result, expected=sent.hash)

    def _replace(self, path: str, result: PushResult, expected: str | None) -> None:
        """Write the server's text for `path` over the version we pushed; if that fails, keep the old base."""
        if result.hash is None or result.content is None:
            self._record(path, result.hash, result.revision)
            return
        try:
            written = self.files.write(path, result.content.encode("utf-8"), expected)
        except (UnsafePathError, UnsyncableError) as exc:
            self._warn(path, f"cannot write the server's version: {exc}")
            return
        if written is not None:
            self._record(path, result.hash, result.revision, written)

    def _still(self, path: str, digest: str | None) -> bool:
        try:
            return self.files.current(path) == digest
        except (UnsafePathError, UnsyncableError):
            return False

    def _record(self, path: str, digest: str | None, revision: int, local: LocalFile | None = None) -> None:
        if digest is None:
            self.state.files.pop(path, None)
            return
        stamp = local is not None and local.stable and local.hash == digest
        self.state.files[path] = Base(
            digest, revision, local.size if local and stamp else None, local.mtime_ns if local and stamp else None
        )

    def _warn(self, path: str, message: str, digest: str | None = None) -> None:
        if (path, digest or message) in self._warned:  # once per version, not at every retry
            log.debug("sync: %s: %s", path, message)
            return
        self._warned.add((path, digest or message))
        log.warning("sync: %s: %s", path, message)
