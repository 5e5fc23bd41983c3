"""A fast approximate KNN for large indexes: sign bits of the live vectors in memory, exact cosine at the end.

sqlite-vec 0.1.9 only scans, and its top-k selection costs O(rows x k): 80 ms at 100k chunks for k = 40, and a
bit[384] column with an oversampled k of 640 took 580 ms at 200k (0.1.10's alpha `rescore` index, 650 ms; see
bench/results/scale.md). So for indexes of BINARY_MIN_CHUNKS chunks or more, the vector side keeps each live
vector's sign bits in memory (48 bytes at 384 dimensions, plus its id and its
embedding-cache row: 64 bytes a chunk) and searches in three steps:
1. Hamming distance to the query's bits over every chunk (a bit plane per 64 dimensions, numpy popcount), keeping
   the HAMMING_POOL nearest (a histogram cut, no sort);
2. those ranked by the dot product of the float query with their sign bits (asymmetric, far closer to cosine than
   Hamming), keeping RESCORE_POOL (at least RESCORE_PER_RESULT per result asked);
3. those ranked by exact cosine on their float vectors (from the embedding cache, whose row ids are kept too).
Recall@10 against the exact scan is measured in bench/bench_scale.py (>= 0.98 at 1M chunks).

The codes are a cache of the vec0 table, never stored: read from its shadow tables in a background thread when
a search first needs them, and trusted only while nothing was written to the database since (SQLite's
data_version, on a connection of their own). Until then, and whenever a write made them stale, search takes the
exact vec0 scan and a refresh runs in the background (reading the table's ids, and the vectors of the new ones
only); so a result never misses a chunk written before it. The new vectors' cache rows are not looked up: their
exact cosine comes through their chunk ids (slower, until the next full read).
"""

from __future__ import annotations

import heapq
import logging
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice

import apsw
import numpy as np

from server.index.filtered import chunk_vectors, knn_similarities, similarities_of
from server.index.queries import Filters, vector_sql
from server.index.store import Store
from server.index.vectors import VectorSpace

log = logging.getLogger(__name__)

BINARY_MIN_CHUNKS = 50_000  # below this the exact scan takes under ~40 ms and keeps perfect recall
HAMMING_POOL = 8_000
RESCORE_POOL = 600  # 400 gave recall@10 0.979 at 1M chunks
RESCORE_PER_RESULT = 10
REFRESH_MAX_SHARE = 0.2  # a refresh reads only the new vectors unless they are more than this share
_BYTE_BITS = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).astype(np.float32)  # (256, 8)


@dataclass(frozen=True)
class Codes:
    """Sign bits of every vector of one vec0 table, as of one data_version of the database."""

    table: str
    version: int
    ids: np.ndarray  # int64 chunk ids, one per vector
    planes: np.ndarray  # uint64 (words, vectors): bit plane w holds dimensions 64w..64w+63 of every vector
    cache_ids: np.ndarray  # int64: the embedding_cache row holding each float vector, -1 when none

    @property
    def nbytes(self) -> int:
        return int(self.ids.nbytes + self.planes.nbytes + self.cache_ids.nbytes)


def pack_signs(vectors: np.ndarray) -> np.ndarray:
    """uint64 words (vectors, words) of the sign bits (1: positive), padded with zeros to whole words."""
    bits = np.packbits(vectors > 0, axis=1)
    pad = (-bits.shape[1]) % 8
    if pad:
        bits = np.pad(bits, ((0, 0), (0, pad)))
    return np.ascontiguousarray(bits).view(np.uint64)


def nearest_rows(codes: Codes, query: np.ndarray, k: int) -> np.ndarray:
    """The rows of `codes` whose exact cosine should decide the `k` nearest to `query` (steps 1 and 2 above)."""
    words = pack_signs(query.reshape(1, -1))[0]
    distance = np.bitwise_count(codes.planes[0] ^ words[0])
    for plane, word in zip(codes.planes[1:], words[1:], strict=True):
        distance += np.bitwise_count(plane ^ word)
    within = np.cumsum(np.bincount(distance, minlength=64 * len(words) + 1))
    cut = int(np.searchsorted(within, HAMMING_POOL))  # the smallest distance keeping at least the pool
    pool = np.flatnonzero(distance <= cut)
    keep = max(RESCORE_POOL, k * RESCORE_PER_RESULT)
    if len(pool) <= keep:
        return pool
    rows = np.ascontiguousarray(codes.planes[:, pool].T).view(np.uint8)  # (pool, bytes) as packbits wrote them
    padded = np.zeros(rows.shape[1] * 8, dtype=np.float32)
    padded[: len(query)] = query
    table = _BYTE_BITS @ padded.reshape(-1, 8).T  # (256, bytes): a byte's bits -> its share of query . bits
    score = table[rows, np.arange(rows.shape[1])].sum(axis=1)
    return pool[np.argpartition(-score, keep)[:keep]]


def exact_similarities(
    db: apsw.Connection, space: VectorSpace, codes: Codes, rows: np.ndarray, query: np.ndarray
) -> dict[int, float]:
    """Cosine of the query to the float vectors of `rows`: from the embedding cache by its row id (one B-tree
    step each; measured 7.5 ms for 1,000 at 100k chunks), through chunk ids for the few the cache lacks."""
    cached = codes.cache_ids[rows]
    wanted = cached[cached >= 0].tolist()
    by_cache = dict(zip(wanted, codes.ids[rows][cached >= 0].tolist(), strict=True))
    out: dict[int, float] = {}
    size = space.dimensions * 4
    if wanted:
        found = [
            (by_cache[cache_id], blob)
            for cache_id, blob in db.execute(cache_vectors_sql(len(wanted)), wanted)
            if len(blob) == size
        ]
        if found:
            matrix = np.frombuffer(b"".join(blob for _, blob in found), dtype=np.float32).reshape(len(found), -1)
            out.update(zip((chunk for chunk, _ in found), (matrix @ query).tolist(), strict=True))
    rest = [chunk for chunk in codes.ids[rows].tolist() if chunk not in out]
    if rest:
        out.update(similarities_of(db, space, query, rest))
    return out


def cache_vectors_sql(count: int) -> str:
    marks = ", ".join("?" for _ in range(count))
    # By row id alone: with provider and model in the WHERE, SQLite walks their index instead (185 us a row).
    return f"SELECT id, vector FROM embedding_cache WHERE id IN ({marks})"


def _cache_ids(db: apsw.Connection, space: VectorSpace, ids: np.ndarray) -> np.ndarray:
    """The embedding-cache row of each chunk's vector for the live model, -1 where the cache has none."""
    sql = (
        "SELECT c.id, e.id FROM chunks c JOIN embedding_cache e"
        " ON e.provider = ? AND e.model = ? AND e.hash = c.hash ORDER BY c.id"
    )
    # Into numpy a slice at a time: a list of a million tuples would take ~100 MB for a moment.
    rows = db.execute(sql, (space.provider, space.model))
    parts = [np.array(batch, dtype=np.int64).reshape(-1, 2) for batch in iter(lambda: list(islice(rows, 100_000)), [])]
    pairs = np.concatenate(parts) if parts else np.zeros((0, 2), dtype=np.int64)
    out = np.full(len(ids), -1, dtype=np.int64)
    if len(pairs):
        where = np.searchsorted(pairs[:, 0], ids).clip(0, len(pairs) - 1)
        hit = pairs[where, 0] == ids
        out[hit] = pairs[where[hit], 1]
    return out


def read_codes(db: apsw.Connection, space: VectorSpace, version: int) -> Codes:
    """The codes of every vector in `space`'s vec0 table, read from its shadow tables (sqlite-vec 0.1.9's layout:
    1,024-slot chunks with a rowid array, a validity bitmap and the float vectors). Raises ValueError when what it
    read does not add up to the table's row count."""
    ids: list[np.ndarray] = []
    words: list[np.ndarray] = []
    for chunk_ids, vectors in _valid_rows(db, space):
        ids.append(chunk_ids)
        words.append(pack_signs(vectors))
    count = int(db.execute(f'SELECT count(*) FROM "{space.table}_rowids"').fetchall()[0][0])  # type: ignore[arg-type]
    total = sum(len(part) for part in ids)
    if total != count:
        raise ValueError(f"read {total} vectors from {space.table}, which holds {count}")
    if not ids:
        width = (space.dimensions + 63) // 64
        empty = np.zeros(0, dtype=np.int64)
        return Codes(space.table, version, empty, np.zeros((width, 0), dtype=np.uint64), empty)
    chunk_ids = np.concatenate(ids)
    planes = np.ascontiguousarray(np.concatenate(words).T)
    return Codes(space.table, version, chunk_ids, planes, _cache_ids(db, space, chunk_ids))


def refresh_codes(db: apsw.Connection, space: VectorSpace, codes: Codes, version: int) -> Codes | None:
    """`codes` brought up to date with the table's rows now: the vectors gone dropped, the new ones read (from the
    embedding cache, vec0 for the rest); None when over REFRESH_MAX_SHARE of them are new (read them all then)."""
    rows = db.execute(f'SELECT rowid FROM "{space.table}_rowids"')
    parts = [np.array(batch, dtype=np.int64) for batch in iter(lambda: [r[0] for r in islice(rows, 100_000)], [])]
    now = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    added = np.setdiff1d(now, codes.ids)
    if len(added) > REFRESH_MAX_SHARE * max(len(now), 1):
        return None
    kept = np.isin(codes.ids, now)
    found = chunk_vectors(db, space, added.tolist()) if len(added) else {}
    new_ids = np.array(list(found), dtype=np.int64)
    matrix = np.frombuffer(b"".join(found.values()), dtype=np.float32).reshape(len(found), space.dimensions)
    planes = np.concatenate([codes.planes[:, kept], pack_signs(matrix).T], axis=1)
    return Codes(
        space.table,
        version,
        np.concatenate([codes.ids[kept], new_ids]),
        np.ascontiguousarray(planes),
        np.concatenate([codes.cache_ids[kept], np.full(len(new_ids), -1, dtype=np.int64)]),
    )


def _valid_rows(db: apsw.Connection, space: VectorSpace) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Per vector-chunk row of the vec0 table: the chunk ids and float vectors of its valid slots."""
    sql = (
        f'SELECT c.rowids, c.validity, v.vectors FROM "{space.table}_chunks" c'
        f' JOIN "{space.table}_vector_chunks00" v ON v.rowid = c.chunk_id'
    )
    for rowids, validity, vectors in db.execute(sql):
        chunk_ids = np.frombuffer(rowids, dtype=np.int64)
        valid = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")
        valid = valid[: len(chunk_ids)].astype(bool)
        matrix = np.frombuffer(vectors, dtype=np.float32).reshape(-1, space.dimensions)
        yield chunk_ids[valid], matrix[: len(chunk_ids)][valid]


class BinaryCodes:
    """The codes of one index's live vectors, kept current in the background."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._watch: apsw.Connection | None = apsw.Connection(str(store.path))  # its data_version sees writes
        self._codes: Codes | None = None
        self._loading: threading.Thread | None = None
        self._broken: set[str] = set()  # tables whose shadow layout could not be read: exact scan only

    def current(self, space: VectorSpace) -> Codes | None:
        """Codes of `space` that match the database as it is now, or None (a refresh starts in the background)."""
        with self._lock:
            try:
                if self._watch is None or space.table in self._broken or not self._large(space):
                    return None
                version = self._version()
            except apsw.Error:  # a table swapped in or dropped while this looked: the exact scan, this once
                return None
            codes = self._codes
            if codes is not None and codes.table == space.table and codes.version == version:
                return codes
            if self._loading is None or not self._loading.is_alive():
                self._loading = threading.Thread(
                    target=self._load, args=(space, version), name="binary-codes", daemon=True
                )
                self._loading.start()
            return None

    def _large(self, space: VectorSpace) -> bool:
        """Whether the table may hold BINARY_MIN_CHUNKS vectors (its largest chunk id: one B-tree step)."""
        assert self._watch is not None
        sql = f'SELECT max(rowid) FROM "{space.table}_rowids"'
        return int(self._watch.execute(sql).fetchall()[0][0] or 0) >= BINARY_MIN_CHUNKS

    def _version(self) -> int:
        assert self._watch is not None
        return int(self._watch.execute("PRAGMA data_version").fetchall()[0][0])  # type: ignore[arg-type]

    def _load(self, space: VectorSpace, version: int) -> None:
        try:
            db = apsw.Connection(str(self._store.path), flags=apsw.SQLITE_OPEN_READONLY)
            previous = self._codes
            try:
                with db:  # one read transaction: the rows and their count agree
                    codes = None
                    if previous is not None and previous.table == space.table:
                        codes = refresh_codes(db, space, previous, version)
                    codes = codes or read_codes(db, space, version)
            finally:
                db.close()
        except (apsw.Error, ValueError) as exc:  # a store closed meanwhile, or a layout this version cannot read
            if isinstance(exc, ValueError):
                log.warning("vector codes unavailable for %s, using the exact scan: %s", space.table, exc)
                with self._lock:
                    self._broken.add(space.table)
            return
        with self._lock:
            self._codes = codes

    def wait(self, timeout: float) -> None:
        """Until the background load running now (if any) ends; for benchmarks and tests."""
        loading = self._loading
        if loading is not None:
            loading.join(timeout)

    def close(self) -> None:
        with self._lock:
            watch, self._watch, self._codes = self._watch, None, None
        if watch is not None:
            watch.close()


def nearest(
    store: Store, db: apsw.Connection, space: VectorSpace, query: np.ndarray, filters: Filters, k: int
) -> dict[int, float]:
    """The `k` chunks nearest to `query` with their cosine similarity: through the codes when the index is large,
    they are current and no filter applies, else by sqlite-vec's exact scan (filters run inside it)."""
    codes = None if filters != Filters() else codes_of(store).current(space)
    if codes is not None and len(codes.ids) >= BINARY_MIN_CHUNKS:
        scored = exact_similarities(db, space, codes, nearest_rows(codes, query, k), query)
        return dict(heapq.nlargest(k, scored.items(), key=lambda item: (item[1], -item[0])))
    sql, params = vector_sql(space.table, filters, k)
    params[0] = query.astype(np.float32).tobytes()
    return dict(knn_similarities(db.execute(sql, params)))


_BY_STORE: weakref.WeakKeyDictionary[Store, BinaryCodes] = weakref.WeakKeyDictionary()
_REGISTRY_LOCK = threading.Lock()


def codes_of(store: Store) -> BinaryCodes:
    """The one BinaryCodes of `store`, closed when the store closes."""
    with _REGISTRY_LOCK:
        found = _BY_STORE.get(store)
        if found is None:
            store.connection()  # raises once the store is closed: its path may name a new database by now
            found = _BY_STORE[store] = BinaryCodes(store)
            store.on_close.append(found.close)
        return found
