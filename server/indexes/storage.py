"""The storage seam: what the memory operations and file sync need from the place files, revisions, chunks and
search live. Narrow protocols and a backend that opens both for one index.

`FileStore` holds an index's files with their revisions, tombstones, idempotency records, merge bases, the
change feed (`holding_changes`) and the version history (`HistoryStore`, written in the transaction that records a
file's new state: a backend must keep that promise); `SearchIndex` holds its chunks, vectors and keyword index.
SQLite is the one implementation (`server.mirror.Mirror`, `server.index.MemoryIndex`, opened by `SqliteBackend`);
another backend (PostgreSQL, later) implements the same protocols and is chosen where the service is built.
"""

from __future__ import annotations

import builtins
import contextlib
import datetime as dt
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Literal, Protocol

from server.index.embeddings.base import Embedder
from server.index.embeddings.chain import ProviderChain
from server.index.engine import MemoryIndex
from server.index.engine_settings import EngineSettings
from server.index.hits import SearchResult
from server.index.indexer import IndexReport
from server.index.labelled_files import FileLabels
from server.index.labels import Labels
from server.index.naming import index_dir
from server.index.search import SearchOptions
from server.index.status import IndexStatus
from server.mirror.history import ChangeKind, HistorySize, Retention, Version, VersionText
from server.mirror.mirror import Mirror, MirrorFile
from server.mirror.state import CallerSync, FileState, IdempotencyRecord


class HistoryStore(Protocol):
    """The versions of one index's memory files, newest first; a version is named by the revision of its change."""

    def versions(
        self, path: str | None = None, *, before: int | None = None, limit: int = 50
    ) -> builtins.list[Version]: ...
    def deleted(self, prefix: str = "", *, before: int | None = None, limit: int = 50) -> builtins.list[Version]: ...
    def last_text(self, path: str, before: int) -> Version | None: ...
    def get(self, path: str, revision: int) -> VersionText | None: ...
    def size(self) -> HistorySize: ...


class FileStore(Protocol):
    """One index's files and their history. Thread-safe; every method blocks."""

    @property
    def lock(self) -> contextlib.AbstractContextManager[object]:
        """Held across a read-modify-write sequence (re-entrant)."""

    @property
    def max_file_bytes(self) -> int: ...

    @property
    def unreadable(self) -> dict[str, str]:
        """Files held but unreadable (no permission, over the cap, not text): path -> why. Never sent as deleted."""

    @property
    def files_dir(self) -> Path:
        """Where the search index reads the files from."""

    @property
    def clock(self) -> Callable[[], dt.datetime]: ...

    @property
    def history(self) -> HistoryStore: ...

    def read(self, path: str) -> MirrorFile | None: ...
    def state(self, path: str) -> FileState | None: ...
    def states(self, paths: builtins.list[str]) -> dict[str, FileState]: ...
    def list(
        self, prefix: str = "", date_from: str | None = None, date_to: str | None = None
    ) -> builtins.list[FileState]: ...
    def reconcile_all(self) -> builtins.list[FileState]: ...
    def changes_since(self, revision: int, limit: int = 1000) -> builtins.list[FileState]: ...
    def version_text(self, digest: str) -> str | None: ...
    def revision(self) -> int: ...
    def write(
        self,
        path: str,
        text: str,
        *,
        caller: str,
        expected_hash: str | None = None,
        record: IdempotencyRecord | None = None,
        change: ChangeKind = "write",
    ) -> FileState: ...
    def delete(
        self, path: str, *, caller: str, expected_hash: str | None = None, change: ChangeKind = "delete"
    ) -> FileState | None: ...
    def recall(self, caller: str, key: str) -> IdempotencyRecord | None: ...
    def remember(self, record: IdempotencyRecord) -> None: ...
    def record_sync(self, caller: str, kind: Literal["pull", "push"], revision: int) -> None: ...
    def sync_callers(self) -> builtins.list[CallerSync]: ...
    def holding_changes(self) -> contextlib.AbstractContextManager[None]: ...
    def close(self) -> None: ...


class SearchIndex(Protocol):
    """One index's chunks, vectors and keyword index, kept up to date from a FileStore's files."""

    @property
    def name(self) -> str: ...

    @property
    def needs_rebuild(self) -> bool: ...

    def start_background_rebuild(self) -> object: ...
    def search(self, query: str, options: SearchOptions | None = None) -> SearchResult: ...
    def status(self) -> IndexStatus: ...
    def index(
        self,
        root: Path | None = None,
        *,
        force: bool = False,
        rebuild_now: bool = True,
        on_file: Callable[[str], None] | None = None,
        paths: Collection[str] | None = None,
        on_seen: Callable[[str], None] | None = None,
    ) -> IndexReport: ...
    def index_if_idle(self, root: Path | None = None, **options: object) -> IndexReport | None: ...
    def indexed_files(self) -> dict[str, str]: ...
    def file_labels(self, wanted: Labels, paths: Collection[str] | None = None) -> dict[str, FileLabels]: ...
    def last_change(self) -> float | None: ...
    def close(self) -> None: ...


class Backend(Protocol):
    """Opens the storage of one index by name."""

    def exists(self, name: str) -> bool: ...
    def open(self, name: str, *, on_change: Callable[[], None]) -> tuple[SearchIndex, FileStore]: ...


class SqliteBackend:
    """Each index in `<data>/indexes/<name>/`: `index.sqlite3` (the engine) beside `files/` and `state.sqlite3`."""

    def __init__(
        self,
        data_dir: Path,
        embedder: Embedder | ProviderChain | None,
        settings: EngineSettings,
        clock: Callable[[], dt.datetime],
        retention: Retention | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.retention = retention
        self.embedder = embedder
        self.settings = settings
        self.clock = clock

    def exists(self, name: str) -> bool:
        return (index_dir(self.data_dir, name) / "index.json").is_file()

    def open(self, name: str, *, on_change: Callable[[], None]) -> tuple[SearchIndex, FileStore]:
        def mirror(directory: Path) -> FileStore:
            return Mirror(
                directory,
                clock=self.clock,
                max_file_bytes=self.settings.scan.max_file_bytes,
                on_change=on_change,
                retention=self.retention,
            )

        return open_beside_engine(self.data_dir, name, self.embedder, self.settings, mirror)


def open_beside_engine(
    data_dir: Path,
    name: str,
    embedder: Embedder | ProviderChain | None,
    settings: EngineSettings,
    files: Callable[[Path], FileStore],
) -> tuple[SearchIndex, FileStore]:
    """Index `name`'s SQLite search engine under `data_dir` (with that index's own settings), and the file store
    `files(its folder)` opens (the engine is closed again when that fails)."""
    index = MemoryIndex.open(data_dir, name, embedder, create=True, settings=settings.for_index(name))
    try:
        return index, files(index.directory)
    except BaseException:
        index.close()
        raise
