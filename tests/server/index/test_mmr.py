"""MMR diversity: lambda 1 keeps the relevance order; lower values push a near-duplicate below a different place."""

from __future__ import annotations

import numpy as np
import pytest

from server.index.mmr import mmr_order


def _blob(*values: float) -> bytes:
    vector = np.asarray(values, dtype=np.float32)
    return (vector / np.linalg.norm(vector)).astype(np.float32).tobytes()


RELEVANCE = {1: 0.9, 2: 0.88, 3: 0.7, 4: 0.6}
VECTORS = {1: _blob(1, 0, 0), 2: _blob(1, 0.01, 0), 3: _blob(0, 1, 0), 4: _blob(0, 0, 1)}  # 2 repeats 1


def test_lambda_one_keeps_the_relevance_order():
    assert mmr_order([1, 2, 3, 4], RELEVANCE, VECTORS, 1.0) == [1, 2, 3, 4]


def test_a_near_duplicate_of_the_best_hit_drops_below_different_places():
    assert mmr_order([1, 2, 3, 4], RELEVANCE, VECTORS, 0.5) == [1, 3, 4, 2]


def test_a_mild_lambda_lets_relevance_win_over_small_differences():
    # 0.9 * 0.88 - 0.1 * ~1.0 = 0.69 still beats 0.9 * 0.7 = 0.63: only near-ties are traded for variety
    assert mmr_order([1, 2, 3, 4], RELEVANCE, VECTORS, 0.9) == [1, 2, 3, 4]


def test_a_candidate_without_a_vector_counts_as_unlike_everything():
    vectors = {k: v for k, v in VECTORS.items() if k != 4}
    order = mmr_order([1, 2, 3, 4], RELEVANCE, vectors, 0.5)
    assert order[0] == 1 and order.index(4) < order.index(2)
    assert sorted(order) == [1, 2, 3, 4]


@pytest.mark.parametrize("lam", [0.0, 0.3, 0.7])
def test_every_candidate_comes_back_once(lam):
    rng = np.random.default_rng(7)
    ids = list(range(50))
    vectors = {i: _blob(*rng.normal(size=8)) for i in ids}
    relevance = {i: 1.0 - i / 100 for i in ids}
    assert sorted(mmr_order(ids, relevance, vectors, lam)) == ids
