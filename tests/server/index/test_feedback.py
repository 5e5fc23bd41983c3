"""Vector pseudo-relevance feedback (`server.index.feedback`): the candidates' cosine against the query moved
towards the best hit, computed without the query vector, and through a real index a note that shares the best
hit's words but none of the query's found only with feedback."""

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
    "memory/broth.md": "# Cooking\n\nTonkotsu broth simmers for twelve hours before the chashu pork goes in.\n",
    "memory/shop.md": "# Errands\n\nThe hardware shop near the station closes early on Sundays.\n",
}


def _unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=-1, keepdims=True)).astype(np.float32)


def test_the_similarities_are_those_of_the_query_moved_towards_the_best_chunk():
    rng = np.random.default_rng(7)
    query, chunks = _unit(rng.standard_normal(16)), _unit(rng.standard_normal((6, 16)))
    similarities = {chunk: float(chunks[chunk] @ query) for chunk in range(6)}
    best = max(similarities, key=similarities.__getitem__)
    blobs = {chunk: chunks[chunk].tobytes() for chunk in range(6)}

    moved = feedback_similarities(similarities, best, lambda ids: {c: blobs[c] for c in ids}, 0.25)

    expected = chunks @ _unit(query + 0.25 * chunks[best])
    assert [moved[chunk] for chunk in range(6)] == pytest.approx(expected.tolist(), abs=1e-5)
    assert moved[best] > similarities[best]


def test_no_weight_or_no_vector_for_the_best_chunk_leaves_the_similarities_alone_and_a_chunk_without_one_keeps_its():
    similarities = {1: 0.8, 2: 0.5, 3: 0.2}
    vectors = {1: _unit(np.array([1.0, 0.0])).tobytes(), 2: _unit(np.array([0.6, 0.8])).tobytes()}

    def of(ids: list[int]) -> dict[int, bytes]:
        return {c: vectors[c] for c in ids if c in vectors}

    assert feedback_similarities(similarities, 1, of, 0.0) == similarities
    assert feedback_similarities(similarities, 3, of, 0.25) == similarities  # the best has no vector
    moved = feedback_similarities(similarities, 1, of, 0.25)
    assert moved[3] == 0.2 and moved[1] > 0.8 and moved[2] != 0.5


def _open(tmp_path: Path) -> MemoryIndex:
    folder = tmp_path / "project"
    for path, text in FEEDBACK_NOTES.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(text)
    index = MemoryIndex.open(tmp_path / "data", "feedback", HashingEmbedder(), create=True)
    index.index(folder)
    return index


def test_feedback_finds_a_note_sharing_the_best_hits_words_but_none_of_the_querys(tmp_path):
    index = _open(tmp_path)
    try:

        def paths(weight: float) -> list[str]:
            options = build_options(limit=4, min_score=0, feedback_weight=weight)
            return [hit.path for hit in index.search("ramen shop", options).hits]

        assert "memory/broth.md" not in paths(0.0)
        found = paths(0.25)
        assert found[0] == "memory/ramen.md" and "memory/broth.md" in found
    finally:
        index.close()


@pytest.mark.parametrize("weight", [-0.1, 1.5, True, "0.3"])
def test_a_feedback_weight_outside_0_to_1_is_refused(weight):
    with pytest.raises(InvalidArgumentError, match="feedback_weight must be a number from 0 to 1"):
        build_options(feedback_weight=weight)  # type: ignore[arg-type]
