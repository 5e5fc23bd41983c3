"""What `memory_status` shows of an index in PostgreSQL (`PgSearchIndex.status`), in the SQLite engine's shape."""

from __future__ import annotations

from typing import Protocol

from server.index.embeddings.chain import ProviderChain
from server.index.rebuild_progress import RebuildProgress
from server.index.status import RECHUNK_NOTICE, IndexStatus
from server.postgres import search_queries as sq
from server.postgres.connection import PgConnection
from server.postgres.migrations import MIGRATIONS
from server.postgres.search_vectors import meta, read_space


class ReportingIndex(Protocol):
    """What the status needs of `server.postgres.search.PgSearchIndex`."""

    name: str
    providers: ProviderChain
    rebuild_progress: RebuildProgress | None
    rebuilding_elsewhere: bool

    def vector_state(self, db: PgConnection | None = None) -> tuple[str, str | None]: ...
    def pending_count(self, db: PgConnection | None = None) -> int: ...


def index_status(index: ReportingIndex, db: PgConnection) -> IndexStatus:
    """Read on `db`: files and chunks per source, the live vectors, a rebuild's progress here or elsewhere."""
    files, chunks = {}, {}
    for source, file_count, chunk_count in db.execute(*sq.counts_by_source()):
        files[str(source)], chunks[str(source)] = int(file_count), int(chunk_count)
    state, why = index.vector_state(db)
    space = read_space(db) if index.providers else None
    progress = index.rebuild_progress
    rechunking = progress is not None and progress.label == "re-chunking"
    if index.rebuilding_elsewhere:
        elsewhere = "another server is rebuilding this index"
        why = f"{why} ({elsewhere})" if why else f"{elsewhere}; the live vectors answer meanwhile"
    return IndexStatus(
        name=index.name,
        root=None,
        provider=space.provider if space else None,
        model=space.model if space else None,
        dimensions=space.dimensions if space else None,
        files=files,
        chunks=chunks,
        pending_vectors=index.pending_count(db),
        vector_state=state,
        search_modes=["hybrid", "vector", "keyword"] if state == "ready" else ["keyword"],
        notice=why or (RECHUNK_NOTICE if rechunking else None),
        last_change=float(raw) if (raw := meta(db, "last_change")) else None,
        database_bytes=int(db.execute(*sq.schema_bytes()).fetchall()[0][0]),
        schema_version=len(MIGRATIONS),
        providers=index.providers.states(),
        rebuild=progress.snapshot() if progress is not None else None,
    )
