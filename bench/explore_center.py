"""Exploring a corpus-aware vector space on SciFact and LoCoMo-dev without re-embedding: centring and whitening.

Sentence embeddings share a common direction (the corpus mean), so every chunk is somewhat similar to every
question, and "hub" chunks near the mean crowd many lists. Two transforms of both sides, fitted on each index's
own chunk vectors (what an index could keep up to date as it is written):
- centring: v' = normalise(v - a * mean), a in [0, 1];
- whitening with shrinkage: v' = normalise(W (v - mean)), W = (C + s * tr(C)/d * I)^(-1/2) for the covariance C.
The product's ranking (explore_prf.py's replay, with vector feedback) runs on the transformed similarities, and the
fusion's vector weight is varied with it, since the transformed cosines have another scale. Tuned on one half and
reported on the other, as explore_prf.py does.

    .venv/bin/python bench/explore_center.py [locomo|scifact|subset]
"""

from __future__ import annotations

import sys
from dataclasses import replace

import numpy as np
from explore_prf import Data, Ranker, prepare_locomo, prepare_scifact, product_params, replay_row


def _normalise(m: np.ndarray) -> np.ndarray:
    return m / np.maximum(np.linalg.norm(m, axis=-1, keepdims=True), 1e-12)  # type: ignore[no-any-return]


class Transformed(Ranker):
    """The replay with every vector (chunks' and queries') mapped by a per-index affine transform."""

    def __init__(self, data: Data, kind: str, amount: float) -> None:
        super().__init__(data)
        self.maps: dict[str, tuple[np.ndarray, np.ndarray | None]] = {}
        matrix = data.matrix.copy()
        for db, rows in data.row_ids.items():
            idx = np.fromiter(rows.values(), dtype=np.int64)
            own = data.matrix[idx]
            mean = own.mean(axis=0)
            if kind == "centre":
                shift, w = amount * mean, None
            else:
                cov = np.cov(own - mean, rowvar=False)
                vals, vecs = np.linalg.eigh(cov + amount * np.trace(cov) / cov.shape[0] * np.eye(cov.shape[0]))
                shift, w = mean, (vecs / np.sqrt(vals)) @ vecs.T
            self.maps[db] = (shift, w)
            matrix[idx] = self._map(own, db)
        self.mapped = matrix
        self.db_now = ""

    def _map(self, v: np.ndarray, db: str) -> np.ndarray:
        shift, w = self.maps[db]
        out = v - shift
        return _normalise(out if w is None else out @ w)

    def similarities(self, vector: np.ndarray) -> np.ndarray:
        return self.mapped @ self._map(vector, self.db_now)  # type: ignore[no-any-return]

    def rank(self, q: int, p):  # type: ignore[no-untyped-def]
        self.db_now = self.data.db[q]
        return super().rank(q, p)


def main() -> None:
    which = sys.argv[1] if len(sys.argv) > 1 else "locomo"
    data = prepare_locomo() if which == "locomo" else prepare_scifact(which == "subset")
    product = product_params(data)
    base_line, base = replay_row(Ranker(data), product, None)
    print("product", base_line, flush=True)
    variants = [("centre", a) for a in (0.5, 1.0)] + [("whiten", s) for s in (1.0, 0.3, 0.1)]
    for kind, amount in variants:
        ranker = Transformed(data, kind, amount)
        for vw in (0.6, 0.7, 0.8):
            line, _ = replay_row(ranker, replace(product, vw=vw), base)
            print(f"{kind} {amount} vw {vw}", line, flush=True)


if __name__ == "__main__":
    main()
