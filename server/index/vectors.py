"""The vector side of an index: which vec0 table is live for which model, the embedding cache, and the
background rebuild that swaps a new model's vectors in atomically."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import apsw
import numpy as np

from server.index.cache_rules import CACHE_KEEP_DAYS, Model, cap_sql, claim_prune_sql, count_sql, prune_sql
from server.index.embeddings.base import Embedder, Vectors, unusable
from server.index.embeddings.chain import ProviderChain
from server.index.errors import EmbeddingError
from server.index.queries import chunks_without_vectors_sql, create_vector_table_sql
from server.index.stats import COMPLETE_THROUGH, count_pending, moved_mark
from server.index.store import Store, for_the_guard
from server.index.transaction import writing

log = logging.getLogger(__name__)

REBUILD_BATCH = 128


@dataclass(frozen=True)
class VectorSpace:
    """A live or pending vec0 table and the model whose vectors it holds."""

    table: str
    provider: str
    model: str
    dimensions: int

    def serves(self, embedder: Embedder | None) -> bool:
        return embedder is not None and (embedder.provider, embedder.model, embedder.dimensions) == (
            self.provider,
            self.model,
            self.dimensions,
        )


def _read_space(store: Store, prefix: str) -> VectorSpace | None:
    return space_in(store.get_meta, prefix)


def space_in(meta: Callable[[str], str | None], prefix: str = "vector") -> VectorSpace | None:
    """The vectors `meta` (a reader of the meta table's values) records under `prefix`; None when it records none."""
    table = meta(f"{prefix}_table")
    if table is None:
        return None
    dimensions = meta(f"{prefix}_dimensions") or "0"
    return VectorSpace(
        table=table,
        provider=meta(f"{prefix}_provider") or "",
        model=meta(f"{prefix}_model") or "",
        dimensions=int(dimensions) if dimensions.isdigit() else 0,
    )


def vector_state(providers: ProviderChain, live: VectorSpace | None, *, vec_loaded: bool) -> tuple[str, str | None]:
    """("ready" | "rebuilding" | "unavailable" | "off", why vectors are not used when they are not), for the live
    vectors `live` and the providers configured.

    Ready while the live vectors' provider answers, even when a rebuild for a preferred one runs beside them;
    unavailable while that provider fails and no other is due to replace it (keyword search meanwhile)."""
    if not providers:
        return "off", "no embedding model is available; keyword search only"
    if not vec_loaded:
        return "off", "sqlite-vec is not available; keyword search only"
    if live is not None and providers.serving(live.provider, live.model, live.dimensions) is not None:
        return "ready", None
    target, failing = providers.preferred(), providers.failures()
    if target is None or (live is not None and live.serves(target)):
        return "unavailable", f"vector search is unavailable ({failing}); keyword search meanwhile"
    why = f"vectors are being rebuilt for {target.model}; keyword search meanwhile"
    return "rebuilding", f"{why} ({failing})" if failing else why


def _write_space(store: Store, db: apsw.Connection, prefix: str, space: VectorSpace | None) -> None:
    for key in ("table", "provider", "model", "dimensions"):
        value = None if space is None else str(getattr(space, key))
        store.set_meta(f"{prefix}_{key}", value, db)


def live_space(store: Store) -> VectorSpace | None:
    return _read_space(store, "vector")


def pending_space(store: Store) -> VectorSpace | None:
    return _read_space(store, "vector_next")


def create_space(store: Store, embedder: Embedder, prefix: str) -> VectorSpace:
    """A new, empty vec0 table for `embedder`, recorded under `prefix` in meta."""
    db = store.connection()
    with writing(db):
        number = int(store.get_meta("vector_table_counter") or 0) + 1
        space = VectorSpace(f"vectors_{number}", embedder.provider, embedder.model, embedder.dimensions)
        db.execute(create_vector_table_sql(space.table, space.dimensions))
        store.set_meta("vector_table_counter", str(number), db)
        _write_space(store, db, prefix, space)
    return space


def ensure_live_space(store: Store, embedder: Embedder) -> VectorSpace | None:
    """The live vector table; a new, empty one for `embedder` only while the index has no chunks (they are embedded
    as they are written). Chunks without live vectors (a rebuild from the files cut short, an index built with no
    model) are left to the background rebuild, which fills a table beside them and swaps it in, keyword search and
    a "rebuilding" state meanwhile: an empty live table would call the vectors ready with every chunk unembedded
    until the next indexing run."""
    live = live_space(store)
    if live is not None or store.connection().execute("SELECT 1 FROM chunks LIMIT 1").fetchall():
        return live
    return create_space(store, embedder, "vector")


def space_for(store: Store, embedder: Embedder) -> VectorSpace:
    """The vector table of a database no search reads yet (a re-chunk's side database) for `embedder`: the one it
    has when that serves `embedder`, else a new one in its place, so one model's vectors never go under another's."""
    space = live_space(store)
    if space is not None and space.serves(embedder):
        return space
    if space is not None:
        log.info("dropping vectors of %s/%s for %s/%s", space.provider, space.model, embedder.provider, embedder.model)
        _drop(store, space, "vector")
    return create_space(store, embedder, "vector")


# embedding cache -------------------------------------------------------------------------------------


def cached_vectors(db: apsw.Connection, embedder: Embedder, hashes: Sequence[str]) -> dict[str, bytes]:
    """Cached vectors of `hashes` for this model; each one found is marked as used now. One of another length than
    the model's dimensions (a model that changed them under the same name) is not found: it is embedded again and
    replaced."""
    found: dict[str, bytes] = {}
    unique = list(dict.fromkeys(hashes))
    now = time.time()
    size = 4 * embedder.dimensions  # float32
    for start in range(0, len(unique), 500):
        batch = unique[start : start + 500]
        marks = ", ".join("?" for _ in batch)
        where = f"provider = ? AND model = ? AND hash IN ({marks})"
        rows = dict(
            db.execute(
                f"SELECT hash, vector FROM embedding_cache WHERE {where}", (embedder.provider, embedder.model, *batch)
            )
        )
        found.update((digest, vector) for digest, vector in rows.items() if len(vector) == size)
        if rows:
            with writing(db):
                db.execute(
                    f"UPDATE embedding_cache SET used_at = ? WHERE {where}",
                    (now, embedder.provider, embedder.model, *batch),
                )
    return found


def model_of(space: VectorSpace | None) -> Model | None:
    """(provider, model) of `space`, whose vectors of current chunks the cache's rules keep."""
    return (space.provider, space.model) if space is not None else None


def prune_cache(store: Store, space: VectorSpace | None, *, keep_days: float = CACHE_KEEP_DAYS) -> int:
    """Forget cached vectors unused for `keep_days` unless the live model's vectors still need them; at most once
    a day (`server.index.cache_rules`). Recent ones stay, so reverting an edit or switching back to a model stays
    free for that long."""
    now = time.time()
    db = store.connection()
    with writing(db):
        if not db.execute(*claim_prune_sql("meta", now)).fetchall():
            return 0
        db.execute(*prune_sql(model_of(space), now, keep_days))
        return db.changes()


def cap_cache(store: Store, max_entries: int, space: VectorSpace | None) -> int:
    """Keep at most `max_entries` cached vectors (0: no cap), dropping the least recently used first and the live
    model's vectors of current chunks last (a search reads those; without them it asks vec0, slower)."""
    if max_entries <= 0:
        return 0
    db = store.connection()
    over = int(db.execute(*count_sql()).fetchall()[0][0]) - max_entries  # type: ignore[arg-type]
    if over <= 0:
        return 0
    with writing(db):
        db.execute(*cap_sql(model_of(space), over))
        return db.changes()


def tidy_cache(store: Store, max_entries: int) -> None:
    """After an indexing run: the day's prune and the cap, keeping the live vectors whether or not this server's
    provider answers now. Housekeeping: a database error other than damage (a full disk, a busy database) is
    logged, and the indexing run it follows still reports the files it indexed."""
    space = live_space(store)
    try:
        prune_cache(store, space)
        cap_cache(store, max_entries, space)
    except apsw.Error as exc:
        if for_the_guard(exc):
            raise  # the engine's guard sets a damaged database aside
        log.warning("embedding cache not tidied (%s: %s); the next indexing run tries again", type(exc).__name__, exc)


def embed_missing(db: apsw.Connection, embedder: Embedder, items: dict[str, str]) -> tuple[dict[str, bytes], int]:
    """Vectors for `items` (hash -> text), from the cache or the model; returns them and how many were embedded.

    Raises EmbeddingError when the model fails or answers vectors that cannot be stored; nothing is cached then.
    """
    found = cached_vectors(db, embedder, list(items))
    missing = [h for h in items if h not in found]
    if missing:
        vectors: Vectors = embedder.embed([items[h] for h in missing], kind="document")
        if vectors.shape != (len(missing), embedder.dimensions):
            raise EmbeddingError("the embedding provider returned vectors of the wrong shape")
        if (why := unusable(vectors)) is not None:
            raise EmbeddingError(f"the embedding provider {embedder.provider} returned {why}")
        with writing(db):
            for h, vector in zip(missing, vectors, strict=True):
                blob = vector.astype(np.float32).tobytes()
                found[h] = blob
                db.execute(
                    "INSERT OR REPLACE INTO embedding_cache(provider, model, hash, vector, used_at)"
                    " VALUES(?, ?, ?, ?, ?)",
                    (embedder.provider, embedder.model, h, blob, time.time()),
                )
    return found, len(missing)


# filling a table -------------------------------------------------------------------------------------


def _chunks_without_vectors(
    db: apsw.Connection, table: str, after: int, limit: int
) -> list[tuple[int, str, str, str, str, str]]:
    rows = db.execute(*chunks_without_vectors_sql(table, after, limit))
    return [(int(i), str(h), str(t), str(s), str(p), str(d)) for i, h, t, s, p, d in rows]


def count_missing(store: Store, space: VectorSpace, *, remember: bool = False) -> int:
    """How many chunks have no vector in `space`, looking only past the mark of a count that found none before
    (`stats.complete_through`): an indexing run's check costs its own chunks, not the index's size. `remember`
    (a writer's call) moves the mark when this count finds none."""
    db = store.connection()
    pending = count_pending(db, space.table)
    if remember and (mark := moved_mark(space.table, *pending)) is not None:
        with writing(db):
            store.set_meta(COMPLETE_THROUGH, mark, db)
    return pending.missing


_STILL_MISSING = (
    "SELECT 1 FROM chunks c WHERE c.id = ? AND NOT EXISTS (SELECT 1 FROM {table} v WHERE v.chunk_id = c.id)"
)


def fill_space(
    store: Store,
    space: VectorSpace,
    embedder: Embedder,
    *,
    stop: threading.Event | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> int:
    """Embed every chunk that has no vector in `space`; returns how many the model embedded.

    Works in short transactions, so searches and indexing go on meanwhile. Raises EmbeddingError on failure.
    """
    db = store.connection()
    embedded, after = 0, 0
    while not (stop and stop.is_set()):
        rows = _chunks_without_vectors(db, space.table, after, REBUILD_BATCH)
        if not rows:
            break
        after = rows[-1][0]
        vectors, count = embed_missing(db, embedder, {h: text for _, h, text, *_ in rows})
        embedded += count
        with writing(db):
            for chunk_id, h, _, source, path, day in rows:
                # The chunk may have been replaced while we embedded, or given its vector by another filler (a
                # rebuild beside an indexing run): insert only if it still exists without one (vec0 has no OR IGNORE).
                if db.execute(_STILL_MISSING.format(table=space.table), (chunk_id,)).fetchall():
                    db.execute(
                        f"INSERT INTO {space.table}(chunk_id, embedding, source, path, day) VALUES(?, ?, ?, ?, ?)",
                        (chunk_id, vectors[h], source, path, day),
                    )
        if on_batch:
            on_batch(len(rows))
    return embedded


def rebuild(
    store: Store,
    embedder: Embedder,
    *,
    stop: threading.Event | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> bool:
    """Build `embedder`'s vectors beside the live ones and swap them in; False if stopped before the swap.
    `on_batch(chunks)` after each batch embedded before the swap."""
    pending = pending_space(store)
    if pending is None or not pending.serves(embedder):
        if pending is not None:
            _drop(store, pending, "vector_next")
        pending = create_space(store, embedder, "vector_next")
    log.info("rebuilding vectors for %s/%s", embedder.provider, embedder.model)
    fill_space(store, pending, embedder, stop=stop, on_batch=on_batch)
    if stop and stop.is_set():
        return False
    db = store.connection()
    with writing(db):
        old = live_space(store)
        db.execute(f"DELETE FROM {pending.table} WHERE chunk_id NOT IN (SELECT id FROM chunks)")
        _write_space(store, db, "vector", pending)
        _write_space(store, db, "vector_next", None)
        if old is not None and old.table != pending.table:
            db.execute(f"DROP TABLE {old.table}")
    # Chunks indexed during the last batch are embedded now; the swap did not wait for them.
    fill_space(store, pending, embedder, stop=stop)
    log.info("vectors for %s/%s are live", embedder.provider, embedder.model)
    return True


def _drop(store: Store, space: VectorSpace, prefix: str) -> None:
    db = store.connection()
    with writing(db):
        db.execute(f"DROP TABLE IF EXISTS {space.table}")
        _write_space(store, db, prefix, None)
