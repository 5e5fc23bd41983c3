"""The index's settings act: a new chunk size is cut again in the background and swapped in atomically (resumed
after a restart), the candidate multiplier widens each side's pool, the embedding cache keeps to its cap, and
memory_search's defaults come from the configuration while a caller's own values still win."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from server.index import search as search_module
from server.index.chunker import ChunkerConfig
from server.index.embeddings.base import InputKind, Vectors
from server.index.engine import MemoryIndex
from server.index.engine_settings import EngineSettings
from server.index.errors import InvalidArgumentError
from server.index.rechunk import CHUNKING_KEY
from server.index.store import Store
from server.index.tuning import SearchDefaults, chunker_config, chunking_identity
from server.index.vectors import live_space
from server.memory.service import CallerContext, MemoryService
from tests.conftest import EXAMPLE
from tests.fakes.embedder import HashingEmbedder
from tests.fakes.provider_api import FakeProviderAPI
from tests.server.index.test_provider_failover import QUERY, _open, two_providers

SMALL = EngineSettings(chunker=chunker_config(64, 8))


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    target = tmp_path / "project"
    shutil.copytree(EXAMPLE, target)
    paragraphs = [
        f"Paragraph {n} about the billing service, its webhook retries and the ledger reconciliation job "
        f"that runs at night number {n} with idempotent writes and careful logging of every step."
        for n in range(30)
    ]
    (target / "memory" / "billing.md").write_text("# Billing notes\n\n" + "\n\n".join(paragraphs) + "\n")
    return target


def chunk_stats(index: MemoryIndex) -> tuple[int, int]:
    db = index.store.connection()
    count, biggest = db.execute("SELECT count(*), max(tokens) FROM chunks").fetchall()[0]
    return int(count), int(biggest)  # type: ignore[arg-type]


class GatedEmbedder(HashingEmbedder):
    """Blocks the re-chunk thread's embedding until the test opens the gate, so it can be watched mid-way."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.entered = threading.Event()

    def embed(self, texts: Sequence[str], *, kind: InputKind = "document") -> Vectors:
        if threading.current_thread().name.startswith("rechunk-"):
            self.entered.set()
            assert self.gate.wait(60), "the test never opened the gate"
        return super().embed(texts, kind=kind)


def test_a_new_chunk_size_is_cut_in_the_background_while_the_old_chunks_answer(tmp_path, folder):
    first = MemoryIndex.open(tmp_path / "data", "notes", HashingEmbedder(), create=True)
    first.index(folder)
    old_count, old_biggest = chunk_stats(first)
    old_path = first.db_path
    first.close()
    assert old_biggest > 64

    embedder = GatedEmbedder()
    index = MemoryIndex.open(tmp_path / "data", "notes", embedder, settings=SMALL)
    try:
        assert index.needs_rebuild
        thread = index.start_background_rebuild()
        assert thread is not None and embedder.entered.wait(60)
        during = index.search("ledger reconciliation")
        assert during.mode == "hybrid" and during.hits[0].path == "memory/billing.md"
        assert chunk_stats(index) == (old_count, old_biggest)  # the old chunks serve until the swap
        status = index.status()
        assert "cut again" in (status.notice or "") and status.vector_state == "ready"
        assert status.rebuild is not None and status.rebuild.line.startswith("re-chunking")
        (folder / "memory" / "late.md").write_text("# Late\n\nThe zeppelin hangar opens on Fridays.\n")
        index.index(folder, rebuild_now=False, paths=["memory/late.md"])  # a write during the rebuild
        embedder.gate.set()
        thread.join(120)
        assert not thread.is_alive()

        count, biggest = chunk_stats(index)
        assert count > old_count and biggest <= 64
        assert index.store.get_meta(CHUNKING_KEY) == chunking_identity(SMALL.chunker)
        assert index.db_path != old_path and index.db_path.name.startswith("index-")
        assert "next_database" not in index.info() and not index.needs_rebuild
        late = index.search("zeppelin hangar")  # the catch-up pass took in what was written meanwhile
        assert late.mode == "hybrid" and late.hits[0].path == "memory/late.md"
        assert index.status().pending_vectors == 0
        index.index(folder)  # a later run closes the swapped-out database and removes its file
        assert not old_path.exists()
    finally:
        embedder.gate.set()
        index.close()


def test_a_rechunk_stopped_by_a_restart_resumes_and_a_newer_size_starts_it_again(tmp_path, folder):
    first = MemoryIndex.open(tmp_path / "data", "notes", HashingEmbedder(), create=True)
    first.index(folder)
    first.close()

    stop = threading.Event()

    class StoppingEmbedder(HashingEmbedder):
        def embed(self, texts: Sequence[str], *, kind: InputKind = "document") -> Vectors:
            stop.set()  # the server goes down while the first batch is embedded
            return super().embed(texts, kind=kind)

    index = MemoryIndex.open(tmp_path / "data", "notes", StoppingEmbedder(), settings=SMALL)
    assert index.rechunker.run(stop) is False
    side = index.info()["next_database"]
    assert (index.directory / side).exists() and index.needs_rebuild
    index.close()

    embedder = HashingEmbedder()
    again = MemoryIndex.open(tmp_path / "data", "notes", embedder, settings=SMALL)
    try:
        again.index(folder)  # the command line's run cuts again in the foreground
        assert again.db_path.name == side  # the side database was resumed, not begun afresh
        assert embedder.embedded == 0  # every chunk was already embedded before the restart
        assert chunk_stats(again)[1] <= 64 and not again.needs_rebuild
    finally:
        again.close()

    bigger = EngineSettings(chunker=chunker_config(128, 16))
    third = MemoryIndex.open(tmp_path / "data", "notes", HashingEmbedder(), settings=bigger)
    try:
        assert third.needs_rebuild
        assert third.rechunker.run() is True
        assert third.db_path.name != side and 64 < chunk_stats(third)[1] <= 128
    finally:
        third.close()
    assert [p.name for p in third.directory.glob("index*.sqlite3")] == [third.db_path.name]  # the old one is gone


@pytest.fixture
def providers():
    with two_providers() as running:
        yield running


def _rechunk_begun_on_voyage(tmp_path: Path, folder: Path, voyage: FakeProviderAPI, openai: FakeProviderAPI) -> str:
    """An index built on Voyage whose re-chunk to SMALL was stopped by a restart: its side database's vectors are
    Voyage's (64 dimensions). Voyage is down from now on. Returns the side database's file name."""
    now = [1000.0]
    first = _open(tmp_path, voyage, openai, now)
    first.index(folder)
    first.close()
    begun = _open(tmp_path, voyage, openai, now, settings=SMALL)
    stop = threading.Event()
    stop.set()
    assert begun.rechunker.run(stop) is False
    side = str(begun.info()["next_database"])
    begun.close()
    store = Store(begun.directory / side)
    try:
        space = live_space(store)
        assert space is not None and (space.provider, space.dimensions) == ("voyage", 64)
    finally:
        store.close()
    voyage.fail(503, times=1_000_000)
    return side


def test_a_rechunk_resumed_on_another_provider_builds_that_providers_vectors_not_into_the_old_ones(
    tmp_path, folder, providers
):
    voyage, openai = providers
    side = _rechunk_begun_on_voyage(tmp_path, folder, voyage, openai)
    index = _open(tmp_path, voyage, openai, [1000.0], settings=SMALL)  # Voyage's probe fails: OpenAI serves
    try:
        assert index.needs_rebuild and index.embedder is not None and index.embedder.provider == "openai"
        thread = index.start_background_rebuild()
        assert thread is not None
        thread.join(60)
        assert not thread.is_alive() and not index.needs_rebuild
        assert index.db_path.name == side  # the side database was resumed, its Voyage vectors replaced
        space = live_space(index.store)
        assert space is not None and (space.provider, space.dimensions) == ("openai", 48)
        db = index.store.connection()
        assert db.execute(f"SELECT count(*) FROM {space.table}").fetchall() == [(index.store.chunk_count(),)]
        result = index.search(QUERY)
        assert result.mode == "hybrid" and result.hits[0].path == "memory/2026-11-18.md"
    finally:
        index.close()


def test_a_rechunk_failing_on_a_database_error_waits_before_it_is_tried_again(tmp_path, folder, providers, caplog):
    voyage, openai = providers
    side = _rechunk_begun_on_voyage(tmp_path, folder, voyage, openai)
    index = _open(tmp_path, voyage, openai, [1000.0], settings=SMALL)
    try:
        embedder = index.embedder
        assert embedder is not None
        store = Store(index.directory / side)  # a table labelled as OpenAI's, of Voyage's size: each insert fails
        try:
            with store.connection() as db:
                for key, value in (("provider", embedder.provider), ("model", embedder.model), ("dimensions", "48")):
                    store.set_meta(f"vector_{key}", value, db)
        finally:
            store.close()
        thread = index.start_background_rebuild()
        assert thread is not None
        thread.join(60)
        assert not thread.is_alive() and index.needs_rebuild
        assert "re-chunking index team failed: Dimension mismatch" in caplog.text
        assert index.search(QUERY).mode == "keyword"  # on the old chunks, whose Voyage is down
        assert index.rechunker.start() is None and index.rechunker._thread is thread  # resting: no thread per search
    finally:
        index.close()


def test_an_index_cut_before_dates_left_the_embedded_context_is_cut_again(tmp_path, folder):
    first = MemoryIndex.open(tmp_path / "data", "notes", HashingEmbedder(), create=True)
    first.index(folder)
    old_mark = '{"heading_budget": 40, "max_tokens": 254, "min_fill": 0.2, "overlap_tokens": 40}'  # no such field yet
    with first.store.connection() as db:
        first.store.set_meta(CHUNKING_KEY, old_mark, db)
    first.close()
    index = MemoryIndex.open(tmp_path / "data", "notes", HashingEmbedder())
    try:
        assert index.needs_rebuild
        assert index.rechunker.run() is True
        assert index.store.get_meta(CHUNKING_KEY) == chunking_identity(ChunkerConfig()) and not index.needs_rebuild
    finally:
        index.close()


def test_a_new_index_is_cut_with_the_configured_size_at_once(tmp_path, folder):
    index = MemoryIndex.open(tmp_path / "data", "fresh", HashingEmbedder(), create=True, settings=SMALL)
    try:
        index.index(folder)
        assert not index.needs_rebuild and index.db_path.name == "index.sqlite3"
        assert chunk_stats(index)[1] <= 64
    finally:
        index.close()


def test_chunks_longer_than_the_model_reads_are_refused_naming_the_setting(tmp_path):
    too_big = EngineSettings(chunker=chunker_config(512, 40))
    with pytest.raises(InvalidArgumentError, match=r"MEMORY_CHUNK_TOKENS is 512, but hashing-v1 reads at most 254"):
        MemoryIndex.open(tmp_path / "data", "x", HashingEmbedder(), create=True, settings=too_big)


@pytest.mark.parametrize(("multiplier", "pool"), [(4, 40), (10, 100)])
def test_the_candidate_multiplier_sets_how_many_candidates_each_side_brings(
    tmp_path, folder, monkeypatch, multiplier, pool
):
    asked: list[int] = []
    best = search_module.keyword_best_sql

    def spy(filters, limit):  # type: ignore[no-untyped-def]
        asked.append(limit)
        return best(filters, limit)

    monkeypatch.setattr(search_module, "keyword_best_sql", spy)
    settings = EngineSettings(search=SearchDefaults(candidate_multiplier=multiplier))
    index = MemoryIndex.open(tmp_path / "data", "pool", HashingEmbedder(), create=True, settings=settings)
    try:
        index.index(folder)
        index.search("billing webhook", search_module.SearchOptions(limit=10))
        assert asked == [pool]
    finally:
        index.close()


def test_the_embedding_cache_keeps_to_its_cap_dropping_unused_vectors_first(tmp_path, folder):
    settings = EngineSettings(cache_max_entries=10)
    index = MemoryIndex.open(tmp_path / "data", "capped", HashingEmbedder(), create=True, settings=settings)
    try:
        db = index.store.connection()
        with db:
            db.execute(
                "INSERT INTO embedding_cache(provider, model, hash, vector, used_at) VALUES('o', 'm', 'h', x'00', 9e9)"
            )
        index.index(folder)
        cached = {h for (h,) in db.execute("SELECT hash FROM embedding_cache")}
        assert len(cached) == 10 and "h" not in cached  # another model's vector went first, however recent
        live = {h for (h,) in db.execute("SELECT hash FROM chunks")}
        assert cached <= live and len(live) > 10
        assert index.search("ledger reconciliation").hits[0].path == "memory/billing.md"  # vec0 answers the rest
    finally:
        index.close()


def caller(index: str) -> CallerContext:
    return CallerContext("alice", "SHA256:alice", {index: "rw"}, index, "rw")  # type: ignore[arg-type]


def test_memory_search_defaults_come_from_the_configuration_and_a_callers_values_win(tmp_path):
    defaults = EngineSettings(search=SearchDefaults(max_results=2, min_score=0.0))
    strict = EngineSettings(search=SearchDefaults(max_results=2, min_score=0.99))
    settings = EngineSettings(search=defaults.search, per_index={"strict": strict})
    service = MemoryService(tmp_path / "data", HashingEmbedder(), settings, rescan_interval=0.0)
    try:
        for name in ("notes", "strict"):
            for n in range(5):
                service.write(caller(name), f"Lighthouse keeper note {n}: the lamp needs oil.", path=f"memory/l{n}.md")
        assert len(service.search(caller("notes"), "lighthouse lamp").hits) == 2
        assert len(service.search(caller("notes"), "lighthouse lamp", max_results=4).hits) == 4
        assert service.search(caller("strict"), "lighthouse lamp").hits == []  # its own min_score
        assert len(service.search(caller("strict"), "lighthouse lamp", min_score=0.0).hits) == 2
    finally:
        service.close()
