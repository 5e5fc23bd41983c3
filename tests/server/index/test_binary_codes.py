"""The in-memory sign-bit codes of a large index, on real SQLite and sqlite-vec (the size threshold lowered)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from server.index import binary, filtered
from server.index.engine import MemoryIndex
from server.index.queries import Filters
from server.index.search import build_options
from server.index.vectors import live_space
from tests.fakes.embedder import HashingEmbedder

WAIT_SECONDS = 30.0
TOPICS = ["webhook", "retry", "invoice", "ledger", "deploy", "rollback", "cache", "queue", "schema", "backup"]


def _notes(folder: Path, files: int) -> None:
    (folder / "memory").mkdir(parents=True, exist_ok=True)
    for n in range(files):
        words = " ".join(TOPICS[(n * 7 + k) % len(TOPICS)] + str(k + n % 5) for k in range(8))
        (folder / "memory" / f"note-{n:03}.md").write_text(f"# Note {n}\n\n{words}\n\nmore {words[::-1]}\n", "utf-8")


@pytest.fixture
def large(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> MemoryIndex:
    """An index the codes serve: 'large' from 50 chunks, pools small enough to cut."""
    monkeypatch.setattr(binary, "BINARY_MIN_CHUNKS", 50)
    monkeypatch.setattr(binary, "HAMMING_POOL", 40)
    monkeypatch.setattr(binary, "RESCORE_POOL", 20)
    monkeypatch.setattr(binary, "RESCORE_PER_RESULT", 2)
    folder = tmp_path / "notes"
    _notes(folder, 120)
    index = MemoryIndex.open(tmp_path / "data", "big", HashingEmbedder(), create=True)
    index.index(folder)
    yield index
    index.close()


def _loaded(index: MemoryIndex) -> binary.Codes:
    space = live_space(index.store)
    assert space is not None
    codes = binary.codes_of(index.store)
    codes.current(space)
    codes.wait(WAIT_SECONDS)
    live = codes.current(space)
    assert live is not None, "the codes were not read"
    return live


def test_the_codes_hold_every_vector_of_the_live_table_as_its_sign_bits(large):
    codes = _loaded(large)
    space = live_space(large.store)
    db = large.store.connection()
    rows = dict(db.execute(f"SELECT chunk_id, embedding FROM {space.table}").fetchall())
    assert sorted(codes.ids.tolist()) == sorted(rows) and len(rows) >= 120
    for position in (0, len(codes.ids) // 2, len(codes.ids) - 1):
        chunk = int(codes.ids[position])
        vector = np.frombuffer(rows[chunk], dtype=np.float32)
        assert (codes.planes[:, position] == binary.pack_signs(vector.reshape(1, -1))[0]).all()
    assert (codes.cache_ids >= 0).all()  # every vector is found in the embedding cache


def test_a_large_index_ranks_its_nearest_chunks_as_the_exact_scan_does(large, monkeypatch):
    _loaded(large)
    space = live_space(large.store)
    db = large.store.connection()
    query = large.embedder.embed(["invoice ledger retry"], kind="query")[0]
    through_codes = binary.nearest(large.store, db, space, query, Filters(), 5)
    monkeypatch.setattr(binary, "BINARY_MIN_CHUNKS", 1 << 40)
    exact = binary.nearest(large.store, db, space, query, Filters(), 5)
    assert len(through_codes) == len(exact) == 5  # the same similarities (ties may swap equal chunks)
    assert sorted(through_codes.values()) == pytest.approx(sorted(exact.values()), abs=1e-5)
    shared = set(exact) & set(through_codes)
    assert all(exact[chunk] == pytest.approx(through_codes[chunk], abs=1e-5) for chunk in shared)


def test_a_write_sets_the_codes_aside_until_they_are_brought_up_to_date_and_search_still_finds_it(large, tmp_path):
    before = _loaded(large)
    space = live_space(large.store)
    notes = tmp_path / "notes" / "memory"
    (notes / "zebra.md").write_text("# Zebra\n\nzebra crossing quagga stripes\n", "utf-8")
    (notes / "note-000.md").unlink()
    large.index(tmp_path / "notes")
    assert binary.codes_of(large.store).current(space) is None  # stale: the exact scan answers meanwhile
    hits = large.search("zebra quagga stripes", build_options(limit=3, mode="vector")).hits
    assert hits and hits[0].path == "memory/zebra.md"
    after = _loaded(large)
    rows = {row[0] for row in large.store.connection().execute(f"SELECT chunk_id FROM {space.table}")}
    assert set(after.ids.tolist()) == rows and after.version != before.version
    assert len(set(before.ids.tolist()) - rows) >= 1 and len(rows - set(before.ids.tolist())) == 1
    assert (after.cache_ids == -1).sum() == 1  # brought up to date: only the new vector was read
    query = large.embedder.embed(["zebra quagga"], kind="query")[0]
    nearest = binary.nearest(large.store, large.store.connection(), space, query, Filters(), 1)
    assert list(nearest) == list(rows - set(before.ids.tolist()))


def test_a_filtered_or_small_search_takes_the_exact_scan(large, monkeypatch):
    _loaded(large)
    space = live_space(large.store)
    db = large.store.connection()
    query = large.embedder.embed(["deploy rollback"], kind="query")[0]
    calls: list[int] = []
    monkeypatch.setattr(binary, "nearest_rows", lambda *args: calls.append(1))
    filtered = binary.nearest(large.store, db, space, query, Filters(path_prefix="memory/note-00"), 5)
    assert calls == [] and set(filtered) <= set(range(1, 40))


def test_a_query_whose_vector_is_all_zeros_is_answered_not_an_error(tmp_path: Path) -> None:
    # sqlite-vec's cosine distance to an all-zero vector is NULL; the hashing embedder gives one for "🚀" (no word).
    folder = tmp_path / "notes"
    _notes(folder, 3)
    index = MemoryIndex.open(tmp_path / "data", "small", HashingEmbedder(), create=True)
    try:
        index.index(folder)
        result = index.search("🚀", build_options(mode="vector"))
        assert result.hits == []
        assert index.search("🚀 webhook0", build_options()).hits  # the keyword side still answers beside it
    finally:
        index.close()


def test_an_all_zero_query_through_the_wide_filtered_scan_is_near_nothing(large, monkeypatch):
    # More chunks pass the filter than are ranked exactly: the filter is applied to a wider KNN, whose distances to
    # an all-zero query are NULL as well.
    monkeypatch.setattr(filtered, "EXACT_MAX_CHUNKS", 0)
    db = large.store.connection()
    space = live_space(large.store)
    zero = np.zeros(space.dimensions, dtype=np.float32)
    assert filtered.filtered_similarities(db, space, zero, Filters(path_prefix="memory/note-00"), 5) == {}
