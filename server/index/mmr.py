"""Maximal marginal relevance: a ranking that trades relevance for variety. Pure.

Each step takes the candidate with the best `lam * relevance - (1 - lam) * (its highest cosine similarity to
what is already taken)`: `lam` 1 is the relevance order unchanged, lower values push near-duplicates of what ranks
above them down the list (Carbonell and Goldstein, 1998). Candidates without a vector count as unlike everything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


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
    closest = np.full(len(ids), -np.inf)  # each candidate's highest similarity to the ones taken
    left = np.ones(len(ids), dtype=bool)
    order: list[int] = []
    for _ in range(len(ids)):
        penalty = np.where(np.isfinite(closest), closest, 0.0) * (1.0 - lam)
        value = np.where(left, gains - penalty, -np.inf)
        best = int(np.argmax(value))  # the first of equals: ties keep the relevance order
        order.append(ids[best])
        left[best] = False
        closest = np.maximum(closest, matrix @ matrix[best])
    return order
