"""Vector ranking inside a tag or category filter, and chunk vectors by id.

sqlite-vec filters a KNN only on the vector table's own metadata columns (source, path, day); tags and category
live on the chunks. So the filter runs first, in SQL, and then:
- up to EXACT_MAX_CHUNKS chunks pass: they are ranked exactly (each vector from the embedding cache, a B-tree
  lookup, vec0 for the rest; one matrix product per batch): the recall of a full scan, for about 16 us a chunk;
- more pass (a tag on most of the index): a KNN over-fetches OVERFETCH times the share the filter leaves out and
  keeps the chunks that pass; a filter that keeps that many chunks is a wide one, so the cut loses little.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Iterable, Iterator

import apsw
import numpy as np

from server.index.queries import (
    Filters,
    cached_vectors_by_id_sql,
    labelled_chunks_sql,
    vector_by_id_sql,
    vector_sql,
)
from server.index.vectors import VectorSpace

BATCH_CHUNKS = 2000  # ids per lookup: under SQLite's bound-parameter limit, and a bounded matrix (12 MB at 1,536d)
EXACT_MAX_CHUNKS = 2000  # measured 35 ms to rank 2,000 chunks exactly at 384 dimensions; 9,000 took 260 ms
OVERFETCH = 2
MAX_KNN = 4096  # the most neighbours sqlite-vec returns from one KNN


def chunk_vectors(db: apsw.Connection, space: VectorSpace, chunk_ids: list[int]) -> dict[int, bytes]:
    """The live vector of each chunk that has one, from the cache first, then from the vector table."""
    size = space.dimensions * 4
    sql, params = cached_vectors_by_id_sql(space.provider, space.model, chunk_ids)
    found = {chunk: blob for chunk, blob in db.execute(sql, params) if len(blob) == size}
    rest = [c for c in chunk_ids if c not in found]
    if rest:  # not in the cache (an index written before it, or a vector inserted directly): ask vec0
        one = vector_by_id_sql(space.table)
        found.update((chunk, blob) for c in rest for chunk, blob in db.execute(one, (c,)) if len(blob) == size)
    return found


def similarities_of(
    db: apsw.Connection, space: VectorSpace, query: np.ndarray, chunk_ids: list[int]
) -> dict[int, float]:
    """Cosine similarity of the query (normalised, like the stored vectors) to each chunk that has a vector."""
    out: dict[int, float] = {}
    for start in range(0, len(chunk_ids), BATCH_CHUNKS):
        found = chunk_vectors(db, space, chunk_ids[start : start + BATCH_CHUNKS])
        if found:
            ids = list(found)
            matrix = np.frombuffer(b"".join(found[c] for c in ids), dtype=np.float32).reshape(len(ids), -1)
            out.update(zip(ids, (matrix @ query).tolist(), strict=True))
    return out


def knn_similarities(rows: Iterable[tuple[int, float | None]]) -> Iterator[tuple[int, float]]:
    """(chunk, similarity) of sqlite-vec's (chunk, cosine distance) rows. The distance to an all-zero query is NULL
    (it has no direction): such a query is near nothing."""
    return ((chunk, 1.0 - distance) for chunk, distance in rows if distance is not None)


def filtered_similarities(
    db: apsw.Connection, space: VectorSpace, query: np.ndarray, filters: Filters, k: int
) -> dict[int, float]:
    """The `k` chunks most similar to the query among those that pass `filters`, with their similarity."""
    sql, params = labelled_chunks_sql(filters)
    ids = [int(row[0]) for row in db.execute(sql, params)]
    if len(ids) <= EXACT_MAX_CHUNKS:
        scored = similarities_of(db, space, query, ids)
    else:
        total = int(db.execute("SELECT count(*) FROM chunks").fetchall()[0][0])  # type: ignore[arg-type]
        wide = min(MAX_KNN, max(k, math.ceil(k * OVERFETCH * total / len(ids))))
        unlabelled = dataclasses.replace(filters, tags=(), category=None)
        sql, params = vector_sql(space.table, unlabelled, wide)
        params[0] = query.astype(np.float32).tobytes()
        passing = set(ids)
        scored = {chunk: score for chunk, score in knn_similarities(db.execute(sql, params)) if chunk in passing}
    return dict(heapq.nlargest(k, scored.items(), key=lambda item: (item[1], -item[0])))
