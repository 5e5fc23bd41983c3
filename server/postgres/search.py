"""`PgSearchIndex`: one index's chunks, keyword statistics, vectors (pgvector, HNSW by cosine) and embedding cache
in its PostgreSQL schema, beside the files of `PgFileStore`. A `SearchIndex` (`server.indexes.storage`).

Every replica serving the index shares it: what one indexes, all find. Work that must run once takes an advisory
lock: indexing (the session lock `<schema>:indexing`, so a change is chunked and embedded by the replica that took
it, or by the first that finds it unindexed, and never twice), and a rebuild for a new model or new chunk settings
(`pg_try_advisory_lock` on `<schema>:rebuild`: one replica rebuilds, the others see it running and keep serving the
live vectors). Search reuses the SQLite engine's pure parts: query terms, fusion, places, hits and snippets
(`server.index.search.rank_hits`); only the candidates come from other SQL (`server.postgres.search_queries`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

from server.errors import EmbeddingError, EngineError
from server.index.common_terms import Counter, TermCounts, rare_terms
from server.index.embeddings.base import Embedder, Tokenizer
from server.index.embeddings.chain import GuardedEmbedder, ProviderChain, as_chain
from server.index.engine_settings import EngineSettings
from server.index.fts import query_terms
from server.index.hits import Hit, Retrievers, SearchResult, join_notices
from server.index.indexer import IndexReport
from server.index.labelled_files import FileLabels, words_of
from server.index.labels import Labels
from server.index.naming import validate_name
from server.index.queries import Filters
from server.index.rebuild_progress import RebuildProgress
from server.index.search import (
    MIN_CANDIDATES,
    SearchOptions,
    check_query,
    embed_query,
    rank_hits,
    settle_mode,
)
from server.index.shared_names import query_texts
from server.index.status import IndexStatus
from server.index.tuning import check_model_limit, chunking_identity
from server.index.vectors import VectorSpace, vector_state
from server.mirror.queries import Query
from server.postgres import search_queries as sq
from server.postgres.connection import PgConnection, schema_of
from server.postgres.migrations import migrate
from server.postgres.pool import ConnectionPool
from server.postgres.search_indexing import PgIndexer
from server.postgres.search_status import index_status
from server.postgres.search_vectors import (
    LIVE,
    count_chunks,
    count_missing,
    create_space,
    fill_space,
    meta,
    nearest,
    put_meta,
    read_space,
    scores_of,
    tidy_cache,
    vectors_of,
)
from server.postgres.search_vectors import rebuild as rebuild_vectors

log = logging.getLogger(__name__)

CHUNKING_KEY = "chunking"  # search_meta: what the chunks were cut with (`tuning.chunking_identity`)
RECHUNK_FILES = 64  # files cut again per turn of the indexing lock, so the other replicas' indexing goes on
RETRY_ELSEWHERE_SECONDS = 5.0  # while another replica rebuilds, try for its lock this often (it may have died)
READERS = 4  # connections per index and process for searches and reads (the writer's is apart)


class PgSearchIndex:
    """Index `name`'s search state in the database at `url`. Thread-safe: searches and reads borrow a connection
    of a small pool, indexing has its own (which holds the indexing lock)."""

    def __init__(
        self, url: str, name: str, embedder: Embedder | ProviderChain | None, settings: EngineSettings
    ) -> None:
        self.name = validate_name(name)
        self.schema = schema_of(name)
        self.providers = as_chain(embedder)
        self.settings = settings
        if self.providers:
            first = self.providers.members[0]
            check_model_limit(settings.chunker, first.model, first.max_tokens)
        self._url = url
        self._pool = ConnectionPool(url, self.schema, READERS)
        self.write_lock = threading.RLock()
        self.rebuild_progress: RebuildProgress | None = None
        self._rebuild_thread: threading.Thread | None = None
        self._rebuild_target: Embedder | None = None
        self._rebuild_stop = threading.Event()
        self.rebuilding_elsewhere = False  # another replica holds the rebuild lock
        self._tried_at = 0.0  # time.monotonic() of the last try for the rebuild lock
        self._term_counts = TermCounts()  # document frequencies of query words (`_counted`)
        self._writer = PgConnection(url, self.schema)
        try:
            migrate(self._writer, self.schema)
            if self.embedder is not None:
                create_space(self._writer, self.embedder, LIVE, only_if_missing=True)
            # Files left unindexed (a server stopped before indexing its change, an upgrade from a local search
            # index): the background work on open indexes them, on one server.
            self._catch_up = bool(self._writer.execute(*sq.any_unindexed()).fetchall()[0][0])
            if meta(self._writer, CHUNKING_KEY) is None:
                with self._writer:
                    put_meta(self._writer, CHUNKING_KEY, chunking_identity(settings.chunker))
        except BaseException:
            self._writer.close()
            raise

    # connections and locks -------------------------------------------------------------------------------

    def _reader(self) -> contextlib.AbstractContextManager[PgConnection]:
        return self._pool.connection()

    @contextlib.contextmanager
    def _held(self, db: PgConnection, what: str, *, wait: bool) -> Iterator[bool]:
        """The index's advisory lock `what` (one holder among every replica), held by `db`'s session; yields False
        when it is taken and `wait` is false. The session is pinned while held: a connection lost meanwhile took
        the lock with it, so the work fails instead of going on beside the replica that takes the lock next."""
        key = (f"{self.schema}:{what}",)
        function = "pg_advisory_lock" if wait else "pg_try_advisory_lock"
        rows = db.execute(f"SELECT {function}(hashtextextended(?, 0))", key).fetchall()
        if not wait and not rows[0][0]:  # pg_advisory_lock returns nothing: it waited
            yield False
            return
        try:
            with db.pinned():
                yield True
        finally:
            if db.backend_pid() is not None:  # a lost session's locks went with it
                db.execute("SELECT pg_advisory_unlock(hashtextextended(?, 0))", key)

    @contextlib.contextmanager
    def _indexing(self, *, wait: bool) -> Iterator[bool]:
        """Holds this process's write lock and the index's indexing lock (on every replica); yields False when
        either is taken and `wait` is false."""
        if not self.write_lock.acquire(blocking=wait):
            yield False
            return
        try:
            with self._held(self._writer, "indexing", wait=wait) as held:
                yield held
        finally:
            self.write_lock.release()

    def close(self) -> None:
        self.stop_rebuild()
        with self.write_lock:
            self._writer.close()
        self._pool.close()

    # vectors ---------------------------------------------------------------------------------------------

    @property
    def embedder(self) -> GuardedEmbedder | None:
        return self.providers.preferred()

    @property
    def tokenizer(self) -> Tokenizer:
        if self.providers:
            return self.providers.members[0].tokenizer
        from server.index.tokens import WordPieceTokenizer

        return WordPieceTokenizer.default()

    def _serving(self, db: PgConnection) -> tuple[VectorSpace, GuardedEmbedder] | None:
        space = read_space(db) if self.providers else None
        provider = self.providers.serving(space.provider, space.model, space.dimensions) if space else None
        return (space, provider) if space is not None and provider is not None else None

    def vector_state(self, db: PgConnection | None = None) -> tuple[str, str | None]:
        """How the vectors stand (`server.index.vectors.vector_state`; pgvector is always there)."""
        if not self.providers:
            return vector_state(self.providers, None, vec_loaded=True)
        if db is None:
            with self._reader() as db:
                return self.vector_state(db)
        return vector_state(self.providers, read_space(db), vec_loaded=True)

    def _rechunk_due(self, db: PgConnection) -> bool:
        return meta(db, CHUNKING_KEY) != chunking_identity(self.settings.chunker)

    def _vectors_due(self, db: PgConnection) -> bool:
        target = self.embedder
        if target is None or not self.providers.serving(target.provider, target.model, target.dimensions):
            return False
        live = read_space(db)
        return live is None or not live.serves(target)

    @property
    def needs_rebuild(self) -> bool:
        """The chunks are to be cut again (new chunk settings), the vectors built for another provider, or files
        found unindexed on open to be indexed."""
        with self._reader() as db:
            return self._catch_up or self._rechunk_due(db) or self._vectors_due(db)

    def start_background_rebuild(self) -> threading.Thread | None:
        """Rebuild in a thread, on the replica that gets the rebuild lock; elsewhere nothing starts and the live
        vectors keep answering (`rebuilding_elsewhere` is set while the lock is taken)."""
        target = self.embedder
        if self._rebuild_thread is not None and self._rebuild_thread.is_alive():
            if self._rebuild_target is not target:
                self._rebuild_stop.set()
            return self._rebuild_thread
        if not self.needs_rebuild:
            self.rebuilding_elsewhere = False
            return None
        if self.rebuilding_elsewhere and time.monotonic() - self._tried_at < RETRY_ELSEWHERE_SECONDS:
            return None
        self._tried_at = time.monotonic()
        self._rebuild_stop.clear()
        self._rebuild_target = target
        self._rebuild_thread = threading.Thread(target=self._rebuild, name=f"rebuild-{self.name}", daemon=True)
        self._rebuild_thread.start()
        return self._rebuild_thread

    def _rebuild(self) -> None:
        db = PgConnection(self._url, self.schema)
        try:
            with self._held(db, "rebuild", wait=False) as held:
                self.rebuilding_elsewhere = not held
                if not held:
                    log.info("index %s is being rebuilt by another server; serving the live vectors", self.name)
                    return
                if self._catch_up:
                    self._index(wait=True)
                    self._catch_up = False
                if self._rechunk_due(db):
                    self._rechunk(db)
                target = self._rebuild_target
                if target is not None and self._vectors_due(db) and not self._rebuild_stop.is_set():
                    if isinstance(target, GuardedEmbedder):
                        target.try_once()
                    self.rebuild_progress = progress = RebuildProgress(count_chunks(db))
                    rebuild_vectors(db, target, stop=self._rebuild_stop, on_batch=progress.add)
        except (EngineError, EmbeddingError) as exc:
            log.error("rebuild of %s failed: %s", self.name, exc)
        finally:
            self.rebuild_progress = None
            db.close()

    def _rechunk(self, db: PgConnection) -> None:
        """Cut every file again with the settings' chunker, a few files per turn of the indexing lock."""
        paths = [str(p) for p, _ in db.execute(*sq.live_files())]
        self.rebuild_progress = progress = RebuildProgress(len(paths), label="re-chunking")
        for start in range(0, len(paths), RECHUNK_FILES):
            if self._rebuild_stop.is_set():
                return
            db.execute("SELECT 1")  # the rebuild lock still held: fails once `db`'s pinned session is gone
            batch = paths[start : start + RECHUNK_FILES]
            with self._indexing(wait=True):
                self._indexer().run(force=True, paths=batch)
            progress.add(len(batch))
        with db:
            put_meta(db, CHUNKING_KEY, chunking_identity(self.settings.chunker))

    def stop_rebuild(self) -> None:
        self._rebuild_stop.set()
        if self._rebuild_thread is not None:
            self._rebuild_thread.join(timeout=30)

    def keep_vectors_current(self) -> None:
        running = self._rebuild_thread is not None and self._rebuild_thread.is_alive()
        if running or self.needs_rebuild:
            self.start_background_rebuild()

    def pending_count(self, db: PgConnection | None = None, *, remember: bool = False) -> int:
        """Chunks still without a vector; `remember` (after an indexing run, on the writer): a count that finds
        none marks them all, and later counts look only past the mark."""
        if db is None:
            with self._reader() as db:
                return self.pending_count(db)
        space = read_space(db) if self.providers else None
        return count_missing(db, space, remember=remember) if space is not None else 0

    def embed_pending(self) -> int:
        """Embed chunks written without vectors (an earlier model failure); how many the model embedded."""
        served = self._serving(self._writer)
        return fill_space(self._writer, *served) if served is not None else 0

    # indexing ----------------------------------------------------------------------------------------------

    def _indexer(self) -> PgIndexer:
        space, provider = self._serving(self._writer) or (None, None)
        return PgIndexer(self._writer, provider, space, self.tokenizer, self.settings.chunker, self.settings.scan)

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
        """Index the file store's live files that are not indexed at their hash (`root` is not read: the files
        are in the database). Waits for an indexing run of any replica to end first."""
        report = self._index(wait=True, force=force, on_file=on_file, paths=paths, on_seen=on_seen)
        assert report is not None, "a run that waits always runs"
        self._after_indexing(report, rebuild_now)
        return report

    def index_if_idle(self, root: Path | None = None, **options: Any) -> IndexReport | None:
        """`index`, or None at once while an indexing run (on any replica) holds the index."""
        rebuild_now = bool(options.pop("rebuild_now", True))
        report = self._index(wait=False, **options)
        if report is not None:
            self._after_indexing(report, rebuild_now)
        return report

    def _index(self, *, wait: bool, **options: Any) -> IndexReport | None:
        with self._indexing(wait=wait) as held:
            report = self._indexer().run(**options) if held else None
            if report is not None:
                tidy_cache(self._writer, self.settings.cache_max_entries)
            return report

    def _after_indexing(self, report: IndexReport, rebuild_now: bool) -> None:
        if rebuild_now and self.needs_rebuild:
            thread = self.start_background_rebuild()
            if thread is not None:
                thread.join()
        else:
            self.keep_vectors_current()
        if report.chunks_pending or self._count_after_indexing():
            try:
                with self.write_lock:
                    report.chunks_embedded += self.embed_pending()
                report.chunks_pending = self._count_after_indexing()
            except EmbeddingError as exc:
                log.warning("pending chunks stay keyword-only: %s", exc)

    def _count_after_indexing(self) -> int:
        """The pending count on the writer's connection, which marks what it finds complete."""
        with self.write_lock:
            return self.pending_count(self._writer, remember=True)

    def indexed_files(self) -> dict[str, str]:
        with self._reader() as db:
            return {str(path): str(digest) for _id, path, digest in db.execute(*sq.indexed())}

    def file_labels(self, wanted: Labels, paths: Collection[str] | None = None) -> dict[str, FileLabels]:
        filters = Filters(tags=wanted.tags, category=wanted.category)
        with self._reader() as db:
            rows = db.execute(*sq.file_labels_sql(filters, None if paths is None else list(paths))).fetchall()
        return {str(path): FileLabels(words_of(tags), words_of(categories)) for path, tags, categories in rows}

    def last_change(self) -> float | None:
        with self._reader() as db:
            raw = meta(db, "last_change")
        return float(raw) if raw else None

    # search ------------------------------------------------------------------------------------------------

    def search(self, query: str, options: SearchOptions | None = None) -> SearchResult:
        options = options or SearchOptions()
        check_query(query)
        started = time.perf_counter()
        with self._reader() as db:
            try:
                hits, mode, notice, embed_ms = self._search(db, query, options)
            except EngineError:  # the vector table it read was dropped by a swap on another server meanwhile
                log.info("search of %s failed once; trying again", self.name)
                hits, mode, notice, embed_ms = self._search(db, query, options)
        self.keep_vectors_current()  # after: a provider that failed this search is bypassed from the next one
        return SearchResult(hits, mode, notice, embed_ms, (time.perf_counter() - started) * 1000 - embed_ms)

    def _search(self, db: PgConnection, query: str, options: SearchOptions) -> tuple[list[Hit], str, str | None, float]:
        """Candidates from both sides (the vector side first: the keyword side scores its candidates too)."""
        served = self._serving(db)  # read once: the notice says why only when vectors are not served
        notice = None if served is not None else self.vector_state(db)[1]
        candidates = max(options.limit * self.settings.search.candidate_multiplier, MIN_CANDIDATES)
        counted = self._counted(db)
        words = rare_terms(query_terms(query), *counted) if options.mode != "vector" else []
        terms = [lexemes for lexemes in map(sq.query_lexemes, words) if lexemes]  # each word as FTS5 cuts it
        vector, notice, embed_ms = embed_query(
            served[1] if served else None, lambda: query_texts(query, *counted), options.mode, notice
        )
        literal = sq.vector_literal(vector) if vector is not None else None
        similarities: dict[int, float] = {}
        if literal is not None and served is not None:
            similarities = nearest(db, served[0], options.filters, candidates, literal)
        keyword = sq.keyword_sql(terms, options.filters, candidates, list(similarities)) if terms else None
        ranks = scores_of(db, keyword) if keyword is not None else {}
        found = Retrievers.of(similarities, ranks)
        mode, notice = settle_mode(options.mode, literal is not None, bool(terms), notice)
        missing = [c for c in ranks if c not in similarities]
        if mode == "hybrid" and served is not None and literal is not None and missing:
            similarities.update(scores_of(db, sq.similarities_sql(served[0].table, missing, literal)))
        space, embedder = served if served is not None else (None, None)
        hits, more = rank_hits(
            similarities, ranks, found, mode, options, self.settings.weights, query,
            lambda ids: db.execute(*sq.spans_sql(ids)), lambda ids: db.execute(*sq.hits_sql(ids)),
            model=(embedder.provider, embedder.model) if embedder is not None else None,
            vectors=(lambda ids: vectors_of(db, space, ids)) if space is not None else None,
            reranker=self.settings.reranker,
        )  # fmt: skip
        return hits, mode, join_notices(notice, more), embed_ms

    def _counted(self, db: PgConnection) -> Counter:
        """The index's chunks and the chunks holding a word, remembered a while: what leaves the common words out
        of the keyword side (`server.index.common_terms`) and the shared names out of the query's vector
        (`server.index.shared_names`), as on SQLite."""
        return self._term_counts.remembering(
            lambda: _scalar(db, sq.keyword_chunks_sql()), lambda term: _scalar(db, sq.term_chunks_sql(term))
        )

    def status(self) -> IndexStatus:
        with self._reader() as db:
            return index_status(self, db)


def _scalar(db: PgConnection, query: Query) -> int:
    return int(db.execute(*query).fetchall()[0][0])
