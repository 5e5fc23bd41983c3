"""Keeping an index in step with its files on request (`memory_sync`): changed files, or all of them, with
progress after each file and a stop after the current one when the caller cancels."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable

from server.errors import InvalidArgumentError
from server.index.indexer import IndexReport
from server.index.scan import ScanConfig
from server.index.search import SOURCES, normalise_prefix
from server.indexes.registry import IndexRegistry, OpenIndex
from server.memory.results import SyncOutput


class _Cancelled(Exception):
    pass


def sync_index(
    registry: IndexRegistry,
    handle: OpenIndex,
    clock: Callable[[], dt.datetime],
    *,
    force: bool,
    progress: Callable[[int, int, str], None] | None,
    cancelled: Callable[[], bool] | None,
    source: str | None = None,
    path: str | None = None,
) -> SyncOutput:
    """Index what changed in `handle`'s files (everything with `force`); only files of `source` and under
    `path` when given (deleted ones included); see `MemoryService.sync`."""
    if source is not None and source not in SOURCES:
        raise InvalidArgumentError(f"unknown source {source!r}; sources are {', '.join(SOURCES)}")
    prefix = normalise_prefix(path or "")
    live = handle.mirror.reconcile_all()
    only: set[str] | None = None
    if source is not None or prefix:
        known = [*(state.path for state in live), *handle.index.indexed_files()]
        only = selected_paths(known, ScanConfig().source_of, source, prefix)
        live = [state for state in live if state.path in only]
    pending = set() if force else registry.pending(handle, live, for_sync=True)
    if only is not None:  # `live` is only the selected files: the index's others are not removed ones
        pending &= only
    total = len(live) if force else len(pending)
    done = 0

    def on_file(path: str) -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(min(done, total), total, path)
        if cancelled is not None and cancelled():
            raise _Cancelled

    start = clock()
    if cancelled is not None and cancelled():
        return SyncOutput(
            files_seen=0, files_indexed=0, files_removed=0, chunks_embedded=0, seconds=0.0, cancelled=True
        )
    try:
        first = IndexReport()
        if pending:  # named, so each is read: an edit that kept its size and mtime is found by its hash
            first = handle.index.index(handle.mirror.files_dir, rebuild_now=False, on_file=on_file, paths=pending)
            registry.remember_skipped(handle, first.skipped)
        report = handle.index.index(
            handle.mirror.files_dir, force=force, rebuild_now=False, on_file=on_file, paths=only
        )
    except _Cancelled:
        seconds = (clock() - start).total_seconds()
        return SyncOutput(
            files_seen=total,
            files_indexed=done,
            files_removed=0,
            chunks_embedded=0,
            seconds=max(seconds, 0.0),
            cancelled=True,
        )
    registry.remember_skipped(handle, report.skipped)
    handle.scanned_at = None
    if progress is not None and done < total:
        progress(total, total, "")
    return SyncOutput(
        files_seen=report.files_seen,
        files_indexed=first.files_indexed + report.files_indexed,
        files_removed=first.files_removed + report.files_removed,
        chunks_embedded=first.chunks_embedded + report.chunks_embedded,
        seconds=round(report.seconds, 3),
        cancelled=False,
    )


def selected_paths(
    paths: Iterable[str], source_of: Callable[[str], str | None], source: str | None, prefix: str
) -> set[str]:
    """The paths of `source` (by the scan rules) that lie under `prefix` (a folder or one file)."""
    folder = prefix if not prefix or prefix.endswith("/") else prefix + "/"
    return {
        path
        for path in paths
        if (source is None or source_of(path) == source) and (not prefix or path == prefix or path.startswith(folder))
    }
