"""Exploring score regularisation over the candidates' similarity graph, replayed without re-embedding (issue 16,
goals 1 and 2).

The cluster hypothesis: chunks close to each other deserve close scores. After the product's ranking (fusion and
vector feedback, explore_prf.py's replay), each of the best `top` candidates' scores is mixed with its neighbours'
among them: (1 - beta) x its own + beta x a weighted mean of the others', the weights either the `k` most similar
chunks' (`knn`, equal) or every candidate's exp(cosine / 0.05) (`soft`). Candidates below `top` keep their order
after them (LoCoMo's replay has 40 candidates a side, so `top` 100 smooths them all). The candidates' vectors are
already in memory, so a search would pay one top x top product.

Cells are tuning half / held-out half / all, then the held-out difference from the product's figures (a 95%
paired bootstrap).

    .venv/bin/python bench/explore_graph.py [scifact] [subset] [locomo]
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
from explore_prf import Data, Params, Ranker, prepare_locomo, prepare_scifact, product_params, replay_row

TEMPERATURE = 0.05  # `soft`: the cosine scale of a neighbour's weight


@dataclass(frozen=True)
class Smoothing:
    way: str  # "knn" or "soft"
    beta: float  # the neighbours' share of a candidate's new score
    top: int = 100  # the candidates smoothed
    k: int = 5  # `knn`: the neighbours counted


GRID = [Smoothing("knn", b, k=k) for k in (3, 10) for b in (0.1, 0.2, 0.3)]
GRID += [Smoothing("soft", b, top=t) for t in (30, 100) for b in (0.1, 0.2, 0.3)]


class GraphRanker(Ranker):
    def __init__(self, data: Data, smoothing: Smoothing) -> None:
        super().__init__(data)
        self.smoothing = smoothing

    def rank(self, q: int, p: Params) -> tuple[list[int], dict[int, float]]:
        ranked, scores = super().rank(q, p)
        s = self.smoothing
        top = ranked[: s.top]
        vectors = self.data.matrix[top]
        similar = vectors @ vectors.T
        own = np.asarray([scores[r] for r in top])
        if s.way == "knn":
            np.fill_diagonal(similar, -np.inf)
            neighbours = own[np.argsort(-similar, axis=1)[:, : s.k]].mean(axis=1)
        else:
            weights = np.exp(similar / TEMPERATURE)
            np.fill_diagonal(weights, 0.0)
            neighbours = (weights @ own) / np.maximum(weights.sum(axis=1), 1e-12)
        new = {r: (1 - s.beta) * own[n] + s.beta * neighbours[n] for n, r in enumerate(top)}
        new.update({r: scores[r] - 1.0 for r in ranked[s.top :]})
        return sorted(new, key=lambda r: (-new[r], r)), new


def main() -> None:
    which = sys.argv[1:] or ["scifact", "subset", "locomo"]
    print("| set | smoothing | figures (tune / held / all) | | | held-out delta |")
    print("|---|---|---|---|---|---|")
    for name in which:
        data = prepare_locomo() if name == "locomo" else prepare_scifact(name == "subset")
        params = product_params(data)
        row, base = replay_row(Ranker(data), params, None)
        print(f"| {name} | none (the product) | {row} |", flush=True)
        for smoothing in GRID:
            row, _ = replay_row(GraphRanker(data, smoothing), params, base)
            label = f"{smoothing.way}, beta {smoothing.beta}, " + (
                f"k {smoothing.k}" if smoothing.way == "knn" else f"top {smoothing.top}"
            )
            print(f"| {name} | {label} | {row} |", flush=True)


if __name__ == "__main__":
    main()
