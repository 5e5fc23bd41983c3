"""Fusing vector and keyword candidates into one score that rises with relevance on both sides.

FTS5's bm25() is negative, more negative meaning more relevant. `1/(1+abs(rank))` would invert the keyword
order and `1/(1+max(0,rank))` would make every keyword hit equal. Here the keyword scores are normalised within
the candidate set, either min-max (best = 1, weakest = 0) or as a share of the best (best = 1); cosine
similarity is used as is, clamped at 0. bench/bench_retrieval_scifact.py measured the choices.

A hybrid candidate without a vector yet (written while its provider failed, or waiting for a fill) has no vector
side to weigh, and its keyword side alone (0.3 at most) never reaches the local model's gate (0.35,
`tuning.default_min_score`): it is scored as keyword mode scores it, by its share of the best bm25. So an index whose
vectors are all missing answers exactly as keyword mode does (as during a rebuild), and one with none missing is
scored as before.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class FusionWeights:
    vector: float = 0.7
    keyword: float = 0.3
    normalise: str = "minmax"  # or "max"

    def __post_init__(self) -> None:
        if self.vector < 0 or self.keyword < 0 or self.vector + self.keyword <= 0:
            raise ValueError("fusion weights must be non-negative and not both zero")
        if self.normalise not in ("minmax", "max"):
            raise ValueError("normalise must be 'minmax' or 'max'")


@dataclass(frozen=True)
class Scored:
    chunk_id: int
    score: float
    vector: float  # clamped cosine similarity, 0 when unknown
    keyword: float  # share of the best bm25 in the candidate set, 0 when the chunk did not match


def normalise_bm25(ranks: Mapping[int, float], method: str = "minmax") -> dict[int, float]:
    """bm25 ranks (negative is better) to [0, 1], the best candidate scoring 1."""
    relevance = {chunk: max(0.0, -rank) for chunk, rank in ranks.items()}
    best = max(relevance.values(), default=0.0)
    if best <= 0:
        return dict.fromkeys(ranks, 0.0)
    worst = min(relevance.values()) if method == "minmax" else 0.0
    if best == worst:
        return dict.fromkeys(ranks, 1.0)
    return {chunk: (value - worst) / (best - worst) for chunk, value in relevance.items()}


def fuse(
    similarities: Mapping[int, float],
    ranks: Mapping[int, float],
    weights: FusionWeights,
    mode: str,
    unembedded: Collection[int] = (),
) -> list[Scored]:
    """Scores for the union of candidates, best first (ties broken by chunk id for a stable order). In hybrid,
    the candidates in `unembedded` (no vector yet) score their keyword share alone, as in keyword mode."""
    # Alone, keyword scores are shares of the best hit, so even the weakest match keeps a score above 0.
    keyword = normalise_bm25(ranks, weights.normalise if mode == "hybrid" else "max")
    alone = normalise_bm25(ranks, "max") if mode == "hybrid" and unembedded else keyword
    total = weights.vector + weights.keyword
    scored: list[Scored] = []
    for chunk in set(similarities) | set(keyword):
        v = max(0.0, similarities.get(chunk, 0.0))
        k = keyword.get(chunk, 0.0)
        if mode == "hybrid" and chunk in unembedded:
            score = k = alone.get(chunk, 0.0)
        elif mode == "hybrid":
            score = (weights.vector * v + weights.keyword * k) / total
        elif mode == "vector":
            score = v
        else:
            score = k
        scored.append(Scored(chunk, score, v, k))
    scored.sort(key=lambda s: (-s.score, s.chunk_id))
    return scored
