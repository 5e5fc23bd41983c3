"""Maximal marginal relevance: a ranking that trades relevance for variety. Pure.

Each step takes the candidate with the best `lam * relevance - (1 - lam) * (its highest cosine similarity to
what is already taken)`: `lam` 1 is the relevance order unchanged, lower values push near-duplicates of what ranks
above them down the list (Carbonell and Goldstein, 1998). Candidates without a vector count as unlike everything,
and so does a negative similarity. A search reorders its first MMR_POOL candidates only (`ordering.py`): its ranking
already put the rest below them, and the cost grows with the square of the pool.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

MMR_POOL = 200  # candidates a search reorders at most


def mmr_order(
    ranked: Sequence[int], relevance: Mapping[int, float], vectors: Mapping[int, bytes], lam: float
) -> list[int]:
    """`ranked` (chunk ids, best first) in MMR order; `vectors` holds each one's normalised float32 vector."""
    if lam >= 1.0 or len(ranked) < 3:
        return list(ranked)
    ids = list(ranked)
    dimensions = next((len(blob) // 4 for blob in vectors.values()), 0)
    matrix = np.zeros((len(ids), dimensions), dtype=np.float32)
    for row, chunk in enumerate(ids):
        blob = vectors.get(chunk)
        if blob is not None and len(blob) == dimensions * 4:
            matrix[row] = np.frombuffer(blob, dtype=np.float32)
    gains = np.array([relevance[chunk] for chunk in ids], dtype=np.float64) * lam
    similar = (matrix @ matrix.T) * (1.0 - lam)  # one product up front: each greedy step below is then linear
    penalty = np.zeros(len(ids))  # each candidate's highest (weighted) similarity to the ones taken, at least 0
    taken = np.zeros(len(ids), dtype=bool)
    order: list[int] = []
    for _ in range(len(ids)):
        value = gains - penalty
        value[taken] = -np.inf
        best = int(np.argmax(value))  # the first of equals: ties keep the relevance order
        order.append(ids[best])
        taken[best] = True
        np.maximum(penalty, similar[best], out=penalty)
    return order
