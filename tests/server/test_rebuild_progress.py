"""`memory_status` while the vectors are rebuilt for another model in the background: how far, how fast, how long."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

from server.index.embeddings.base import InputKind, Vectors
from server.index.rebuild_progress import RebuildProgress
from server.index.vectors import REBUILD_BATCH
from server.memory.service import CallerContext, MemoryService
from tests.fakes.embedder import HashingEmbedder

ALICE = CallerContext("alice", "SHA256:alice", {"proj": "rw"}, "proj", "rw")
FILES = 150


class GatedEmbedder(HashingEmbedder):
    """A second model whose second batch of documents waits for the test: the rebuild is caught halfway."""

    def __init__(self) -> None:
        super().__init__(model="hashing-v2")
        self.second_batch = threading.Event()
        self.gate = threading.Event()
        self.batches = 0

    def embed(self, texts: Sequence[str], *, kind: InputKind = "document") -> Vectors:
        if kind == "document":
            self.batches += 1
            if self.batches == 2:
                self.second_batch.set()
                assert self.gate.wait(30), "the test never opened the gate"
        return super().embed(texts, kind=kind)


def test_memory_status_reports_a_background_rebuilds_progress_and_drops_it_once_done(tmp_path: Path) -> None:
    files = tmp_path / "data" / "indexes" / "proj" / "files" / "memory"
    files.mkdir(parents=True)
    for number in range(FILES):
        (files / f"n{number:03}.md").write_text(f"# Note {number}\n\nthe deploy step number {number}\n", "utf-8")
    first = MemoryService(tmp_path / "data", HashingEmbedder())
    first.sync(ALICE, force=True)
    chunks = sum(first.status(ALICE).chunks.values())
    first.close()
    assert chunks > REBUILD_BATCH

    model = GatedEmbedder()
    service = MemoryService(tmp_path / "data", model)
    try:
        assert service.status(ALICE).search_modes == ["keyword"]  # opening the index starts the rebuild
        assert model.second_batch.wait(30)

        during = service.status(ALICE).rebuild

        assert during is not None
        assert (during.done, during.total) == (REBUILD_BATCH, chunks)
        assert during.line.startswith(f"rebuilding vectors: {REBUILD_BATCH}/{chunks} chunks (")
        model.gate.set()
        handle = service.indexes.get("proj")
        thread = handle.index._rebuild_thread  # type: ignore[attr-defined]
        thread.join(30)
        after = service.status(ALICE)
        assert after.rebuild is None and after.model == "hashing-v2" and "hybrid" in after.search_modes
    finally:
        model.gate.set()
        service.close()


def test_the_rate_and_time_left_appear_after_the_first_second() -> None:
    now = [100.0]
    progress = RebuildProgress(1000, clock=lambda: now[0])
    progress.add(128)
    assert progress.snapshot().per_second is None

    now[0] += 2.0

    snapshot = progress.snapshot()
    assert (snapshot.per_second, snapshot.seconds_left) == (64.0, (1000 - 128) / 64.0)
    assert snapshot.line == "rebuilding vectors: 128/1,000 chunks (12%), 64.0/s, about 14s left"
