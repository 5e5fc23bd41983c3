"""What `memory_status` shows of an index in PostgreSQL (`PgSearchIndex.status`), in the SQLite engine's shape, and
what the metrics count of every index in the database (`index_counts`, as `server.index.stats` does for SQLite).
Both count files, chunks and the embedding backlog with the same queries."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Protocol

from server.index.embeddings.chain import ProviderChain
from server.index.rebuild_progress import RebuildProgress
from server.index.stats import IndexCounts
from server.index.status import RECHUNK_NOTICE, IndexStatus
from server.postgres import search_queries as sq
from server.postgres.connection import PgConnection
from server.postgres.migrations import MIGRATIONS
from server.postgres.search_vectors import NEXT, count_missing, meta, read_space


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
    files, chunks = counts_by_source(db)
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
        database_bytes=schema_bytes(db),
        schema_version=len(MIGRATIONS),
        providers=index.providers.states(),
        rebuild=progress.snapshot() if progress is not None else None,
    )


def counts_by_source(db: PgConnection) -> tuple[dict[str, int], dict[str, int]]:
    """Indexed files and chunks per source."""
    files, chunks = {}, {}
    for source, file_count, chunk_count in db.execute(*sq.counts_by_source()):
        files[str(source)], chunks[str(source)] = int(file_count), int(chunk_count)
    return files, chunks


def schema_bytes(db: PgConnection) -> int:
    """The index's schema on disk: files, history and search tables, with their indexes and TOAST."""
    return int(db.execute(*sq.schema_bytes()).fetchall()[0][0])


def index_counts(db: PgConnection) -> IndexCounts:
    """The counts of the index whose schema is `db`'s search path, from the database alone (whichever server
    reads them, whatever its embedding provider): chunks without a vector in the live table, and whether a new
    table is being filled (by any replica)."""
    files, chunks = counts_by_source(db)
    live = read_space(db)
    pending = count_missing(db, live) if live is not None else 0  # no live vectors: keyword-only, nothing waits
    return IndexCounts(files, sum(chunks.values()), pending, read_space(db, NEXT) is not None)


def index_schemas(db: PgConnection) -> list[str]:
    """The schemas of every index in the database."""
    return [str(row[0]) for row in db.execute(*sq.index_schemas())]


@contextlib.contextmanager
def reading_schema(db: PgConnection, schema: str) -> Iterator[PgConnection]:
    """`db` in a read-only transaction of one snapshot, its search path `schema` (an index's, `schema_of`) until the
    transaction ends."""
    with db:
        db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        db.execute("SELECT set_config('search_path', ?, true)", (f'"{schema}", public',))
        yield db
