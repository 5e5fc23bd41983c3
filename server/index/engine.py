"""One memory index: its folder under the data directory, its database, and the operations on it.

Layout: `<data-dir>/indexes/<name>/index.sqlite3` and `index.json` (the folder of markdown files it indexes,
kept outside the database so a damaged database can be rebuilt from the files).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, TypeVar

from server.index.embeddings.base import Embedder, Tokenizer
from server.index.embeddings.chain import GuardedEmbedder, ProviderChain, as_chain
from server.index.engine_settings import EngineSettings
from server.index.errors import CorruptIndexError, EngineError, InvalidArgumentError, UnknownIndexError
from server.index.hits import SearchResult, join_notices
from server.index.indexer import Indexer, IndexReport, scan_folder
from server.index.labelled_files import FileLabels, file_labels
from server.index.labels import Labels
from server.index.naming import FILES_FOLDER, index_dir, validate_name, write_info
from server.index.rebuild_progress import RebuildProgress
from server.index.rechunk import LIVE_DATABASE, Rechunker, live_chunker, live_database, present_database, remove_strays
from server.index.relabel import relabel_notice, start_relabel
from server.index.search import SearchOptions, search
from server.index.status import IndexStatus, index_status
from server.index.store import LET_GO, Store, for_the_guard, is_corruption, is_missing_table, quarantine
from server.index.tuning import check_model_limit
from server.index.vectors import (
    VectorSpace,
    count_missing,
    ensure_live_space,
    fill_space,
    live_space,
    rebuild,
    tidy_cache,
    vector_state,
)

log = logging.getLogger(__name__)

T = TypeVar("T")


class MemoryIndex:
    """Opened with `open`; safe to search from several threads while one thread indexes."""

    def __init__(
        self, name: str, directory: Path, embedder: Embedder | ProviderChain | None, settings: EngineSettings
    ) -> None:
        self.name = validate_name(name)
        self.directory = directory
        self.providers = as_chain(embedder)
        self.settings = settings
        if self.providers:  # the first provider's tokenizer cuts the chunks, whichever provider embeds them
            first = self.providers.members[0]
            check_model_limit(settings.chunker, first.model, first.max_tokens)
        self.write_lock = threading.RLock()  # re-entered by index_if_idle
        self._info_lock = threading.Lock()
        self._rebuild_thread: threading.Thread | None = None
        self._rebuild_target: Embedder | None = None
        self.rebuild_progress: RebuildProgress | None = None
        self._rebuild_stop = threading.Event()
        self.rechunker = Rechunker(self)
        self.closing = threading.Event()
        self.store = self._open_store()
        remove_strays(self.directory, self.info())
        self.relabel_thread = start_relabel(self)  # once, after the upgrade that added labels

    @classmethod
    def open(
        cls,
        data_dir: Path,
        name: str,
        embedder: Embedder | ProviderChain | None,
        *,
        create: bool = False,
        settings: EngineSettings | None = None,
    ) -> MemoryIndex:
        directory = index_dir(data_dir, name)
        if not (directory / "index.json").is_file():
            if not create:
                raise UnknownIndexError(f"there is no index named {name!r}")
            for folder in (data_dir, directory.parent, directory):  # those missing made 0700: they hold memory text
                folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            write_info(directory, {"root": None, "created_at": time.time()})
        return cls(name, directory, embedder, settings or EngineSettings())

    # the database ---------------------------------------------------------------------------------------

    @property
    def db_path(self) -> Path:
        return self.directory / live_database(self.info())

    @property
    def root(self) -> Path | None:
        """The folder last indexed (index.json; None before the first run); when that folder is gone, the index's
        own `files` folder if it is one (a data folder moved, or mounted at another path: the service keeps the
        files there)."""
        stored = self.info().get("root")
        root = Path(stored) if isinstance(stored, str) else None
        own = self.directory / FILES_FOLDER
        if root is not None and not root.is_dir() and own.is_dir():
            return own.resolve()
        return root

    def info(self) -> dict[str, Any]:
        path = self.directory / "index.json"
        try:
            info = json.loads(path.read_text("utf-8"))
        except (FileNotFoundError, ValueError):  # ValueError: not JSON, or not UTF-8
            return self._rewrite_info()
        except OSError as exc:
            raise EngineError(f"the description of index {self.name!r} is unreadable") from exc
        return info if isinstance(info, dict) else self._rewrite_info()

    def _rewrite_info(self) -> dict[str, Any]:
        """index.json rewritten from what the folder shows, when it is gone, empty or garbled (everything in it but
        the folder of files and the live database can be rebuilt): the files the service keeps beside the database,
        and the newest database file present."""
        with self._info_lock:
            files = self.directory / FILES_FOLDER
            database = present_database(self.directory)
            info: dict[str, Any] = {
                "root": str(files.resolve()) if files.is_dir() else None,
                "created_at": time.time(),
                **({"database": database} if database != LIVE_DATABASE else {}),
            }
            log.warning("the description of index %s was unreadable; rewritten from its folder", self.name)
            write_info(self.directory, info)
            return info

    def update_info(self, **values: object) -> None:
        """Set (None: remove) entries of index.json, atomically."""
        info = {**self.info(), **values}
        write_info(self.directory, {k: v for k, v in info.items() if v is not None})

    def _open_store(self) -> Store:
        if self._database_lost():
            log.warning("index %s has no database; rebuilding from files", self.name)
            self.store = Store(self.db_path)
            self._reindex_after_rebuild()
            return self.store
        store: Store | None = None
        try:
            store = Store(self.db_path)
            if self.embedder is not None and store.vec_loaded:
                ensure_live_space(store, self.embedder)
        except Exception as exc:  # damage the schema check missed shows in the first reads of the vectors' space
            if not (isinstance(exc, CorruptIndexError) or is_corruption(exc)):
                raise
            if store is not None:
                store.close()
            quarantine(self.db_path)
            self.store = Store(self.db_path)
            self._reindex_after_rebuild()  # the vectors' table comes with the background rebuild
            return self.store
        return store

    def _database_lost(self) -> bool:
        """The database is gone or empty (deleted, or truncated to nothing) while its folder has files to index."""
        path, root = self.db_path, self.root
        try:
            if path.stat().st_size > 0:
                return False
        except FileNotFoundError:
            pass
        return root is not None and root.is_dir() and next(scan_folder(root, self.settings.scan), None) is not None

    def _reindex_after_rebuild(self) -> None:
        """Fill a fresh database from the files: text and keywords now (seconds), vectors in the background
        (minutes for a large index), so searches answer by keyword meanwhile."""
        root = self.root
        if root is not None and root.is_dir():
            log.warning("rebuilding index %s from %s; vectors follow in the background", self.name, root)
            # Marked as cut with the configured chunking (the store is new), or a re-chunk would cut it all again.
            chunker = live_chunker(self.store, self.settings.chunker)
            Indexer(self.store, None, None, self.tokenizer, chunker, self.settings.scan).run(root)
        self.keep_vectors_current()

    def _guard(self, operation: Callable[[], T]) -> T:
        """Run `operation`; if the database turns out damaged, rebuild it from the files and run it again. One that
        failed because another thread set the database aside under it runs again on the new one."""
        store = self.store
        try:
            return operation()
        except Exception as exc:
            if is_missing_table(exc) and self.store is store:
                try:  # a vector table swapped out between two reads of this operation: the retry reads the new one
                    return operation()
                except Exception as again:
                    exc = again
            if self.store is store and not for_the_guard(exc):
                raise
            self._replace_damaged(store, exc)
            return operation()

    def _replace_damaged(self, damaged: Store, exc: Exception) -> None:
        """Set the damaged database aside and fill a new one from the files: once, however many threads find it."""
        with self.write_lock:  # after the indexing run in flight, which may be finding the damage too
            if self.store is not damaged:
                return  # another thread has replaced it, or was replacing it when it closed this one's connection
            if isinstance(exc, LET_GO):
                raise exc
            log.error("index %s is damaged (%s); rebuilding from files", self.name, type(exc).__name__)
            damaged.close()
            quarantine(self.db_path)
            self.store = Store(self.db_path)
            self._reindex_after_rebuild()

    def close(self) -> None:
        self.closing.set()
        self.stop_rebuild()
        self.rechunker.stop()
        self.rechunker.close_retired()
        with self.write_lock:  # after the indexing run in flight (a re-chunk's batch)
            self.store.close()

    # vectors ------------------------------------------------------------------------------------------

    @property
    def embedder(self) -> Embedder | None:
        """The provider to build vectors for: the first in the fallback order that is not down for long."""
        return self.providers.preferred()

    def _serving(self) -> tuple[VectorSpace, GuardedEmbedder] | None:
        """The live vectors and the provider that can embed queries for them now; None when there is none."""
        if not self.store.vec_loaded:
            return None
        space = live_space(self.store)
        provider = self.providers.serving(space.provider, space.model, space.dimensions) if space else None
        return (space, provider) if space is not None and provider is not None else None

    def vector_state(self) -> tuple[str, str | None]:
        """How the vectors stand (`vectors.vector_state`)."""
        return vector_state(self.providers, live_space(self.store), vec_loaded=self.store.vec_loaded)

    @property
    def needs_rebuild(self) -> bool:
        """The chunks are to be cut again (new chunk settings), or the vectors built for another provider."""
        return self._guard(lambda: self.rechunker.due() or self._vectors_due)

    @property
    def _vectors_due(self) -> bool:
        """A provider is due whose vectors are not the live ones, and it answers (or is on trial)."""
        target = self.embedder
        if (
            target is None
            or not self.store.vec_loaded
            or not self.providers.serving(target.provider, target.model, target.dimensions)
        ):
            return False
        live = live_space(self.store)
        return live is None or not live.serves(target)

    def rebuild_vectors(
        self,
        stop: threading.Event | None = None,
        target: Embedder | None = None,
        on_batch: Callable[[int], None] | None = None,
    ) -> bool:
        """Embed everything for the preferred provider beside the live vectors, then swap. Blocks."""
        target = target or self.embedder
        if target is None or not self.store.vec_loaded:
            raise EngineError("no embedding model to rebuild vectors with")
        return self._guard(lambda: rebuild(self.store, target, stop=stop, on_batch=on_batch))

    def start_background_rebuild(self) -> threading.Thread | None:
        """Rebuild in a thread while searches go on (on the old vectors while their provider answers, else by
        keyword, until the swap). A rebuild for a provider no longer preferred is told to stop; the next call
        starts the one now due. New chunk settings come first: cutting again also builds the preferred vectors."""
        if self.rechunker.running or self.rechunker.due():
            return self.rechunker.start()
        target = self.embedder
        if self._rebuild_thread is not None and self._rebuild_thread.is_alive():
            if self._rebuild_target is not target:
                self._rebuild_stop.set()
            return self._rebuild_thread
        if target is None:
            return None
        self._rebuild_stop.clear()
        self._rebuild_target = target
        progress = self.rebuild_progress = RebuildProgress(self.store.chunk_count())

        def run() -> None:
            try:
                if isinstance(target, GuardedEmbedder):
                    target.try_once()
                self.rebuild_vectors(self._rebuild_stop, target, on_batch=progress.add)
            except EngineError as exc:
                log.error("vector rebuild of %s failed: %s", self.name, exc)
            except Exception as exc:
                if self._rebuild_stop.is_set():
                    # Closed under it (a join that timed out on a slow batch): the next open takes the rebuild up.
                    log.info("vector rebuild of %s stopped with the index", self.name)
                else:  # the type only: a foreign error's text may quote the files
                    log.error("vector rebuild of %s failed (%s); tried again later", self.name, type(exc).__name__)
            finally:
                self.rebuild_progress = None

        self._rebuild_thread = threading.Thread(target=run, name=f"rebuild-{self.name}", daemon=True)
        self._rebuild_thread.start()
        return self._rebuild_thread

    def stop_rebuild(self) -> None:
        self._rebuild_stop.set()
        if self._rebuild_thread is not None:
            self._rebuild_thread.join(timeout=30)

    def embed_pending(self) -> int:
        """Embed chunks that were written without vectors (an earlier model failure); returns how many."""
        served = self._serving()
        if served is None:
            return 0
        return self._guard(lambda: fill_space(self.store, *served))

    def keep_vectors_current(self) -> None:
        """Start the background rebuild a provider's failure or recovery calls for; cheap when none is due."""
        rebuilding = self.rechunker.running or (self._rebuild_thread is not None and self._rebuild_thread.is_alive())
        if rebuilding or self.needs_rebuild:
            self.start_background_rebuild()

    # indexing and search -------------------------------------------------------------------------------

    @property
    def tokenizer(self) -> Tokenizer:
        """The first provider's: chunks keep their boundaries whichever provider embeds them."""
        if self.providers:
            return self.providers.members[0].tokenizer
        from server.index.tokens import WordPieceTokenizer

        return WordPieceTokenizer.default()

    def _indexer(self) -> Indexer:
        space, provider = self._serving() or (None, None)
        chunker = live_chunker(self.store, self.settings.chunker)  # the live chunks' own, until a re-chunk swaps
        return Indexer(self.store, provider, space, self.tokenizer, chunker, self.settings.scan)

    def index_if_idle(self, root: Path | None = None, **options: Any) -> IndexReport | None:
        """`index`, or None at once when another indexing run holds this index: a search that would like to pick
        up a few changed files must not wait behind a long sync."""
        if not self.write_lock.acquire(blocking=False):
            return None
        try:
            return self.index(root, **options)
        finally:
            self.write_lock.release()

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
        with self.write_lock:
            self.rechunker.close_retired()
            if root is not None:
                root = root.resolve()
                if not root.is_dir():
                    raise InvalidArgumentError(f"not a folder: {root}")
                if self.info().get("root") != str(root):
                    self.update_info(root=str(root))
            target = root or self.root
            if target is None:
                raise InvalidArgumentError(f"index {self.name!r} has no folder yet; pass one")
            report = self._guard(
                lambda: self._indexer().run(target, force=force, on_file=on_file, only=paths, on_seen=on_seen)
            )
            self._guard(lambda: tidy_cache(self.store, self.settings.cache_max_entries))
            if rebuild_now and self.rechunker.due():
                self.rechunker.run()
            elif rebuild_now and self._vectors_due:
                self.rebuild_vectors()
            else:
                self.keep_vectors_current()
            counted = functools.partial(self.pending_count, remember=True)
            if report.chunks_pending or self._guard(counted):
                try:
                    report.chunks_embedded += self.embed_pending()
                    report.chunks_pending = self._guard(counted)
                except EngineError as exc:
                    log.warning("pending chunks stay keyword-only: %s", exc)
            return report

    def pending_count(self, *, remember: bool = False) -> int:
        """Chunks still without a vector; `remember` (an indexing run's, which writes anyway): a count that finds
        none marks them all, and later counts look only past the mark (`vectors.count_missing`)."""
        if not self.store.vec_loaded or (space := live_space(self.store)) is None:
            return 0
        return count_missing(self.store, space, remember=remember)

    def search(self, query: str, options: SearchOptions | None = None) -> SearchResult:
        result = self._guard(lambda: self._search(query, options or SearchOptions()))
        self._guard(self.keep_vectors_current)  # after: a provider that failed this search is bypassed next time
        return result

    def _search(self, query: str, options: SearchOptions) -> SearchResult:
        why, own = self.vector_state()[1], self.settings
        space, provider = self._serving() or (None, None)
        result = search(self.store, provider, space, query, options, own.weights, why,
                        candidate_multiplier=own.search.candidate_multiplier, reranker=own.reranker)  # fmt: skip
        relabelling = relabel_notice(self.store)
        return dataclasses.replace(result, notice=join_notices(result.notice, relabelling)) if relabelling else result

    def status(self) -> IndexStatus:
        return self._guard(lambda: index_status(self))

    def indexed_files(self) -> dict[str, str]:
        """The content hash of every file the index holds, by path."""
        return self._guard(
            lambda: {str(path): str(h) for path, h in self.store.connection().execute("SELECT path, hash FROM files")}
        )

    def file_labels(self, wanted: Labels, paths: Collection[str] | None = None) -> dict[str, FileLabels]:
        """Each file's tags and categories: of files with a chunk `wanted` passes (all files), among `paths`."""
        return self._guard(lambda: file_labels(self.store.connection(), wanted, paths))

    def last_change(self) -> float | None:
        """When the index last changed (epoch seconds), None before its first change."""
        raw = self._guard(lambda: self.store.get_meta("last_change"))
        return float(raw) if raw else None
