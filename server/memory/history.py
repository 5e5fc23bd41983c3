"""The history tools: `memory_history` (the versions of a file, the recent changes of the whole index, or the files
deleted now) and `memory_restore` (a past version brought back as a new version), for one authorised caller.

Like `server.sync.service.SyncService`, this works through `MemoryService` (its grants, its open indexes and its
re-indexing) and blocks. The versions themselves are kept by the mirror (`server.mirror.history`), in the same
transaction as every change; a restore is one more change (`change="restore"`), so it is undone the same way and
reaches every laptop through the normal sync like any other write. `memory_get` reads a version
(`server.memory.reading.version_file`).
"""

from __future__ import annotations

from functools import partial

from server.errors import InvalidArgumentError
from server.indexes.storage import FileStore
from server.memory.arguments import check_version
from server.memory.caller import CallerContext
from server.memory.intake import redacted, refuse_secret_path
from server.memory.reading import version_file
from server.memory.results import HistoryOutput, RestoreOutput, VersionEntry
from server.memory.service import ABSENT, MemoryService
from server.mirror.current import Current, rewritten
from server.mirror.history import Version
from server.mirror.paths import normalise_memory_path, normalise_memory_prefix
from syncproto.wire import sha256_hex

MAX_HISTORY_LIMIT = 100


class HistoryService:
    def __init__(self, service: MemoryService) -> None:
        self.service = service

    def history(
        self,
        caller: CallerContext,
        *,
        path: str | None = None,
        deleted: bool = False,
        before: int | None = None,
        limit: int = 50,
    ) -> HistoryOutput:
        """Versions of `path`, newest first (every file's when None); with `deleted`, the deletions of files that
        are deleted now (`path` is then a prefix). `before`: only versions older than that one."""
        with self.service.calling():
            mirror = self.service.open_index(caller).mirror
            if not isinstance(deleted, bool):
                raise InvalidArgumentError("deleted must be true or false")
            if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_HISTORY_LIMIT:
                raise InvalidArgumentError(f"limit must be a whole number from 1 to {MAX_HISTORY_LIMIT}")
            below = check_version(before, "before") if before is not None else None
            if deleted:
                clean = None
                rows = mirror.history.deleted(normalise_memory_prefix(path, argument="path"), before=below,
                                              limit=limit + 1)  # fmt: skip
            else:
                clean = normalise_memory_path(path) if path is not None else None
                mirror.reconcile_all()  # an edit made on the server's disk is a version too
                rows = mirror.history.versions(clean, before=below, limit=limit + 1)
            entries = [_entry(mirror, row) for row in rows[:limit]]
            more = len(rows) > limit
            return HistoryOutput(
                path=clean, deleted=deleted, versions=entries, next_before=entries[-1].version if more else None
            )

    def restore(self, caller: CallerContext, path: str, version: int) -> RestoreOutput:
        """Make version `version` of `path` the current one, as a new version by `caller` (a deletion restored
        deletes the file). Indexed before it returns; restoring the version the file already is changes nothing.
        With `redact_writes`, the restored text is redacted as `memory_write` content is: the version itself stays
        in the history as it was (readable with memory_get), only its secrets do not come back to every laptop."""
        with self.service.calling():
            handle = self.service.open_index(caller, write=True)
            path = normalise_memory_path(path)
            counts: dict[str, int] = {}
            if self.service.redact_writes:  # a file stored before names were checked stays deleted
                refuse_secret_path(path, "Nothing was restored: its text can be read with memory_get and version")
            mirror = handle.mirror
            with mirror.holding_changes():  # long-polls wake once the restored text is searchable
                with mirror.lock:
                    old, entry = version_file(mirror, path, version)
                    text = old.text if old is not None else None
                    if text is not None and self.service.redact_writes:
                        text = redacted(text, counts)  # a version kept from before redaction, or a newer rule
                    changed = rewritten(mirror, path, partial(_put, mirror, caller.name, path, text))
                    state = mirror.state(path)
                indexed = self.service.reindex(handle, [path]) if changed else True
            return RestoreOutput(
                path=path,
                restored_version=entry.revision,
                changed=changed,
                version=state.revision if state is not None else entry.revision,
                hash=state.hash if state is not None else None,
                indexed=indexed,
                redacted=counts,
            )


def _put(mirror: FileStore, caller: str, path: str, text: str | None, found: Current) -> bool:
    """The file at `path` made `text` (None: deleted) over the file `found` (a damaged one too: only its hash is
    needed); whether that changed it."""
    changed = (sha256_hex(text.encode("utf-8")) if text is not None else None) != found.hash
    if changed and text is None:
        mirror.delete(path, caller=caller, expected_hash=found.hash, change="restore")
    elif changed and text is not None:
        expected = found.hash if found.hash is not None else ABSENT
        mirror.write(path, text, caller=caller, expected_hash=expected, change="restore")
    return changed


def _entry(mirror: FileStore, version: Version) -> VersionEntry:
    restore = None
    if version.hash is None:
        last = mirror.history.last_text(version.path, version.revision)
        restore = last.revision if last is not None else None
    return VersionEntry(
        path=version.path,
        version=version.revision,
        hash=version.hash,
        size=version.size,
        change=version.change,
        updated_by=version.updated_by,
        updated_at=version.updated_at,
        restore_version=restore,
    )
