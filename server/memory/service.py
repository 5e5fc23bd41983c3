"""The memory service: what the MCP tools do, for one authorised caller, on the caller's own index only.

Every method blocks (the MCP layer calls it through `anyio.to_thread.run_sync`) and is thread-safe. The index a
method works on is `caller.index`, checked against the caller's grants on every call; no argument names an index.
Indexes (engine + mirror) open lazily on first use and stay open until `close` (`server.indexes`). The work of
each tool is in the modules beside this one; how a write composes its text is told in `server.memory.writing`.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import datetime as dt
import logging
import threading
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Literal

from server.errors import (
    ConflictError,
    InvalidArgumentError,
    PermissionDeniedError,
    ServiceClosedError,
    UnsafePathError,
)
from server.index.embeddings.base import Embedder
from server.index.embeddings.chain import ProviderChain
from server.index.engine_settings import EngineSettings
from server.index.labels import labels_argument
from server.index.search import build_options
from server.indexes.registry import RESCAN_SECONDS, IndexRegistry, OpenIndex
from server.indexes.storage import Backend, SqliteBackend
from server.memory.arguments import (
    check_day,
    check_expected_hash,
    check_heading,
    decode_cursor,
    valid_index_name,
)
from server.memory.caller import CallerContext, authorise
from server.memory.reading import list_files, read_lines
from server.memory.results import (
    CallerSyncEntry,
    DeleteOutput,
    GetOutput,
    ListOutput,
    ProviderHealth,
    RebuildOutput,
    SearchOutput,
    StatusOutput,
    SyncOutput,
    WriteOutput,
)
from server.memory.searching import search_indexes
from server.memory.upkeep import sync_index
from server.memory.writing import check_write, write_locked
from server.mirror.mirror import ABSENT, IdempotencyRecord, utc_now
from server.mirror.paths import normalise_memory_path, normalise_memory_prefix, normalise_mirror_path
from server.mirror.state import MirrorFile, iso_epoch
from syncproto.wire import MAX_WRITE_BYTES

__all__ = [
    "ABSENT",
    "MAX_GET_CHARS",
    "MAX_WRITE_BYTES",
    "SERVER_VERSION",
    "CallerContext",
    "ConflictError",
    "MemoryService",
    "PermissionDeniedError",
    "ServiceClosedError",
    "UnsafePathError",
]

log = logging.getLogger(__name__)

MAX_GET_CHARS = 40_000  # about 10k tokens per memory_get answer
MAX_LIST_LIMIT = 1000
CLOSE_WAIT_SECONDS = 60.0


def _server_version() -> str:
    try:
        return metadata.version("agent-memory-server")
    except metadata.PackageNotFoundError:
        return "0.0.0"


SERVER_VERSION = _server_version()


class MemoryService:
    def __init__(
        self,
        data_dir: Path,
        embedder: Embedder | ProviderChain | None,
        settings: EngineSettings | None = None,
        *,
        clock: Callable[[], dt.datetime] = utc_now,
        rescan_interval: float = RESCAN_SECONDS,
        redact_writes: bool = True,
        backend: Backend | None = None,
    ) -> None:
        """`redact_writes`: replace secrets in `memory_write` content (and topic) by `[redacted:<kind>]` markers.
        `backend`: where the indexes' files and search live (default: SQLite under `data_dir`)."""
        self.data_dir = data_dir
        self.redact_writes = redact_writes
        self.embedder = embedder
        self.settings = settings or EngineSettings()
        self.clock = clock
        # The mirrors read the service's clock when they use it (a test may set it after the service exists).
        backend = backend or SqliteBackend(data_dir, embedder, self.settings, lambda: self.clock())
        self.indexes = IndexRegistry(backend, self._changed, rescan_interval=rescan_interval)
        self._calls = threading.Condition()
        self._in_flight = 0
        self._closed = False
        # Called with an index's name after every change to its mirror, in the thread that made it.
        self.change_listeners: builtins.list[Callable[[str], None]] = []
        # Called once when the server stops taking requests (long-polls answer at once); on the event loop.
        self.stopping_listeners: builtins.list[Callable[[], None]] = []

    # lifecycle -----------------------------------------------------------------------------------------

    def close(self) -> None:
        """Refuse new calls, wait for the ones in flight (writes finish), then close every open index."""
        with self._calls:
            self._closed = True
            if not self._calls.wait_for(lambda: self._in_flight == 0, timeout=CLOSE_WAIT_SECONDS):
                log.warning("closing with %d calls still running", self._in_flight)
        self.indexes.close()

    def stopping(self) -> None:
        """The server is stopping: whoever waits for changes should answer now (before `close`)."""
        for listener in builtins.list(self.stopping_listeners):
            listener()

    def _changed(self, name: str) -> None:
        for listener in builtins.list(self.change_listeners):
            listener(name)

    def calling(self) -> contextlib.AbstractContextManager[None]:
        """Hold the service open for one call (ServiceClosedError once it is closing)."""
        return self._call()

    def open_index(self, caller: CallerContext, *, write: bool = False) -> OpenIndex:
        """The caller's index, opened, after checking its grant (and `rw` when `write`)."""
        name, _access = authorise(caller, write=write)
        return self.indexes.get(name)

    def reindex(self, handle: OpenIndex, paths: builtins.list[str]) -> bool:
        """Index `paths` of `handle` now (after sync wrote them); False when indexing failed (logged)."""
        return self.indexes.index_quietly(handle, paths=paths)

    @contextlib.contextmanager
    def _call(self) -> Iterator[None]:
        with self._calls:
            if self._closed:
                raise ServiceClosedError("the memory server is shutting down")
            self._in_flight += 1
        try:
            yield
        finally:
            with self._calls:
                self._in_flight -= 1
                self._calls.notify_all()

    # search --------------------------------------------------------------------------------------------

    def search(
        self,
        caller: CallerContext,
        query: str,
        *,
        max_results: int | None = None,
        min_score: float | None = None,
        sources: list[str] | None = None,
        path: str | None = None,
        date_from: str | None = None,
        date_to: str | None = None,
        scope: Literal["index", "all"] = "index",
        tags: builtins.list[str] | None = None,
        category: str | None = None,
        mmr_lambda: float | None = None,
        recency_half_life_days: float | None = None,
        rerank: bool | None = None,
    ) -> SearchOutput:
        """Hybrid search of the caller's index (`scope="all"`: and of every other index it may read), of chunks with
        any of `tags` and of `category` when given; arguments not given take the configured `SearchDefaults`."""
        with self._call():
            name, _access = authorise(caller)
            if scope not in ("index", "all"):
                raise InvalidArgumentError("scope must be 'index' or 'all'")
            options = build_options(
                defaults=self.settings.for_index(name).search,
                limit=max_results,
                min_score=min_score,
                sources=sources,
                path_prefix=normalise_memory_prefix(path, argument="path"),
                date_from=date_from,
                date_to=date_to,
                tags=tags,
                category=category,
                mmr_lambda=mmr_lambda,
                recency_half_life_days=recency_half_life_days,
                rerank=rerank,
            )
            names = [name]
            if scope == "all":
                names += sorted(n for n in caller.grants if n != name and valid_index_name(n))
            return search_indexes(self.indexes, name, names, query, options)

    # get -----------------------------------------------------------------------------------------------

    def get(
        self,
        caller: CallerContext,
        path: str,
        *,
        start_line: int | None = None,
        end_line: int | None = None,
        heading: str | None = None,
        version: int | None = None,
        start_char: int | None = None,
    ) -> GetOutput:
        """Lines of one file (all by default; with `heading`, of that section; with `version`, of that past
        version from memory_history), at most MAX_GET_CHARS characters; a missing file is exists=False. A line
        longer than that is read in pieces: `start_char` of `start_line` begins the next (`next_start_char`)."""
        with self._call():
            name, _access = authorise(caller)
            path = normalise_mirror_path(path)
            for value, argument in ((start_line, "start_line"), (end_line, "end_line"), (start_char, "start_char")):
                if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                    raise InvalidArgumentError(f"{argument} must be a whole number from 1")
            if start_line is not None and end_line is not None and start_line > end_line:
                raise InvalidArgumentError("start_line is after end_line")
            if start_char is not None and start_line is None:
                raise InvalidArgumentError("start_char needs start_line: the line whose characters it counts")
            parts = check_heading(heading)
            handle = self.indexes.get(name)
            return read_lines(handle, path, start_line, end_line, MAX_GET_CHARS, parts, version, start_char or 1)

    def read(self, caller: CallerContext, path: str) -> MirrorFile | None:
        """The whole current file at `path`, exactly as stored (line ends and long lines kept, no page limit: the
        mirror refuses a file over its `max_file_bytes`), for a `memory://` resource; None when there is none."""
        with self._call():
            name, _access = authorise(caller)
            return self.indexes.get(name).mirror.read(normalise_mirror_path(path))

    # write ---------------------------------------------------------------------------------------------

    def write(
        self,
        caller: CallerContext,
        content: str,
        *,
        path: str | None = None,
        mode: Literal["append", "replace"] = "append",
        topic: str | None = None,
        expected_hash: str | None = None,
        idempotency_key: str | None = None,
        timezone: str | None = None,
        heading: str | None = None,
        tags: builtins.list[str] | None = None,
        category: str | None = None,
    ) -> WriteOutput:
        """Append to a file (default: today's daily log in `timezone`) or replace one whose current hash the
        caller names (`expected_hash`, or "absent" for a new file); with `heading`, only under or of that section
        (its hash then). Indexed before it returns."""
        with self._call():
            name, _access = authorise(caller, write=True)
            change = check_write(
                caller.name, content, path=path, mode=mode, topic=topic, heading=heading,
                expected_hash=expected_hash, idempotency_key=idempotency_key, timezone=timezone,
                now=self.clock(), redact_writes=self.redact_writes, tags=tags, category=category,
            )  # fmt: skip
            handle = self.indexes.get(name)
            with handle.mirror.holding_changes():  # readers hear of the write once it is indexed
                with handle.mirror.lock:
                    made = write_locked(handle, change)
                if isinstance(made, IdempotencyRecord):  # the key's earlier write
                    if made.request != change.request:
                        raise InvalidArgumentError(
                            "idempotency_key was already used for a different write; use a new key"
                        )
                    replay = WriteOutput.model_validate_json(made.result)
                    return self._after_write(handle, replay, made, replayed=True)
                output, record = made
                return self._after_write(handle, output, record, replayed=False)

    def _after_write(
        self, handle: OpenIndex, output: WriteOutput, record: IdempotencyRecord | None, *, replayed: bool
    ) -> WriteOutput:
        indexed = output.indexed or self.indexes.index_quietly(handle, paths=[output.path])
        final = output.model_copy(update={"indexed": indexed})
        if record is not None and indexed and not output.indexed:
            stored = final.model_copy(update={"replayed": False})
            updated = IdempotencyRecord(record.caller, record.key, record.request, stored.model_dump_json())
            handle.mirror.remember(updated)
        return final.model_copy(update={"replayed": replayed})

    # list ----------------------------------------------------------------------------------------------

    def list(
        self,
        caller: CallerContext,
        *,
        prefix: str | None = None,
        date_from: str | None = None,
        date_to: str | None = None,
        cursor: str | None = None,
        limit: int = 200,
        tags: builtins.list[str] | None = None,
        category: str | None = None,
    ) -> ListOutput:
        """Memory files and session transcripts sorted by path, `limit` per page; date bounds keep only daily
        logs and transcripts (by the day they began) in the range; `tags` and `category`, files with a chunk
        that has any of the tags and the category (as the index knows them)."""
        with self._call():
            name, _access = authorise(caller)
            clean_prefix = normalise_memory_prefix(prefix)
            low, high = check_day(date_from, "date_from"), check_day(date_to, "date_to")
            if low and high and low > high:
                raise InvalidArgumentError("date_from is after date_to")
            if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIST_LIMIT:
                raise InvalidArgumentError(f"limit must be a whole number from 1 to {MAX_LIST_LIMIT}")
            after, wanted = decode_cursor(cursor), labels_argument(tags, category)
            handle = self.indexes.get(name)
            return list_files(handle, handle.mirror.list(clean_prefix, low, high), after, limit, wanted)

    def resource_paths(self, caller: CallerContext) -> builtins.list[str]:
        """Every memory file of the caller's index, sorted, for `memory://` resources."""
        with self._call():
            name, _access = authorise(caller)
            return [f.path for f in self.indexes.get(name).mirror.list()]

    # delete --------------------------------------------------------------------------------------------

    def delete(self, caller: CallerContext, path: str, *, expected_hash: str | None = None) -> DeleteOutput:
        """Delete a file (a tombstone records it for sync); deleting a missing file is `deleted=False`."""
        with self._call():
            name, _access = authorise(caller, write=True)
            path = normalise_memory_path(path)
            expected = check_expected_hash(expected_hash)
            handle = self.indexes.get(name)
            with handle.mirror.holding_changes():
                previous = handle.mirror.delete(path, caller=caller.name, expected_hash=expected)
                if previous is not None:
                    self.indexes.index_quietly(handle, paths=[path])
            return DeleteOutput(
                path=path, deleted=previous is not None, previous_hash=previous.hash if previous else None
            )

    # status and sync -----------------------------------------------------------------------------------

    def status(self, caller: CallerContext) -> StatusOutput:
        """The caller's index: model, counts, pending work, freshness, size, search modes."""
        with self._call():
            name, access = authorise(caller)
            handle = self.indexes.get(name)
            pending = len(self.indexes.pending(handle, handle.mirror.reconcile_all()))
            status = handle.index.status()
            history = handle.mirror.history.size()
            return StatusOutput(
                caller=caller.name,
                index=name,
                access=access,
                server_version=SERVER_VERSION,
                provider=status.provider,
                model=status.model,
                dimensions=status.dimensions,
                files=status.files,
                chunks=status.chunks,
                pending_vectors=status.pending_vectors,
                pending_files=pending,
                last_change_at=iso_epoch(status.last_change),
                database_bytes=status.database_bytes,
                search_modes=status.search_modes,
                notice=status.notice,
                revision=handle.mirror.revision(),
                sync=[CallerSyncEntry(**dataclasses.asdict(entry)) for entry in handle.mirror.sync_callers()],
                unreadable=dict(sorted(self.indexes.unreadable(handle).items())),
                embedding_providers=[ProviderHealth(**dataclasses.asdict(p)) for p in status.providers],
                history_versions=history.versions,
                history_bytes=history.bytes,
                rebuild=RebuildOutput(**dataclasses.asdict(status.rebuild)) if status.rebuild else None,
            )

    def sync(
        self,
        caller: CallerContext,
        *,
        force: bool = False,
        progress: Callable[[int, int, str], None] | None = None,
        cancelled: Callable[[], bool] | None = None,
        source: str | None = None,
        path: str | None = None,
    ) -> SyncOutput:
        """Index what changed (everything with `force`; only `source`'s files and those under `path` when given),
        calling `progress(done, total, path)` per file and stopping after the current one once `cancelled()`."""
        with self._call():
            if not isinstance(force, bool):
                raise InvalidArgumentError("force must be true or false")
            name, _access = authorise(caller, write=force)  # re-embedding everything costs minutes: writers only
            handle = self.indexes.get(name)
            return sync_index(self.indexes, handle, self.clock, force=force, progress=progress,
                              cancelled=cancelled, source=source, path=path)  # fmt: skip
