"""Filling a vector table and counting what it lacks, at costs that stay linear in the index's size
(bench/bench_pending.py: a rebuild's SQL from the cache went from 241 s to 5.3 s at 100k chunks)."""

from __future__ import annotations

import itertools

import pytest

import server.index.stats as stats_module
import server.index.vectors as vectors_module
from server.index.embeddings.chain import ProviderChain
from server.index.engine import MemoryIndex
from server.index.queries import chunks_without_vectors_sql, missing_vectors_sql
from server.index.stats import COMPLETE_THROUGH
from tests.fakes.embedder import HashingEmbedder


def _count(index: MemoryIndex, sql: str) -> int:
    return int(index.store.connection().execute(sql).fetchall()[0][0])


def test_the_pending_count_is_the_chunks_without_a_vector(index):
    space = vectors_module.live_space(index.store)
    assert space is not None and vectors_module.count_missing(index.store, space) == 0
    index.store.set_meta(COMPLETE_THROUGH, None)  # no mark: every chunk is looked at
    chunks = _count(index, "SELECT count(*) FROM chunks")
    index.store.connection().execute(f"DELETE FROM {space.table} WHERE chunk_id IN (SELECT id FROM chunks LIMIT 3)")
    assert chunks > 3 and vectors_module.count_missing(index.store, space) == 3 == index.pending_count()


def test_an_indexing_run_marks_its_count_and_later_counts_look_only_at_chunks_written_since(tmp_path, folder):
    embedder, now = HashingEmbedder(), [0.0]
    providers = ProviderChain.of([embedder], clock=lambda: now[0])
    index = MemoryIndex.open(tmp_path / "data", "flaky", providers, create=True)
    try:
        index.index(folder)
        space = vectors_module.live_space(index.store)
        assert space is not None
        last = _count(index, "SELECT max(id) FROM chunks")
        assert index.store.get_meta(COMPLETE_THROUGH) == f"{space.table} {last}"
        embedder.fail = True  # the model is down: the new note's chunks are written without vectors
        (folder / "memory" / "2026-11-26.md").write_text("# Deploy\n\nThe canary runs for an hour first.\n")
        report = index.index(folder, paths=["memory/2026-11-26.md"])
        assert report.chunks_pending == report.chunks_written > 0
        assert index.pending_count() == report.chunks_pending  # counted past the mark, which did not move
        assert index.store.get_meta(COMPLETE_THROUGH) == f"{space.table} {last}"
        embedder.fail, now[0] = False, now[0] + 60  # back, and past the breaker's rest
        assert index.index(folder).chunks_pending == 0 and index.pending_count() == 0
        assert index.store.get_meta(COMPLETE_THROUGH) == f"{space.table} {_count(index, 'SELECT max(id) FROM chunks')}"
    finally:
        index.close()


def _lose_the_first_vector(index: MemoryIndex) -> tuple[str, int]:
    """Delete the vector of the index's first chunk (below the mark), which nothing the server does; its table
    and the chunk's id."""
    space = vectors_module.live_space(index.store)
    assert space is not None
    first = _count(index, "SELECT min(id) FROM chunks")
    index.store.connection().execute(f"DELETE FROM {space.table} WHERE chunk_id = ?", (first,))
    assert index.pending_count() == 0  # below the mark: not looked at
    return space.table, first


def test_a_vector_lost_below_the_mark_comes_back_with_a_forced_run(index, folder):
    table, _ = _lose_the_first_vector(index)
    index.index(folder, force=True)  # every file written again: every chunk new, with its vector
    assert _count(index, f"SELECT count(*) FROM {table}") == _count(index, "SELECT count(*) FROM chunks")
    index.store.set_meta(COMPLETE_THROUGH, None)
    assert index.pending_count() == 0


def test_a_count_with_more_chunks_past_the_mark_than_lookups_pay_for_scans_every_chunk(index, monkeypatch):
    table, first = _lose_the_first_vector(index)
    monkeypatch.setattr(stats_module, "LOOKUPS_MAX", 0)  # any chunk past the mark is one too many to look up
    index.store.connection().execute("UPDATE meta SET value = ? WHERE key = ?", (f"{table} {first}", COMPLETE_THROUGH))
    assert index.pending_count() == 1


def test_a_fill_pages_by_chunk_id_so_no_batch_reads_the_chunks_filled_before_it(index, monkeypatch):
    space = vectors_module.live_space(index.store)
    assert space is not None
    index.store.connection().execute(f"DELETE FROM {space.table}")
    monkeypatch.setattr(vectors_module, "REBUILD_BATCH", 3)
    real = vectors_module._chunks_without_vectors
    calls: list[tuple[int, list[int]]] = []

    def recorded(db, table, after, limit):
        rows = real(db, table, after, limit)
        calls.append((after, [row[0] for row in rows]))
        return rows

    monkeypatch.setattr(vectors_module, "_chunks_without_vectors", recorded)
    vectors_module.fill_space(index.store, space, HashingEmbedder())
    chunks = _count(index, "SELECT count(*) FROM chunks")
    assert vectors_module.count_missing(index.store, space) == 0
    assert len(calls) == -(-chunks // 3) + 1  # a batch of three at a time, then one that finds none
    for (after, ids), (next_after, _) in itertools.pairwise(calls):
        assert all(i > after for i in ids) and next_after == ids[-1]


def test_chunks_written_while_a_table_fills_get_their_vectors_in_the_same_fill(index, folder, monkeypatch):
    # A rebuild fills a new table while indexing goes on: a chunk written meanwhile takes a larger id than any
    # before it (AUTOINCREMENT), so paging by id still reaches it.
    monkeypatch.setattr(vectors_module, "REBUILD_BATCH", 2)
    pending = vectors_module.create_space(index.store, HashingEmbedder(), "vector_next")
    written: list[int] = []

    def index_a_new_note(batch: int) -> None:
        if not written:
            (folder / "memory" / "2026-11-26.md").write_text("# Deploy\n\nThe canary runs for an hour first.\n")
            written.append(index.index(folder).chunks_written)

    vectors_module.fill_space(index.store, pending, HashingEmbedder(), on_batch=index_a_new_note)
    assert written and written[0] > 0
    assert _count(index, f"SELECT count(*) FROM {pending.table}") == _count(index, "SELECT count(*) FROM chunks")


@pytest.mark.parametrize("table", ["chunks", "vectors_1; DROP TABLE chunks", "vectors_", "Vectors_1"])
def test_the_vector_bookkeeping_sql_refuses_a_table_that_is_not_a_vector_table(table):
    with pytest.raises(ValueError, match="bad vector table name"):
        missing_vectors_sql(table)
    with pytest.raises(ValueError, match="bad vector table name"):
        chunks_without_vectors_sql(table, 0, 10)
