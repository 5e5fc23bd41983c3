"""Vector pseudo-relevance feedback (Rocchio) within a hybrid search's candidates.

A hybrid search's best chunk is found by both sides together, so its vector carries what the keyword side knew and
the question's own vector missed (a name, a rare term). The query vector q becomes q' = normalise(q + w * b), b the
best fused chunk's vector, and every candidate's cosine is taken again against q' before the fusion runs once more.
The candidates stay those of the first pass: a second vector search over the whole index measured the same
(bench/explore_prf.py) at twice the vector side's cost. No query vector is needed: for unit vectors,
cos(q', c) = (cos(q, c) + w * b.c) / sqrt(1 + 2w * cos(q, b) + w^2).

Chosen with bench/explore_prf.py on one half of each data set and reported on the other (SciFact test queries by
id parity, LoCoMo conv-26/30/41 against conv-42/43): w = 0.25 from the best chunk alone; 2, 3, 5 or 10 chunks, w
from 0.15 to 1.5, and keyword feedback (RM3-like expansion words) measured no better (bench/results/*.md).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from server.index.hits import VectorsOf


def feedback_similarities(
    similarities: Mapping[int, float], best: int, vectors: VectorsOf, weight: float
) -> dict[int, float]:
    """Each candidate's cosine to the query moved towards chunk `best` by `weight` (0: unchanged). Feedback
    reorders what the query found and adds nothing it did not: a candidate whose cosine to the query is 0 or less
    keeps it, as does one without a vector; all do when `best` has no vector or the weight is 0."""
    out = dict(similarities)
    if weight <= 0 or best not in similarities:
        return out
    found = vectors(list(similarities))
    if best not in found:
        return out
    ids = [chunk for chunk in found if similarities[chunk] > 0]
    if not ids:  # the best hit came from the keyword side alone (a min_score under the gate lets it through)
        return out
    matrix = np.stack([np.frombuffer(found[chunk], dtype=np.float32) for chunk in ids])
    towards = matrix @ np.frombuffer(found[best], dtype=np.float32)
    before = np.array([similarities[chunk] for chunk in ids], dtype=np.float64)
    norm = np.sqrt(max(1e-12, 1.0 + 2.0 * weight * similarities[best] + weight * weight))
    out.update(zip(ids, ((before + weight * towards) / norm).tolist(), strict=True))
    return out
