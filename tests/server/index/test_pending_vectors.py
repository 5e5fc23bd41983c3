"""Chunks that have no vector yet in a live vector table (written while the provider failed, or waiting for a fill)
are found by their keywords, and the answer says so; a database that has chunks but no live vectors is rebuilt,
not called ready; a database rebuilt from the files keeps its chunk settings; the tag re-chunk after an upgrade says
what it does."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import apsw

from server.index import engine as engine_module
from server.index import relabel
from server.index.embeddings.base import Embedder, InputKind, Vectors
from server.index.embeddings.chain import ProviderChain
from server.index.engine import MemoryIndex
from server.index.engine_settings import EngineSettings
from server.index.errors import EmbeddingError
from server.index.fusion import FusionWeights, fuse
from server.index.migrations import RELABEL_KEY
from server.index.search import build_options
from server.index.tuning import chunker_config
from server.index.vectors import live_space
from tests.fakes.embedder import HashingEmbedder

NOTE = "memory/2026-11-26.md"
NOTE_TEXT = "# Keys\n\nThe zorblax keys rotate every quarter; Dana owns the quarterly rotation.\n"
JOIN_SECONDS = 60
ONE_WAITS = "has no vector yet, so it is ranked by keyword alone until it is embedded"


class Switchable:
    """An embedder that can be switched off (EmbeddingError), as a provider in an outage."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.fail = False
        self.provider, self.model, self.dimensions = inner.provider, inner.model, inner.dimensions
        self.max_tokens, self.tokenizer = inner.max_tokens, inner.tokenizer

    def embed(self, texts: Sequence[str], *, kind: InputKind = "document") -> Vectors:
        if self.fail:
            raise EmbeddingError("the provider is switched off")
        return self.inner.embed(texts, kind=kind)


def _outage(embedder: Embedder) -> tuple[Switchable, list[float], ProviderChain]:
    switch, now = Switchable(embedder), [0.0]
    return switch, now, ProviderChain.of([switch], clock=lambda: now[0])


def _answer(index: MemoryIndex, query: str, mode: str = "auto") -> list[tuple[str, float]]:
    return [(h.path, round(h.score, 6)) for h in index.search(query, build_options(mode=mode)).hits]


def test_a_hybrid_candidate_without_a_vector_scores_its_keyword_share_and_the_others_score_as_before():
    similarities, ranks = {1: 0.8, 2: 0.1}, {1: -2.0, 2: -1.0, 3: -4.0}  # chunk 3 matched by keyword, no vector
    before = {s.chunk_id: s.score for s in fuse(similarities, ranks, FusionWeights(), "hybrid")}
    after = {s.chunk_id: s.score for s in fuse(similarities, ranks, FusionWeights(), "hybrid", {3})}
    keyword_mode = {s.chunk_id: s.score for s in fuse({}, ranks, FusionWeights(), "keyword")}
    assert before[3] <= 0.3 and after[3] == keyword_mode[3] == 1.0
    assert {c: after[c] for c in (1, 2)} == {c: before[c] for c in (1, 2)}
    nothing_waits = fuse(similarities, ranks, FusionWeights(), "hybrid", ())
    assert nothing_waits == fuse(similarities, ranks, FusionWeights(), "hybrid")


def test_a_note_written_while_the_model_failed_is_found_by_its_keywords_until_embedded(
    tmp_path, folder, local_embedder
):
    switch, now, providers = _outage(local_embedder)
    index = MemoryIndex.open(tmp_path / "data", "live", providers, create=True)
    try:
        index.index(folder)
        switch.fail = True
        (folder / NOTE).write_text(NOTE_TEXT)
        assert index.index(folder, paths=[NOTE]).chunks_pending == 1
        switch.fail, now[0] = False, now[0] + 3600  # the provider answers again; no indexing run since
        assert index.status().vector_state == "ready" and index.pending_count() == 1

        found = index.search("zorblax", build_options())
        assert found.mode == "hybrid" and found.hits[0].path == NOTE and found.hits[0].score == 1.0
        assert found.notice == f"1 matching passage {ONE_WAITS}"

        assert index.index(folder).chunks_pending == 0  # the next run embeds it: scored as every hybrid hit again
        found = index.search("zorblax", build_options())
        assert found.hits[0].path == NOTE and found.hits[0].score < 1.0 and found.notice is None
    finally:
        index.close()


def test_an_index_whose_every_vector_is_missing_answers_as_keyword_mode_does(tmp_path, folder, local_embedder):
    switch, now, providers = _outage(local_embedder)
    (folder / NOTE).write_text(NOTE_TEXT)
    index = MemoryIndex.open(tmp_path / "data", "live", providers, create=True)
    try:
        switch.fail = True
        report = index.index(folder)  # a new index: its live table is there, every chunk waits for a vector
        switch.fail, now[0] = False, now[0] + 3600
        assert report.chunks_pending == report.chunks_written == index.pending_count() > 0
        for query in ("zorblax", "quarterly rotation of the keys", "webhook idempotent processed events"):
            hybrid = index.search(query, build_options())
            assert hybrid.mode == "hybrid" and hybrid.hits and hybrid.notice and "no vector yet" in hybrid.notice
            assert _answer(index, query) == _answer(index, query, "keyword")
    finally:
        index.close()


def test_a_database_with_chunks_but_no_live_vectors_is_rebuilt_not_called_ready(tmp_path, folder):
    embedder = HashingEmbedder()
    data = tmp_path / "data"
    kept = MemoryIndex.open(data, "kept", embedder, create=True)
    kept.index(folder)
    kept.close()
    kept.db_path.unlink()
    embedder.fail = True  # rebuilt from the files, the vectors' rebuild fails: chunks and no live vectors
    cut_short = MemoryIndex.open(data, "kept", embedder)
    try:
        assert cut_short._rebuild_thread is not None
        cut_short._rebuild_thread.join(JOIN_SECONDS)
        assert live_space(cut_short.store) is None and cut_short.store.chunk_count() > 0
    finally:
        cut_short.close()

    embedder.fail = False
    reopened = MemoryIndex.open(data, "kept", embedder)
    try:
        assert reopened.vector_state()[0] == "rebuilding"  # not "ready" with every chunk waiting for its vector
        assert reopened.search("webhook idempotent processed events", build_options()).mode == "keyword"
        assert reopened._rebuild_thread is not None  # the search started the rebuild it found due
        reopened._rebuild_thread.join(JOIN_SECONDS)
        assert reopened.vector_state()[0] == "ready" and reopened.pending_count() == 0
        assert reopened.search("webhook idempotent processed events", build_options()).mode == "hybrid"
    finally:
        reopened.close()


def test_a_database_rebuilt_from_the_files_is_not_cut_again_for_its_own_chunk_settings(tmp_path, folder):
    settings = EngineSettings(chunker=chunker_config(128, 16))
    data = tmp_path / "data"
    first = MemoryIndex.open(data, "small", HashingEmbedder(), create=True, settings=settings)
    first.index(folder)
    first.close()
    first.db_path.unlink()
    rebuilt = MemoryIndex.open(data, "small", HashingEmbedder(), settings=settings)
    try:
        assert rebuilt.store.chunk_count() > 0
        assert not rebuilt.rechunker.due() and not rebuilt.rechunker.running
    finally:
        rebuilt.close()


def _as_schema_3(db_path: Path) -> None:
    """The database as the version before labels wrote it (as test_label_filters makes it): migration 4 runs again."""
    db = apsw.Connection(str(db_path))
    db.execute(
        "DROP TABLE chunk_tags; DROP INDEX chunks_by_category;"
        " ALTER TABLE chunks DROP COLUMN tags; ALTER TABLE chunks DROP COLUMN category; PRAGMA user_version = 3"
    )
    db.close()


def test_files_waiting_to_be_chunked_again_for_tags_are_named_as_the_servers_own_work(tmp_path, folder, monkeypatch):
    embedder = HashingEmbedder()
    old = MemoryIndex.open(tmp_path / "data", "old", embedder, create=True)
    old.index(folder)
    files = len(old.indexed_files())
    old.close()
    _as_schema_3(old.db_path)

    monkeypatch.setattr(engine_module, "start_relabel", lambda index: None)  # held: the re-chunk has not begun
    upgraded = MemoryIndex.open(tmp_path / "data", "old", embedder)
    try:
        assert upgraded.store.get_meta(RELABEL_KEY) is not None
        expected = f"re-reading {files} files for their tags after an upgrade, which finishes by itself"
        notice = upgraded.status().notice
        assert notice is not None and notice.startswith(expected) and "memory_sync" not in notice
        found = upgraded.search("webhook idempotent processed events", build_options())
        assert found.hits and found.notice is not None and found.notice.startswith(expected)

        relabel._relabel(upgraded)  # the re-chunk, run here
        assert upgraded.store.get_meta(RELABEL_KEY) is None and all(upgraded.indexed_files().values())
        assert upgraded.status().notice is None
        assert upgraded.search("webhook idempotent processed events", build_options()).notice is None
    finally:
        upgraded.close()
