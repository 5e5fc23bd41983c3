"""What the engine reports about one index (`MemoryIndex.status`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from server.index.embeddings.chain import ProviderChain, ProviderState
from server.index.hits import join_notices
from server.index.migrations import SCHEMA_VERSION
from server.index.rebuild_progress import RebuildProgress, RebuildSnapshot
from server.index.relabel import relabel_notice
from server.index.store import Store
from server.index.vectors import live_space

# Counted per file first, from the chunks' (file_id) index alone, then per source: 110 ms at a million chunks,
# where joining every chunk to its file took 310 (bench/bench_pending.py's index).
CHUNKS_PER_SOURCE = (
    "SELECT f.source, sum(c.n) FROM files f JOIN (SELECT file_id, count(*) AS n FROM chunks GROUP BY file_id) c"
    " ON c.file_id = f.id GROUP BY f.source"
)
RECHUNK_NOTICE = "the chunks are being cut again for new chunk settings; the old ones answer meanwhile"


@dataclass(frozen=True)
class IndexStatus:
    name: str
    root: str | None
    provider: str | None
    model: str | None
    dimensions: int | None
    files: dict[str, int]  # per source
    chunks: dict[str, int]
    pending_vectors: int
    vector_state: str  # "ready", "rebuilding", "unavailable", "off"
    search_modes: list[str]
    notice: str | None
    last_change: float | None
    database_bytes: int
    schema_version: int
    providers: list[ProviderState] = field(default_factory=list)  # the fallback order, each one's health
    rebuild: RebuildSnapshot | None = None  # a background vector rebuild's progress, while it runs


class _Rechunk(Protocol):
    progress: RebuildProgress | None

    @property
    def running(self) -> bool: ...


class ReportingIndex(Protocol):
    """What the status needs of `engine.MemoryIndex`."""

    name: str
    store: Store
    providers: ProviderChain
    rebuild_progress: RebuildProgress | None

    @property
    def rechunker(self) -> _Rechunk: ...
    @property
    def root(self) -> Path | None: ...
    def vector_state(self) -> tuple[str, str | None]: ...
    def pending_count(self) -> int: ...


def index_status(index: ReportingIndex) -> IndexStatus:
    """What `memory_status` shows of one index, read from its live database."""
    db = index.store.connection()
    files = {s: n for s, n in db.execute("SELECT source, count(*) FROM files GROUP BY source")}
    chunks = {s: n for s, n in db.execute(CHUNKS_PER_SOURCE)}
    state, why = index.vector_state()
    space = live_space(index.store) if index.store.vec_loaded else None
    last = index.store.get_meta("last_change")
    progress = index.rebuild_progress or index.rechunker.progress
    return IndexStatus(
        name=index.name,
        root=str(index.root) if index.root else None,
        provider=space.provider if space else None,
        model=space.model if space else None,
        dimensions=space.dimensions if space else None,
        files=files,
        chunks=chunks,
        pending_vectors=index.pending_count(),
        vector_state=state,
        search_modes=["hybrid", "vector", "keyword"] if state == "ready" else ["keyword"],
        notice=join_notices(why or (RECHUNK_NOTICE if index.rechunker.running else None), relabel_notice(index.store)),
        last_change=float(last) if last else None,
        database_bytes=index.store.size_bytes(),
        schema_version=SCHEMA_VERSION,
        providers=index.providers.states(),
        rebuild=progress.snapshot() if progress is not None else None,
    )
