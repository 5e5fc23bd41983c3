"""The vector side of the search index in PostgreSQL: which pgvector table is live for which model (named in
`search_meta`, as the SQLite engine's meta names its vec0 tables, and read with the same `VectorSpace`), the
embedding cache, filling a table, and the rebuild that swaps a new model's vectors in. Every replica reads the
live table's name from the database, so a swap made by one is seen by all at their next search. The cache is
pruned and capped by the SQLite engine's rules (`server.index.cache_rules`) after each indexing run.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import numpy as np

from server.errors import EmbeddingError, EngineError
from server.index.cache_rules import CACHE_KEEP_DAYS, cap_sql, claim_prune_sql, count_sql, prune_sql
from server.index.embeddings.base import Embedder, unusable
from server.index.queries import Filters
from server.index.stats import COMPLETE_THROUGH, complete_through, moved_mark
from server.index.vectors import REBUILD_BATCH, VectorSpace, model_of
from server.mirror.queries import Query
from server.postgres import search_queries as sq
from server.postgres.connection import PgConnection

log = logging.getLogger(__name__)

LIVE, NEXT = "vector", "vector_next"
_KEYS = ("table", "provider", "model", "dimensions")
# hnsw.ef_search grows with the table, one per 500 chunks within these bounds. With the index's m=32,
# ef_construction=256 (bench/results/pgvector.md, two cores): recall@10 0.996 at 100k chunks with 200, p50 6 ms;
# 0.994 at 300k with 600, p50 9 ms; 0.987 at 1M with 1000, pgvector's bound, p50 11 ms.
MIN_EF_SEARCH, MAX_EF_SEARCH = 200, 1000
CHUNKS_PER_EF = 500


def meta(db: PgConnection, key: str) -> str | None:
    rows = db.execute(*sq.get_meta(key)).fetchall()
    return str(rows[0][0]) if rows else None


def put_meta(db: PgConnection, key: str, value: str | None) -> None:
    db.execute(*(sq.delete_meta(key) if value is None else sq.set_meta(key, value)))


def read_space(db: PgConnection, prefix: str = LIVE) -> VectorSpace | None:
    keys = [f"{prefix}_{key}" for key in _KEYS]
    rows = dict(db.execute("SELECT key, value FROM search_meta WHERE key = ANY(?::text[])", (keys,)).fetchall())
    table = rows.get(f"{prefix}_table")
    if table is None:
        return None
    return VectorSpace(
        str(table),
        str(rows.get(f"{prefix}_provider", "")),
        str(rows.get(f"{prefix}_model", "")),
        int(rows.get(f"{prefix}_dimensions") or 0),
    )


def _write_space(db: PgConnection, prefix: str, space: VectorSpace | None) -> None:
    for key in _KEYS:
        put_meta(db, f"{prefix}_{key}", None if space is None else str(getattr(space, key)))


def create_space(db: PgConnection, embedder: Embedder, prefix: str, *, only_if_missing: bool = False) -> VectorSpace:
    """A new, empty vector table for `embedder`, named under `prefix`; with `only_if_missing`, the one already
    named there when another replica made it first."""
    with db:
        db.execute("SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || ':spaces', 0))")
        existing = read_space(db, prefix)
        if only_if_missing and existing is not None:
            return existing
        number = int(meta(db, "vector_table_counter") or 0) + 1
        space = VectorSpace(f"vectors_{number}", embedder.provider, embedder.model, embedder.dimensions)
        for statement in sq.create_vector_table(space.table, space.dimensions):
            db.execute(statement)
        put_meta(db, "vector_table_counter", str(number))
        _write_space(db, prefix, space)
    return space


def embed_missing(db: PgConnection, embedder: Embedder, items: dict[str, str]) -> tuple[dict[str, bytes], int]:
    """Vectors for `items` (hash -> text), from the cache or the model; them and how many the model embedded.
    EmbeddingError when the model fails (nothing is cached then)."""
    found: dict[str, bytes] = {}
    if items:
        rows = db.execute(*sq.cached(embedder.provider, embedder.model, list(items), time.time())).fetchall()
        found = {str(h): bytes(v) for h, v in rows}
    missing = [h for h in items if h not in found]
    if missing:
        vectors = embedder.embed([items[h] for h in missing], kind="document")
        if vectors.shape != (len(missing), embedder.dimensions):
            raise EmbeddingError("the embedding provider returned vectors of the wrong shape")
        if (why := unusable(vectors)) is not None:  # the SQLite engine's rule (server.index.vectors.embed_missing)
            raise EmbeddingError(f"the embedding provider {embedder.provider} returned {why}")
        with db:
            for h, vector in zip(missing, vectors, strict=True):
                found[h] = vector.astype(np.float32).tobytes()
                db.execute(*sq.cache(embedder.provider, embedder.model, h, found[h], time.time()))
    return found, len(missing)


def prune_cache(db: PgConnection, space: VectorSpace | None, *, keep_days: float = CACHE_KEEP_DAYS) -> int:
    """As `server.index.vectors.prune_cache`, by the same rule (`server.index.cache_rules`), and once a day across
    every server sharing the database: the claim of the day's prune commits with the delete.

    Nothing another server is about to read goes. Indexing runs take turns under the indexing lock, which the
    caller holds. Filling the live table (`embed_pending`, outside that lock) reads the live model's vectors of
    current chunks, which no prune removes. A rebuild for another model reads that model's vectors in one
    statement that marks them used and returns them (`search_queries.cached`) and holds them until they are in
    its table: a delete racing that statement finds the row just used (PostgreSQL checks a row changed under it
    again) and keeps it, or goes first and the rebuild embeds those chunks again."""
    now = time.time()
    with db:
        if not db.execute(*claim_prune_sql("search_meta", now)).fetchall():
            return 0
        db.execute(*prune_sql(model_of(space), now, keep_days))
        return db.changes()


def cap_cache(db: PgConnection, max_entries: int, space: VectorSpace | None) -> int:
    """As `server.index.vectors.cap_cache`. The caller holds the index's indexing lock, so two servers never
    count the same surplus and each drop it."""
    if max_entries <= 0:
        return 0
    over = int(db.execute(*count_sql()).fetchall()[0][0]) - max_entries
    if over <= 0:
        return 0
    with db:
        db.execute(*cap_sql(model_of(space), over))
        return db.changes()


def tidy_cache(db: PgConnection, max_entries: int) -> None:
    """After an indexing run, under its lock: the day's prune and the cap, keeping the live table's model's
    vectors (whether or not this server's provider answers now)."""
    space = read_space(db)
    try:
        prune_cache(db, space)
        cap_cache(db, max_entries, space)
    except EngineError as exc:  # housekeeping: the files of the run before stay indexed, and the next run tries again
        log.warning("embedding cache not tidied (%s); the next indexing run tries again", type(exc.__cause__).__name__)


def vectors_of(db: PgConnection, space: VectorSpace, chunk_ids: list[int]) -> dict[int, bytes]:
    """The live vector of each chunk that has one, as float32 bytes (as the SQLite engine stores them)."""
    rows = db.execute(*sq.vectors_of_sql(space.table, chunk_ids))
    return {int(chunk): np.asarray(vector, dtype=np.float32).tobytes() for chunk, vector in rows}


def ef_search(rows: float, k: int) -> int:
    """hnsw.ef_search for `k` neighbours from a vector table of about `rows` chunks (-1: never counted); past
    its bound, iterative scans go on until `k` are found."""
    return int(min(MAX_EF_SEARCH, max(MIN_EF_SEARCH, rows / CHUNKS_PER_EF, 2 * k)))


def nearest(db: PgConnection, space: VectorSpace, filters: Filters, k: int, literal: str) -> dict[int, float]:
    """The `k` nearest chunks that pass `filters`: by the HNSW index, exactly inside a tag or category filter."""
    build = sq.labelled_vector_sql if filters.labelled else sq.vector_sql
    with db:
        rows = float(db.execute(*sq.estimated_rows(space.table)).fetchall()[0][0])
        db.execute(f"SET LOCAL hnsw.ef_search = {ef_search(rows, k)}")
        db.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        return scores_of(db, build(space.table, filters, k, literal))


def scores_of(db: PgConnection, query: Query) -> dict[int, float]:
    """A (chunk id, score) query's rows as a dict."""
    return {int(chunk): float(score) for chunk, score in db.execute(*query)}


def count_chunks(db: PgConnection) -> int:
    return int(db.execute("SELECT count(*) FROM chunks").fetchall()[0][0])


def count_missing(db: PgConnection, space: VectorSpace, *, remember: bool = False) -> int:
    """How many chunks have no vector in `space`, looking only past the mark of a count that found none before
    (the rule of `server.index.stats.complete_through`: chunk ids only grow, and one indexing run at a time, on
    any replica, writes chunks). `remember` (after an indexing run) moves the mark when this count finds none."""
    after = complete_through(meta(db, COMPLETE_THROUGH), space.table)
    missing, last = (int(value) for value in db.execute(*sq.count_missing(space.table, after)).fetchall()[0])
    if remember and (mark := moved_mark(space.table, missing, last, after)) is not None:
        with db:
            put_meta(db, COMPLETE_THROUGH, mark)
    return missing


def fill_space(
    db: PgConnection,
    space: VectorSpace,
    embedder: Embedder,
    *,
    stop: threading.Event | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> int:
    """Embed every chunk without a vector in `space`, in short transactions; how many the model embedded."""
    embedded, after = 0, 0
    while not (stop and stop.is_set()):
        rows = db.execute(*sq.chunks_without_vectors(space.table, after, REBUILD_BATCH)).fetchall()
        if not rows:
            break
        after = int(rows[-1][0])
        vectors, count = embed_missing(db, embedder, {str(h): str(text) for _, h, text, *_ in rows})
        embedded += count
        with db:
            for chunk_id, h, _, source, path, day in rows:
                db.execute(*sq.insert_vector(space.table, int(chunk_id), vectors[h], source, path, day))
        if on_batch:
            on_batch(len(rows))
    return embedded


def rebuild(
    db: PgConnection,
    embedder: Embedder,
    *,
    stop: threading.Event | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> bool:
    """Build `embedder`'s vectors beside the live ones and swap them in; False if stopped before the swap. The
    caller holds the index's rebuild lock, so one replica does this while the others serve the live vectors."""
    pending = read_space(db, NEXT)
    if pending is None or not pending.serves(embedder):
        if pending is not None:
            with db:
                db.execute(sq.drop_vector_table(pending.table))
                _write_space(db, NEXT, None)
        pending = create_space(db, embedder, NEXT)
    log.info("rebuilding vectors for %s/%s", embedder.provider, embedder.model)
    fill_space(db, pending, embedder, stop=stop, on_batch=on_batch)
    if stop and stop.is_set():
        return False
    with db:
        old = read_space(db, LIVE)
        db.execute(*sq.delete_orphan_vectors(pending.table))
        _write_space(db, LIVE, pending)
        _write_space(db, NEXT, None)
        if old is not None and old.table != pending.table:
            db.execute(sq.drop_vector_table(old.table))
    fill_space(db, pending, embedder, stop=stop)  # chunks written during the last batch
    log.info("vectors for %s/%s are live", embedder.provider, embedder.model)
    return True
