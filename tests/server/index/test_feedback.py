"""Vector pseudo-relevance feedback (`server.index.feedback`): the candidates' cosine against the query moved
towards the best hit, computed without the query vector, never admitting a chunk the query found nothing in; and
through a real index a note that shares the best hit's words moved above one that shares only the query's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from server.index.engine import MemoryIndex
from server.index.errors import InvalidArgumentError
from server.index.feedback import feedback_similarities
from server.index.search import build_options
from tests.fakes.embedder import HashingEmbedder

FEEDBACK_NOTES = {
    "memory/ramen.md": "# Lunch\n\nThe ramen shop serves tonkotsu broth with chashu pork.\n",
    "memory/broth.md": "# Cooking\n\nOur shop simmers tonkotsu broth with chashu pork for twelve hours.\n",
    "memory/shop.md": "# Errands\n\nThe hardware shop near the station closes early on Sundays.\n",
}


def _unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=-1, keepdims=True)).astype(np.float32)


def test_the_similarities_are_those_of_the_query_moved_towards_the_best_chunk():
    rng = np.random.default_rng(7)
    query = _unit(rng.standard_normal(16))
    chunks = _unit(query + 0.8 * rng.standard_normal((6, 16)))  # all with a positive cosine to the query
    similarities = {chunk: float(chunks[chunk] @ query) for chunk in range(6)}
    best = max(similarities, key=similarities.__getitem__)
    blobs = {chunk: chunks[chunk].tobytes() for chunk in range(6)}

    moved = feedback_similarities(similarities, best, lambda ids: {c: blobs[c] for c in ids}, 0.25)

    expected = chunks @ _unit(query + 0.25 * chunks[best])
    assert min(similarities.values()) > 0
    assert [moved[chunk] for chunk in range(6)] == pytest.approx(expected.tolist(), abs=1e-5)
    assert moved[best] > similarities[best]


def test_feedback_changes_nothing_when_no_candidate_has_a_positive_cosine_to_the_query():
    similarities = {1: 0.0, 2: -0.2}
    vectors = {1: _unit(np.array([1.0, 0.0])).tobytes(), 2: _unit(np.array([0.0, 1.0])).tobytes()}
    assert feedback_similarities(similarities, 1, lambda ids: {c: vectors[c] for c in ids}, 0.25) == similarities


def test_feedback_moves_only_chunks_the_query_found_with_a_vector_and_nothing_without_a_weight_or_a_best_vector():
    similarities = {1: 0.8, 2: 0.5, 3: 0.2, 4: 0.0, 5: -0.1}
    vectors = {
        c: _unit(np.array(v)).tobytes() for c, v in {1: [1.0, 0.0], 2: [0.6, 0.8], 4: [1, 0.1], 5: [1, 0]}.items()
    }

    def of(ids: list[int]) -> dict[int, bytes]:
        return {c: vectors[c] for c in ids if c in vectors}

    assert feedback_similarities(similarities, 1, of, 0.0) == similarities
    assert feedback_similarities(similarities, 3, of, 0.25) == similarities  # the best has no vector
    moved = feedback_similarities(similarities, 1, of, 0.25)
    assert moved[1] > 0.8 and moved[2] != 0.5
    assert (moved[3], moved[4], moved[5]) == (0.2, 0.0, -0.1)  # no vector; nothing in common with the query


def _open(tmp_path: Path) -> MemoryIndex:
    folder = tmp_path / "project"
    for path, text in FEEDBACK_NOTES.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(text)
    index = MemoryIndex.open(tmp_path / "data", "feedback", HashingEmbedder(), create=True)
    index.index(folder)
    return index


def _paths(index: MemoryIndex, weight: float) -> list[str]:
    return [hit.path for hit in index.search("ramen shop", build_options(limit=4, feedback_weight=weight)).hits]


def test_feedback_moves_a_note_sharing_the_best_hits_words_above_one_sharing_only_the_querys(tmp_path):
    index = _open(tmp_path)
    try:
        assert _paths(index, 0.0) == ["memory/ramen.md", "memory/shop.md", "memory/broth.md"]
        assert _paths(index, 0.25) == ["memory/ramen.md", "memory/broth.md", "memory/shop.md"]
    finally:
        index.close()


@pytest.mark.parametrize("weight", [-0.1, 1.5, True, "0.3"])
def test_a_feedback_weight_outside_0_to_1_is_refused(weight):
    with pytest.raises(InvalidArgumentError, match="feedback_weight must be a number from 0 to 1"):
        build_options(feedback_weight=weight)  # type: ignore[arg-type]
