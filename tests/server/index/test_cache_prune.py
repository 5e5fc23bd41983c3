"""The embedding cache forgets what nothing has used for a month, and never what the live vectors still need."""

from __future__ import annotations

import shutil
import time

import apsw
import pytest

from server.index import vectors
from server.index.engine import MemoryIndex
from server.index.vectors import live_space, prune_cache
from tests.conftest import EXAMPLE
from tests.fakes.embedder import HashingEmbedder


def test_old_unused_vectors_are_pruned_and_live_ones_kept(tmp_path):
    folder = tmp_path / "project"
    shutil.copytree(EXAMPLE, folder)
    embedder = HashingEmbedder()
    index = MemoryIndex.open(tmp_path / "data", "demo", embedder, create=True)
    try:
        index.index(folder)
        db = index.store.connection()
        live = db.execute("SELECT count(*) FROM embedding_cache").fetchall()[0][0]
        path = folder / "memory" / "2026-11-20.md"
        path.write_text(path.read_text() + "\n- One more line about the deploy.\n")
        index.index(folder)  # the file's old chunk vector is now unreferenced
        with db:
            db.execute(
                "INSERT INTO embedding_cache(provider, model, hash, vector, used_at)"
                " VALUES('old', 'model', 'h', x'00', 0)"
            )
        total = db.execute("SELECT count(*) FROM embedding_cache").fetchall()[0][0]
        assert total == live + 2

        # Everything was used just now: nothing is old enough, and the daily throttle holds the next prune back.
        index.store.set_meta("cache_pruned_at", "0")
        assert prune_cache(index.store, live_space(index.store)) == 1  # only the other model's month-old row
        with db:
            db.execute(
                "INSERT INTO embedding_cache(provider, model, hash, vector, used_at)"
                " VALUES('old', 'model', 'h2', x'00', 0)"
            )
        assert prune_cache(index.store, live_space(index.store)) == 0  # throttled: h2 stays until the next day

        with db:
            db.execute("UPDATE embedding_cache SET used_at = ?", (time.time() - 31 * 86400,))
        index.store.set_meta("cache_pruned_at", "0")
        assert prune_cache(index.store, live_space(index.store)) == 2  # the edited chunk's old vector, and h2
        referenced = db.execute(
            "SELECT count(*) FROM embedding_cache WHERE hash IN (SELECT hash FROM chunks)"
        ).fetchall()[0][0]
        assert db.execute("SELECT count(*) FROM embedding_cache").fetchall()[0][0] == referenced == live
        assert index.search("deploy checklist").mode == "hybrid"
    finally:
        index.close()


def test_the_live_vectors_stay_cached_while_their_model_is_down(tmp_path, monkeypatch):
    # The day's prune ran from the space a working provider serves: with the model down (none served) it kept
    # nothing, and a month-old index lost every cached vector of its live chunks.
    folder = tmp_path / "project"
    shutil.copytree(EXAMPLE, folder)
    index = MemoryIndex.open(tmp_path / "data", "demo", HashingEmbedder(), create=True)
    try:
        index.index(folder)
        db = index.store.connection()
        live = db.execute("SELECT count(*) FROM embedding_cache").fetchall()[0][0]
        with db:
            db.execute("UPDATE embedding_cache SET used_at = ?", (time.time() - 31 * 86400,))
        index.store.set_meta("cache_pruned_at", "0")
        monkeypatch.setattr(index, "_serving", lambda: None)  # the model does not answer
        index.index(folder)
        assert db.execute("SELECT count(*) FROM embedding_cache").fetchall()[0][0] == live > 0
    finally:
        index.close()


def test_a_cache_that_cannot_be_tidied_leaves_the_indexing_run_reported_and_is_tried_again(
    tmp_path, monkeypatch, caplog
):
    # A database error in the day's prune (a full disk, say) failed the whole call, though every file was indexed.
    folder = tmp_path / "project"
    shutil.copytree(EXAMPLE, folder)
    index = MemoryIndex.open(tmp_path / "data", "demo", HashingEmbedder(), create=True)
    try:
        index.store.set_meta("cache_pruned_at", "0")
        failing = ("INSERT INTO meta(key, value) VALUES('x', NULL)", ())  # a real error inside the prune's transaction
        monkeypatch.setattr(vectors, "prune_sql", lambda *_: failing)
        report = index.index(folder)
        assert report.files_indexed > 0 and report.chunks_pending == 0
        assert index.search("deploy checklist").mode == "hybrid"
        assert "embedding cache not tidied (ConstraintError" in caplog.text
        assert index.store.get_meta("cache_pruned_at") == "0"  # the day's claim rolled back with it: tried again
        monkeypatch.undo()
        index.index(folder)
        assert float(index.store.get_meta("cache_pruned_at") or 0) > time.time() - 60
    finally:
        index.close()


def test_damage_met_while_tidying_the_cache_still_reaches_the_engine_guard(tmp_path, monkeypatch):
    index = MemoryIndex.open(tmp_path / "data", "demo", HashingEmbedder(), create=True)
    try:

        def damaged(store, space, **_):
            raise apsw.CorruptError("database disk image is malformed")

        monkeypatch.setattr(vectors, "prune_cache", damaged)
        with pytest.raises(apsw.CorruptError):
            vectors.tidy_cache(index.store, 0)
    finally:
        index.close()
