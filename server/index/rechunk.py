"""Cutting an index's chunks again when its chunking settings change, in the background, swapped in atomically.

A new chunk size or overlap makes every chunk different, so chunks, keyword rows and vectors are all built again
(the embedding cache, keyed by chunk text, saves only the chunks that come out the same). They are built into a
second database file beside the live one (`index-<n>.sqlite3`, named `next_database` in index.json) from the
index's folder, while the live database keeps answering searches and taking writes. When the side database has
every file and every vector, a catch-up pass under the index's write lock takes in what changed meanwhile, then
index.json names it as the live `database` in one atomic replace and the engine swaps its store at that moment.

A server restarted mid-way resumes the side database when it was cut for the same settings (each file is written
in its own transaction and unchanged files are skipped), and starts it again when the settings changed once more.
Its vectors are kept only when they are the model now preferred (another provider may have taken over meanwhile);
else they are built again for that one. One run embeds with one provider throughout, the catch-up pass included.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import apsw

from server.index.chunker import ChunkerConfig
from server.index.embeddings.base import Embedder, Tokenizer
from server.index.errors import CorruptIndexError, EmbeddingError, EngineError
from server.index.indexer import Indexer, count_memory_files
from server.index.rebuild_progress import RebuildProgress
from server.index.scan import ScanConfig
from server.index.store import Store
from server.index.transaction import writing
from server.index.tuning import chunker_of, chunking_identity
from server.index.vectors import VectorSpace, count_missing, fill_space, space_for

log = logging.getLogger(__name__)

_DATABASE_FILE = re.compile(r"(index(?:-[0-9]+)?\.sqlite3)(?:-wal|-shm)?")

LIVE_DATABASE = "index.sqlite3"  # the first database of every index; later ones are index-<n>.sqlite3


def live_database(info: Mapping[str, Any] | None) -> str:
    """The file name of the live database that an index's description (`index.json`) names: an `index-` name that
    is a plain file name, else `index.sqlite3`."""
    name = (info or {}).get("database")
    return name if isinstance(name, str) and name.startswith("index-") and "/" not in name else LIVE_DATABASE


CHUNKING_KEY = "chunking"  # meta: the ChunkerConfig the chunks were cut with (tuning.chunking_identity)
RETRY_AFTER = 60.0  # seconds before a re-chunk that could not finish (its provider failing) is tried again


class _Stopped(Exception):
    pass


def live_chunker(store: Store, target: ChunkerConfig) -> ChunkerConfig:
    """What the store's chunks were cut with. A store without the mark is marked: one with files was cut with the
    defaults (the only chunking before the setting existed), an empty one takes `target` (nothing to cut again)."""
    found = chunker_of(store.get_meta(CHUNKING_KEY))
    if found is not None:
        return found
    db = store.connection()
    has_files = bool(db.execute("SELECT 1 FROM files LIMIT 1").fetchall())
    found = ChunkerConfig() if has_files else target
    with writing(db):
        store.set_meta(CHUNKING_KEY, chunking_identity(found), db)
    return found


def remove_database(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")


def present_database(directory: Path) -> str:
    """The database file an index's folder shows as the newest (each later one is the live one once swapped in):
    what index.json names, when it is unreadable. Anything the choice misses is indexed again from the files."""
    names = [p.name for p in directory.iterdir() if (m := _DATABASE_FILE.fullmatch(p.name)) and m.group(1) == p.name]

    def age(name: str) -> int:  # index-<time_ns>.sqlite3, later than the first
        return -1 if name == LIVE_DATABASE else int(name.removeprefix("index-").removesuffix(".sqlite3"))

    return max(names, key=age, default=LIVE_DATABASE)


def remove_strays(directory: Path, info: Mapping[str, object]) -> None:
    """Delete database files that are neither the live one nor the side one being built (left by a crash between
    the swap and the old file's removal). Quarantined damaged databases stay."""
    keep = {info.get("database") or LIVE_DATABASE, info.get("next_database")}
    for path in directory.iterdir():
        match = _DATABASE_FILE.fullmatch(path.name)
        if match is not None and match.group(1) not in keep:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


class _Settings(Protocol):
    @property
    def chunker(self) -> ChunkerConfig: ...
    @property
    def scan(self) -> ScanConfig: ...


class RechunkedIndex(Protocol):
    """What the re-chunk needs of `engine.MemoryIndex`."""

    name: str
    directory: Path
    store: Store
    write_lock: threading.RLock

    @property
    def settings(self) -> _Settings: ...
    @property
    def root(self) -> Path | None: ...
    @property
    def embedder(self) -> Embedder | None: ...
    @property
    def tokenizer(self) -> Tokenizer: ...
    def info(self) -> dict[str, Any]: ...
    def update_info(self, **values: object) -> None: ...


class Rechunker:
    """The background re-chunk of one index: at most one thread, stopped with the index."""

    def __init__(self, index: RechunkedIndex) -> None:
        self.index = index
        self.retired: list[Store] = []  # swapped-out stores: searches that began before the swap may still read
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._failed_at = 0.0
        self.progress: RebuildProgress | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def due(self) -> bool:
        """The live chunks were cut with other settings than the configured ones, and there is a folder to cut."""
        index = self.index
        return live_chunker(index.store, index.settings.chunker) != index.settings.chunker and index.root is not None

    def start(self) -> threading.Thread | None:
        if self.running:
            return self._thread
        if time.monotonic() - self._failed_at < RETRY_AFTER:
            return None
        self._stop.clear()

        def run() -> None:
            try:
                if not self.run(self._stop):
                    self._failed_at = time.monotonic()
            except (EngineError, EmbeddingError, apsw.Error) as exc:  # apsw.Error: the side database's (a full disk)
                self._failed_at = time.monotonic()
                log.error("re-chunking index %s failed: %s", self.index.name, exc)
            except Exception:
                if not self._stop.is_set():
                    raise
                log.info("re-chunking index %s stopped with the index", self.index.name)
            finally:
                self.progress = None

        self._thread = threading.Thread(target=run, name=f"rechunk-{self.index.name}", daemon=True)
        self._thread.start()
        return self._thread

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def close_retired(self) -> None:
        """Close the stores swapped out earlier and delete their files (called when no search can still hold one)."""
        retired, self.retired = self.retired, []
        for store in retired:
            store.close()
            remove_database(store.path)

    def run(self, stop: threading.Event | None = None) -> bool:
        """Build the side database and swap it in; False when stopped, or when vectors are still missing."""
        index = self.index
        root = index.root
        if root is None:
            return False
        side = self._side_store()
        embedder = index.embedder  # both passes embed with it, though another provider may be preferred meanwhile
        try:
            self.progress = RebuildProgress(count_memory_files(root, index.settings.scan), label="re-chunking")
            self._fill(side, root, embedder, stop, self.progress.add)
            if stop is not None and stop.is_set():
                side.close()
                return False
            with index.write_lock:  # nothing is written to the live store while the side one catches up and swaps
                space = self._fill(side, root, embedder, None, None)
                if space is not None and count_missing(side, space):
                    log.warning("re-chunking %s: some chunks have no vector yet; trying again later", index.name)
                    side.close()
                    return False
                index.update_info(database=side.path.name, next_database=None)
                self.retired.append(index.store)
                index.store = side
        except _Stopped:
            side.close()
            return False
        except BaseException:
            side.close()
            raise
        log.info("index %s is re-chunked and live", index.name)
        return True

    def _side_store(self) -> Store:
        """The side database for the configured chunking: resumed when it was begun for it, else begun afresh."""
        index = self.index
        target = chunking_identity(index.settings.chunker)
        name = index.info().get("next_database")
        if isinstance(name, str) and name.startswith("index-") and "/" not in name:
            try:
                store = Store(index.directory / name)
            except CorruptIndexError:
                remove_database(index.directory / name)
            else:
                if store.get_meta(CHUNKING_KEY) == target:
                    log.info("resuming the re-chunk of index %s", index.name)
                    return store
                store.close()
                remove_database(index.directory / name)
        name = f"index-{time.time_ns()}.sqlite3"
        index.update_info(next_database=name)
        store = Store(index.directory / name)
        db = store.connection()
        with writing(db):
            store.set_meta(CHUNKING_KEY, target, db)
        _copy_cache(db, index.store.path)
        return store

    def _fill(
        self,
        side: Store,
        root: Path,
        embedder: Embedder | None,
        stop: threading.Event | None,
        on_file: Callable[[int], None] | None,
    ) -> VectorSpace | None:
        """Index `root` into the side store with the configured chunking, and embed with `embedder` what has no
        vector yet; returns the side store's vectors (None without a model or sqlite-vec)."""
        index = self.index

        def seen(_path: str) -> None:
            if on_file is not None:
                on_file(1)
            if stop is not None and stop.is_set():
                raise _Stopped

        space = space_for(side, embedder) if embedder is not None and side.vec_loaded else None
        indexer = Indexer(side, embedder, space, index.tokenizer, index.settings.chunker, index.settings.scan)
        indexer.run(root, on_seen=seen)
        if space is not None and embedder is not None:
            fill_space(side, space, embedder, stop=stop)
        return space


def _copy_cache(db: apsw.Connection, live: Path) -> None:
    """Start the side database's embedding cache from the live one's: chunks that come out the same (a short file
    is one chunk at any size) need no model call."""
    db.execute("ATTACH DATABASE ? AS live", (str(live),))
    try:
        with writing(db):
            db.execute(
                "INSERT OR IGNORE INTO embedding_cache(provider, model, hash, vector, used_at)"
                " SELECT provider, model, hash, vector, used_at FROM live.embedding_cache"
            )
    finally:
        db.execute("DETACH DATABASE live")
