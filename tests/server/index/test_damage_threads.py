"""A damaged index found by several threads at once (searches, an indexing run, the background rebuild): found by
the fault loop (scripts/faults.py --seed 2 in CI) and a fuzz of its noise, where one thread set the database aside
while another was using it or doing the same."""

from __future__ import annotations

import threading
from pathlib import Path

import apsw
import pytest

import server.index.search as search_module
import server.index.vectors as vectors_module
from server.index.engine import MemoryIndex
from server.index.store import for_the_guard, is_corruption, is_missing_table
from tests.fakes.embedder import HashingEmbedder

QUERY = "webhook idempotent processed events"
EXPECTED = "memory/2026-11-18.md"


def _set_aside(index: MemoryIndex) -> list[Path]:
    return [p for p in index.db_path.parent.glob("index.sqlite3.corrupt-*") if not p.name.endswith(("-wal", "-shm"))]


def _damage_vectors(index: MemoryIndex) -> None:
    db = index.store.connection()
    sql = "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE '%vector_chunks%'"
    (table,) = [row[0] for row in db.execute(sql)]
    db.execute(f"UPDATE {table} SET vectors = zeroblob(3)")


def test_damage_found_by_many_threads_at_once_is_set_aside_once_and_every_call_answers(index):
    _damage_vectors(index)
    start = threading.Barrier(7)
    answers: list[str] = []
    failures: list[BaseException] = []

    def call(operation) -> None:
        start.wait(timeout=30)
        try:
            answers.append(operation())
        except BaseException as exc:  # every failure is the finding
            failures.append(exc)

    searches = [lambda: index.search(QUERY).hits[0].path for _ in range(6)]
    indexing = [lambda: EXPECTED if index.index() is not None else "none"]
    threads = [threading.Thread(target=call, args=(op,)) for op in searches + indexing]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert failures == []
    assert answers == [EXPECTED] * 7
    assert len(_set_aside(index)) == 1, "the damaged database is set aside once, not once per thread"


def test_a_vector_table_gone_once_between_two_reads_is_read_again_not_taken_for_damage(index, monkeypatch):
    real, calls = search_module.nearest, []

    def swapped_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:  # the background rebuild swapped its table in between the two reads of this search
            raise apsw.SQLError("no such table: vectors_1")
        return real(*args, **kwargs)

    monkeypatch.setattr(search_module, "nearest", swapped_once)
    result = index.search(QUERY)
    assert result.mode == "hybrid" and result.hits[0].path == EXPECTED
    assert _set_aside(index) == []


def test_a_vector_table_still_gone_on_the_second_read_is_damage_and_rebuilt(index, monkeypatch):
    real, calls = search_module.nearest, []

    def gone_twice(*args, **kwargs):
        calls.append(1)
        if len(calls) <= 2:
            raise apsw.SQLError("no such table: vectors_1")
        return real(*args, **kwargs)

    monkeypatch.setattr(search_module, "nearest", gone_twice)
    assert index.search(QUERY).hits[0].path == EXPECTED
    assert len(_set_aside(index)) == 1


def test_a_vector_another_filler_gave_meanwhile_is_not_inserted_twice(index, monkeypatch):
    # vec0 has no INSERT OR IGNORE: a second insert of a chunk's vector failed "UNIQUE constraint failed on
    # vectors_1 primary key", which read as damage and rebuilt the whole index.
    db = index.store.connection()
    space = vectors_module.live_space(index.store)
    assert space is not None
    db.execute(f"DELETE FROM {space.table}")
    real = vectors_module.embed_missing
    raced: list[int] = []

    def other_filler_meanwhile(db, embedder, items):
        found = real(db, embedder, items)
        if not raced:
            raced.append(1)
            other = threading.Thread(target=vectors_module.fill_space, args=(index.store, space, embedder))
            other.start()  # its own connection, as the background rebuild has
            other.join(timeout=30)
        return found

    monkeypatch.setattr(vectors_module, "embed_missing", other_filler_meanwhile)
    vectors_module.fill_space(index.store, space, HashingEmbedder())
    chunks = db.execute("SELECT count(*) FROM chunks").fetchall()[0][0]
    assert raced and db.execute(f"SELECT count(*) FROM {space.table}").fetchall()[0][0] == chunks
    assert vectors_module.count_missing(index.store, space) == 0


@pytest.mark.parametrize(
    ("error", "damage"),
    [
        (apsw.SQLError("SQL logic error"), True),  # sqlite-vec's delete over a damaged shadow table, no message
        (apsw.SchemaChangeError("vtable constructor failed: chunks_fts"), True),
        (apsw.SQLError('near "SELEC": syntax error'), False),
        (apsw.SQLError("no such table: vectors_1"), False),  # a table swapped out: read again first
    ],
)
def test_what_counts_as_damage(error, damage):
    assert is_corruption(error) is damage


def test_a_missing_table_is_told_apart_from_other_errors():
    assert is_missing_table(apsw.SQLError("no such table: vectors_3"))
    assert not is_missing_table(apsw.SQLError("SQL logic error"))
    assert not is_missing_table(apsw.BusyError("database is locked"))


def test_the_guard_takes_damage_a_table_gone_and_a_connection_let_go_and_nothing_else():
    assert for_the_guard(apsw.CorruptError("database disk image is malformed"))
    assert for_the_guard(apsw.SQLError("no such table: vectors_3"))
    assert for_the_guard(apsw.ConnectionClosedError("closed")) and for_the_guard(apsw.InterruptError("interrupted"))
    assert not for_the_guard(apsw.FullError("database or disk is full"))
    assert not for_the_guard(apsw.ConstraintError("NOT NULL constraint failed: meta.value"))


def _scribble_on_the_files_table(index: MemoryIndex) -> Path:
    """Garble the page of the `files` table (not its index, which the open's schema check reads), with the index
    closed: damage found by the first read of the files' hashes."""
    db = index.store.connection()
    (root,) = [row[0] for row in db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'files'")]
    page_size = db.execute("PRAGMA page_size").fetchall()[0][0]
    db_path = index.db_path
    index.close()
    data = bytearray(db_path.read_bytes())
    start = (root - 1) * page_size
    data[start : start + page_size] = bytes([0xA5]) * page_size
    db_path.write_bytes(bytes(data))
    return db_path


def test_damage_first_met_by_the_list_of_indexed_files_is_set_aside_and_rebuilt(tmp_path, folder, caplog):
    index = MemoryIndex.open(tmp_path / "data", "live", HashingEmbedder(), create=True)
    index.index(folder)
    expected = index.indexed_files()
    _scribble_on_the_files_table(index)

    reopened = MemoryIndex.open(tmp_path / "data", "live", HashingEmbedder())
    try:
        assert reopened.indexed_files() == expected
        assert _set_aside(reopened), "the damaged file is kept for inspection"
        assert any("rebuilding from files" in record.message for record in caplog.records)
        assert reopened.search(QUERY).hits[0].path == EXPECTED
    finally:
        reopened.close()
