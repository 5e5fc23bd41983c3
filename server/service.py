"""The memory service: what the MCP tools do, for one authorised caller, on the caller's own index only.

Every method blocks (the MCP layer calls it through `anyio.to_thread.run_sync`) and is thread-safe. The index a
method works on is `caller.index`, checked against the caller's grants on every call; no argument names an index.
Indexes (engine + mirror) open lazily on first use and stay open until `close`.

Writing: `append` (default) adds to a file, by default today's daily log `memory/YYYY-MM-DD.md` in the caller's
time zone; a new daily log starts with `# YYYY-MM-DD`; an entry in a daily log goes under `## HH:MM — topic`
(`## HH:MM` without a topic), an entry in another file under `## HH:MM — topic` only when a topic is given;
entries are separated by one blank line. `replace` needs `expected_hash`: the file's current sha256, or the
literal "absent" for a file that must not exist yet. Either way the mirror and the index are updated before
the call returns, and an `idempotency_key` makes a retry return the first answer without writing again.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Literal, cast

from channel.authz import ChannelUser
from server.arguments import (
    MAX_WRITE_BYTES,
    check_content,
    check_day,
    check_expected_hash,
    check_idempotency_key,
    decode_cursor,
    encode_cursor,
    request_digest,
    time_zone,
    valid_index_name,
)
from server.errors import ConflictError, PermissionDeniedError, ServiceClosedError, UnsafePathError
from server.index.embeddings.base import Embedder
from server.index.engine import EngineSettings, MemoryIndex, index_dir, validate_name
from server.index.errors import EngineError, InvalidArgumentError
from server.index.scan import day_of
from server.index.search import build_options
from server.intake import redacted
from server.memory_text import clean_topic, compose_append, count_lines, entry_heading, page
from server.mirror import ABSENT, FileState, IdempotencyRecord, Mirror, check_expected, iso, sha256_hex, utc_now
from server.models import (
    CallerSyncEntry,
    DeleteOutput,
    FileEntry,
    GetOutput,
    ListOutput,
    SearchHit,
    SearchOutput,
    StatusOutput,
    SyncOutput,
    WriteOutput,
)
from server.paths import (
    daily_log_path,
    is_session_file,
    normalise_memory_path,
    normalise_memory_prefix,
    normalise_mirror_path,
)

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

Access = Literal["r", "rw"]
MAX_GET_CHARS = 40_000  # about 10k tokens per memory_get answer
MAX_LIST_LIMIT = 1000
AUTO_INDEX_FILES = 32  # a search indexes at most this many files changed on disk first; more wait for sync
CLOSE_WAIT_SECONDS = 60.0
# A search looks for files changed on disk behind the service (a walk of the mirror, ~10 ms per 1,000 files) at
# most this often per index; changes made through the service are indexed before the call returns anyway.
RESCAN_SECONDS = 2.0
_MODE_RANK = {"keyword": 0, "vector": 1, "hybrid": 2}


def _server_version() -> str:
    try:
        return metadata.version("agent-memory-server")
    except metadata.PackageNotFoundError:
        return "0.0.0"


SERVER_VERSION = _server_version()


@dataclass(frozen=True)
class CallerContext:
    """Who is calling and on which index, as the channel authenticated them."""

    name: str
    fingerprint: str
    grants: Mapping[str, Access]
    index: str
    access: Access

    @classmethod
    def from_user(cls, user: ChannelUser) -> CallerContext:
        """From the channel's `request.user`; PermissionDeniedError when the request names no granted index."""
        if user.index is None:
            raise PermissionDeniedError("no index selected: the proxy must name one of the caller's indexes")
        access = user.access or user.grants.get(user.index)
        if access is None:
            raise PermissionDeniedError(f"caller {user.name} has no access to index {user.index}")
        return cls(user.name, user.fingerprint, dict(user.grants), user.index, access)


@dataclass
class OpenIndex:
    """One open index: the engine and the mirror it indexes (sync works on both through the service)."""

    index: MemoryIndex
    mirror: Mirror
    unindexable: dict[str, str] = field(default_factory=dict)  # path -> hash the engine skipped (not UTF-8...)
    scanned_at: float | None = None  # time.monotonic() of the last look for disk changes by a search
    pending: int = 0  # files waiting for the index at that look


class _Cancelled(Exception):
    pass


class MemoryService:
    def __init__(
        self,
        data_dir: Path,
        embedder: Embedder | None,
        settings: EngineSettings | None = None,
        *,
        clock: Callable[[], dt.datetime] = utc_now,
        rescan_interval: float = RESCAN_SECONDS,
        redact_writes: bool = True,
    ) -> None:
        """`redact_writes`: replace secrets in `memory_write` content (and topic) by `[redacted:<kind>]` markers."""
        self.data_dir = data_dir
        self.redact_writes = redact_writes
        self.rescan_interval = rescan_interval
        self.embedder = embedder
        self.settings = settings or EngineSettings()
        self.clock = clock
        self._open_lock = threading.Lock()
        self._indexes: dict[str, OpenIndex] = {}
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
        with self._open_lock:
            opened, self._indexes = self._indexes, {}
        for handle in opened.values():
            handle.index.close()
            handle.mirror.close()

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
        name, _access = self._authorise(caller, write=write)
        return self._handle(name)

    def reindex(self, handle: OpenIndex, paths: builtins.list[str]) -> bool:
        """Index `paths` of `handle` now (after sync wrote them); False when indexing failed (logged)."""
        return self._index_quietly(handle, paths=paths)

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

    def _open(self, name: str, *, create: bool = True) -> OpenIndex | None:
        with self._open_lock:
            handle = self._indexes.get(name)
            if handle is not None:
                return handle
            if not create and not (index_dir(self.data_dir, name) / "index.json").is_file():
                return None
            index = MemoryIndex.open(self.data_dir, name, self.embedder, create=True, settings=self.settings)
            try:
                mirror = Mirror(
                    index.directory,
                    clock=self.clock,
                    max_file_bytes=self.settings.scan.max_file_bytes,
                    on_change=lambda: self._changed(name),
                )
            except BaseException:
                index.close()
                raise
            if index.needs_rebuild:
                index.start_background_rebuild()
            handle = self._indexes[name] = OpenIndex(index, mirror)
            return handle

    def _handle(self, name: str) -> OpenIndex:
        handle = self._open(name)
        assert handle is not None
        return handle

    # authorisation -------------------------------------------------------------------------------------

    def _authorise(self, caller: CallerContext, *, write: bool = False) -> tuple[str, Access]:
        """The caller's index and effective access, checked against the grants on every call."""
        if not isinstance(caller, CallerContext):
            raise PermissionDeniedError("no authenticated caller")
        granted = caller.grants.get(caller.index)
        if granted is None:
            raise PermissionDeniedError(f"caller {caller.name} has no access to index {caller.index}")
        validate_name(caller.index)
        access: Access = "rw" if granted == "rw" and caller.access == "rw" else "r"
        if write and access != "rw":
            raise PermissionDeniedError(
                f"caller {caller.name} may only read index {caller.index}; writing and deleting need rw access"
            )
        return caller.index, access

    # search --------------------------------------------------------------------------------------------

    def search(
        self,
        caller: CallerContext,
        query: str,
        *,
        max_results: int = 8,
        min_score: float = 0.0,
        sources: list[str] | None = None,
        path: str | None = None,
        date_from: str | None = None,
        date_to: str | None = None,
        scope: Literal["index", "all"] = "index",
    ) -> SearchOutput:
        """Hybrid search of the caller's index (`scope="all"`: and of every other index it may read)."""
        with self._call():
            name, _access = self._authorise(caller)
            if scope not in ("index", "all"):
                raise InvalidArgumentError("scope must be 'index' or 'all'")
            if sources is not None and (not isinstance(sources, list) or not all(isinstance(s, str) for s in sources)):
                raise InvalidArgumentError("sources must be a list of source names")
            options = build_options(
                limit=max_results,
                min_score=min_score,
                sources=sources,
                path_prefix=normalise_memory_prefix(path, argument="path"),
                date_from=date_from,
                date_to=date_to,
            )
            names = [name]
            if scope == "all":
                names += sorted(n for n in caller.grants if n != name and valid_index_name(n))
            hits: list[SearchHit] = []
            modes: list[str] = []
            notices: list[str] = []
            searched: list[str] = []
            pending = 0
            updated_at: str | None = None
            for index_name in names:
                handle = self._open(index_name, create=index_name == name)
                if handle is None:
                    continue
                files_pending = self._freshen(handle)
                result = handle.index.search(query, options)
                states = handle.mirror.states([h.path for h in result.hits])
                for hit in result.hits:
                    state = states.get(hit.path)
                    hits.append(
                        SearchHit(
                            path=hit.path,
                            start_line=hit.start_line,
                            end_line=hit.end_line,
                            heading=hit.heading,
                            score=round(hit.score, 4),
                            snippet=hit.snippet,
                            source=cast(Literal["memory", "sessions"], hit.source),
                            citation=hit.citation,
                            index=index_name,
                            updated_by=state.updated_by if state else None,
                            updated_at=state.updated_at if state else None,
                        )
                    )
                searched.append(index_name)
                modes.append(result.mode)
                if result.notice and result.notice not in notices:
                    notices.append(result.notice)
                if index_name == name:
                    pending = files_pending
                    updated_at = _last_change(handle)
            if pending:
                notices.append(f"{pending} changed files are not indexed yet; memory_sync indexes them")
            hits.sort(key=lambda h: -h.score)
            return SearchOutput(
                hits=hits[: options.limit],
                search_mode=cast(Literal["hybrid", "vector", "keyword"], min(modes, key=_MODE_RANK.__getitem__)),
                notice="; ".join(notices) or None,
                indexes=searched,
                index_updated_at=updated_at,
                pending_files=pending,
            )

    # get -----------------------------------------------------------------------------------------------

    def get(
        self, caller: CallerContext, path: str, *, start_line: int | None = None, end_line: int | None = None
    ) -> GetOutput:
        """Lines of one file (all by default), at most MAX_GET_CHARS characters; a missing file is exists=False."""
        with self._call():
            name, _access = self._authorise(caller)
            path = normalise_mirror_path(path)
            for value, argument in ((start_line, "start_line"), (end_line, "end_line")):
                if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                    raise InvalidArgumentError(f"{argument} must be a whole number from 1")
            if start_line is not None and end_line is not None and start_line > end_line:
                raise InvalidArgumentError("start_line is after end_line")
            handle = self._handle(name)
            current = handle.mirror.read(path)
            if current is None:
                gone = handle.mirror.state(path)
                return GetOutput(
                    path=path,
                    exists=False,
                    content="",
                    start_line=0,
                    end_line=0,
                    total_lines=0,
                    hash=None,
                    truncated=False,
                    next_start_line=None,
                    updated_by=gone.updated_by if gone else None,
                    updated_at=gone.updated_at if gone else None,
                )
            part = page(current.text, start_line, end_line, MAX_GET_CHARS)
            return GetOutput(
                path=path,
                exists=True,
                content=part.content,
                start_line=part.start_line,
                end_line=part.end_line,
                total_lines=part.total_lines,
                hash=current.hash,
                truncated=part.truncated,
                next_start_line=part.next_start_line,
                updated_by=current.updated_by,
                updated_at=current.updated_at,
            )

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
    ) -> WriteOutput:
        """Append to a file (default: today's daily log in `timezone`) or replace one whose current hash the
        caller names (`expected_hash`, or "absent" for a new file). Indexed before it returns."""
        with self._call():
            name, _access = self._authorise(caller, write=True)
            check_content(content)
            redacted: dict[str, int] = {}
            if self.redact_writes:
                content = _redact_into(content, redacted)
                topic = _redact_into(topic, redacted) if isinstance(topic, str) else topic
            if mode not in ("append", "replace"):
                raise InvalidArgumentError("mode must be 'append' or 'replace'")
            if topic is not None and not isinstance(topic, str):
                raise InvalidArgumentError("topic must be a string")
            expected = check_expected_hash(expected_hash)
            key = check_idempotency_key(idempotency_key)
            zone = time_zone(timezone)
            if mode == "replace":
                if path is None:
                    raise InvalidArgumentError("replace needs a path")
                if expected is None:
                    raise InvalidArgumentError(
                        "replace needs expected_hash: the file's current hash (from memory_get or memory_list),"
                        f" or {ABSENT!r} to create a new file"
                    )
            request = request_digest(
                {
                    "content": content,
                    "path": path,
                    "mode": mode,
                    "topic": topic,
                    "expected_hash": expected,
                    "timezone": timezone,
                }
            )
            local = self.clock().astimezone(zone)
            target = normalise_memory_path(path) if path is not None else daily_log_path(local.date())
            handle = self._handle(name)
            with handle.mirror.holding_changes():  # readers hear of the write once it is indexed
                with handle.mirror.lock:
                    earlier = handle.mirror.recall(caller.name, key) if key is not None else None
                    if earlier is None:
                        output, record = self._write_locked(
                            handle, caller, content, target, mode, topic, expected, local, key, request, redacted
                        )
                if earlier is not None:
                    if earlier.request != request:
                        raise InvalidArgumentError(
                            "idempotency_key was already used for a different write; use a new key"
                        )
                    replay = WriteOutput.model_validate_json(earlier.result)
                    return self._after_write(handle, replay, earlier, replayed=True)
                return self._after_write(handle, output, record, replayed=False)

    def _write_locked(
        self,
        handle: OpenIndex,
        caller: CallerContext,
        content: str,
        target: str,
        mode: Literal["append", "replace"],
        topic: str | None,
        expected: str | None,
        local: dt.datetime,
        key: str | None,
        request: str,
        redacted: dict[str, int],
    ) -> tuple[WriteOutput, IdempotencyRecord | None]:
        """The read-modify-write of `write`, under the mirror's lock."""
        current = handle.mirror.read(target)
        check_expected(target, current.hash if current else None, expected)
        if mode == "append":
            title = f"# {day}" if current is None and (day := day_of(target)) else None
            heading = None
            clean = clean_topic(topic)
            if clean is not None or day_of(target) is not None:
                heading = entry_heading(local.strftime("%H:%M"), clean)
            added = compose_append(current.text if current else "", content, title=title, heading=heading)
            text, first, last = added.text, added.start_line, added.end_line
        else:
            text, first, last = content, 1, count_lines(content)
        data = text.encode("utf-8")
        if len(data) > handle.mirror.max_file_bytes:
            raise InvalidArgumentError(
                f"{target} would be larger than {handle.mirror.max_file_bytes} bytes; write to another file"
            )
        output = WriteOutput(
            path=target,
            mode=mode,
            hash=sha256_hex(data),
            lines=count_lines(text),
            start_line=first,
            end_line=last,
            indexed=False,
            replayed=False,
            redacted=redacted,
        )
        record = IdempotencyRecord(caller.name, key, request, output.model_dump_json()) if key else None
        handle.mirror.write(
            target,
            text,
            caller=caller.name,
            expected_hash=current.hash if current is not None else ABSENT,
            record=record,
        )
        return output, record

    def _after_write(
        self, handle: OpenIndex, output: WriteOutput, record: IdempotencyRecord | None, *, replayed: bool
    ) -> WriteOutput:
        indexed = output.indexed or self._index_quietly(handle, paths=[output.path])
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
    ) -> ListOutput:
        """Memory files and session transcripts sorted by path, `limit` per page; date bounds keep only daily
        logs and transcripts (by the day they began) in the range."""
        with self._call():
            name, _access = self._authorise(caller)
            clean_prefix = normalise_memory_prefix(prefix)
            low, high = check_day(date_from, "date_from"), check_day(date_to, "date_to")
            if low and high and low > high:
                raise InvalidArgumentError("date_from is after date_to")
            if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIST_LIMIT:
                raise InvalidArgumentError(f"limit must be a whole number from 1 to {MAX_LIST_LIMIT}")
            after = decode_cursor(cursor)
            files = self._handle(name).mirror.list(clean_prefix, low, high)
            total = len(files)
            if after is not None:
                files = [f for f in files if f.path > after]
            shown = files[:limit]
            return ListOutput(
                files=[
                    FileEntry(
                        path=f.path,
                        source="sessions" if is_session_file(f.path) else "memory",
                        size=f.size,
                        lines=f.lines,
                        hash=f.hash or "",
                        updated_at=f.updated_at,
                        updated_by=f.updated_by,
                    )
                    for f in shown
                ],
                next_cursor=encode_cursor(shown[-1].path) if len(files) > limit else None,
                total=total,
            )

    def resource_paths(self, caller: CallerContext) -> builtins.list[str]:
        """Every memory file of the caller's index, sorted, for `memory://` resources."""
        with self._call():
            name, _access = self._authorise(caller)
            return [f.path for f in self._handle(name).mirror.list()]

    # delete --------------------------------------------------------------------------------------------

    def delete(self, caller: CallerContext, path: str, *, expected_hash: str | None = None) -> DeleteOutput:
        """Delete a file (a tombstone records it for sync); deleting a missing file is `deleted=False`."""
        with self._call():
            name, _access = self._authorise(caller, write=True)
            path = normalise_memory_path(path)
            expected = check_expected_hash(expected_hash)
            handle = self._handle(name)
            with handle.mirror.holding_changes():
                previous = handle.mirror.delete(path, caller=caller.name, expected_hash=expected)
                if previous is not None:
                    self._index_quietly(handle, paths=[path])
            return DeleteOutput(
                path=path, deleted=previous is not None, previous_hash=previous.hash if previous else None
            )

    # status and sync -----------------------------------------------------------------------------------

    def status(self, caller: CallerContext) -> StatusOutput:
        """The caller's index: model, counts, pending work, freshness, size, search modes."""
        with self._call():
            name, access = self._authorise(caller)
            handle = self._handle(name)
            pending = len(self._pending(handle, handle.mirror.reconcile_all()))
            status = handle.index.status()
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
                last_change_at=_iso_epoch(status.last_change),
                database_bytes=status.database_bytes,
                search_modes=status.search_modes,
                notice=status.notice,
                revision=handle.mirror.revision(),
                sync=[CallerSyncEntry(**dataclasses.asdict(entry)) for entry in handle.mirror.sync_callers()],
                unreadable=dict(sorted(handle.mirror.unreadable.items())),
            )

    def sync(
        self,
        caller: CallerContext,
        *,
        force: bool = False,
        progress: Callable[[int, int, str], None] | None = None,
        cancelled: Callable[[], bool] | None = None,
    ) -> SyncOutput:
        """Index what changed in the mirror (everything with `force`), calling `progress(done, total, path)`
        after each file and stopping after the current file once `cancelled()` is true."""
        with self._call():
            if not isinstance(force, bool):
                raise InvalidArgumentError("force must be true or false")
            # Re-embedding a whole index costs minutes of CPU: only a caller who may write asks for it.
            name, _access = self._authorise(caller, write=force)
            handle = self._handle(name)
            live = handle.mirror.reconcile_all()
            total = len(live) if force else len(self._pending(handle, live, include_unindexable=True))
            done = 0

            def on_file(path: str) -> None:
                nonlocal done
                done += 1
                if progress is not None:
                    progress(min(done, total), total, path)
                if cancelled is not None and cancelled():
                    raise _Cancelled

            start = self.clock()
            if cancelled is not None and cancelled():
                return SyncOutput(
                    files_seen=0, files_indexed=0, files_removed=0, chunks_embedded=0, seconds=0.0, cancelled=True
                )
            try:
                report = handle.index.index(handle.mirror.files_dir, force=force, rebuild_now=False, on_file=on_file)
            except _Cancelled:
                seconds = (self.clock() - start).total_seconds()
                return SyncOutput(
                    files_seen=total,
                    files_indexed=done,
                    files_removed=0,
                    chunks_embedded=0,
                    seconds=max(seconds, 0.0),
                    cancelled=True,
                )
            self._remember_skipped(handle, report.skipped)
            handle.scanned_at = None
            if progress is not None and done < total:
                progress(total, total, "")
            return SyncOutput(
                files_seen=report.files_seen,
                files_indexed=report.files_indexed,
                files_removed=report.files_removed,
                chunks_embedded=report.chunks_embedded,
                seconds=round(report.seconds, 3),
                cancelled=False,
            )

    # indexing helpers ----------------------------------------------------------------------------------

    def _index_quietly(self, handle: OpenIndex, *, wait: bool = True, paths: builtins.list[str] | None = None) -> bool:
        """Bring the engine up to date with the mirror (only `paths`, after a write or delete through the service);
        False when that failed (logged) or, without `wait`, when another run (a sync) holds the index."""
        try:
            if wait:
                report = handle.index.index(handle.mirror.files_dir, rebuild_now=False, paths=paths)
            else:
                maybe = handle.index.index_if_idle(handle.mirror.files_dir, rebuild_now=False)
                if maybe is None:
                    return False
                report = maybe
        except EngineError as exc:
            log.error("indexing %s after a change failed: %s", handle.index.name, type(exc).__name__)
            return False
        self._remember_skipped(handle, report.skipped)
        handle.scanned_at = None  # the next search looks at the disk again
        return True

    def _remember_skipped(self, handle: OpenIndex, skipped: builtins.list[tuple[str, str]]) -> None:
        for path, _reason in skipped:
            state = handle.mirror.state(path)
            if state is not None and state.hash is not None:
                handle.unindexable[path] = state.hash

    def _freshen(self, handle: OpenIndex) -> int:
        """Record disk changes, index them now when they are few; the number still waiting. Looks at the disk
        at most once per `rescan_interval` (a write through the service resets nothing: it indexes itself)."""
        now = time.monotonic()
        if handle.scanned_at is not None and now - handle.scanned_at < self.rescan_interval:
            return handle.pending
        pending = self._pending(handle, handle.mirror.reconcile_all())
        # Never wait behind a running sync: answer from the index as it is, and count the files still pending.
        if 0 < len(pending) <= AUTO_INDEX_FILES and self._index_quietly(handle, wait=False):
            pending = self._pending(handle, handle.mirror.reconcile_all())
        handle.scanned_at, handle.pending = now, len(pending)
        return len(pending)

    def _pending(
        self, handle: OpenIndex, live: builtins.list[FileState], *, include_unindexable: bool = False
    ) -> set[str]:
        """Paths where the mirror and the engine disagree (changed, new or removed files)."""
        indexed = {
            str(path): str(digest)
            for path, digest in handle.index.store.connection().execute("SELECT path, hash FROM files")
        }
        out: set[str] = set()
        for state in live:
            if indexed.get(state.path) == state.hash:
                continue
            if not include_unindexable and handle.unindexable.get(state.path) == state.hash:
                continue
            out.add(state.path)
        out.update(set(indexed) - {s.path for s in live})
        return out


def _last_change(handle: OpenIndex) -> str | None:
    raw = handle.index.store.get_meta("last_change")
    return _iso_epoch(float(raw)) if raw else None


def _redact_into(text: str, counts: dict[str, int]) -> str:
    """`text` with its secrets replaced; adds what was replaced, per kind, to `counts` (see `server.intake`)."""
    return redacted(text, counts)


def _iso_epoch(seconds: float | None) -> str | None:
    return iso(dt.datetime.fromtimestamp(seconds, dt.UTC)) if seconds else None
