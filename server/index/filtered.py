"""Vector ranking inside a tag or category filter, and chunk vectors by id.

sqlite-vec filters a KNN only on the vector table's own metadata columns (source, path, day); tags and category
live on the chunks. A filtered KNN's top k would be cut before the filter, so with such filters the vector side
ranks exactly instead: every chunk that passes the filter (in SQL, before any ranking), its vector from the
embedding cache (a B-tree lookup; vec0 for the rest), one matrix product per batch. Recall is that of a full scan;
the cost grows with the chunks that pass the filter, which is what a tag is for keeping small.
"""

from __future__ import annotations

import heapq

import apsw
import numpy as np

from server.index.queries import Filters, cached_vectors_by_id_sql, labelled_chunks_sql, vectors_by_id_sql
from server.index.vectors import VectorSpace

BATCH_CHUNKS = 2000  # ids per lookup: under SQLite's bound-parameter limit, and a bounded matrix (12 MB at 1,536d)


def chunk_vectors(db: apsw.Connection, space: VectorSpace, chunk_ids: list[int]) -> dict[int, bytes]:
    """The live vector of each chunk that has one, from the cache first, then from the vector table."""
    size = space.dimensions * 4
    sql, params = cached_vectors_by_id_sql(space.provider, space.model, chunk_ids)
    found = {chunk: blob for chunk, blob in db.execute(sql, params) if len(blob) == size}
    rest = [c for c in chunk_ids if c not in found]
    if rest:  # not in the cache (an index written before it, or a vector inserted directly): ask vec0
        sql, params = vectors_by_id_sql(space.table, rest)
        found.update((chunk, blob) for chunk, blob in db.execute(sql, params) if len(blob) == size)
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


def filtered_similarities(
    db: apsw.Connection, space: VectorSpace, query: np.ndarray, filters: Filters, k: int
) -> dict[int, float]:
    """The `k` chunks most similar to the query among those that pass `filters`, with their similarity."""
    sql, params = labelled_chunks_sql(filters)
    ids = [int(row[0]) for row in db.execute(sql, params)]
    scored = similarities_of(db, space, query, ids)
    return dict(heapq.nlargest(k, scored.items(), key=lambda item: (item[1], -item[0])))
