from __future__ import annotations

import pytest

from server.index.fusion import FusionWeights, fuse, normalise_bm25


def test_a_better_bm25_rank_always_gives_a_higher_keyword_score():
    ranks = {1: -9.0, 2: -3.0, 3: -0.5}
    for method in ("minmax", "max"):
        scores = normalise_bm25(ranks, method)
        assert scores[1] == 1.0 and scores[1] > scores[2] > scores[3] >= 0.0


def test_keyword_hits_are_not_all_equal_and_not_inverted():
    # The two broken formulas of the design documents, for contrast.
    ranks = {1: -9.0, 2: -3.0}
    inverted = {c: 1 / (1 + abs(r)) for c, r in ranks.items()}
    flat = {c: 1 / (1 + max(0.0, r)) for c, r in ranks.items()}
    assert inverted[1] < inverted[2] and flat[1] == flat[2]
    ours = normalise_bm25(ranks)
    assert ours[1] > ours[2]


def test_hybrid_score_rises_with_relevance_on_both_sides():
    weights = FusionWeights(vector=0.7, keyword=0.3)
    base = {c.chunk_id: c.score for c in fuse({1: 0.5, 2: 0.5, 3: 0.2}, {1: -5.0, 2: -2.0, 3: -1.0}, weights, "hybrid")}
    assert base[1] > base[2] > base[3]
    better_vector = {c.chunk_id: c.score for c in fuse({1: 0.5, 2: 0.9}, {1: -5.0, 2: -5.0}, weights, "hybrid")}
    assert better_vector[2] > better_vector[1]


def test_scores_stay_between_zero_and_one_and_negative_cosine_counts_as_zero():
    scored = fuse({1: -0.4, 2: 1.0}, {1: -3.0}, FusionWeights(), "hybrid")
    assert all(0.0 <= s.score <= 1.0 for s in scored)
    assert next(s for s in scored if s.chunk_id == 1).vector == 0.0


def test_keyword_mode_keeps_every_match_above_zero():
    scored = fuse({}, {1: -4.0, 2: -1.0}, FusionWeights(), "keyword")
    assert [s.chunk_id for s in scored] == [1, 2] and scored[-1].score > 0


def test_ties_break_by_chunk_id_for_a_stable_order():
    assert [s.chunk_id for s in fuse({3: 0.5, 1: 0.5, 2: 0.5}, {}, FusionWeights(), "vector")] == [1, 2, 3]


@pytest.mark.parametrize("kwargs", [{"vector": -1}, {"vector": 0, "keyword": 0}, {"normalise": "zscore"}])
def test_bad_weights_are_refused(kwargs):
    with pytest.raises(ValueError):
        FusionWeights(**kwargs)
