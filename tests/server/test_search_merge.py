"""Several indexes' hits merged into one list (memory_search scope="all")."""

from __future__ import annotations

from server.memory.results import SearchHit
from server.memory.searching import merge_ranked


def _hit(index: str, path: str, score: float) -> SearchHit:
    return SearchHit(
        path=path, start_line=1, end_line=2, heading="", score=score, snippet="", source="memory",
        citation=f"{path}#L1-L2", index=index, updated_by=None, updated_at=None, matched_by="both",
        vector_rank=None, keyword_rank=None,
    )  # fmt: skip


def test_each_indexs_own_order_survives_the_merge_even_where_it_is_not_by_score():
    # MMR or a reranker put a lower-scored but different passage second in index a: the merge must not undo that.
    a = [_hit("a", "a1", 0.9), _hit("a", "a-diverse", 0.5), _hit("a", "a2", 0.8)]
    b = [_hit("b", "b1", 0.85), _hit("b", "b2", 0.4)]
    merged = [(h.index, h.path) for h in merge_ranked([a, b])]
    assert merged == [("a", "a1"), ("b", "b1"), ("a", "a-diverse"), ("a", "a2"), ("b", "b2")]


def test_one_index_comes_back_as_it_is():
    only = [_hit("a", "x", 0.2), _hit("a", "y", 0.7)]
    assert merge_ranked([only]) == only
