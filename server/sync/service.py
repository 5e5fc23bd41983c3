"""File sync on the server: what `/sync/changes` and `/sync/push` do to one caller's index (see
`docs/sync-protocol.md`). Blocking and thread-safe, like `MemoryService`, whose grants and indexes it uses.

A push is applied change by change under the mirror's lock, so nothing else writes between reading the server's
file and replacing it (servers sharing one database are not ordered by it: a change another made meanwhile is merged
with as here, `server.mirror.current.rewritten`); then the changed files are indexed, so a push is searchable when it
returns. What depends on a change alone (its path rules, the secret scan) is checked before the lock: a scan of a few
MiB takes seconds, and every pull and push of the index waited behind it.

A pull looks for edits made directly on the server's disk (`reconcile_all`, a walk of every file) at most once per
`DISK_LOOK_SECONDS` per index, one look shared by the pulls that ask meanwhile: 32 idle long-polls rechecking every
5 s kept 40% of a core busy walking 5,000 files. Writes through the server need no look: they are recorded as made.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import weakref
from dataclasses import dataclass, field, replace

from server.errors import ConflictError, InvalidArgumentError
from server.indexes.storage import FileStore
from server.memory.intake import refuse_secrets
from server.memory.service import CallerContext, MemoryService
from server.memory.text import utf8
from server.mirror.current import REWRITE_TRIES, Current, rewritten
from server.mirror.mirror import ABSENT, FileState, IdempotencyRecord, MirrorFile
from server.mirror.paths import normalise_memory_path
from server.sync.conflicts import conflict_path
from server.sync.merge import merge3, merge_unrelated
from syncproto.faults import fault_point
from syncproto.messages import Change, PushChange, PushResult, changes_json
from syncproto.paths import is_session_file, memory_folders
from syncproto.wire import MAX_CHANGE_BYTES, MAX_CHANGES, MAX_FILE_BYTES, sha256_hex

log = logging.getLogger(__name__)

_HISTORY_PAGE = 200  # versions of one path read per query when a push with no base is looked for in its history
DISK_LOOK_SECONDS = 1.0  # a pull looks for edits made on the server's disk at most this often per index


@dataclass
class ChangesAnswer:
    """A pull answer as the server builds it, its entries already in their wire form (`Change.as_json`)."""

    revision: int
    next: int
    more: bool
    reset: bool
    changes: list[dict[str, object]] = field(default_factory=list)
    # The caps this answer keeps, announced so the proxy can hold a server to them (client_proxy.sync.pull_limits).
    limits: dict[str, int] = field(default_factory=dict)

    def as_json(self) -> dict[str, object]:
        answer = changes_json(self.revision, self.next, self.more, self.reset, self.changes)
        # The extra memory folders, so laptops sync them like memory/ (client_proxy.sync.api.adopt_memory_folders).
        return {**answer, "limits": self.limits, "extra_paths": list(memory_folders()[1:])}


@dataclass
class _DiskLook:
    lock: threading.Lock = field(default_factory=threading.Lock)  # held during a look: later pulls wait and share it
    started: float | None = None  # time.monotonic() when the last look that completed began


class _DiskLooks:
    """Per index, the last look at its disk for a pull: a pull within DISK_LOOK_SECONDS of one skips its own."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._looks: weakref.WeakKeyDictionary[FileStore, _DiskLook] = weakref.WeakKeyDictionary()

    def look(self, mirror: FileStore) -> None:
        """Record the edits made on `mirror`'s disk, unless a look that began at most DISK_LOOK_SECONDS ago did."""
        asked = time.monotonic()
        with self._guard:
            look = self._looks.setdefault(mirror, _DiskLook())
        with look.lock:
            if look.started is not None and asked - look.started < DISK_LOOK_SECONDS:
                return
            started = time.monotonic()
            mirror.reconcile_all()
            look.started = started


class SyncService:
    def __init__(self, service: MemoryService) -> None:
        self.service = service
        self._disk = _DiskLooks()

    def changes(self, caller: CallerContext, since: int, *, limit: int = MAX_CHANGES) -> ChangesAnswer:
        """Changes after `since` with their content (at most `limit`, about MAX_CHANGE_BYTES of text)."""
        with self.service.calling():
            mirror = self.service.open_index(caller).mirror
            self._disk.look(mirror)  # changes made on the server's disk count too, within about a second
            revision = mirror.revision()
            reset = since > revision
            start = 0 if reset else since
            rows = mirror.changes_since(start, limit=limit + 1)
            answer = ChangesAnswer(revision=revision, next=start, more=len(rows) > limit, reset=reset)
            answer.limits = {"max_file_bytes": mirror.max_file_bytes, "max_changes": limit}
            budget = MAX_CHANGE_BYTES
            for row in rows[:limit]:
                if is_session_file(row.path):  # transcripts stay on the server: searchable, never pulled
                    answer.next = row.revision
                    continue
                entry = _change(mirror, row)
                if entry is None:  # unreadable, or larger than laptops write: laptops keep their copy
                    answer.next = row.revision
                    continue
                size = len(str(entry.get("content", "")).encode("utf-8"))
                if answer.changes and size > budget:
                    answer.more = True
                    break
                budget -= size
                answer.changes.append(entry)
                answer.next = row.revision
            if not answer.more:  # complete: everything up to the revision read before the listing
                answer.next = max(answer.next, revision)
            mirror.record_sync(caller.name, "pull", answer.next)
            return answer

    def revision(self, caller: CallerContext) -> int:
        with self.service.calling():
            return self.service.open_index(caller).mirror.revision()

    def push(self, caller: CallerContext, changes: list[PushChange]) -> tuple[int, list[PushResult]]:
        """Apply `changes` in order; the index's revision after them and one result per change."""
        with self.service.calling():
            handle = self.service.open_index(caller, write=True)
            mirror = handle.mirror
            results: list[PushResult] = []
            written: list[str] = []
            fault_point("sync.push.received")
            checked = [self._checked(change) for change in changes]  # before the lock: a scan may take seconds
            with mirror.holding_changes():  # long-polls wake once, after the files are searchable
                try:
                    with mirror.lock:
                        for change, path in zip(changes, checked, strict=True):
                            if isinstance(path, PushResult):  # refused already
                                result = path
                            else:
                                result = self._apply(mirror, caller.name, path, change)
                            fault_point("sync.push.applied")
                            results.append(result)
                            if result.status in ("applied", "merged", "deleted") and result.path not in written:
                                written.append(result.path)
                            if result.conflict_path is not None:
                                written.append(result.conflict_path)
                finally:  # also when a later change failed: the ones stored are searchable, as a resend skips them
                    if written:
                        self.service.reindex(handle, written)
                        fault_point("sync.push.indexed")
            revision = mirror.revision()
            mirror.record_sync(caller.name, "push", revision)
            counts: dict[str, int] = {}
            for result in results:
                counts[result.status] = counts.get(result.status, 0) + 1
            log.info("sync push by %s: %s", caller.name, ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
            return revision, results

    def _checked(self, change: PushChange) -> str | PushResult:
        """The canonical path of `change`, or its `rejected` result: a path the rules refuse, or a path or text that
        holds a secret. Depends on the change alone, so it runs outside the mirror's lock."""
        try:
            path = normalise_memory_path(change.path)
            if change.content is not None and self.service.redact_writes:
                refuse_secrets(path, change.content)  # the one rule for text entering the server: server.memory.intake
        except InvalidArgumentError as exc:
            return _rejected(change, exc)
        return path

    def _apply(self, mirror: FileStore, caller: str, path: str, change: PushChange) -> PushResult:
        """`change` (at its checked `path`) applied to the server's file; call under the mirror's lock. Applied
        again over a change another server made to the file meanwhile (`rewritten`): merged, as here."""
        try:
            return rewritten(mirror, path, lambda found: _applied(mirror, caller, path, change, found))
        except InvalidArgumentError as exc:  # the text or the server's own file is unusable
            return _rejected(change, exc)


def _applied(mirror: FileStore, caller: str, path: str, change: PushChange, found: Current) -> PushResult:
    if found.unreadable is not None:
        return _over_unreadable(mirror, caller, path, change, found)
    if change.content is None:
        return _delete(mirror, caller, path, change.base, found.file)
    return _write(mirror, caller, path, change.base, change.content, found.file)


def _kept_apart(
    mirror: FileStore, caller: str, path: str, content: str, record: IdempotencyRecord
) -> tuple[str, FileState]:
    """The pushed text kept under a new conflict copy's name beside `path`: its name and state. A server sharing
    the database that takes the same name first (the same caller, the same second) moves it to the next name, as
    one server's lock would have, REWRITE_TRIES times at most."""

    def keep() -> tuple[str, FileState]:
        copy = conflict_path(path, caller, mirror.clock(), lambda p: mirror.read(p) is not None)
        return copy, mirror.write(
            copy, content, caller=caller, expected_hash=ABSENT, change="conflict", record=_answer(record, copy)
        )

    for _ in range(REWRITE_TRIES - 1):
        with contextlib.suppress(ConflictError):
            return keep()
    return keep()


def _rejected(change: PushChange, exc: InvalidArgumentError) -> PushResult:
    return PushResult(change.path, "rejected", None, 0, message=str(exc))


def _over_unreadable(mirror: FileStore, caller: str, path: str, change: PushChange, found: Current) -> PushResult:
    """A push over a file the server holds but cannot read: made when its base is the file's hash (the laptop
    replaces or deletes exactly what is there), else refused, as nothing can be merged with it."""
    if change.base != found.hash:
        raise InvalidArgumentError(f"{found.unreadable}; the laptop's copy is kept")
    if change.content is None:
        mirror.delete(path, caller=caller, expected_hash=found.hash)
        gone = mirror.state(path)
        return PushResult(path, "deleted", None, gone.revision if gone else 0)
    state = mirror.write(path, change.content, caller=caller, expected_hash=found.hash, change="push")
    return PushResult(path, "applied", state.hash, state.revision)


def _change(mirror: FileStore, row: FileState) -> dict[str, object] | None:
    """One entry of a changes answer: the path's state now (it may be newer than `row`), content included. None
    for a file the server has but cannot read or send (too large, not text, no permission): it is not a deletion,
    so laptops keep their copy, and memory_status lists it. None too for a file larger than laptops write
    (MAX_FILE_BYTES, under a raised MEMORY_MAX_FILE_BYTES): an answer holding it could pass the laptops' answer
    ceiling, which they refuse whole, and so never pull anything after it."""
    current: MirrorFile | None = None
    if row.hash is not None:
        try:
            current = mirror.read(row.path)
        except InvalidArgumentError as exc:  # UnsafePathError too: the file is there, only unreadable
            log.warning("sync: %s cannot be sent (%s); laptops keep their copy", row.path, exc)
            return None
    if current is not None and current.size > MAX_FILE_BYTES:
        log.warning(
            "sync: %s is %d bytes, more than laptops write (%d); not sent, laptops keep their copy",
            row.path,
            current.size,
            MAX_FILE_BYTES,
        )
        return None
    if current is None:
        gone = mirror.state(row.path) if row.hash is not None else row
        gone = gone if gone is not None else row
        revision = max(gone.revision, row.revision)
        return Change(row.path, revision, None, None, gone.updated_by, gone.updated_at).as_json()
    return Change(
        row.path, current.revision, current.hash, current.text, current.updated_by, current.updated_at
    ).as_json()


def _write(
    mirror: FileStore, caller: str, path: str, base: str | None, content: str, current: MirrorFile | None
) -> PushResult:
    digest = sha256_hex(utf8(content, "content"))
    if current is not None and current.hash == digest:
        return PushResult(path, "unchanged", current.hash, current.revision)
    record = IdempotencyRecord(caller, _PUSH_KEY + path, f"{base or ''} {digest}", "")
    if current is not None and (answer := _answered(mirror, record, current)) is not None:
        return answer
    if current is None or base == current.hash:
        expected = current.hash if current else ABSENT
        state = mirror.write(path, content, caller=caller, expected_hash=expected, change="push")
        return PushResult(path, "applied", state.hash, state.revision)
    if base is None and _held_before(mirror, path, digest):
        base = digest  # an old copy of this file from a laptop that lost its sync state: nothing in it is new
    if base is None:
        merged = merge_unrelated(current.text, content)
    else:
        base_text = mirror.version_text(base)
        merged = merge3(base_text, current.text, content) if base_text is not None else None
    if merged is not None:
        fault_point("sync.merge.merged")
        try:
            state = mirror.write(
                path,
                merged,
                caller=caller,
                expected_hash=current.hash,
                change="merge",
                record=_answer(record, "merged"),
            )
        except InvalidArgumentError:  # the merged text is over the size cap: keep both sides apart instead
            log.info("sync: merging %s would exceed the size cap; keeping a conflict copy", path)
        else:
            return PushResult(path, "merged", state.hash, state.revision, content=merged)
    copy, kept = _kept_apart(mirror, caller, path, content, record)
    log.info("sync: conflicting edits of %s; %s kept the pushed text", path, copy)
    return PushResult(
        path,
        "conflict",
        current.hash,
        current.revision,
        content=current.text,
        conflict_path=copy,
        conflict_revision=kept.revision,
    )


def _held_before(mirror: FileStore, path: str, digest: str) -> bool:
    """Whether `path` held the text of hash `digest` earlier (a version its history keeps, whose text is known).
    A laptop that pushes such a text with no base has lost what it last synced, not written a file of its own."""
    if mirror.version_text(digest) is None:  # most texts pushed with no base were never held by any file
        return False
    before: int | None = None
    while True:
        versions = mirror.history.versions(path, before=before, limit=_HISTORY_PAGE)
        if any(version.hash == digest for version in versions):
            return True
        if len(versions) < _HISTORY_PAGE:
            return False
        before = versions[-1].revision


# A merge or a conflict copy is remembered per caller and path, so that the same push again (a laptop that lost the
# answer retries it) gets the same answer: merging it again could conflict with its own merged text, and a conflict
# would be copied twice. The key holds a newline, which no idempotency_key of memory_write can.
_PUSH_KEY = "sync push\n"


def _answer(record: IdempotencyRecord, outcome: str) -> IdempotencyRecord:
    """`record` holding what a push was answered: "merged", or the conflict copy's path."""
    return replace(record, result=json.dumps({"outcome": outcome}))


def _answered(mirror: FileStore, record: IdempotencyRecord, current: MirrorFile) -> PushResult | None:
    """The answer to a push this caller already made (same path, base and text), given with the file as it is now
    (it holds the push, or a later change made over it); None for a push not seen before."""
    remembered = mirror.recall(record.caller, record.key)
    if remembered is None or remembered.request != record.request:
        return None
    outcome = str(json.loads(remembered.result).get("outcome", ""))
    now = PushResult(record.key.removeprefix(_PUSH_KEY), "merged", current.hash, current.revision, current.text)
    if outcome == "merged":
        return now
    copy = mirror.state(outcome) if outcome else None
    if copy is None or copy.hash is None:  # the copy was deleted since: keep the text again
        return None
    return replace(now, status="conflict", conflict_path=copy.path, conflict_revision=copy.revision)


def _delete(mirror: FileStore, caller: str, path: str, base: str | None, current: MirrorFile | None) -> PushResult:
    if current is None:
        gone = mirror.state(path)
        return PushResult(path, "deleted", None, gone.revision if gone else 0)
    if base != current.hash:  # changed on the server since this laptop saw it: the newer text wins
        return PushResult(path, "kept", current.hash, current.revision, content=current.text)
    mirror.delete(path, caller=caller, expected_hash=current.hash)
    gone = mirror.state(path)
    return PushResult(path, "deleted", None, gone.revision if gone else 0)
