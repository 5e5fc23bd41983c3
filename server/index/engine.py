"""One memory index: its folder under the data directory, its database, and the operations on it.

Layout: `<data-dir>/indexes/<name>/index.sqlite3` and `index.json` (the folder of markdown files it indexes,
kept outside the database so a damaged database can be rebuilt from the files).
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from server.index.chunker import ChunkerConfig
from server.index.embeddings.base import Embedder, Tokenizer
from server.index.errors import CorruptIndexError, EngineError, InvalidArgumentError, UnknownIndexError
from server.index.fusion import FusionWeights
from server.index.indexer import Indexer, IndexReport
from server.index.migrations import SCHEMA_VERSION
from server.index.rebuild_progress import RebuildProgress, RebuildSnapshot
from server.index.scan import ScanConfig
from server.index.search import SearchOptions, SearchResult, search
from server.index.store import Store, is_corruption, quarantine
from server.index.vectors import (
    VectorSpace,
    count_missing,
    ensure_live_space,
    fill_space,
    live_space,
    prune_cache,
    rebuild,
)

log = logging.getLogger(__name__)

NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
T = TypeVar("T")


@dataclass(frozen=True)
class EngineSettings:
    chunker: ChunkerConfig = field(default_factory=ChunkerConfig)
    scan: ScanConfig = field(default_factory=ScanConfig)
    weights: FusionWeights = field(default_factory=FusionWeights)


@dataclass(frozen=True)
class IndexStatus:
    name: str
    root: str | None
    provider: str | None
    model: str | None
    dimensions: int | None
    files: dict[str, int]  # per source
    chunks: dict[str, int]
    pending_vectors: int
    vector_state: str  # "ready", "rebuilding", "off"
    search_modes: list[str]
    notice: str | None
    last_change: float | None
    database_bytes: int
    schema_version: int
    rebuild: RebuildSnapshot | None = None  # a background vector rebuild's progress, while it runs


def validate_name(name: str) -> str:
    """Index names become folder names: lowercase letters, digits, `_.-`, starting with a letter or digit."""
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise InvalidArgumentError(
            "index names are 1-64 characters of a-z, 0-9, '_', '.', '-', starting with a letter or digit"
        )
    return name


def index_dir(data_dir: Path, name: str) -> Path:
    return data_dir / "indexes" / validate_name(name)


class MemoryIndex:
    """Opened with `open`; safe to search from several threads while one thread indexes."""

    def __init__(self, name: str, directory: Path, embedder: Embedder | None, settings: EngineSettings) -> None:
        self.name = validate_name(name)
        self.directory = directory
        self.embedder = embedder
        self.settings = settings
        self._write_lock = threading.RLock()  # re-entered by index_if_idle
        self._rebuild_thread: threading.Thread | None = None
        self._rebuild_progress: RebuildProgress | None = None
        self._rebuild_stop = threading.Event()
        self.store = self._open_store()

    @classmethod
    def open(
        cls,
        data_dir: Path,
        name: str,
        embedder: Embedder | None,
        *,
        create: bool = False,
        settings: EngineSettings | None = None,
    ) -> MemoryIndex:
        directory = index_dir(data_dir, name)
        if not (directory / "index.json").is_file():
            if not create:
                raise UnknownIndexError(f"there is no index named {name!r}")
            directory.mkdir(parents=True, exist_ok=True)
            _write_json(directory / "index.json", {"root": None, "created_at": time.time()})
        return cls(name, directory, embedder, settings or EngineSettings())

    # the database ---------------------------------------------------------------------------------------

    @property
    def db_path(self) -> Path:
        return self.directory / "index.sqlite3"

    @property
    def root(self) -> Path | None:
        root = self._info().get("root")
        return Path(root) if isinstance(root, str) else None

    def _info(self) -> dict[str, Any]:
        try:
            info = json.loads((self.directory / "index.json").read_text("utf-8"))
        except (OSError, ValueError) as exc:
            raise EngineError(f"the description of index {self.name!r} is unreadable") from exc
        return info if isinstance(info, dict) else {}

    def _open_store(self) -> Store:
        try:
            store = Store(self.db_path)
        except CorruptIndexError:
            quarantine(self.db_path)
            store = Store(self.db_path)
            self.store = store
            self._reindex_after_rebuild()
        if self.embedder is not None and store.vec_loaded:
            ensure_live_space(store, self.embedder)
        return store

    def _reindex_after_rebuild(self) -> None:
        root = self.root
        if self.embedder is not None and self.store.vec_loaded:
            ensure_live_space(self.store, self.embedder)
        if root is not None and root.is_dir():
            log.warning("rebuilding index %s from %s", self.name, root)
            self._indexer().run(root)

    def _guard(self, operation: Callable[[], T]) -> T:
        """Run `operation`; if the database turns out damaged, rebuild it from the files and run it again."""
        try:
            return operation()
        except Exception as exc:
            if not is_corruption(exc):
                raise
            log.error("index %s is damaged (%s); rebuilding from files", self.name, type(exc).__name__)
            self.store.close()
            quarantine(self.db_path)
            self.store = Store(self.db_path)
            self._reindex_after_rebuild()
            return operation()

    def close(self) -> None:
        self.stop_rebuild()
        self.store.close()

    # vectors ------------------------------------------------------------------------------------------

    def _live(self) -> VectorSpace | None:
        if not self.store.vec_loaded:
            return None
        space = live_space(self.store)
        return space if space is not None and space.serves(self.embedder) else None

    def vector_state(self) -> tuple[str, str | None]:
        """("ready" | "rebuilding" | "off", why vectors are not used when they are not)."""
        if self.embedder is None:
            return "off", "no embedding model is available; keyword search only"
        if not self.store.vec_loaded:
            return "off", "sqlite-vec is not available; keyword search only"
        if self._live() is None:
            return (
                "rebuilding",
                f"vectors are being rebuilt for {self.embedder.model}; keyword search meanwhile",
            )
        return "ready", None

    @property
    def needs_rebuild(self) -> bool:
        return self.vector_state()[0] == "rebuilding"

    def rebuild_vectors(
        self, stop: threading.Event | None = None, on_batch: Callable[[int], None] | None = None
    ) -> bool:
        """Embed everything for the current model beside the live vectors, then swap. Blocks."""
        if self.embedder is None or not self.store.vec_loaded:
            raise EngineError("no embedding model to rebuild vectors with")
        return self._guard(lambda: rebuild(self.store, self.embedder, stop=stop, on_batch=on_batch))  # type: ignore[arg-type]

    def start_background_rebuild(self) -> threading.Thread:
        """Rebuild in a thread while searches go on (keyword-only until the swap)."""
        if self._rebuild_thread is not None and self._rebuild_thread.is_alive():
            return self._rebuild_thread
        self._rebuild_stop.clear()
        progress = self._rebuild_progress = RebuildProgress(self._chunk_count())

        def run() -> None:
            try:
                self.rebuild_vectors(self._rebuild_stop, on_batch=progress.add)
            except EngineError as exc:
                log.error("vector rebuild of %s failed: %s", self.name, exc)
            finally:
                self._rebuild_progress = None

        self._rebuild_thread = threading.Thread(target=run, name=f"rebuild-{self.name}", daemon=True)
        self._rebuild_thread.start()
        return self._rebuild_thread

    def stop_rebuild(self) -> None:
        self._rebuild_stop.set()
        if self._rebuild_thread is not None:
            self._rebuild_thread.join(timeout=30)

    def embed_pending(self) -> int:
        """Embed chunks that were written without vectors (an earlier model failure); returns how many."""
        space = self._live()
        if space is None or self.embedder is None:
            return 0
        return self._guard(lambda: fill_space(self.store, space, self.embedder))  # type: ignore[arg-type]

    # indexing and search -------------------------------------------------------------------------------

    @property
    def tokenizer(self) -> Tokenizer:
        if self.embedder is not None:
            return self.embedder.tokenizer
        from server.index.tokens import WordPieceTokenizer

        return WordPieceTokenizer.default()

    def _indexer(self) -> Indexer:
        return Indexer(
            self.store, self.embedder, self._live(), self.tokenizer, self.settings.chunker, self.settings.scan
        )

    def index_if_idle(self, root: Path | None = None, **options: Any) -> IndexReport | None:
        """`index`, or None at once when another indexing run holds this index: a search that would like to pick
        up a few changed files must not wait behind a long sync."""
        if not self._write_lock.acquire(blocking=False):
            return None
        try:
            return self.index(root, **options)
        finally:
            self._write_lock.release()

    def index(
        self,
        root: Path | None = None,
        *,
        force: bool = False,
        rebuild_now: bool = True,
        on_file: Callable[[str], None] | None = None,
        paths: Collection[str] | None = None,
        on_seen: Callable[[str], None] | None = None,
    ) -> IndexReport:
        """Index the folder `root` (remembered for next time); rebuild vectors first if the model changed.
        `on_file(path)` runs after each file is written (an exception from it stops the run there; every file
        written so far stays consistent, each in its own transaction); `on_seen(path)` as each file is looked at."""
        with self._write_lock:
            if root is not None:
                root = root.resolve()
                if not root.is_dir():
                    raise InvalidArgumentError(f"not a folder: {root}")
                if self.root != root:
                    _write_json(self.directory / "index.json", {**self._info(), "root": str(root)})
            target = root or self.root
            if target is None:
                raise InvalidArgumentError(f"index {self.name!r} has no folder yet; pass one")
            report = self._guard(
                lambda: self._indexer().run(target, force=force, on_file=on_file, only=paths, on_seen=on_seen)
            )
            self._guard(lambda: prune_cache(self.store, self._live()))
            if rebuild_now and self.needs_rebuild:
                self.rebuild_vectors()
            elif report.chunks_pending or self._pending_count():
                try:
                    report.chunks_embedded += self.embed_pending()
                    report.chunks_pending = self._pending_count()
                except EngineError as exc:
                    log.warning("pending chunks stay keyword-only: %s", exc)
            return report

    def _chunk_count(self) -> int:
        value = self.store.connection().execute("SELECT count(*) FROM chunks").fetchall()[0][0]
        assert isinstance(value, int), "count(*) is an integer"
        return value

    def _pending_count(self) -> int:
        space = self._live()
        return count_missing(self.store, space) if space is not None else 0

    def search(self, query: str, options: SearchOptions | None = None) -> SearchResult:
        options = options or SearchOptions()
        _state, why = self.vector_state()
        return self._guard(
            lambda: search(
                self.store,
                self.embedder,
                self._live(),
                query,
                options,
                self.settings.weights,
                unavailable=why,
            )
        )

    def status(self) -> IndexStatus:
        return self._guard(self._status)

    def indexed_files(self) -> dict[str, str]:
        """The content hash of every file the index holds, by path."""
        return {
            str(path): str(digest) for path, digest in self.store.connection().execute("SELECT path, hash FROM files")
        }

    def last_change(self) -> float | None:
        """When the index last changed (epoch seconds), None before its first change."""
        raw = self.store.get_meta("last_change")
        return float(raw) if raw else None

    def _status(self) -> IndexStatus:
        db = self.store.connection()
        files = {s: n for s, n in db.execute("SELECT source, count(*) FROM files GROUP BY source")}
        chunks = {
            s: n
            for s, n in db.execute(
                "SELECT f.source, count(*) FROM chunks c JOIN files f ON f.id = c.file_id GROUP BY f.source"
            )
        }
        state, why = self.vector_state()
        space = live_space(self.store) if self.store.vec_loaded else None
        last = self.store.get_meta("last_change")
        progress = self._rebuild_progress
        return IndexStatus(
            name=self.name,
            root=str(self.root) if self.root else None,
            provider=space.provider if space else None,
            model=space.model if space else None,
            dimensions=space.dimensions if space else None,
            files=files,
            chunks=chunks,
            pending_vectors=self._pending_count(),
            vector_state=state,
            search_modes=["hybrid", "vector", "keyword"] if state == "ready" else ["keyword"],
            notice=why,
            last_change=float(last) if last else None,
            database_bytes=self.store.size_bytes(),
            schema_version=SCHEMA_VERSION,
            rebuild=progress.snapshot() if progress is not None and state == "rebuilding" else None,
        )


def _write_json(path: Path, value: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(value, indent=2) + "\n", "utf-8")
    os.replace(tmp, path)
